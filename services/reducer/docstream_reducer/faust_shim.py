"""Every touch of faust-streaming's, aiokafka's and mode-streaming's private internals, in one place.

The reducer needs fixes inside those libraries and some of their private fields
(docs/reducer.md "Faust shim"). They were written for the exact versions in ``PINNED`` (also
pinned in pyproject.toml); ``apply()`` refuses to start on any other version, or when a wrapped
function's signature changed, with a ``LibraryMismatchError`` naming the package, what was
expected and what was found.

Nothing here patches a class for the whole process. ``apply(app, ...)`` gives one Faust app a
transport of its own, whose subclasses carry the fixes:

* ``_Consumer`` / ``_ConsumerThread``: only committed records read, at-least-once too
  (``AIOKafkaConsumerThread._create_worker_consumer``); changelog ends read from the broker under exactly-once
  (``AIOKafkaConsumerThread._highwaters``); a fetch loop of its own (``Consumer._drain_messages``)
  that never marks an input record read, or a missing offset skipped, unless the broker gave it
  after the last seek and an agent took it (``FetchGate``; ``Consumer.perform_seek``, ``seek``,
  ``stop_flow``, ``getmany``, ``_getmany``, ``_add_gap``): the lost record after a restart and the partition stall,
  docs/reducer.md; handled records committed before a rebalance takes their partitions
  (``Consumer.on_partitions_revoked``, ``Consumer.wait_empty``);
* ``_Producer``: transactional producers get ``transaction_timeout_ms`` (``Producer._settings_extra``),
  the value of this app's transport, and are ``_TransactionalProducer``s; ``flush()``, awaited before
  every at-least-once commit, returns only when every table change was acknowledged
  (``Producer.send_soon``, ``Producer.flush``); under exactly-once the offsets commit only once every
  buffered send is acknowledged in its transaction (``Producer.commit_transactions``, ``_trn_locks``);
* ``_TransactionalProducer``: its sender retries a FindCoordinator that lost its connection
  (``Sender._find_coordinator``, wrapped on that sender instance only);
* ``_TableManager`` / ``_Recovery``: under at-least-once too, a table's recovery ends at a changelog whose last
  offsets hold only transaction markers (``TableManager.recovery``, ``Recovery.active_offsets``,
  ``active_highwaters``, ``in_recovery``).

``ReducerWorker`` (a bounded stop: ``Worker._schedule_shutdown``, ``_signal_stop_time``) and
``ThreadWorker`` (a quick loop close: ``Worker._sentinel_task``) are subclasses used only where the
reducer creates its worker. ``committed_offsets(consumer)`` reads Faust's view of the group's
committed offsets. ``make_current(event)`` sets Faust's current event (``faust.streams._current_event``)
in a task that handles a batch taken with ``Stream.noack_take``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.metadata
import inspect
import os
import signal
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiokafka
import faust
import mode
from aiokafka import errors as kafka_errors
from aiokafka.producer.sender import Sender
from faust import streams as faust_streams
from faust.tables.manager import TableManager
from faust.tables.recovery import Recovery
from faust.transport import base as transport_base
from faust.transport import consumer as transport_consumer
from faust.transport import producer as transport_producer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from docstream.errors import DocstreamError, FatalError
from docstream.logging import get_logger

__all__ = [
    "PINNED",
    "SIGNATURES",
    "ChangelogNotSentError",
    "LibraryMismatchError",
    "ReducerWorker",
    "Sends",
    "Shim",
    "SpanProbe",
    "ThreadWorker",
    "apply",
    "check_signatures",
    "check_versions",
    "committed_offsets",
    "exit_watchdog",
    "make_current",
    "partition_state",
]

_log = get_logger(__name__)

SpanProbe = Callable[[list[tuple[str, int, int, int]]], Mapping[tuple[str, int], bool]]
"""Whether each ``(topic, partition, start, end)`` span holds a committed record, by ``(topic, partition)``; a span
it could not decide is left out (``probe.spans_with_records``)."""

PINNED: Mapping[str, str] = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "mode-streaming": "0.7.1"}
"""The distributions whose internals this module touches, at the versions it was written for."""

SIGNATURES: Mapping[str, tuple[str, Callable[..., Any], str]] = {
    "aiokafka.producer.sender.Sender._find_coordinator":
        ("aiokafka", Sender._find_coordinator, "(self, coordinator_type, coordinator_key)"),
    "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._highwaters":
        ("faust-streaming", faust_aiokafka.AIOKafkaConsumerThread._highwaters,
         "(self, partitions: List[faust.types.tuples.TP]) -> Mapping[faust.types.tuples.TP, int]"),
    "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._create_worker_consumer":
        ("faust-streaming", faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer,
         "(self, transport: 'Transport') -> aiokafka.consumer.consumer.AIOKafkaConsumer"),
    "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.verify_event_path":
        ("faust-streaming", faust_aiokafka.AIOKafkaConsumerThread.verify_event_path,
         "(self, now: float, tp: faust.types.tuples.TP) -> None"),
    "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._ensure_consumer":
        ("faust-streaming", faust_aiokafka.AIOKafkaConsumerThread._ensure_consumer,
         "(self) -> aiokafka.consumer.consumer.AIOKafkaConsumer"),
    "faust.transport.drivers.aiokafka.Consumer._new_consumer_thread":
        ("faust-streaming", faust_aiokafka.Consumer._new_consumer_thread,
         "(self) -> 'AIOKafkaConsumerThread'"),
    "faust.transport.drivers.aiokafka.Producer._settings_extra":
        ("faust-streaming", faust_aiokafka.Producer._settings_extra, "(self) -> Mapping[str, Any]"),
    "faust.transport.drivers.aiokafka.Producer._new_producer":
        ("faust-streaming", faust_aiokafka.Producer._new_producer,
         "(self, transactional_id: Optional[str] = None) -> aiokafka.producer.producer.AIOKafkaProducer"),
    "faust.transport.drivers.aiokafka.Producer._producer_type":
        ("faust-streaming", faust_aiokafka.Producer.__dict__["_producer_type"].fget,
         "(self) -> Type[aiokafka.producer.producer.AIOKafkaProducer]"),
    "faust.transport.producer.Producer.send_soon":
        ("faust-streaming", transport_producer.Producer.send_soon,
         "(self, fut: faust.types.tuples.FutureMessage) -> None"),
    "faust.transport.drivers.aiokafka.Producer.flush":
        ("faust-streaming", faust_aiokafka.Producer.flush, "(self) -> None"),
    "faust.transport.drivers.aiokafka.Producer.commit_transactions":
        ("faust-streaming", faust_aiokafka.Producer.commit_transactions,
         "(self, tid_to_offset_map: Mapping[str, Mapping[faust.types.tuples.TP, int]], group_id: str,"
         " start_new_transaction: bool = True) -> None"),
    "faust.transport.base.Transport.__init__":
        ("faust-streaming", transport_base.Transport.__init__,
         "(self, url: List[yarl.URL], app: faust.types.app.AppT,"
         " loop: Optional[asyncio.events.AbstractEventLoop] = None) -> None"),
    "faust.transport.consumer.Consumer.on_partitions_revoked":
        ("faust-streaming", transport_consumer.Consumer.on_partitions_revoked,
         "(self, revoked: Set[faust.types.tuples.TP]) -> None"),
    "faust.transport.consumer.Consumer.wait_empty":
        ("faust-streaming", transport_consumer.Consumer.wait_empty, "(self) -> None"),
    "faust.transport.consumer.Consumer._drain_messages":
        ("faust-streaming", transport_consumer.Consumer._drain_messages,
         "(self, fetcher: mode.types.services.ServiceT) -> None"),
    "faust.transport.consumer.Consumer.getmany":
        ("faust-streaming", transport_consumer.Consumer.getmany,
         "(self, timeout: float) -> AsyncIterator[Tuple[faust.types.tuples.TP, faust.types.tuples.Message]]"),
    "faust.transport.consumer.ThreadDelegateConsumer._getmany":
        ("faust-streaming", transport_consumer.ThreadDelegateConsumer._getmany,
         "(self, active_partitions: Optional[Set[faust.types.tuples.TP]], timeout: float)"
         " -> Mapping[faust.types.tuples.TP, List[Any]]"),
    "faust.transport.consumer.Consumer._add_gap":
        ("faust-streaming", transport_consumer.Consumer._add_gap,
         "(self, tp: faust.types.tuples.TP, offset_from: int, offset_to: int) -> None"),
    "faust.transport.consumer.Consumer.perform_seek":
        ("faust-streaming", transport_consumer.Consumer.perform_seek, "(self) -> None"),
    "faust.transport.consumer.Consumer.seek":
        ("faust-streaming", transport_consumer.Consumer.seek,
         "(self, partition: faust.types.tuples.TP, offset: int) -> None"),
    "faust.transport.consumer.Consumer.stop_flow":
        ("faust-streaming", transport_consumer.Consumer.stop_flow, "(self) -> None"),
    "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.seek_to_beginning":
        ("faust-streaming", faust_aiokafka.AIOKafkaConsumerThread.seek_to_beginning,
         "(self, *partitions: aiokafka.structs.TopicPartition) -> None"),
    "faust.streams.Stream.noack_take":
        ("faust-streaming", faust_streams.Stream.noack_take,
         "(self, max_: int, within: Union[datetime.timedelta, float, str])"
         " -> AsyncGenerator[Sequence[+T_co], NoneType]"),
    "faust.tables.manager.TableManager.recovery":
        ("faust-streaming", TableManager.__dict__["recovery"].fget,
         "(self) -> faust.tables.recovery.Recovery"),
    "faust.tables.recovery.Recovery.__init__":
        ("faust-streaming", Recovery.__init__,
         "(self, app: faust.types.app.AppT, tables: faust.types.tables.TableManagerT, **kwargs: Any) -> None"),
    "mode.worker.Worker._schedule_shutdown":
        ("mode-streaming", mode.Worker._schedule_shutdown, "(self, signal: signal.Signals) -> None"),
    "mode.worker.Worker._sentinel_task":
        ("mode-streaming", mode.Worker._sentinel_task, "(self) -> None"),
}
"""Every third-party function this module wraps, overrides or calls privately: (package, function,
expected ``str(inspect.signature(...))``)."""

_PRIVATE_FIELDS = (
    ("mode-streaming", mode.Worker, "_signal_stop_time"),
    ("faust-streaming", faust_aiokafka.Consumer, "_committed_offset"),
    ("faust-streaming", faust_aiokafka.Consumer, "_read_offset"),
    ("faust-streaming", faust_aiokafka.Consumer, "_commit_every"),
    ("faust-streaming", faust_aiokafka.Consumer, "_n_acked"),
    ("faust-streaming", faust_aiokafka.Producer, "_trn_locks"),
    ("faust-streaming", faust_aiokafka.Producer, "_transaction_producers"),
    ("faust-streaming", TableManager, "_recovery"),
    ("faust-streaming", Recovery, "active_offsets"),
    ("faust-streaming", Recovery, "active_highwaters"),
    ("faust-streaming", Recovery, "in_recovery"),
)

class LibraryMismatchError(FatalError):
    """An installed library differs from the one the reducer's patches were written for.

    Attributes:
        package: the distribution, e.g. ``aiokafka``.
        expected: the pinned version, or the expected signature.
        found: the installed version, or the signature found.
    """

    code = "library_mismatch"

    def __init__(self, package: str, what: str, expected: str, found: str) -> None:
        super().__init__(f"{package}: {what} is {found!r}, the reducer's patches were written for {expected!r} "
                         "(services/reducer/docstream_reducer/faust_shim.py)")
        self.package = package
        self.expected = expected
        self.found = found


def check_versions(version: Callable[[str], str] = importlib.metadata.version) -> None:
    """Refuse any installed version of the patched libraries but the pinned one.

    Args:
        version: looks up an installed distribution's version (``importlib.metadata.version``).

    Raises:
        LibraryMismatchError: a distribution is missing or at another version.
    """
    for package, expected in PINNED.items():
        try:
            found = version(package)
        except importlib.metadata.PackageNotFoundError:
            found = "not installed"
        if found != expected:
            raise LibraryMismatchError(package, "the installed version", expected, found)


def check_signatures(signatures: Mapping[str, tuple[str, Callable[..., Any], str]] = SIGNATURES) -> None:
    """Refuse to run when a function this module wraps changed its signature, or a private field is gone.

    Raises:
        LibraryMismatchError: a signature differs, or a function or field is missing.
    """
    for name, (package, function, expected) in signatures.items():
        found = str(inspect.signature(function))
        if found != expected:
            raise LibraryMismatchError(package, f"the signature of {name}", expected, found)
    if not isinstance(getattr(faust_streams, "_current_event", None), contextvars.ContextVar):
        raise LibraryMismatchError("faust-streaming", "faust.streams._current_event", "a ContextVar", "absent")
    if not inspect.iscoroutinefunction(mode.Worker._sentinel_task):
        raise LibraryMismatchError("mode-streaming", "mode.Worker._sentinel_task", "a coroutine function",
                                   "a plain function")
    for package, owner, field in _PRIVATE_FIELDS:
        if field not in _annotations(owner):
            raise LibraryMismatchError(package, f"{owner.__qualname__}.{field}", "a declared field", "absent")


def _annotations(owner: type) -> set[str]:
    return {name for cls in owner.__mro__ for name in getattr(cls, "__annotations__", {})}


@dataclass
class Shim:
    """What ``apply()`` did to one app; ``undo()`` gives the app back the transport it had."""

    app: faust.App
    transport: _Transport
    previous: Any

    def undo(self) -> None:
        """Put the app's previous transport back (None: Faust builds its own again on first use)."""
        self.app._transport = self.previous


def apply(app: faust.App, *, transaction_timeout_s: float, idempotent: bool = False,
          span_probe: SpanProbe | None = None) -> Shim:
    """Check the libraries, then give ``app`` the patched transport and table manager. Call it before the app
    starts and before it declares its tables.

    Args:
        app: the reducer's Faust app (broker ``kafka://``: the aiokafka driver).
        transaction_timeout_s: ``transaction_timeout_ms`` of its transactional producers.
        idempotent: its producers outside a transaction send with ``enable_idempotence`` and
            ``acks=all`` too (faust-streaming 0.15.3 has no setting for it).
        span_probe: whether offset spans hold committed records (``probe.spans_with_records``); with it, an
            at-least-once recovery ends at a changelog whose last offsets hold none (``_Recovery``).

    Raises:
        LibraryMismatchError: see ``check_versions`` and ``check_signatures``.
    """
    check_versions()
    check_signatures()
    previous = app._transport
    transport = _Transport(app.conf.broker_consumer, app, transaction_timeout_ms=int(transaction_timeout_s * 1000),
                           idempotent=idempotent, span_probe=span_probe)
    app.transport = transport
    app.conf.TableManager = _TableManager  # type: ignore[assignment]  # faust types the setting as its SymbolArg
    return Shim(app=app, transport=transport, previous=previous)


def make_current(event: Any) -> None:
    """Make ``event`` the current event of the running task, as Faust's stream iteration does.

    A table change goes to the changelog partition of the current event (``Table.partition_for_key``), which
    Faust keeps in a context variable (``faust.streams._current_event``) and sets only in the task that iterates
    the stream. A batch taken with ``Stream.noack_take`` is handled in the agent's own task, after that
    iteration moved on: each record is made current before its changes (``DocumentReducer.handle_batch``).
    """
    faust_streams._current_event.set(weakref.ref(event))


def committed_offsets(consumer: Any, tps: Iterable[TP]) -> dict[TP, int]:
    """Faust's view of the group's committed offsets of ``tps`` (partitions without one are left out)."""
    committed: Mapping[TP, int | None] = getattr(consumer, "_committed_offset", {})
    return {tp: offset for tp in tps if (offset := committed.get(tp)) is not None}


def partition_state(consumer: Any, tp: TP) -> dict[str, Any]:
    """What Faust and aiokafka hold about one partition: the evidence a stall report carries.

    Faust: ``read`` (last offset read), ``committed``, the acked offsets not committed yet
    (``acked``: count, lowest, highest), the first recorded ``gaps``, and whether the partition
    is ``paused``, ``active`` (asked for on the next fetch) or ``buffered`` (its stream is full).
    aiokafka: the fetch ``position``, the last fetched ``highwater`` and ``lso``, its own ``paused``
    flag and whether its fetcher holds records of the partition (``prefetched``). A value
    these versions do not have is None. Read-only; call it on the consumer's event loop.
    """
    acked: list[int] = list(getattr(consumer, "_acked", {}).get(tp, ()))
    gaps = getattr(consumer, "_gap", {}).get(tp)
    state: dict[str, Any] = {
        "read": getattr(consumer, "_read_offset", {}).get(tp),
        "committed": getattr(consumer, "_committed_offset", {}).get(tp),
        "acked": [len(acked), min(acked, default=None), max(acked, default=None)],
        "gaps": sorted((i.begin, i.end) for i in gaps)[:3] if gaps else [],
        "paused": tp in getattr(consumer, "_paused_partitions", ()),
        "active": tp in (getattr(consumer, "_active_partitions", None) or ()),
        "buffered": tp in getattr(consumer, "_buffered_partitions", ()),
    }
    try:
        aio = consumer._thread._ensure_consumer()
        fetched = _fetch_state(aio, tp)
    except (AttributeError, kafka_errors.ConsumerStoppedError):
        fetched = None
    if fetched is not None:
        state.update(position=fetched._position, highwater=fetched.highwater, lso=fetched.lso,
                     fetch_paused=fetched.paused, prefetched=tp in getattr(aio._fetcher, "_records", {}))
    return {key: int(value) if isinstance(value, int) and not isinstance(value, bool) else value
            for key, value in state.items()}


def _fetch_state(aio: aiokafka.AIOKafkaConsumer, tp: TP) -> Any:
    """aiokafka's fetch state of one partition (its position, highwater, lso, paused flag), or None while the
    partition is not assigned. Faust's TP and aiokafka's TopicPartition are equal tuples."""
    subscription = aio._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    return assignment.state_value(tp) if assignment is not None else None


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Reads committed records only, and changelog ends from the broker.

    faust-streaming 0.15.3 reads with isolation read_committed under exactly-once only. At-least-once, a reducer
    on the topics of an exactly-once one that was killed mid-transaction read the records of the aborted
    transaction: a completion marker whose DocumentCompleted was never committed came back into the table from the
    changelog, and the document's chunks, read again, were dropped as already folded; it never completed. Every
    record a reducer reads is committed, whatever the guarantee (the records of producers without transactions
    are).

    faust-streaming 0.15.3 takes the end of a changelog partition, under exactly-once, from
    aiokafka's ``last_stable_offset``, which stays None until that partition has been fetched
    once; Faust turns None into -1, an "empty" changelog: recovery after a restart or a
    rebalance then restores nothing, or stops with ConsistencyError. A ListOffsets request
    (``end_offsets``) with isolation read_committed returns the broker's last stable offset.
    """

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        if getattr(consumer, "_isolation_level", None) not in ("read_committed", "read_uncommitted"):
            raise LibraryMismatchError("aiokafka", "AIOKafkaConsumer._isolation_level", "an isolation level",
                                       repr(getattr(consumer, "_isolation_level", None)))
        consumer._isolation_level = "read_committed"  # read when it starts, by the fetcher it makes then
        return consumer

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        return cast(Mapping[TP, int], await self._ensure_consumer().end_offsets(partitions))

    def verify_event_path(self, now: float, tp: TP) -> None:
        """Faust's livelock check of one partition, skipped while the partition has no fetch position yet.

        faust-streaming 0.15.3 reads the partition's position, which aiokafka 0.14.0 asserts is set. A partition
        that a rebalance has just assigned has none until its committed offset is fetched, and a check (every 2.5
        commit intervals, whenever no rebalance is marked in progress) that fell in that window crashed the reducer
        with an AssertionError. A partition with no position has read nothing whose progress could be checked.
        """
        if self._has_position(tp):
            super().verify_event_path(now, tp)

    def _has_position(self, tp: TP) -> bool:
        state = _fetch_state(self._ensure_consumer(), tp)
        return state is not None and bool(state.has_valid_position)


_YIELD_EVERY = 100
"""Records handed over between two passes of the event loop (as in Faust's fetch loop)."""

_FETCH_WAIT_S = 0.2
"""How long a fetch waits for records when none are there (Faust: 1 s). A seek waits for the fetch in progress (the
fetch lock), so this also bounds how long a rebalance's seek, or the partition watch's, waits."""


class FetchGate:
    """Whether a fetched record of an input partition may still reach the agents and count as read (no I/O).

    faust-streaming 0.15.3's fetch loop (``Consumer._drain_messages``) marks each record it hands
    to the agents read, and records a gap (offsets the broker left out: transaction markers,
    aborted records) when a record's offset is more than one past the read offset; a gap counts
    as acknowledged, and the offsets commit past it. A seek to the committed offsets
    (``perform_seek``, at the end of every rebalance's recovery) sets the read offsets back, but the
    loop went on with the records fetched before it: the first of them, past the committed offset,
    made a gap over every offset between, handled or not, and the records read again were then
    dropped as already read. A record that had been handed over but not handled (a delivery that
    the rebalance's ``stop_flow`` cancelled, a stream buffer that the rebalance cleared) was
    acknowledged that way and never read again: a restarted exactly-once reducer committed past one
    record of 50 documents and that document never completed (docs/reliability.md, "Found and
    fixed"). And a delivery cancelled by ``stop_flow`` was marked read all the same.

    The rules, kept by ``_Consumer``:

    * a fetch and a seek never overlap (one lock): a batch was fetched either before a seek, from the
      old positions, or after it, from the new ones; the moment of its fetch is its ``epoch``;
    * a record of an input partition is handed over only if no seek of all partitions, no seek of
      its own partition and no stop of the flow came since its fetch (``current``), and only once a
      seek of all partitions began after the last stop of the flow and ended (the one that ends every
      rebalance): the fetch positions are then at the committed offsets, and whatever was dropped is
      fetched again;
    * it counts as read only if that still holds once an agent took it.

    Changelog records (no acknowledgements) are not gated: recovery seeks them itself.
    """

    __slots__ = ("_clock", "_flowing", "_moved", "_moved_all", "_stopped")

    def __init__(self) -> None:
        self._clock = 0
        self._moved_all = 0  # when the last seek of all partitions, or stop of the flow, began
        self._moved: dict[TP, int] = {}  # when each partition was last sought on its own
        self._stopped = 0  # when the flow last stopped
        self._flowing = True  # a seek of all partitions ended that began after the last stop

    def epoch(self) -> int:
        """The moment a fetch begins: the records it returns belong to it."""
        return self._clock

    def current(self, tp: TP, epoch: int) -> bool:
        """Records of ``tp`` fetched at ``epoch`` may be handed over, and one taken may count as read."""
        return self._flowing and self._moved_all <= epoch and self._moved.get(tp, 0) <= epoch

    def stop(self) -> None:
        """The flow stopped (a rebalance began): nothing more is handed over until a seek of all partitions."""
        self._clock += 1
        self._moved_all = self._stopped = self._clock
        self._flowing = False

    def seek_all_began(self) -> int:
        """A seek of every partition to its committed offset began; pass the result to ``seek_all_ended``."""
        self._clock += 1
        self._moved_all = self._clock
        return self._clock

    def seek_all_ended(self, began: int) -> None:
        """The seek that began at ``began`` ended: the flow is open again if no stop came after it began."""
        if began > self._stopped:
            self._flowing = True

    def seek(self, tp: TP) -> None:
        """``tp`` alone was sought: its records fetched before now are stale."""
        self._clock += 1
        self._moved[tp] = self._clock


class _Consumer(faust_aiokafka.Consumer):
    """Faust's consumer with a fetch loop that marks nothing read that no agent took (``FetchGate``), and
    the handled records committed before their partitions are given up in a rebalance
    (``on_partitions_revoked``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = FetchGate()
        self._delivery: asyncio.Future[Any] | None = None
        self._fetching = asyncio.Lock()  # a fetch and a seek never overlap
        self._fetched_at = 0  # the gate's epoch of the last fetch

    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Any:
        async with self._fetching:
            self._fetched_at = self.gate.epoch()
            return await super()._getmany(active_partitions, timeout)

    def stop_flow(self) -> None:
        """Stop the flow, and cancel the record being handed over (it is neither read nor acknowledged)."""
        self.gate.stop()
        if self._delivery is not None:
            self._delivery.cancel()
        super().stop_flow()

    async def perform_seek(self) -> None:
        """Faust's seek of every partition to its committed offset, also of those aiokafka leaves where they are.

        aiokafka 0.14.0's ``seek_to_committed`` seeks only partitions with a committed offset above 0:
        an input partition without one (or at 0) is sought to its beginning here, the group's
        ``auto_offset_reset``, so that the records the gate dropped are fetched again.
        """
        async with self._fetching:
            began = self.gate.seek_all_began()
            committed = await self.seek_to_committed()
            acks_enabled_for = self.app.topics.acks_enabled_for
            unsought = [tp for tp, offset in committed.items() if not offset and acks_enabled_for(tp.topic)]
            if unsought:
                await self._thread.seek_to_beginning(*unsought)
            self._read_offset.update({tp: offset if offset is not None and offset >= 0 else None
                                      for tp, offset in committed.items()})
            self._committed_offset.update({transport_consumer.ensure_TP(tp): offset or None
                                           for tp, offset in committed.items() if offset is not None})
            self.gate.seek_all_ended(began)

    async def seek(self, partition: TP, offset: int) -> None:
        async with self._fetching:
            self.gate.seek(partition)
            await super().seek(partition, offset)

    async def _drain_messages(self, fetcher: Any) -> None:
        """faust-streaming 0.15.3's fetch loop, under the rules of ``FetchGate``.

        Also: a gap records the missing offsets only, not the record after them (Faust counted that
        record acknowledged before an agent handled it); a read offset of 0 counts as read (Faust
        tested it for truth: after offset 0 a gap was lost and the partition never committed again,
        the partition stall of docs/reducer.md, tests/integration/test_reducer_faust_gap.py); the
        record is handed over on one task that ``stop_flow`` cancels, where Faust waited on four.
        """
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        read = self._read_offset
        gate = self.gate
        acks_enabled_for = self.app.topics.acks_enabled_for
        since_yield = 0
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                self.diag.set_flag(transport_consumer.CONSUMER_FETCHING)
                batch = cast(AsyncGenerator[tuple[TP, Any], None], self.getmany(timeout=_FETCH_WAIT_S))
                await self.sleep(0)  # as Faust: getmany can return at once, again and again
                if not self.should_stop:
                    async with contextlib.aclosing(batch):
                        async for tp, message in batch:
                            epoch = self._fetched_at  # the fetch of this batch (the next waits for its end)
                            since_yield += 1
                            if since_yield > _YIELD_EVERY:
                                await asyncio.sleep(0)
                                since_yield = 0
                            gated = acks_enabled_for(message.topic)
                            if gated and not gate.current(tp, epoch):
                                continue  # fetched before a seek or a stop: the next seek fetches it again
                            offset = message.offset
                            last = read[tp]
                            if last is not None and offset < last:
                                continue  # read already
                            if gated and last is not None and offset - last > 1:
                                await self._add_gap(tp, last + 1, offset - 1)
                            if self._commit_every is not None and self._n_acked >= self._commit_every:
                                self._n_acked = 0
                                await self.commit()
                            taken = await self._hand_over(message)
                            if not gated or (taken and gate.current(tp, epoch)):
                                read[tp] = offset
                self.diag.unset_flag(transport_consumer.CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                _log.info("reducer_consumer_stopped_by_broker")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception as exc:  # logged where it ends the loop (Faust's fetcher then crashes the worker)
            _log.error("reducer_fetch_loop_failed", error=repr(exc))
            raise
        finally:
            self.diag.unset_flag(transport_consumer.CONSUMER_FETCHING)

    async def _hand_over(self, message: Any) -> bool:
        """Give ``message`` to the agents' streams; False when ``stop_flow`` cancelled it first."""
        delivery = self._delivery = asyncio.ensure_future(self.callback(message))
        try:
            await asyncio.wait((delivery,))
        finally:
            self._delivery = None
            if not delivery.done():  # this loop was cancelled
                delivery.cancel()
        if delivery.cancelled():
            return False
        delivery.result()  # an error in a stream's callback ends the loop, as in Faust
        return True

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """Commit what the agents handled, then let Faust forget the revoked partitions.

        faust-streaming 0.15.3 drops the acknowledged offsets of the revoked partitions first
        (``Consumer.on_partitions_revoked``) and waits for the agents and commits only after
        (``App._on_partitions_revoked``): that commit finds nothing to commit. Under exactly-once
        the open transaction then holds table changes and outputs of records already handled, and
        the producer that replaces its own after the rebalance aborts it; the tables in memory keep
        those changes all the same. A completion marker aborted that way made the record, read
        again, look like a duplicate: the document was never completed (docs/reliability.md,
        "Found and fixed"). At-least-once redelivered every record handled since the last
        commit. Committing here, the way Kafka Streams commits its tasks before it suspends them,
        leaves no handled record in an open transaction. Faust's own steps that follow do the same
        again and find nothing left.
        """
        app = self.app
        assignment = self.assignment()
        if revoked and assignment and not app.should_stop:
            self.stop_flow()
            app.flow_control.suspend()
            self.pause_partitions(assignment)
            app.flow_control.clear()
            await self.wait_empty()  # every delivered record handled and acknowledged, then committed
        await super().on_partitions_revoked(revoked)

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


def _retry_find_coordinator(sender: Any) -> None:
    """Make ``sender`` retry a FindCoordinator that lost its connection (this sender only).

    aiokafka 0.14.0's ``Sender._find_coordinator`` retries only CoordinatorNotAvailable, NodeNotReady
    and RequestTimedOut; any other error, a KafkaConnectionError too (the broker went away during
    the request), becomes a KafkaError that ends the sender routine: Faust's consumer then crashes
    and the exactly-once reducer exits 1 on a broker restart (docs/reliability.md, "Found and
    fixed"). Here every error its library marks ``retriable`` is retried the way the library retries
    NodeNotReady: refresh the metadata, wait ``retry_backoff``, ask again; other errors stay fatal.
    """
    find = sender._find_coordinator

    async def _find_coordinator(coordinator_type: Any, coordinator_key: str) -> Any:
        while True:
            try:
                return await find(coordinator_type, coordinator_key)
            except kafka_errors.KafkaError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, kafka_errors.KafkaError) and cause.retriable):
                    raise
                _log.warning("find_coordinator_retry", error=repr(cause), coordinator_key=coordinator_key)
                await sender.client.force_metadata_update()
                await asyncio.sleep(sender._retry_backoff)

    _find_coordinator.docstream_retries = True  # type: ignore[attr-defined]
    sender._find_coordinator = _find_coordinator


class _TransactionalProducer(aiokafka.AIOKafkaProducer):  # aiokafka is untyped: see the mypy carve-out
    """An AIOKafkaProducer whose sender retries FindCoordinator on retriable errors."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        sender = getattr(self, "_sender", None)
        if not isinstance(sender, Sender):
            raise LibraryMismatchError("aiokafka", "AIOKafkaProducer._sender", "a Sender", type(sender).__name__)
        _retry_find_coordinator(sender)


class ChangelogNotSentError(FatalError):
    """A table change the consumer was about to commit past was not acknowledged by the broker.

    Raised by the app's producer ``flush()``, awaited before every offset commit (at-least-once:
    by Faust; exactly-once: by ``_Producer.commit_transactions``): the commit does not happen, the
    worker stops, and the input is read again after the restart (nothing is lost).
    """

    code = "changelog_not_sent"


class _Producer(faust_aiokafka.Producer):
    """Faust's producer; transactional producers get their transport's ``transaction_timeout_ms``, others
    idempotence when the transport says so; ``flush()`` waits for every table change.

    faust-streaming 0.15.3 has no setting for it, so aiokafka's 60 s default applies: a store
    outage that keeps an agent retrying inside a transaction for longer (Cassandra restarting) made
    the broker abort the transaction and fence the producer, and the reducer crashed with
    ProducerFenced (full Cassandra-outage chaos scenario, docs/reliability.md).

    Table writes reach Kafka through the producer's buffer (``send_soon``), and Faust flushes the
    producer before each at-least-once offset commit. faust-streaming 0.15.3's buffer flush
    (``ProducerBuffer.flush_atmost``) gives up as soon as no message left the buffer for 0.1 s, and
    a message already taken from the buffer but not yet handed to aiokafka is in neither flush; the
    offsets were then committed past table changes still in memory, and a kill -9 lost them: one
    document of 50 never completed after the restart (tests/integration/test_reducer.py, a
    clean-clone CI run). Here every future given to ``send_soon`` is kept until it is done, and
    ``flush()`` returns only once all of them were acknowledged.

    Exactly-once commits offsets through ``commit_transactions`` (the transaction manager's commit),
    and faust-streaming 0.15.3 flushes nothing there (only the at-least-once branch of
    ``Consumer._commit_offsets`` does): a table change still in the buffer, or queued behind another
    partition's commit, joined the next transaction while the offset of the record that made it
    committed in this one, and a kill -9 lost it (docs/reliability.md). Here the commit first
    flushes as above, then takes the lock of every transaction it commits (sends into them wait),
    and commits only when no buffered send is unacknowledged with the locks held; otherwise it lets
    go and flushes again. A record's table changes are buffered before its handler sends its
    outputs (agents.py: the completion marker before the DocumentCompleted), and the buffer hands
    them to the transaction only after the handler's send asked for its lock: a transaction that
    holds an output commits only once the record's table changes are acknowledged in it.
    tests/integration/test_reducer_eos_flush.py and tests/unit/reducer/test_faust_shim.py.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sends = Sends()

    def send_soon(self, fut: Any) -> None:
        self._sends.add(fut)
        super().send_soon(fut)

    async def flush(self) -> None:
        await super().flush()
        await self._sends.wait(lambda: self.buffer.state == "running",
                               timeout_s=float(self.app.conf.producer_request_timeout))

    async def commit_transactions(self, tid_to_offset_map: Mapping[str, Mapping[TP, int]], group_id: str,
                                  start_new_transaction: bool = True) -> None:
        tids = sorted(tid_to_offset_map)
        while True:
            await self.flush()
            async with contextlib.AsyncExitStack() as held:
                for tid in tids:
                    await held.enter_async_context(self._trn_locks[tid])
                if not self._sends.unsent:  # nothing buffered can reach these transactions while held
                    await self._commit_held(tid_to_offset_map, group_id, start_new_transaction)
                    return
            _log.debug("transaction_commit_reflushed", waiting=len(self._sends.unsent))

    async def _commit_held(self, tid_to_offset_map: Mapping[str, Mapping[TP, int]], group_id: str,
                           start_new_transaction: bool) -> None:
        """faust-streaming 0.15.3's ``commit_transactions`` loop, with the locks already held."""
        for tid, offsets in tid_to_offset_map.items():
            producer = self._transaction_producers.get(tid)
            if producer is None:
                _log.warning("transaction_commit_unknown", transactional_id=tid)
                continue
            await producer.send_offsets_to_transaction(offsets, group_id)
            await producer.commit_transaction()
            if start_new_transaction:
                await producer.begin_transaction()

    def _settings_extra(self) -> Mapping[str, Any]:
        extra = dict(super()._settings_extra())
        transport = cast(_Transport, self.transport)
        if self.app.in_transaction:
            extra["transaction_timeout_ms"] = transport.transaction_timeout_ms
        elif transport.idempotent:
            # at-least-once: a send retried across a leader change is not written twice
            extra.update(acks="all", enable_idempotence=True)
        return extra

    @property
    def _producer_type(self) -> type[aiokafka.AIOKafkaProducer]:
        return _TransactionalProducer


_WAITING_LOG_S = 10.0


class Sends:
    """The buffered sends of one producer until each is acknowledged; a failed one is kept for good.

    A failed table change means the table in memory holds what its changelog does not: every
    later ``wait`` raises, the worker stops, and the restart rebuilds the table from the changelog
    and reads the input again from the committed offsets.
    """

    def __init__(self) -> None:
        self.unsent: set[asyncio.Future[Any]] = set()
        self.failed: list[asyncio.Future[Any]] = []

    def add(self, fut: asyncio.Future[Any]) -> None:
        """Keep ``fut`` until it is done."""
        self.unsent.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: asyncio.Future[Any]) -> None:
        self.unsent.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            self.failed.append(fut)

    async def wait(self, sending: Callable[[], bool], *, timeout_s: float) -> None:
        """Return once every send so far is acknowledged.

        Args:
            sending: whether the buffer still sends (false once it stopped: what waits now never leaves).
            timeout_s: the most to wait, the producer's request timeout (a send fails by then anyway).

        Raises:
            ChangelogNotSentError: a send failed, the buffer stopped with sends waiting, or the time ran out.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.unsent and not self.failed:
            if not sending():
                raise ChangelogNotSentError(f"{len(self.unsent)} table changes were still buffered when the "
                                            "producer stopped sending; offsets are not committed past them")
            left = deadline - loop.time()
            if left <= 0:
                raise ChangelogNotSentError(f"{len(self.unsent)} table changes not acknowledged within "
                                            f"{timeout_s:g} s; offsets are not committed past them")
            _, pending = await asyncio.wait(list(self.unsent), timeout=min(left, _WAITING_LOG_S))
            if pending and not self.failed:
                _log.warning("changelog_sends_waiting", waiting=len(pending))
        if self.failed:
            first = self.failed[0]
            cause = "cancelled" if first.cancelled() else repr(first.exception())
            raise ChangelogNotSentError(f"{len(self.failed)} table changes were not written, the first: {cause}")


class _Transport(faust_aiokafka.Transport):
    """The aiokafka transport of one app, with the patched consumer and producer."""

    Consumer = _Consumer
    Producer = _Producer

    def __init__(self, url: Any, app: faust.App, *, transaction_timeout_ms: int, idempotent: bool = False,
                 span_probe: SpanProbe | None = None) -> None:
        super().__init__(url, app)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotent = idempotent
        self.span_probe = span_probe


_MARKER_CHECK_S = 5.0
"""How often an at-least-once recovery asks whether what it waits for is only transaction markers (Faust's own
check under exactly-once comes after two waits of 5 s)."""


class _Recovery(Recovery):
    """Table recovery that ends, under at-least-once too, where a changelog partition's last offsets hold no
    committed record.

    faust-streaming 0.15.3 recovers a changelog partition until it has read the record at the partition's end
    offset minus one. A partition that an exactly-once reducer wrote ends at a transaction's commit marker, which
    no consumer is given. Faust ends such a recovery under exactly-once only (its ``detect_aborted_tx``): an
    at-least-once reducer on the topics of an exactly-once one waited for ever (docs/reducer.md "Exactly-once").
    Here, every ``_MARKER_CHECK_S`` while an at-least-once recovery runs, the broker is asked (read_committed,
    ``span_probe``) whether the offsets between what each partition has read and its end hold a record; a
    partition whose offsets hold none, and that read nothing meanwhile, is recovered. Faust ends the recovery at
    its next check.
    """

    @mode.Service.task
    async def _end_at_markers(self) -> None:
        while not self.should_stop:
            await self.sleep(_MARKER_CHECK_S)
            probe = getattr(self.app.transport, "span_probe", None)
            if probe is not None and self.in_recovery and not self.app.in_transaction:
                await self._end_where_only_markers_remain(probe)

    async def _end_where_only_markers_remain(self, probe: SpanProbe) -> None:
        waiting = {tp: (read, end) for tp, end in self.active_highwaters.items()
                   if end is not None and (read := self.active_offsets.get(tp)) is not None and read < end}
        if not waiting:
            return
        spans = [(tp.topic, tp.partition, read + 1, end + 1) for tp, (read, end) in waiting.items()]
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, probe, spans)
        except DocstreamError as exc:  # the broker refused the look: the partitions wait for the next check
            _log.warning("changelog_probe_failed", error_code=exc.code, error=exc.message[:300])
            return
        for tp, (read, end) in waiting.items():
            if found.get((tp.topic, tp.partition)) is False and self.active_offsets.get(tp) == read:
                _log.info("changelog_ends_at_markers", topic=tp.topic, partition=tp.partition, read=read, end=end)
                self.active_offsets[tp] = end


class _TableManager(TableManager):
    """The app's table manager, whose recovery is a ``_Recovery``."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = _Recovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


def exit_watchdog(seconds: float, code: int) -> threading.Timer:
    """Exit the process with ``code`` unless it ended by itself within ``seconds``.

    A stop can hang in Faust/aiokafka (a transaction commit during a rebalance, a consumer thread
    that never ends); a service must still go away. Exiting hard loses nothing: input offsets
    are committed only with their effects (and open transactions are aborted by the broker).
    """

    def _exit() -> None:
        _log.error("reducer_stop_timed_out", seconds=seconds, exit_code=code)
        os._exit(code)

    timer = threading.Timer(seconds, _exit)
    timer.daemon = True
    timer.start()
    return timer


class ReducerWorker(faust.Worker):
    """A Faust worker whose stop is bounded by ``stop_timeout_s`` when set (the process exits 1 past it).

    Only a process of its own (``docstream reducer``) sets it; a host process running the
    reducer on a thread keeps the default None and decides itself. ``watchdog`` arms the bound
    (``exit_watchdog``; tests give a recorder).
    """

    stop_timeout_s: float | None = None
    watchdog: Callable[[float, int], object] = staticmethod(exit_watchdog)

    def request_stop(self) -> None:
        """Stop as on SIGTERM (call it on the worker's loop)."""
        self._schedule_shutdown(signal.SIGTERM)

    def _schedule_shutdown(self, signum: signal.Signals) -> None:
        if not self._signal_stop_time and self.stop_timeout_s is not None:
            self.watchdog(self.stop_timeout_s, 1)
        super()._schedule_shutdown(signum)


_LOOP_CLOSE_GRACE_S = 0.05


class ThreadWorker(ReducerWorker):
    """A worker that leaves signals to the process that hosts it, and closes its loop without a pause.

    mode-streaming 0.7.1's ``Worker._shutdown_loop`` (the end of every stop) runs ``_sentinel_task``, a
    bare ``asyncio.sleep(1.0)``, on the stopped worker's loop before closing it: one loop pass is
    left for late callbacks (transports closing) and the second is idle. Here a short sleep does the
    same; on a thread of a process that waits for the reducer to stop, that second was one more in
    every ``docstream run`` (tests/unit/reducer/test_faust_shim.py checks mode still works this way).
    """

    def install_signal_handlers(self) -> None:
        return

    async def _sentinel_task(self) -> None:
        await asyncio.sleep(_LOOP_CLOSE_GRACE_S)
