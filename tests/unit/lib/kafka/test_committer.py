"""The Committer against a consumer-shaped fake: revoke-time ordering, stale callbacks, failed
commits, the consumer replacement and the lag gauge, with no broker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from docstream.errors import FatalError
from docstream.kafka.committer import Committer, RebalanceHooks
from docstream.kafka.offsets import OffsetTracker
from docstream.metrics import Metrics
from docstream.settings import KafkaSettings, Settings
from tests.fixtures.clock import FakeClock

TOPIC = "chunks"


@dataclass
class FakeConsumer:
    """What the Committer calls on a confluent_kafka Consumer, recorded in ``events``."""

    on_commit: Callable[[KafkaError | None, list[Any]], None]
    events: list[tuple[Any, ...]]
    member: str | None = "member-1"
    partitions: tuple[int, ...] = (0, 1, 2)
    high: int = 100
    fail_commit: int | None = None  # a KafkaError code the next commit raises
    callbacks: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    committed_offsets: dict[int, int] = field(default_factory=dict)  # the group's, by partition (none: -1001)
    fail_committed: list[int] = field(default_factory=list)  # KafkaError codes the next committed() calls raise
    assigned_at: list[tuple[str, int, int]] = field(default_factory=list)

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.fail_committed:
            raise KafkaException(KafkaError(self.fail_committed.pop(0)))
        return [TopicPartition(p.topic, p.partition, self.committed_offsets.get(p.partition, -1001)) for p in parts]

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks
        self.events.append(("subscribe", tuple(topics)))

    def assign(self, parts: list[TopicPartition]) -> None:
        self.events.append(("assign", tuple((p.topic, p.partition) for p in parts)))
        self.assigned_at = [(p.topic, p.partition, p.offset) for p in parts]

    def list_topics(self, topic: str, timeout: float) -> Any:
        info = SimpleNamespace(error=None, partitions=dict.fromkeys(self.partitions))
        return SimpleNamespace(topics={topic: info})

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        if self.fail_commit is not None:
            code, self.fail_commit = self.fail_commit, None
            raise KafkaException(KafkaError(code))
        self.events.append(("commit", tuple((p.topic, p.partition, p.offset) for p in offsets), asynchronous))

    def memberid(self) -> str | None:
        return self.member

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool) -> tuple[int, int]:
        return 0, self.high

    def close(self) -> None:
        self.closed = True
        self.events.append(("close",))

    # the broker's side: what librdkafka would call back during poll
    def rebalance(self, kind: str, *partitions: int) -> None:
        self.callbacks[f"on_{kind}"](self, [TopicPartition(TOPIC, p) for p in partitions])


@dataclass
class Rig:
    committer: Committer
    book: OffsetTracker
    consumers: list[FakeConsumer]
    events: list[tuple[Any, ...]]
    clock: FakeClock
    metrics: Metrics

    @property
    def consumer(self) -> FakeConsumer:
        return self.consumers[-1]


def _rig(
    *, static: bool = False, rejoin_timeout_s: float | None = 5.0, kafka: KafkaSettings | None = None,
    hooks: dict[str, Any] | None = None,
    partitions: tuple[int, ...] = (0, 1, 2), committed: dict[int, int] | None = None,
    refusals: list[int] | None = None,
) -> Rig:
    events: list[tuple[Any, ...]] = []
    consumers: list[FakeConsumer] = []
    book = OffsetTracker()
    clock = FakeClock(1000.0)
    metrics = Metrics()

    def new_consumer(on_commit: Callable[[KafkaError | None, list[Any]], None]) -> Any:
        consumers.append(FakeConsumer(on_commit, events, partitions=partitions, committed_offsets=dict(committed or {}),
                                      fail_committed=list(refusals or [])))
        return consumers[-1]

    def hook(name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            events.append((name, *args))
        return record

    names = ("assigned", "revoking", "dropped", "replaced")
    given = hooks or {}
    committer = Committer(
        kafka or Settings().kafka, group_id="g", topics=[TOPIC], service="svc", book=book, metrics=metrics,
        hooks=RebalanceHooks(**{n: given.get(n, hook(n)) for n in names}), static_assignment=static,
        rejoin_timeout_s=rejoin_timeout_s, clock=clock, new_consumer=new_consumer,
    )
    return Rig(committer, book, consumers, events, clock, metrics)


def _done(book: OffsetTracker, partition: int, *offsets: int) -> None:
    for offset in offsets:
        book.track((TOPIC, partition), offset)
        book.done((TOPIC, partition), offset)


def test_revoke_lets_the_driver_finish_then_commits_the_revoked_partitions_then_drops_them() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.rebalance("assign", 0, 1)
    _done(rig.book, 0, 10, 11)
    _done(rig.book, 1, 20)
    rig.book.track((TOPIC, 1), 21)  # not done: its new owner consumes it again
    rig.events.clear()

    rig.consumer.rebalance("revoke", 1)

    assert rig.events == [
        ("revoking", [(TOPIC, 1)]),
        ("commit", ((TOPIC, 1, 21),), False),  # synchronous, only the revoked partition, up to the pending one
        ("dropped", [(TOPIC, 1)]),
    ]
    assert rig.book.partitions() == [(TOPIC, 0)], "the revoked partition's tracking is dropped"
    assert rig.committer.assigned == [(TOPIC, 0)]


def test_what_the_driver_finishes_while_revoking_is_committed() -> None:
    rig = _rig(hooks={"revoking": lambda tps: rig.book.done((TOPIC, 0), 6)})
    rig.committer.start()
    rig.consumer.rebalance("assign", 0)
    _done(rig.book, 0, 5)
    rig.book.track((TOPIC, 0), 6)

    rig.consumer.rebalance("revoke", 0)

    assert ("commit", ((TOPIC, 0, 7),), False) in rig.events


def test_lost_partitions_are_dropped_without_a_commit() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.rebalance("assign", 0)
    _done(rig.book, 0, 1, 2)
    rig.events.clear()

    rig.consumer.rebalance("lost", 0)

    assert rig.events == [("dropped", [(TOPIC, 0)])]
    assert rig.book.partitions() == []


def test_callbacks_of_a_replaced_consumer_are_ignored() -> None:
    rig = _rig(rejoin_timeout_s=5.0)
    rig.committer.start()
    rig.consumer.rebalance("assign", 0, 1)
    old = rig.consumer
    old.member = ""
    rig.clock.now += 1.0
    assert not rig.committer.watch_membership()  # outside the group from now on
    rig.clock.now += 5.0
    assert rig.committer.watch_membership()
    new = rig.consumer
    assert new is not old and old.closed
    new.rebalance("assign", 2)
    _done(rig.book, 2, 7)
    rig.events.clear()

    old.rebalance("assign", 0)  # late callbacks of the old consumer, during its close
    old.rebalance("revoke", 2)
    old.rebalance("lost", 2)

    assert rig.events == [], "nothing: the partitions' tracking belongs to the new consumer"
    assert rig.committer.assigned == [(TOPIC, 2)]
    assert rig.book.partitions() == [(TOPIC, 2)]


def test_a_consumer_outside_its_group_too_long_is_replaced_and_what_it_held_is_dropped() -> None:
    rig = _rig(rejoin_timeout_s=5.0)
    rig.committer.start()
    rig.consumer.rebalance("assign", 0)
    rig.book.track((TOPIC, 0), 3)  # in flight on the stuck consumer
    rig.consumer.member = None
    rig.clock.now += 1.0
    rig.committer.watch_membership()
    rig.clock.now += 4.9
    assert not rig.committer.watch_membership(), "inside the rejoin timeout the consumer is kept"
    rig.events.clear()
    rig.clock.now += 1.0

    assert rig.committer.watch_membership()

    assert rig.events == [("dropped", [(TOPIC, 0)]), ("close",), ("subscribe", (TOPIC,)), ("replaced",)]
    assert rig.book.partitions() == [], "nothing of the stuck consumer is committed"
    assert rig.committer.consumers_replaced == 1
    assert rig.metrics.retries.labels("svc", "consumer_rejoin")._value.get() == 1
    # the new consumer gets the whole timeout to join
    rig.consumer.member = ""
    rig.clock.now += 1.0
    assert not rig.committer.watch_membership()


def test_the_rejoin_timeout_comes_from_the_kafka_settings_unless_given() -> None:
    rig = _rig(rejoin_timeout_s=None, kafka=Settings().kafka.model_copy(update={"rejoin_timeout_s": 45.0}))
    rig.committer.start()
    rig.consumer.member = None
    rig.clock.now += 1.0
    rig.committer.watch_membership()  # outside the group from here
    rig.clock.now += 44.5
    assert not rig.committer.watch_membership()
    rig.clock.now += 1.0
    assert rig.committer.watch_membership()
    assert rig.committer.consumers_replaced == 1


def test_membership_is_read_at_most_once_a_second_and_a_member_resets_the_watch() -> None:
    reads: list[float] = []
    rig = _rig(rejoin_timeout_s=2.0)
    rig.committer.start()

    def member_id(consumer: Any) -> str:
        reads.append(rig.clock.now)
        return "" if len(reads) < 3 else "m"

    rig.committer._member_id = member_id  # type: ignore[method-assign]
    for _ in range(20):
        rig.clock.now += 0.25
        rig.committer.watch_membership()

    assert len(reads) == 5
    assert rig.committer.consumers_replaced == 0, "back in the group before the timeout"


def test_a_statically_assigned_consumer_takes_every_partition_and_is_never_replaced() -> None:
    rig = _rig(static=True, rejoin_timeout_s=1.0)

    rig.committer.start()

    assert rig.events == [("assign", ((TOPIC, 0), (TOPIC, 1), (TOPIC, 2))),
                          ("assigned", [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)])]
    rig.consumer.member = ""  # an assigned consumer has no member id
    for _ in range(5):
        rig.clock.now += 1.0
        assert not rig.committer.watch_membership()


def test_a_static_assignment_starts_at_the_committed_offsets_asked_again_while_the_coordinator_is_not_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # librdkafka's own fetch of them, left to assign(), gives up after one NOT_COORDINATOR: the partitions stall
    monkeypatch.setattr("docstream.kafka.committer.time.sleep", lambda _s: None)
    rig = _rig(static=True, committed={1: 5},
               refusals=[KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])

    rig.committer.start()

    assert rig.consumer.fail_committed == [], "asked again after each refusal"
    assert rig.consumer.assigned_at == [(TOPIC, 0, OFFSET_BEGINNING), (TOPIC, 1, 5), (TOPIC, 2, OFFSET_BEGINNING)]


def test_a_refused_commit_is_offered_again_and_nothing_new_is_quiet() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.rebalance("assign", 0)
    _done(rig.book, 0, 0, 1)
    rig.consumer.fail_commit = KafkaError.REBALANCE_IN_PROGRESS
    rig.events.clear()

    rig.committer.commit(asynchronous=True)
    assert rig.events == [] and rig.book.committable() == {(TOPIC, 0): 2}, "not marked committed"

    rig.committer.commit(asynchronous=True)
    assert rig.events == [("commit", ((TOPIC, 0, 2),), True)]
    assert rig.book.committable() == {}

    rig.consumer.fail_commit = KafkaError._NO_OFFSET
    _done(rig.book, 0, 2)
    rig.committer.commit(asynchronous=True)  # no warning, no exception
    assert rig.book.committable() == {(TOPIC, 0): 3}


def test_an_asynchronous_commit_that_fails_later_is_offered_again() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.rebalance("assign", 0, 1)
    _done(rig.book, 0, 0)
    _done(rig.book, 1, 0)
    rig.committer.commit(asynchronous=True)
    assert rig.book.committable() == {}

    failed = SimpleNamespace(topic=TOPIC, partition=1, offset=1, error=KafkaError(KafkaError.REQUEST_TIMED_OUT))
    rig.consumer.on_commit(None, [TopicPartition(TOPIC, 0, 1), failed])

    assert rig.book.committable() == {(TOPIC, 1): 1}


def test_the_lag_gauge_is_the_distance_to_the_high_watermark() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.high = 50

    rig.committer.observe_lag({(TOPIC, 0): 9, (TOPIC, 2): 49})

    assert rig.metrics.consumer_lag.labels("svc", TOPIC, "0")._value.get() == 40
    assert rig.metrics.consumer_lag.labels("svc", TOPIC, "2")._value.get() == 0


def test_close_commits_what_is_done_synchronously_once() -> None:
    rig = _rig()
    rig.committer.start()
    rig.consumer.rebalance("assign", 0)
    _done(rig.book, 0, 0, 1, 2)
    rig.events.clear()

    rig.committer.close()
    rig.committer.close()

    assert rig.events == [("commit", ((TOPIC, 0, 3),), False), ("close",)]
    with pytest.raises(RuntimeError):
        _ = rig.committer.consumer


def test_a_failed_static_assignment_closes_its_consumer() -> None:
    rig = _rig(static=True, partitions=())

    with pytest.raises(FatalError, match="not found"):
        rig.committer.start()

    assert rig.consumer.closed
    with pytest.raises(RuntimeError):
        _ = rig.committer.consumer


def test_started_holds_from_start_to_close_and_not_after_a_failed_start() -> None:
    rig = _rig()
    assert not rig.committer.started
    rig.committer.start()
    assert rig.committer.started  # subscribed, before any assignment: what a loop's /readyz reads
    rig.committer.close()
    assert not rig.committer.started

    failed = _rig(static=True, partitions=())
    with pytest.raises(FatalError):
        failed.committer.start()
    assert not failed.committer.started
