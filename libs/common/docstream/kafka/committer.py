"""Committer: the one component that owns a consumer's group membership, rebalances and commits.

Every driver of a consumer (ConsumeLoop, one record at a time; the inference pipeline, micro-batched
over threads) polls on its own and tells an ``OffsetBook`` what is done. The Committer does the rest,
once for all of them:

* subscribe (or ``assign`` every partition, with ``static_assignment``) and serve the rebalance
  callbacks, ignoring late callbacks of a consumer it has replaced;
* on revoke: let the driver finish what it can (``RebalanceHooks.revoking``), commit the revoked
  partitions synchronously, then drop them from the book: their records not done are consumed again
  by the new owner (at-least-once);
* commit what the book says is committable, asynchronously while running and synchronously on
  revoke and close; a failed commit is offered again (``forget_committed``), never assumed;
* the membership watch: a consumer outside its group (no member id) for ``rejoin_timeout_s`` is
  replaced by a new one; nothing of it is committed past what is done and the new consumer resumes
  from the group's committed offsets (docs/messaging.md);
* the consumer-lag gauge ``docstream_consumer_lag``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from docstream.kafka.clients import (
    ask_committed,
    close_abandoned_consumer,
    create_consumer,
    topic_partitions,
)
from docstream.kafka.membership import MembershipWatch
from docstream.kafka.offsets import TopicPartitionKey
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import KafkaSettings

__all__ = ["Committer", "OffsetBook", "RebalanceHooks"]

_log = get_logger(__name__)
_MEMBERSHIP_EVERY_S = 1.0

OnCommit = Callable[[KafkaError | None, list[Any]], None]
TopicPartitions = list[TopicPartitionKey]
_OFFSET_FETCH_S = 60.0
"""How long a static assignment asks the group's committed offsets, asking again while the coordinator refuses."""


def _at_committed(consumer: Consumer, tps: Sequence[tuple[str, int]]) -> list[TopicPartition]:
    """Each partition at the group's committed offset (the beginning where it has none: ``auto.offset.reset`` is
    earliest), asked here (``ask_committed``) rather than left to ``assign()``: librdkafka reports an offset fetch
    that fails (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS: a coordinator that moved or is loading, a new
    broker still making its offsets topic) as one consumer error and never fetches those partitions (the chunker
    of a first ``docstream run`` on a new broker stalled so).

    Raises:
        RetryableError: the coordinator did not answer in ``_OFFSET_FETCH_S``.
        FatalError: the broker refused.
    """
    asked = [TopicPartition(t, p) for t, p in tps]
    found = ask_committed(lambda timeout: consumer.committed(asked, timeout=timeout), timeout_s=_OFFSET_FETCH_S,
                          context="committed offsets of a static assignment")
    return [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in found]


class OffsetBook(Protocol):
    """What a driver knows of its records: which offsets are committable (``OffsetTracker``, ``AckLedger``)."""

    def committable(self, tps: Iterable[TopicPartitionKey] | None = None) -> dict[TopicPartitionKey, int]:
        """Per partition, the next offset to commit, where it moved since the last commit."""

    def mark_committed(self, offsets: dict[TopicPartitionKey, int]) -> None:
        """``offsets`` were sent for commit."""

    def forget_committed(self, tps: Iterable[TopicPartitionKey]) -> None:
        """A commit of ``tps`` failed: offer them again."""

    def revoke(self, tps: Iterable[TopicPartitionKey]) -> int:
        """Drop ``tps``; return how many of their records were not done."""


def _ignore(_: TopicPartitions) -> None:
    return None


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class RebalanceHooks:
    """What a driver does around the Committer's rebalance handling (all optional).

    Attributes:
        assigned: partitions were assigned (also for the static assignment at start).
        revoking: partitions are about to be revoked: finish (or flush) their records in flight;
            the Committer commits them synchronously right after.
        dropped: partitions are gone (revoked, lost, or held by a replaced consumer) and were
            dropped from the book: forget them.
        replaced: a new consumer replaced one that stayed outside its group.
    """

    assigned: Callable[[TopicPartitions], None] = _ignore
    revoking: Callable[[TopicPartitions], None] = _ignore
    dropped: Callable[[TopicPartitions], None] = _ignore
    replaced: Callable[[], None] = _nothing


def _keys(partitions: Iterable[TopicPartition]) -> TopicPartitions:
    return [(str(p.topic), int(p.partition)) for p in partitions]


def _names(tps: Iterable[TopicPartitionKey]) -> list[str]:
    return [f"{t}[{p}]" for t, p in tps]


class Committer:
    """Own one consumer of ``topics`` in ``group_id``: membership, rebalances, commits and lag.

    Args:
        kafka: Kafka settings (the consumer's configuration).
        group_id: consumer group; offsets are committed to it, also with ``static_assignment``.
        topics: topics to consume.
        service: service name for logs, metrics and client.id.
        book: the driver's record of what is done.
        metrics: where the lag gauge and the consumer-replacement count go.
        hooks: the driver's part of a rebalance.
        static_assignment: ``assign()`` every partition of ``topics`` instead of joining the group
            (one process is the only consumer: no join delay, no rebalancing, no membership watch).
        rejoin_timeout_s: a consumer outside its group this long is replaced (default: ``kafka.rejoin_timeout_s``).
        clock: monotonic seconds.
        member_id: reads a consumer's group member id (empty or None while outside the group).
        new_consumer: makes a consumer given its commit callback; default: ``create_consumer``.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        group_id: str,
        topics: Sequence[str],
        service: str,
        book: OffsetBook,
        metrics: Metrics,
        hooks: RebalanceHooks | None = None,
        static_assignment: bool = False,
        rejoin_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        member_id: Callable[[Consumer], str | None] | None = None,
        new_consumer: Callable[[OnCommit], Consumer] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("Committer needs at least one topic")
        self._group_id = group_id
        self._topics = list(topics)
        self._service = service
        self._book = book
        self._metrics = metrics
        self._hooks = hooks or RebalanceHooks()
        self._static = static_assignment
        self._clock = clock
        self._member_id = member_id or (lambda consumer: consumer.memberid())
        self._new_consumer = new_consumer or (
            lambda on_commit: create_consumer(kafka, group_id=group_id, client_id=service, on_commit=on_commit))
        self._membership = MembershipWatch(kafka.rejoin_timeout_s if rejoin_timeout_s is None else rejoin_timeout_s)
        self._last_membership = clock()
        self._consumer: Consumer | None = None
        self._assigned: dict[TopicPartitionKey, None] = {}
        self.consumers_replaced = 0

    @property
    def consumer(self) -> Consumer:
        """The current consumer (a new one after a replacement).

        Raises:
            RuntimeError: before ``start`` or after ``close``.
        """
        if self._consumer is None:
            raise RuntimeError("the Committer has no consumer: start() it first")
        return self._consumer

    @property
    def started(self) -> bool:
        """Whether it holds a consumer: ``start`` subscribed (or assigned) one and ``close`` has not closed it."""
        return self._consumer is not None

    @property
    def assigned(self) -> TopicPartitions:
        """The partitions the current consumer holds, in assignment order."""
        return list(self._assigned)

    def start(self) -> Consumer:
        """Create the consumer and subscribe it (or assign every partition: ``static_assignment``).

        Raises:
            FatalError: a topic to assign statically does not exist.
            DocstreamError: its metadata could not be read (``kafka_error``'s families).
        """
        consumer = self._new_consumer(self._on_commit)
        self._consumer = consumer
        try:
            if self._static:
                tps = [(t, p) for t in self._topics for p in topic_partitions(consumer, t)]
                consumer.assign(_at_committed(consumer, tps))
                self._taken(tps)
                _log.info("partitions_assigned", partitions=_names(tps), static=True)
            else:
                consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                   on_lost=self._on_lost)
        except BaseException:
            self._consumer = None
            consumer.close()
            raise
        return consumer

    def watch_membership(self) -> bool:
        """Replace the consumer when it has stayed outside its group too long (checked once a second).

        Returns:
            True when the consumer was replaced (``consumer`` is a new one).
        """
        now = self._clock()
        if self._static or now - self._last_membership < _MEMBERSHIP_EVERY_S:
            return False
        self._last_membership = now
        if not self._membership.observe(self._member_id(self.consumer), now):
            return False
        self._replace(now)
        return True

    def commit(self, *, asynchronous: bool, tps: Iterable[TopicPartitionKey] | None = None) -> None:
        """Commit, per partition, what the book says is done (``tps``: only those partitions).

        A refused commit is logged and left for the next one; ``_NO_OFFSET`` (nothing new) is quiet.
        """
        consumer = self._consumer
        if consumer is None:
            return
        offsets = self._book.committable(tps)
        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            if asynchronous:
                consumer.commit(offsets=parts, asynchronous=True)
            else:
                consumer.commit(offsets=parts, asynchronous=False)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() != KafkaError._NO_OFFSET:
                _log.warning("offsets_commit_failed", error_code=err.name(), error=err.str())
            return
        self._book.mark_committed(offsets)
        _log.debug("offsets_committed", offsets={f"{t}[{p}]": o for (t, p), o in offsets.items()},
                   asynchronous=asynchronous)

    def observe_lag(self, last: Mapping[TopicPartitionKey, int]) -> None:
        """Set the lag gauge of each partition from the last offset taken in it (cached watermarks)."""
        consumer = self._consumer
        if consumer is None:
            return
        for (topic, partition), offset in last.items():
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except KafkaException:
                continue
            if high is not None and high >= 0:
                self._metrics.consumer_lag.labels(self._service, topic, str(partition)).set(max(0, high - offset - 1))

    def close(self) -> None:
        """Commit what is done, synchronously, and close the consumer (a second call does nothing)."""
        consumer = self._consumer
        if consumer is None:
            return
        self.commit(asynchronous=False)
        consumer.close()
        self._consumer = None
        self._assigned.clear()

    # -- the consumer's callbacks, served by its poll/consume on the driver's thread ----------

    def _on_commit(self, err: KafkaError | None, partitions: list[Any]) -> None:
        failed = [(str(p.topic), int(p.partition)) for p in partitions if err is not None or p.error is not None]
        if failed:
            self._book.forget_committed(failed)
            _log.warning("offsets_commit_failed", partitions=_names(failed),
                         error=err.str() if err is not None else None)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return  # a replaced consumer closing late: assignments belong to the new one
        tps = _keys(partitions)
        self._taken(tps)
        _log.info("partitions_assigned", partitions=_names(tps))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return
        tps = _keys(partitions)
        self._hooks.revoking(tps)
        self.commit(asynchronous=False, tps=tps)
        dropped = self._drop(tps)
        _log.info("partitions_revoked", partitions=_names(tps), dropped_in_flight=dropped)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return
        tps = _keys(partitions)
        dropped = self._drop(tps)  # lost: the group moved on, a commit would be refused
        _log.warning("partitions_lost", partitions=_names(tps), dropped_in_flight=dropped)

    # -- bookkeeping ----------------------------------------------------------------------------

    def _taken(self, tps: TopicPartitions) -> None:
        self._assigned.update(dict.fromkeys(tps))
        self._hooks.assigned(tps)

    def _drop(self, tps: TopicPartitions) -> int:
        dropped = self._book.revoke(tps)
        for tp in tps:
            self._assigned.pop(tp, None)
        self._hooks.dropped(tps)
        return dropped

    def _replace(self, now: float) -> None:
        """Give up on a consumer that never joined its group again; start a new one.

        What it held is dropped uncommitted (outside the group its commits are refused anyway); the
        new consumer starts from the group's committed offsets, so records handled and not committed
        are handled again (at-least-once, as after a restart). The old consumer is closed on a side
        thread for at most 10 s (a stuck one may never finish closing); its late callbacks are ignored.
        """
        stuck = self.consumer
        tps = self.assigned
        dropped = self._drop(tps)
        _log.error("consumer_rejoin_stuck", group_id=self._group_id, outside_group_s=round(
            self._membership.outside_for(now), 1), partitions=_names(tps), dropped_in_flight=dropped)
        self._consumer = None
        close_abandoned_consumer(stuck)
        self.start()
        self._membership.restart(self._clock())
        self.consumers_replaced += 1
        self._metrics.retries.labels(self._service, "consumer_rejoin").inc()
        self._hooks.replaced()
        _log.warning("consumer_replaced", group_id=self._group_id, replaced=self.consumers_replaced)

