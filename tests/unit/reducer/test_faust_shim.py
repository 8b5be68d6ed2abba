"""faust_shim: each fix inside faust-streaming/aiokafka/mode, and the checks that guard them (no broker).

Every test that applies the shim gets its app from the ``shimmed`` fixture, whose teardown
undoes it and checks that no class of the three libraries was changed for the process.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import inspect
import signal
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MethodType, SimpleNamespace
from typing import Any

import faust
import mode
import pytest
from aiokafka import errors as kafka_errors
from aiokafka.client import CoordinationType
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.producer.sender import Sender
from aiokafka.structs import TopicPartition
from faust.streams import current_event
from faust.transport import consumer as transport_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from docstream_reducer import faust_shim
from docstream_reducer.faust_shim import LibraryMismatchError, ReducerWorker, ThreadWorker

_ROOT = Path(__file__).resolve().parents[3]
_LIBRARY_CLASSES = (Sender, faust_aiokafka.AIOKafkaConsumerThread, faust_aiokafka.Consumer,
                    faust_aiokafka.Producer, faust_aiokafka.Transport, mode.Worker, faust.Worker)


def _class_state() -> dict[str, dict[str, Any]]:
    return {cls.__qualname__: dict(vars(cls)) for cls in _LIBRARY_CLASSES}


def _app(name: str, *, exactly_once: bool = False) -> faust.App:
    return faust.App(name, broker="kafka://127.0.0.1:1", web_enabled=False, autodiscover=False,
                     processing_guarantee="exactly_once" if exactly_once else "at_least_once")


@pytest.fixture
def shimmed() -> Iterator[Callable[..., faust.App]]:
    """Apply the shim to new apps; undo it afterwards and check that nothing process-wide changed."""
    before = _class_state()
    shims: list[faust_shim.Shim] = []

    def _make(name: str = "shim-test", *, exactly_once: bool = False, timeout_s: float = 300.0,
              idempotent: bool = False) -> faust.App:
        app = _app(name, exactly_once=exactly_once)
        app.in_worker = exactly_once  # in_transaction needs both (set by faust's Worker)
        shims.append(faust_shim.apply(app, transaction_timeout_s=timeout_s, idempotent=idempotent))
        return app

    yield _make
    for shim in shims:
        shim.undo()
        assert shim.app._transport is shim.previous
    assert _class_state() == before


# --- version and signature checks ---------------------------------------------------------------


def test_the_pins_of_the_shim_are_the_pins_of_pyproject() -> None:
    dependencies = tomllib.loads((_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for package, version in faust_shim.PINNED.items():
        assert f"{package}=={version}" in dependencies


def test_the_installed_libraries_pass_both_checks() -> None:
    faust_shim.check_versions()
    faust_shim.check_signatures()


def test_another_installed_version_is_refused_with_the_package_and_both_versions() -> None:
    def version(package: str) -> str:
        return "0.15.0" if package == "aiokafka" else importlib.metadata.version(package)

    with pytest.raises(LibraryMismatchError) as caught:
        faust_shim.check_versions(version)
    assert caught.value.code == "library_mismatch"
    assert (caught.value.package, caught.value.expected, caught.value.found) == ("aiokafka", "0.14.0", "0.15.0")
    assert "aiokafka" in caught.value.message and "0.14.0" in caught.value.message and "0.15.0" in caught.value.message


def test_a_missing_library_is_refused() -> None:
    def version(package: str) -> str:
        raise importlib.metadata.PackageNotFoundError(package)

    with pytest.raises(LibraryMismatchError, match="not installed"):
        faust_shim.check_versions(version)


def test_a_changed_signature_is_refused_with_both_signatures() -> None:
    async def _find_coordinator(self: Any, coordinator_type: Any, coordinator_key: str, timeout: float) -> Any:
        return None

    expected = "(self, coordinator_type, coordinator_key)"
    with pytest.raises(LibraryMismatchError) as caught:
        faust_shim.check_signatures({"aiokafka.producer.sender.Sender._find_coordinator":
                                     ("aiokafka", _find_coordinator, expected)})
    assert caught.value.package == "aiokafka" and caught.value.expected == expected
    assert "timeout: 'float'" in caught.value.found and "Sender._find_coordinator" in caught.value.message


def test_apply_checks_before_it_patches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust_shim, "PINNED", {"faust-streaming": "0.16.0"})
    app = _app("shim-refused")
    with pytest.raises(LibraryMismatchError, match="faust-streaming"):
        faust_shim.apply(app, transaction_timeout_s=300)
    assert app._transport is None


def test_mode_still_ends_a_worker_with_the_sentinel_task_that_the_thread_worker_shortens() -> None:
    # ThreadWorker overrides a private coroutine of mode's Worker; a mode that no longer calls it
    # (or calls it differently) makes the override dead code: review faust_shim.ThreadWorker.
    assert "self._sentinel_task()" in inspect.getsource(mode.Worker._shutdown_loop)
    assert "self._shutdown_loop()" in inspect.getsource(mode.Worker.stop_and_shutdown)
    assert "self._producer_type(" in inspect.getsource(faust_aiokafka.Producer._new_producer)
    assert ThreadWorker._sentinel_task is not mode.Worker._sentinel_task


# --- the patches ---------------------------------------------------------------------------------


def test_changelog_ends_come_from_the_broker_also_in_a_transaction(shimmed: Callable[..., faust.App]) -> None:
    app = shimmed("shim-highwaters")

    async def _consumer_thread() -> type:
        async def _noop(*_: Any) -> None:
            return None

        consumer = app.transport.create_consumer(callback=_noop, on_partitions_revoked=_noop,
                                                 on_partitions_assigned=_noop)
        consumer._thread.thread_loop.close()
        return type(consumer._thread)

    thread_type = asyncio.run(_consumer_thread())
    assert issubclass(thread_type, faust_aiokafka.AIOKafkaConsumerThread)

    class _AioConsumer:
        async def end_offsets(self, partitions: list[TP]) -> dict[TP, int]:
            return {tp: 41 for tp in partitions}

        def last_stable_offset(self, tp: TP) -> None:
            return None  # what aiokafka answers before the partition was fetched

    aio = _AioConsumer()
    thread = SimpleNamespace(consumer=SimpleNamespace(in_transaction=True), _ensure_consumer=lambda: aio)
    tp = TP("t-changelog", 0)
    assert asyncio.run(thread_type._highwaters(thread, [tp])) == {tp: 41}
    assert asyncio.run(faust_aiokafka.AIOKafkaConsumerThread._highwaters(thread, [tp])) == {tp: None}


def test_the_livelock_check_skips_a_partition_that_a_rebalance_assigned_before_it_has_a_position(
    shimmed: Callable[..., faust.App],
) -> None:
    """Faust's check (every 2.5 commit intervals) read aiokafka's position of a partition just assigned, which
    asserts it is set: the reducer crashed with an AssertionError in that window."""
    app = shimmed("shim-livelock")
    tp = TP("t-input", 0)

    async def _check() -> list[str]:
        async def _noop(*_: Any) -> None:
            return None

        consumer = app.transport.create_consumer(callback=_noop, on_partitions_revoked=_noop,
                                                 on_partitions_assigned=_noop)
        consumer._thread.thread_loop.close()
        thread_type = type(consumer._thread)
        subscriptions = SubscriptionState()  # aiokafka's own, as a rebalance leaves it: assigned, no position yet
        subscriptions.assign_from_user({TopicPartition(tp.topic, tp.partition)})
        # the consumer's and its fetcher's subscription state are the one object, as in aiokafka
        aio = SimpleNamespace(_subscription=subscriptions, _fetcher=SimpleNamespace(_subscriptions=subscriptions))
        faust_app = SimpleNamespace(monitor=object(), topics=SimpleNamespace(acks_enabled_for=lambda _: True))
        thread = thread_type.__new__(thread_type)  # the shim's class, its state set by hand (no event loop)
        vars(thread).update(
            _ensure_consumer=lambda: aio, _verify_aiokafka_event_path=lambda *_: False, time_started=0.0,
            tp_stream_timeout_secs=300.0, consumer=SimpleNamespace(app=faust_app),
        )
        outcomes = []
        for verify in (thread_type.verify_event_path, faust_aiokafka.AIOKafkaConsumerThread.verify_event_path):
            try:
                verify(thread, 1.0, tp)
                outcomes.append("checked")
            except AssertionError:
                outcomes.append("crashed")
        subscriptions.seek(TopicPartition(tp.topic, tp.partition), 7)  # the position fetched: checked as before
        thread_type.verify_event_path(thread, 1.0, tp)
        outcomes.append("checked")
        return outcomes

    assert asyncio.run(_check()) == ["checked", "crashed", "checked"]


def test_a_rebalance_commits_the_handled_offsets_before_faust_forgets_them(
    shimmed: Callable[..., faust.App],
) -> None:
    """The consumer's revoke commits the acknowledged offsets, then Faust's own revoke drops them; Faust alone
    dropped them first and its commit found nothing (the rebalance then aborted the open transaction)."""
    app = shimmed("shim-revoke", exactly_once=True)
    tp = TP("t", 0)
    seen: list[str] = []

    async def _revoke() -> tuple[list[dict[TP, int]], bool]:
        async def _noop(*_: Any) -> None:
            return None

        async def _faust_revoke(revoked: set[TP]) -> None:
            seen.append(f"faust revoke, acked {list(consumer._acked.get(tp, []))}")

        consumer = app.transport.create_consumer(callback=_noop, on_partitions_revoked=_faust_revoke,
                                                 on_partitions_assigned=_noop)
        consumer._thread.thread_loop.close()
        committed: list[dict[TP, int]] = []

        async def _commit_offsets(offsets: dict[TP, int], start_new_transaction: bool = True) -> bool:
            committed.append(dict(offsets))
            return True

        consumer._commit_offsets = _commit_offsets
        consumer.assignment = lambda: {tp}
        consumer.pause_partitions = lambda tps: seen.append(f"paused {sorted(tps)}")
        for offset in (0, 1, 2):
            consumer._acked[tp].append(offset)
            consumer._acked_index[tp].add(offset)
        await consumer.on_partitions_revoked({tp})
        return committed, consumer.flow_active

    committed, flowing = asyncio.run(_revoke())
    assert committed == [{tp: 3}]  # the next offset to read after the handled 0, 1, 2
    assert seen == [f"paused {[tp]}", "faust revoke, acked []"]
    assert not flowing  # nothing more reaches the agents until the assignment resumes the flow


# --- the fetch loop: nothing counts as read that no agent took ------------------------------------

_IN = TP("in", 0)
_OTHER = TP("in", 1)
_CHANGELOG = TP("app-table-changelog", 0)

Fetch = list[Any]  # the records of one fetch, (partition, offset); a step in it starts while the fetch is served
Step = Callable[[Any], Any]  # an async step, given the consumer: a rebalance's stop and seek, a watch's seek


class _Loop:
    """A shimmed app's consumer whose fetches are scripted at aiokafka's edge (the consumer thread's
    ``getmany``): Faust's ``getmany``, and the shim's fetch lock and fetch loop, run as they are. A step
    starts while its fetch is served (a rebalance's seek, a partition watch's seek); ``blocked`` holds a
    record's delivery (a full stream buffer) while a step runs, until a stop of the flow cancels it.
    ``stock`` runs Faust's own fetch, seek and fetch loop instead."""

    def __init__(self, app: faust.App, *, committed: dict[TP, int | None],
                 blocked: dict[int, Step] | None = None) -> None:
        self.app = app
        self.taken: list[tuple[TP, int]] = []
        self.committed = committed
        self.sought: list[tuple[str, Any]] = []
        self.events: list[str] = []
        self._blocked = dict(blocked or {})
        self._consumer: Any = None
        self._steps: list[asyncio.Task[Any]] = []
        app.topics._acking_topics.add(_IN.topic)  # what an agent on the topic does

    async def _callback(self, message: Any) -> None:
        step = self._blocked.pop(message.offset, None)
        if step is not None:
            self._steps.append(asyncio.ensure_future(step(self._consumer)))
            await asyncio.Event().wait()  # only a stop of the flow ends it
        self.taken.append((message.tp, message.offset))

    def run(self, script: list[Fetch], *, stock: bool = False, read: dict[TP, int] | None = None) -> Any:
        async def _run() -> Any:
            async def _noop(*_: Any) -> None:
                return None

            consumer = self.app.transport.create_consumer(callback=self._callback, on_partitions_revoked=_noop,
                                                          on_partitions_assigned=_noop)
            consumer._thread.thread_loop.close()
            self._consumer = consumer
            fetcher = SimpleNamespace(_stopped=asyncio.Event())
            fetches = iter(script)

            async def _fetch(active: Any, timeout: float) -> dict[TP, list[Any]]:
                fetch = next(fetches, None)
                if fetch is None:
                    fetcher._stopped.set()
                    return {}
                self.events.append("fetch")
                records: dict[TP, list[Any]] = {}
                for item in fetch:
                    if callable(item):
                        self._steps.append(asyncio.ensure_future(item(consumer)))
                    else:
                        tp, offset = item
                        records.setdefault(tp, []).append(
                            SimpleNamespace(tp=tp, topic=tp.topic, offset=offset, key=None, value=None))
                for _ in range(3):
                    await asyncio.sleep(0)  # the fetch waits on the broker: a step may run meanwhile
                self.events.append("fetched")
                return records

            async def _seek_to_committed() -> dict[TP, int | None]:
                self.events.append("seek")
                self.sought.append(("committed", dict(self.committed)))
                return dict(self.committed)

            async def _seek_to_beginning(*tps: TP) -> None:
                self.sought.append(("beginning", sorted(tps)))

            async def _seek(tp: TP, offset: int) -> None:
                self.events.append("seek")
                self.sought.append(("seek", (tp, offset)))

            consumer._thread.getmany = _fetch
            consumer._thread.seek_to_beginning = _seek_to_beginning
            consumer.seek_to_committed = _seek_to_committed
            consumer._seek = _seek
            consumer._to_message = lambda tp, record: record
            consumer.highwater = lambda tp: 0
            consumer.assignment = lambda: set(self.committed)
            consumer._set_active_tps({*self.committed, _CHANGELOG})
            consumer._read_offset.update(read or {})
            consumer._committed_offset.update(self.committed)
            if stock:  # Faust's own fetch, seek of every partition and fetch loop
                consumer._getmany = MethodType(transport_consumer.ThreadDelegateConsumer._getmany, consumer)
                consumer.perform_seek = MethodType(transport_consumer.Consumer.perform_seek, consumer)
                drain = transport_consumer.Consumer._drain_messages
            else:
                drain = type(consumer)._drain_messages
            await asyncio.wait_for(drain(consumer, fetcher), timeout=10)
            await asyncio.gather(*self._steps)
            return consumer

        return asyncio.run(_run())


def _records(tp: TP, *offsets: int) -> Fetch:
    return [(tp, offset) for offset in offsets]


async def _seek_all(consumer: Any) -> None:
    """The seek that ends a rebalance's recovery: every partition to its committed offset."""
    await consumer.perform_seek()


def _gaps(consumer: Any, tp: TP) -> list[tuple[int, int]]:
    return sorted((i.begin, i.end - 1) for i in consumer._gap.get(tp, ()))


def test_a_batch_fetched_before_a_seek_is_fetched_again_after_it(shimmed: Callable[..., faust.App]) -> None:
    """Committed offset 10, 11 and 12 handled; the rebalance's seek to 10 comes while 13 and 14 are fetched.
    Faust alone went on with them after the seek: 13 made a gap of 11-13, acknowledged before any agent had
    13 (and 11, 12 whether handled or not), and the re-fetched 10-13 were dropped as read. With the shim the
    seek waits for the fetch, the batch is dropped after it, and 10-14 are fetched and handed over again."""
    script = [_records(_IN, 11, 12), [*_records(_IN, 13, 14), _seek_all], _records(_IN, 10, 11, 12, 13, 14)]

    stock = _Loop(shimmed("shim-drain-stock"), committed={_IN: 10})
    consumer = stock.run(script, stock=True, read={_IN: 10})
    assert _gaps(consumer, _IN) == [(11, 13)]
    assert [o for _, o in stock.taken] == [11, 12, 13, 14, 14]

    shim = _Loop(shimmed("shim-drain"), committed={_IN: 10})
    consumer = shim.run(script, read={_IN: 10})
    assert _gaps(consumer, _IN) == []
    assert [o for _, o in shim.taken][-5:] == [10, 11, 12, 13, 14]
    assert consumer._read_offset[_IN] == 14


def test_a_fetch_and_a_seek_never_overlap(shimmed: Callable[..., faust.App]) -> None:
    shim = _Loop(shimmed("shim-drain-lock"), committed={_IN: 10})
    shim.run([[*_records(_IN, 11), _seek_all], _records(_IN, 10, 11)], read={_IN: 10})
    assert shim.events[:3] == ["fetch", "fetched", "seek"]

    stock = _Loop(shimmed("shim-drain-lock-stock"), committed={_IN: 10})
    stock.run([[*_records(_IN, 11), _seek_all], _records(_IN, 10, 11)], stock=True, read={_IN: 10})
    assert stock.events[:3] == ["fetch", "seek", "fetched"]


def test_a_delivery_the_stop_cancels_is_not_read_and_nothing_is_handed_over_until_the_seek(
    shimmed: Callable[..., faust.App],
) -> None:
    """Record 12 waits for a full stream buffer when a rebalance stops the flow. Faust alone marked it read and
    handed over 13 and 14, fetched between the stop and the seek: a commit could then pass 12. The shim keeps
    the read offset at 11 and hands over only the changelog record until the seek; 12 comes back with the fetch
    after it."""
    read_at_seek: list[int | None] = []

    async def _stop(consumer: Any) -> None:
        consumer.stop_flow()
        await asyncio.sleep(0)
        consumer.resume_flow()  # a recovery resumes the flow to read changelogs before it seeks the inputs

    async def _seek(consumer: Any) -> None:
        read_at_seek.append(consumer._read_offset[_IN])
        await consumer.perform_seek()

    def script() -> list[Fetch]:
        return [_records(_IN, 11, 12, 13), [(_IN, 14), (_CHANGELOG, 5), _seek], _records(_IN, 11, 12, 13, 14)]

    shim = _Loop(shimmed("shim-drain-stop"), committed={_IN: 11}, blocked={12: _stop})
    consumer = shim.run(script(), read={_IN: 10})
    assert read_at_seek == [11]
    assert shim.taken == [(_IN, 11), (_CHANGELOG, 5), (_IN, 11), (_IN, 12), (_IN, 13), (_IN, 14)]
    assert _gaps(consumer, _IN) == []

    stock = _Loop(shimmed("shim-drain-stop-stock"), committed={_IN: 11}, blocked={12: _stop})
    stock.run(script(), stock=True, read={_IN: 10})
    assert read_at_seek[-1] == 13
    assert stock.taken[:2] == [(_IN, 11), (_IN, 13)]


def test_a_gap_acknowledges_the_missing_offsets_not_the_record_after_them(shimmed: Callable[..., faust.App]) -> None:
    """Transaction markers at 1, 2 and 6, 7: the gaps are those offsets. Faust counted the record after a gap
    acknowledged too (and lost a gap right after offset 0, the partition stall of docs/reducer.md)."""
    script = [_records(_IN, 0, 3, 4, 5, 8)]
    shim = _Loop(shimmed("shim-drain-gaps"), committed={_IN: None})
    consumer = shim.run(script)
    assert _gaps(consumer, _IN) == [(1, 2), (6, 7)]
    assert consumer._read_offset[_IN] == 8

    stock = _Loop(shimmed("shim-drain-gaps-stock"), committed={_IN: None})
    consumer = stock.run(script, stock=True)
    assert _gaps(consumer, _IN) == [(6, 8)]  # no gap after 0, and 8 counted before it was handled


def test_a_partitions_own_seek_drops_only_its_records_of_the_batch(shimmed: Callable[..., faust.App]) -> None:
    async def _watch_seek(consumer: Any) -> None:  # the partition watch's re-fetch of a stalled partition
        await consumer.seek(_IN, 3)

    script = [[(_IN, 4), (_OTHER, 7), (_IN, 5), (_OTHER, 8), _watch_seek], _records(_IN, 3, 4, 5)]
    shim = _Loop(shimmed("shim-drain-watch"), committed={_IN: 3, _OTHER: 6})
    consumer = shim.run(script, read={_IN: 3, _OTHER: 6})
    assert shim.taken == [(_IN, 4), (_OTHER, 7), (_OTHER, 8), (_IN, 3), (_IN, 4), (_IN, 5)]
    assert ("seek", (_IN, 3)) in shim.sought
    assert _gaps(consumer, _IN) == [] and _gaps(consumer, _OTHER) == []


def test_the_seek_of_every_partition_also_seeks_input_partitions_without_a_committed_offset(
    shimmed: Callable[..., faust.App],
) -> None:
    """aiokafka leaves a partition without a committed offset (or at 0) where its fetch is; an input partition
    goes back to its beginning (records dropped by the gate are fetched again), a changelog stays."""
    shim = _Loop(shimmed("shim-drain-beginning"), committed={_IN: None, _OTHER: 0, TP("in", 2): 9,
                                                              _CHANGELOG: None})
    consumer = shim.run([[_seek_all]])
    assert shim.sought[-1] == ("beginning", [_IN, _OTHER])
    assert consumer._read_offset[TP("in", 2)] == 9 and consumer._read_offset[_IN] is None


def test_the_fetch_gate_opens_only_after_a_seek_that_began_after_the_last_stop() -> None:
    gate = faust_shim.FetchGate()
    before = gate.epoch()
    assert gate.current(_IN, before)
    gate.stop()
    assert not gate.current(_IN, gate.epoch())  # nothing fetched after a stop either, until a seek
    began = gate.seek_all_began()
    gate.stop()  # a second rebalance during the seek
    gate.seek_all_ended(began)
    assert not gate.current(_IN, gate.epoch())
    gate.seek_all_ended(gate.seek_all_began())
    after = gate.epoch()
    assert gate.current(_IN, after) and not gate.current(_IN, before)
    gate.seek(_OTHER)
    assert gate.current(_IN, after) and not gate.current(_OTHER, after) and gate.current(_OTHER, gate.epoch())


def test_transactional_producers_get_their_own_apps_transaction_timeout(shimmed: Callable[..., faust.App]) -> None:
    first = shimmed("shim-txn-1", exactly_once=True, timeout_s=300)
    second = shimmed("shim-txn-2", exactly_once=True, timeout_s=450)  # no "last call wins"
    plain = shimmed("shim-plain", timeout_s=450)
    assert first.producer._settings_extra() == {"acks": "all", "enable_idempotence": True,
                                                "transaction_timeout_ms": 300_000}
    assert second.producer._settings_extra()["transaction_timeout_ms"] == 450_000
    assert plain.producer._settings_extra() == {}
    assert plain.conf.producer_acks == -1  # acks=all (Faust's producer_acks -1)


def test_at_least_once_producers_are_idempotent_when_the_transport_says_so(shimmed: Callable[..., faust.App]) -> None:
    # reducer.idempotent_producer (auto and on: idempotent, off: not; docs/operations.md "A replicated deployment")
    idempotent = shimmed("shim-idempotent", idempotent=True)
    assert idempotent.producer._settings_extra() == {"acks": "all", "enable_idempotence": True}
    assert shimmed("shim-not-idempotent").producer._settings_extra() == {}
    # exactly-once producers are transactional: idempotent already, with their timeout
    both = shimmed("shim-txn-idempotent", exactly_once=True, idempotent=True)
    assert both.producer._settings_extra() == {"acks": "all", "enable_idempotence": True,
                                               "transaction_timeout_ms": 300_000}

    async def _new() -> Any:
        producer = idempotent.producer._new_producer()
        try:
            return producer._txn_manager
        finally:
            await producer.stop()

    manager = asyncio.run(_new())  # aiokafka keeps a transaction manager for the producer id and sequences
    gc.collect()
    assert manager is not None and manager.transactional_id is None


@pytest.mark.parametrize(("mode", "transactions", "idempotent"), [
    ("auto", False, True),
    ("on", False, True),
    ("off", False, False),
    ("off", True, True),  # exactly-once producers are transactional, hence idempotent
])
def test_the_reducers_producer_idempotence_by_mode(mode: str, transactions: bool, idempotent: bool) -> None:
    from docstream.settings import Settings
    from docstream_reducer.app import resolve_producer_idempotence

    # no broker answers here: the decision is the settings' alone, nothing is asked of the cluster
    settings = Settings().with_overrides(kafka={"bootstrap_servers": "127.0.0.1:9", "transactions": transactions},
                                         reducer={"idempotent_producer": mode})
    assert resolve_producer_idempotence(settings.kafka, settings.reducer) is idempotent


def test_the_apps_aiokafka_producers_retry_find_coordinator(shimmed: Callable[..., faust.App]) -> None:
    app = shimmed("shim-sender", exactly_once=True)

    async def _new() -> tuple[Any, Any]:
        producer = app.producer._new_producer(transactional_id="reducer-0")
        try:
            return producer._sender._find_coordinator, producer._txn_manager.transaction_timeout_ms
        finally:
            await producer.stop()

    find, timeout_ms = asyncio.run(_new())
    gc.collect()
    assert getattr(find, "docstream_retries", False)
    assert timeout_ms == 300_000


class _Client:
    """coordinator_lookup answers with the given errors first, then node 7; every node is ready."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.lookups = 0
        self.metadata_updates = 0

    async def coordinator_lookup(self, coordinator_type: Any, coordinator_key: str) -> int:
        self.lookups += 1
        if self.errors:
            raise self.errors.pop(0)
        return 7

    async def ready(self, node_id: int, group: Any = None) -> bool:
        return True

    async def force_metadata_update(self) -> bool:
        self.metadata_updates += 1
        return True


def _sender(client: _Client) -> Any:
    """A stand-in for a Sender's state (client, transaction manager, backoff), with the shim's retry."""
    sender = SimpleNamespace(client=client, _txn_manager=SimpleNamespace(transactional_id="reducer-0"),
                             _coordinators={}, _retry_backoff=0.0)
    sender._find_coordinator = MethodType(Sender._find_coordinator, sender)
    faust_shim._retry_find_coordinator(sender)
    return sender


def _find(sender: Any) -> int:
    return asyncio.run(sender._find_coordinator(CoordinationType.GROUP, "group"))


def test_a_connection_lost_during_find_coordinator_is_retried_until_the_broker_answers() -> None:
    client = _Client(kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"),
                     kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"))
    sender = _sender(client)
    assert _find(sender) == 7
    assert client.lookups == 3 and client.metadata_updates == 2
    assert sender._coordinators[CoordinationType.GROUP] == 7


def test_a_non_retriable_error_still_fails() -> None:
    client = _Client(kafka_errors.GroupAuthorizationFailedError())
    with pytest.raises(kafka_errors.GroupAuthorizationFailedError):
        _find(_sender(client))
    client = _Client(kafka_errors.UnsupportedVersionError())
    with pytest.raises(kafka_errors.KafkaError):
        _find(_sender(client))
    assert client.lookups == 1


def test_without_the_shim_a_connection_lost_ends_find_coordinator() -> None:
    client = _Client(kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"))
    sender = SimpleNamespace(client=client, _txn_manager=SimpleNamespace(transactional_id="reducer-0"),
                             _coordinators={}, _retry_backoff=0.0)
    with pytest.raises(kafka_errors.KafkaError):
        asyncio.run(Sender._find_coordinator(sender, CoordinationType.GROUP, "group"))


# --- private reads and the workers ----------------------------------------------------------------


def test_committed_offsets_leave_out_partitions_without_one() -> None:
    a, b, c = TP("t", 0), TP("t", 1), TP("u", 0)
    consumer = SimpleNamespace(_committed_offset={a: 5, b: None})
    assert faust_shim.committed_offsets(consumer, [a, b, c]) == {a: 5}
    assert faust_shim.committed_offsets(SimpleNamespace(), [a]) == {}


def test_the_first_stop_signal_arms_the_watchdog_once_and_only_with_a_bound() -> None:
    loop = asyncio.new_event_loop()
    try:
        for bound, expected in ((7.0, [(7.0, 1)]), (None, [])):
            worker = ReducerWorker(_app("shim-worker"), loop=loop, quiet=True, override_logging=False,
                                   redirect_stdouts=False, loglevel="warning")
            armed: list[tuple[float, int]] = []
            worker.watchdog = lambda seconds, code, armed=armed: armed.append((seconds, code))  # type: ignore[misc]
            worker.stop_timeout_s = bound
            worker.request_stop()
            worker.request_stop()
            loop.run_until_complete(worker._signal_stop_future)
            assert armed == expected
    finally:
        loop.close()


def test_the_thread_worker_installs_no_signal_handlers() -> None:
    loop = asyncio.new_event_loop()
    try:
        worker = ThreadWorker(_app("shim-thread"), loop=loop, quiet=True, override_logging=False,
                              redirect_stdouts=False, loglevel="warning")
        worker.install_signal_handlers()
        assert not loop.remove_signal_handler(signal.SIGTERM)
    finally:
        loop.close()


def test_the_thread_worker_sentinel_lets_the_loop_run_once_more_and_returns_at_once() -> None:
    loop = asyncio.new_event_loop()
    ran: list[str] = []
    try:
        loop.call_soon(ran.append, "late callback")
        worker = object.__new__(ThreadWorker)  # the coroutine uses nothing of the worker
        loop.run_until_complete(asyncio.wait_for(ThreadWorker._sentinel_task(worker), timeout=0.5))
    finally:
        loop.close()
    assert ran == ["late callback"]


def test_partition_state_reports_faust_and_aiokafka_views_of_a_partition() -> None:
    from intervaltree import IntervalTree

    tp = TP("t", 2)
    fetched = SimpleNamespace(_position=7, highwater=58, lso=58, paused=False)
    assignment = SimpleNamespace(state_value=lambda _tp: fetched)
    aio = SimpleNamespace(_subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)),
                          _fetcher=SimpleNamespace(_records={tp: object()}))
    consumer = SimpleNamespace(
        _read_offset={tp: 0}, _committed_offset={tp: 1}, _acked={tp: [4, 5, 9]},
        _gap={tp: IntervalTree.from_tuples([(2, 4)])},
        _paused_partitions=set(), _active_partitions={tp}, _buffered_partitions=set(),
        _thread=SimpleNamespace(_ensure_consumer=lambda: aio),
    )
    assert faust_shim.partition_state(consumer, tp) == {
        "read": 0, "committed": 1, "acked": [3, 4, 9], "gaps": [(2, 4)], "paused": False, "active": True,
        "buffered": False, "position": 7, "highwater": 58, "lso": 58, "fetch_paused": False, "prefetched": True,
    }


def test_partition_state_of_a_consumer_without_an_aiokafka_consumer_has_faust_fields_only() -> None:
    state = faust_shim.partition_state(SimpleNamespace(), TP("t", 0))
    assert state == {"read": None, "committed": None, "acked": [0, None, None], "gaps": [], "paused": False,
                     "active": False, "buffered": False}


# --- every table change acknowledged before an at-least-once commit -----------------------------------


def _slow_sends(buffer: Any, *, delay_s: float, error: Exception | None = None) -> list[Any]:
    """Make ``buffer`` send each message after ``delay_s`` (acknowledged, or failed with ``error``)."""
    sent: list[Any] = []

    async def _send_pending(self: Any, fut: asyncio.Future[Any]) -> None:
        await asyncio.sleep(delay_s)
        sent.append(fut)
        if error is None:
            fut.set_result("acked")
        else:
            fut.set_exception(error)

    buffer._send_pending = MethodType(_send_pending, buffer)
    return sent


def test_faust_alone_flushes_its_buffer_with_table_changes_still_waiting() -> None:
    # the library's behaviour the fix is for: its buffer flush gives up after 0.1 s without a send
    from faust.transport.producer import ProducerBuffer

    async def _run() -> list[bool]:
        buffer = ProducerBuffer()
        buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))
        _slow_sends(buffer, delay_s=0.3)
        await buffer.start()
        futures = [asyncio.get_running_loop().create_future() for _ in range(3)]
        try:
            for fut in futures:
                buffer.put(fut)
            await buffer.flush()
            return [f.done() for f in futures]
        finally:
            await asyncio.gather(*futures)  # a stop with messages waiting raises in faust
            await buffer.stop()

    assert asyncio.run(_run()) == [False, False, False]


def test_the_apps_producer_flush_returns_only_once_every_table_change_is_acknowledged(
    shimmed: Callable[..., faust.App],
) -> None:
    app = shimmed("shim-flush")

    async def _run() -> tuple[list[bool], int]:
        producer = app.producer
        sent = _slow_sends(producer.buffer, delay_s=0.15)
        await producer.buffer.start()
        futures = [asyncio.get_running_loop().create_future() for _ in range(4)]
        try:
            for fut in futures:
                producer.send_soon(fut)
            await producer.flush()
            return [f.done() for f in futures], len(sent)
        finally:
            await producer.buffer.stop()

    assert asyncio.run(_run()) == ([True] * 4, 4)


def test_a_failed_table_change_fails_the_flush_so_nothing_is_committed_past_it(
    shimmed: Callable[..., faust.App],
) -> None:
    app = shimmed("shim-flush-failed")

    async def _run() -> None:
        producer = app.producer
        _slow_sends(producer.buffer, delay_s=0.05, error=kafka_errors.KafkaTimeoutError("no leader"))
        await producer.buffer.start()
        try:
            producer.send_soon(asyncio.get_running_loop().create_future())
            await producer.flush()
        finally:
            await producer.buffer.stop()

    with pytest.raises(faust_shim.ChangelogNotSentError, match="KafkaTimeoutError") as caught:
        asyncio.run(_run())
    assert caught.value.code == "changelog_not_sent"


def test_waiting_sends_of_a_stopped_buffer_or_past_the_timeout_fail_the_flush() -> None:
    async def _run(sending: bool, timeout_s: float) -> None:
        sends = faust_shim.Sends()
        sends.add(asyncio.get_running_loop().create_future())
        await sends.wait(lambda: sending, timeout_s=timeout_s)

    with pytest.raises(faust_shim.ChangelogNotSentError, match="1 table changes were still buffered"):
        asyncio.run(_run(sending=False, timeout_s=5))
    with pytest.raises(faust_shim.ChangelogNotSentError, match=r"not acknowledged within 0\.05 s"):
        asyncio.run(_run(sending=True, timeout_s=0.05))


def test_acknowledged_sends_are_forgotten_and_a_failed_one_fails_every_later_flush() -> None:
    async def _run() -> list[str]:
        loop = asyncio.get_running_loop()
        sends = faust_shim.Sends()
        acked, cancelled = loop.create_future(), loop.create_future()
        sends.add(acked)
        acked.set_result("acked")
        await asyncio.sleep(0)  # done callbacks run on the next loop pass
        await asyncio.wait_for(sends.wait(lambda: False, timeout_s=0), timeout=1)  # nothing waits: at once
        assert not sends.unsent
        sends.add(cancelled)
        cancelled.cancel()
        await asyncio.sleep(0)
        errors = []
        for _ in range(2):
            with pytest.raises(faust_shim.ChangelogNotSentError) as caught:
                await sends.wait(lambda: True, timeout_s=5)
            errors.append(str(caught.value))
        return errors

    assert asyncio.run(_run()) == ["1 table changes were not written, the first: cancelled"] * 2


# --- every buffered send acknowledged in its transaction before an exactly-once commit ----------------


class _TransactionProducer:
    """Records what the commit does, and whether each buffered send was acknowledged when the offsets went."""

    def __init__(self, futures: list[asyncio.Future[Any]]) -> None:
        self.futures = futures
        self.calls: list[Any] = []

    async def flush(self) -> None:
        return None

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self.calls.append(("offsets", dict(offsets), group_id, [f.done() for f in self.futures]))

    async def commit_transaction(self) -> None:
        self.calls.append("commit")

    async def begin_transaction(self) -> None:
        self.calls.append("begin")


async def _until(condition: Callable[[], Any]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def _commit_with_buffered_sends(app: faust.App, commit: Callable[..., Any], *, late_send: bool) -> list[Any]:
    """Three table changes buffered (sent 0.1 s apart), then ``commit``; ``late_send``: one more change is
    buffered while the commit waits for the transaction's lock (a direct send holds it)."""
    tp, tid = TP("in", 0), "app-0-0"

    async def _run() -> list[Any]:
        loop = asyncio.get_running_loop()
        producer: Any = app.producer  # made on this loop: its buffer's task runs here
        futures = [loop.create_future() for _ in range(4 if late_send else 3)]
        transaction = _TransactionProducer(futures)
        producer._transaction_producers = {tid: transaction}  # instance fields: the class's dicts stay as they are
        producer._trn_locks = {tid: asyncio.Lock()}
        _slow_sends(producer.buffer, delay_s=0.1)
        await producer.buffer.start()
        try:
            for fut in futures[:3]:
                producer.send_soon(fut)
            if late_send:
                await producer._trn_locks[tid].acquire()
                committing = asyncio.ensure_future(commit(producer, {tid: {tp: 7}}, "app"))
                lock = producer._trn_locks[tid]
                await asyncio.wait_for(_until(lambda: lock._waiters), timeout=5)  # flushed, waiting for the lock
                producer.send_soon(futures[3])
                producer._trn_locks[tid].release()
                await asyncio.wait_for(committing, timeout=5)
            else:
                await asyncio.wait_for(commit(producer, {tid: {tp: 7}}, "app"), timeout=5)
            return transaction.calls
        finally:
            await asyncio.gather(*futures)
            await producer.buffer.stop()

    return asyncio.run(_run())


@pytest.mark.parametrize("late_send", [False, True], ids=["buffered-before", "buffered-while-locked"])
def test_an_exactly_once_commit_sends_its_offsets_only_once_every_buffered_send_is_acknowledged(
    late_send: bool, shimmed: Callable[..., faust.App],
) -> None:
    app = shimmed("shim-eos-commit", exactly_once=True)
    calls = _commit_with_buffered_sends(app, faust_shim._Producer.commit_transactions, late_send=late_send)
    done = [True] * (4 if late_send else 3)
    assert calls == [("offsets", {TP("in", 0): 7}, "app", done), "commit", "begin"]


def test_faust_alone_commits_a_transaction_with_its_table_changes_still_buffered(
    shimmed: Callable[..., faust.App],
) -> None:
    # the library's behaviour the fix is for: the transactional commit flushes nothing
    app = shimmed("shim-eos-commit-faust", exactly_once=True)
    calls = _commit_with_buffered_sends(app, faust_aiokafka.Producer.commit_transactions, late_send=False)
    assert calls == [("offsets", {TP("in", 0): 7}, "app", [False, False, False]), "commit", "begin"]


def test_make_current_sets_the_event_that_faust_tables_write_for() -> None:
    """A batch is handled in the agent's task, not the one that iterated the stream: make_current is what makes a
    record's table changes go to its changelog partition (``Table.partition_for_key`` reads ``current_event``)."""
    class _Event:
        pass

    first, second = _Event(), _Event()

    async def handle() -> list[Any]:
        seen = [current_event()]
        faust_shim.make_current(first)
        seen.append(current_event())
        faust_shim.make_current(second)
        seen.append(current_event())
        return seen

    assert asyncio.run(handle()) == [None, first, second]
