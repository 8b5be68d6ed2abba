"""The pipeline's stages after poll + decode, each on its own thread, joined by bounded queues.

    poll + decode ──Q0──► BatchStage ──Q1──► ModelStage ──Q2──► WriteStage ──► AckLedger ──► commit
                         (batch, tokenize,   (forward,          (store write, produce
                          sort by length)     isolate failures)   ChunkResult, DLQ)

A record carries the generation of its partition's assignment; after a revoke, every stage
drops records of an older generation, and their acknowledgements are ignored by the ledger.
A stage that raises stops the pipeline (``on_error``); nothing is committed past its records.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import KafkaError, Message

from docstream.errors import BackendUnavailable, DocstreamError, FatalError, PoisonRecord, StoreError
from docstream.jobs.standing import RATE_EVERY_S, RATE_TTL_S, TokenRate
from docstream.kafka.attempts import run_with_retries
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.dlq import DlqRouter, error_code_of
from docstream.kafka.offsets import TopicPartitionKey
from docstream.lanes import BATCH, INTERACTIVE, LANES, Lane
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import ChunkCreated, utc_now
from docstream.retry import backoff_delay
from docstream.settings import RetrySettings
from docstream.store.base import ChunkRow, JobsStore, ResultsStore, ResultStore
from docstream.store.sources import enforce
from docstream.tasks.base import (
    EMBED,
    ChunkOutput,
    PreparedTexts,
    Task,
    TaskRequest,
    failure_output,
    token_ids_accepted,
    usable_token_ids,
)
from docstream.tenants.usage import apportion
from docstream_inference.batching import Batch, Batcher, CloseReason, order_by_length
from docstream_inference.fair_queue import FairQueue, Waiting
from docstream_inference.handler import (
    MODEL_ERROR,
    MODEL_UNAVAILABLE,
    ChunkOutcome,
    chunk_row,
    failed_result,
    output_of_row,
    requested_model,
    result_of,
    result_record,
)
from docstream_inference.isolation import Isolated, embed_isolating
from docstream_inference.ledger import DLQ, PRODUCE, WRITE, AckLedger

__all__ = [
    "FLUSH",
    "Assignments",
    "BatchStage",
    "BatchStats",
    "ConsumedChunk",
    "FairInbox",
    "Halted",
    "ModelBatch",
    "ModelStage",
    "ResultBatch",
    "ReusableOutputs",
    "StageHooks",
    "StoredResults",
    "ThroughputWriter",
    "WriteStage",
    "put_until",
]

_log = get_logger(__name__)
_IDLE_S = 0.05
_IDLE_GRACE_S = 0.002  # no record for this long and the model idle: the open batch goes
_BACKEND_WAIT_BASE_S = 0.5  # the model's backend is down: the batch is sent again after a full-jitter wait
_BACKEND_WAIT_MAX_S = 5.0
_T = TypeVar("_T")
_EMBED_REQUEST = TaskRequest(EMBED)


class Halted(Exception):  # noqa: N818 - a control signal, not an error
    """The pipeline halts: the stage leaves what it holds undone (it is not committed)."""


FLUSH = object()
"""Put in Q0 to close the open batch at once (drain on shutdown)."""


@dataclass(frozen=True, slots=True)
class ConsumedChunk:
    """One consumed chunk and where it came from."""

    tp: TopicPartitionKey
    offset: int
    generation: int
    key: bytes | None
    value: bytes
    chunk: ChunkCreated
    received_at: float
    request: TaskRequest = _EMBED_REQUEST
    """The request of the pipeline's task in the chunk's job (its labels, for classify)."""
    lane: Lane = BATCH
    """The lane whose topic it came by (``Topics.lanes``)."""


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What the batcher recorded for one closed batch."""

    size: int
    tokens: int
    reason: CloseReason
    oldest_wait_s: float


@dataclass(frozen=True, slots=True)
class ModelBatch:
    """A closed batch, tokenized, longest record first; ``unavailable`` ask for a model not loaded."""

    works: tuple[ConsumedChunk, ...]
    prepared: PreparedTexts
    unavailable: tuple[ConsumedChunk, ...]
    stats: BatchStats
    reused: tuple[tuple[ConsumedChunk, ChunkOutput], ...] = ()
    busy_us: int = 0
    """Time spent on the batch so far: the store lookup of reusable results and tokenizing."""
    model_ids: tuple[str, ...] = ()
    """The model_id of each of ``works`` (its results' key)."""


@dataclass(frozen=True, slots=True)
class ResultBatch:
    """A batch's results, one per work, same order."""

    works: tuple[ConsumedChunk, ...]
    results: tuple[ChunkOutcome, ...]
    busy_us: int = 0
    """Time spent on the batch before the write: the batch stage's and the forward pass."""


class Assignments:
    """The generation of each assigned partition; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[TopicPartitionKey, int] = {}
        self._counter = 0

    def assign(self, tps: Iterable[TopicPartitionKey]) -> None:
        """Partitions assigned: each gets a new generation."""
        with self._lock:
            for tp in tps:
                self._counter += 1
                self._current[tp] = self._counter

    def revoke(self, tps: Iterable[TopicPartitionKey]) -> None:
        """Partitions revoked or lost: their records in flight become stale."""
        with self._lock:
            for tp in tps:
                self._current.pop(tp, None)

    def partitions(self) -> list[TopicPartitionKey]:
        """The assigned partitions."""
        with self._lock:
            return sorted(self._current)

    def generation(self, tp: TopicPartitionKey) -> int | None:
        """The current generation of ``tp``; None when not assigned."""
        with self._lock:
            return self._current.get(tp)

    def is_live(self, work: ConsumedChunk) -> bool:
        """The record belongs to the current assignment of its partition."""
        return self.generation(work.tp) == work.generation

    def live(self, works: Iterable[ConsumedChunk]) -> list[ConsumedChunk]:
        """The records of ``works`` that are still live."""
        with self._lock:
            return [w for w in works if self._current.get(w.tp) == w.generation]


@dataclass(frozen=True, slots=True)
class ReusableOutputs:
    """The stored outputs a batch's chunks reuse instead of running the model (``StoredResults.find``): chunk_id →
    stored output, and which of them came from an earlier version of the chunk's source."""

    outputs: dict[str, ChunkOutput]
    by_version: frozenset[str] = frozenset()


class StoredResults:
    """Results already in the store that a batch's chunks can reuse instead of running the model.

    * By chunk_id (``by_chunk_id``: ``inference.reuse_stored``, always for generate; and always for a chunk the
      chunker sent again, ``ChunkCreated.resent``): the chunk's own stored row under the same model_id. One read
      per (document, model_id) of a batch. A chunk sent again keeps the result stored first, which a sink may
      hold already: a model's output may move with the batch it is in (bf16), and nothing would tell the sink.
    * By text, always: a chunk of a new version of a source (``ChunkCreated.previous_doc_id``) reuses the stored
      row of the same text in that earlier version, under the same model_id (docs/intake.md "Versions of a
      document"). The earlier version's rows are read once per (document, model_id) and kept for the next
      batches of the same document (the last ``PREVIOUS_KEPT``).

    Only rows with status ok and of the same task count; an ok embed row without its vector (a foreign
    writer's) would be refused by the fold, so it is run again.
    """

    PREVIOUS_KEPT = 8

    def __init__(self, store: ResultsStore, *, by_chunk_id: bool = True) -> None:
        self._store = store
        self._by_chunk_id = by_chunk_id
        self._previous: OrderedDict[tuple[str, str, str], dict[str, ChunkRow]] = OrderedDict()

    def find(self, chunks: Sequence[ChunkCreated], model_ids: Sequence[str], task: str) -> ReusableOutputs:
        """The stored outputs of the chunks of ``chunks`` (each under its model id) that have one."""
        found: dict[str, ChunkOutput] = {}
        by_version: set[str] = set()
        wanted: dict[tuple[str, str], set[str]] = {}
        for chunk, model_id in zip(chunks, model_ids, strict=True):
            if self._by_chunk_id or chunk.resent:
                wanted.setdefault((chunk.doc_id, model_id), set()).add(chunk.chunk_id)
        for (doc_id, model_id), ids in sorted(wanted.items()):
            for row in self._store.iter_chunks(doc_id, model_id):
                if row.chunk_id in ids and _reusable(row, task):
                    found[row.chunk_id] = output_of_row(row)
        for chunk, model_id in zip(chunks, model_ids, strict=True):
            if chunk.chunk_id in found or not chunk.previous_doc_id:
                continue
            earlier = self._previous_rows(chunk.previous_doc_id, model_id, task).get(chunk.text)
            if earlier is not None:
                found[chunk.chunk_id] = output_of_row(earlier)
                by_version.add(chunk.chunk_id)
        return ReusableOutputs(found, frozenset(by_version))

    def _previous_rows(self, doc_id: str, model_id: str, task: str) -> dict[str, ChunkRow]:
        """Text → reusable stored row of an earlier version (read once, kept while among the last few)."""
        key = (doc_id, model_id, task)
        rows = self._previous.get(key)
        if rows is None:
            rows = {}
            for row in self._store.iter_chunks(doc_id, model_id):
                if _reusable(row, task):
                    rows.setdefault(row.text, row)
            self._previous[key] = rows
            while len(self._previous) > self.PREVIOUS_KEPT:
                self._previous.popitem(last=False)
        self._previous.move_to_end(key)
        return rows


def _reusable(row: ChunkRow, task: str) -> bool:
    return row.status == "ok" and row.task == task and (bool(row.embedding) or task != EMBED)


@dataclass(frozen=True, slots=True)
class StageHooks:
    """Callbacks into the stages, none by default: the chaos tests' fault injection
    (``docstream_inference.faults.stage_hooks``) is the only user.

    Attributes:
        after_write: called after each batch's rows are written, before its records are produced.
        on_embedded: called with the chunk_ids of each batch the model ran.
    """

    after_write: Callable[[], None] | None = None
    on_embedded: Callable[[Sequence[str]], None] | None = None


class FairInbox:
    """Q0: the chunks polled and not batched yet, per lane and tenant, taken in the order of the fair rule
    (``docstream.lanes.FairQueue``: interactive first with a guaranteed batch share, deficit round robin between
    tenants). Thread-safe: the consumer thread puts, the batch stage takes.

    Each lane holds at most ``capacity`` chunks (``put_nowait`` raises ``queue.Full`` past it), so a full batch lane
    never keeps an interactive chunk out. A control item (FLUSH) is taken once nothing else waits. The consumer
    thread waits here, without polling, while a lane is full (``wait_for_room``).
    """

    def __init__(self, capacity: int, *, batch_share: float = 0.2, quantum: int = 256,
                 weights: Mapping[str, float] | None = None) -> None:
        if capacity < 1:
            raise ValueError("a lane holds at least one chunk")
        self.capacity = capacity
        self._fair: FairQueue[ConsumedChunk] = FairQueue(batch_share=batch_share, quantum=quantum, weights=weights)
        self._control: deque[object] = deque()
        self._lock = threading.Lock()
        self._added = threading.Condition(self._lock)
        self._taken = threading.Condition(self._lock)

    def size(self, lane: Lane | None = None) -> int:
        """Chunks waiting in ``lane``, or in both."""
        with self._lock:
            return len(self._fair) if lane is None else self._fair.count(lane)

    def waiting_tokens(self) -> dict[tuple[Lane, str], int]:
        """Tokens waiting per (lane, tenant)."""
        with self._lock:
            return {(lane, tenant): tokens for lane in LANES
                    for tenant, tokens in self._fair.tenant_tokens(lane).items()}

    def put_nowait(self, work: ConsumedChunk) -> None:
        """Add a chunk behind its tenant's earlier ones in its lane.

        Raises:
            queue.Full: the lane holds ``capacity`` chunks.
        """
        with self._lock:
            if self._fair.count(work.lane) >= self.capacity:
                raise queue.Full
            self._fair.push(Waiting(work.lane, work.chunk.tenant, max(1, work.chunk.token_count), work))
            self._added.notify()

    def put_control(self, item: object) -> None:
        """Add a control item (FLUSH), taken once no chunk waits."""
        with self._lock:
            self._control.append(item)
            self._added.notify()

    def _take(self) -> ConsumedChunk | object:
        waiting = self._fair.take()
        if waiting is not None:
            self._taken.notify_all()
            return waiting.item
        if self._control:
            return self._control.popleft()
        raise queue.Empty

    def get(self, timeout: float) -> ConsumedChunk | object:
        """The next item, waiting up to ``timeout`` seconds for one.

        Raises:
            queue.Empty: nothing arrived in time.
        """
        with self._lock:
            if not self._added.wait_for(lambda: len(self._fair) > 0 or bool(self._control), timeout):
                raise queue.Empty
            return self._take()

    def get_nowait(self) -> ConsumedChunk | object:
        """The next item.

        Raises:
            queue.Empty: nothing waits.
        """
        with self._lock:
            return self._take()

    def remove(self, unwanted: Callable[[ConsumedChunk], bool]) -> list[ConsumedChunk]:
        """Take out the waiting chunks ``unwanted`` names (a revoked partition's, or every one at a stop)."""
        with self._lock:
            removed = [waiting.item for waiting in self._fair.remove(lambda w: unwanted(w.item))]
            self._taken.notify_all()
            return removed

    def wait_for_room(self, levels: Mapping[Lane, int], timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until some lane of ``levels`` holds at most its level (each take wakes it); True
        once so (at once when ``levels`` is empty)."""
        with self._taken:
            return self._taken.wait_for(
                lambda: not levels or any(self._fair.count(lane) <= level for lane, level in levels.items()),
                timeout_s)


def put_until(q: queue.Queue[_T], item: _T, halt: threading.Event) -> None:
    """Put ``item`` on a bounded queue, waiting for room (this is the backpressure).

    Raises:
        Halted: the pipeline halted while waiting.
    """
    while True:
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            if halt.is_set():
                raise Halted from None


class _StageThread(threading.Thread):
    def __init__(self, name: str, halt: threading.Event, on_error: Callable[[BaseException], None]) -> None:
        super().__init__(name=name, daemon=True)
        self._halt = halt
        self._on_error = on_error

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self.step()
        except Halted:
            return
        except BaseException as exc:  # noqa: BLE001 - a stage's failure stops the pipeline; run() reports it
            self._on_error(exc)

    def step(self) -> None:
        raise NotImplementedError


class BatchStage(_StageThread):
    """Q0 → batches by size/tokens/latency → tokenized, longest first → Q1.

    With ``model_idle``, an open batch also closes when no record arrived for ``_IDLE_GRACE_S``
    while the model stage has nothing to run (reason ``idle``): the latency cap bounds a batch's
    wait while the model is busy, and never keeps an idle model waiting.
    """

    def __init__(
        self,
        *,
        inbox: FairInbox,
        outbox: queue.Queue[ModelBatch],
        batcher: Batcher[ConsumedChunk],
        task: Task,
        assignments: Assignments,
        metrics: Metrics,
        service: str,
        history: deque[BatchStats],
        halt: threading.Event,
        on_error: Callable[[BaseException], None],
        stored: StoredResults,
        model_idle: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__("inference-batch", halt, on_error)
        self._stored = stored
        self._model_idle = model_idle
        self._inbox, self._outbox = inbox, outbox
        self._batcher = batcher
        self._task = task
        self._assignments = assignments
        self._metrics = metrics
        self._service = service
        self._history = history

    def step(self) -> None:
        left = self._batcher.time_left()
        if left is not None and self._model_idle is not None:
            left = min(left, _IDLE_GRACE_S)
        try:
            item = self._inbox.get(timeout=_IDLE_S * 2 if left is None else left)
        except queue.Empty:
            self._close_waiting()  # nothing arrived: the latency rule, or the model has nothing to run
            return
        for _ in range(self._batcher.policy.max_batch_size):
            self._take(item)
            try:
                item = self._inbox.get_nowait()  # a backlog fills the batch before the latency rule
            except queue.Empty:
                self._emit(self._batcher.poll())
                return
        self._take(item)

    def _close_waiting(self) -> None:
        batch = self._batcher.poll()
        if batch is None and self._model_idle is not None and self._batcher.pending and self._model_idle():
            batch = self._batcher.close_idle()
        self._emit(batch)

    def _take(self, item: Any) -> None:
        if item is FLUSH:
            for batch in self._batcher.flush():
                self._emit(batch)
        elif isinstance(item, ConsumedChunk):
            tokens = max(1, min(item.chunk.token_count, self._task.max_tokens))
            urgent = item.lane == INTERACTIVE
            for batch in self._batcher.add(item, tokens, arrived_at=item.received_at, urgent=urgent):
                self._emit(batch)

    def _count_prepared(self, carried: int, tokenized: int) -> None:
        """``docstream_prepared_chunks_total``: chunks built from their carried token ids, and tokenized here."""
        if carried:
            self._metrics.prepared_chunks.labels(self._service, "token_ids").inc(carried)
        if tokenized:
            self._metrics.prepared_chunks.labels(self._service, "text").inc(tokenized)

    def _emit(self, batch: Batch[ConsumedChunk] | None) -> None:
        if batch is None:
            return
        stats = BatchStats(len(batch), batch.tokens, batch.reason, batch.oldest_wait_s)
        self._history.append(stats)
        self._metrics.batch_size.labels(self._service).observe(stats.size)
        self._metrics.batch_wait.labels(self._service).observe(stats.oldest_wait_s)
        _log.debug("batch_closed", size=stats.size, tokens=stats.tokens, reason=stats.reason,
                   oldest_wait_ms=round(stats.oldest_wait_s * 1000, 1))
        live = self._assignments.live(batch.items)
        if not live:
            return
        task = self._task
        name, loaded = task.name, task.model_id
        runnable = [w for w in live if requested_model(w.chunk, name, loaded) == loaded]
        unavailable = tuple(w for w in live if requested_model(w.chunk, name, loaded) != loaded)
        reused: tuple[tuple[ConsumedChunk, ChunkOutput], ...] = ()
        started = time.perf_counter()
        if runnable:
            found = self._stored.find([w.chunk for w in runnable], [task.model_id_for(w.request) for w in runnable],
                                      name)
            reused = tuple((w, found.outputs[w.chunk.chunk_id]) for w in runnable if w.chunk.chunk_id in found.outputs)
            runnable = [w for w in runnable if w.chunk.chunk_id not in found.outputs]
            if found.by_version:
                self._metrics.reused_chunks.labels(self._service, "version").inc(len(found.by_version))
            if len(found.outputs) > len(found.by_version):
                self._metrics.reused_chunks.labels(self._service, "chunk_id").inc(
                    len(found.outputs) - len(found.by_version))
        order = order_by_length([w.chunk.token_count for w in runnable])
        works = tuple(order.apply(runnable))
        texts, requests = [w.chunk.text for w in works], [w.request for w in works]
        accepted = token_ids_accepted(task)
        if accepted is None or not works:
            carried = 0
            prepared = task.prepare(texts, requests)
        else:
            ids = usable_token_ids([w.chunk.token_ids for w in works], [w.chunk.tokenizer for w in works], accepted)
            carried = sum(1 for row in ids if row is not None)
            prepared = task.prepare_token_ids(texts, requests, ids)  # type: ignore[attr-defined]
        self._count_prepared(carried, len(works) - carried)
        busy_us = _micros_since(started)
        model_ids = tuple(task.model_id_for(w.request) for w in works)
        put_until(self._outbox, ModelBatch(works, prepared, unavailable, stats, reused, busy_us, model_ids),
                  self._halt)


class ModelStage(_StageThread):
    """Q1 → model forward (a failing record is isolated by splitting its batch) → Q2.

    When the model's backend does not answer (``BackendUnavailable``: an endpoint past its retry
    budget), the stage keeps the batch and sends it again after a short full-jitter wait, until it
    answers or the pipeline halts. Meanwhile the queues fill and the consumer pauses its partitions:
    consumption waits, nothing fails, nothing is committed past the batch.
    """

    def __init__(
        self,
        *,
        inbox: queue.Queue[ModelBatch],
        outbox: queue.Queue[ResultBatch],
        task: Task,
        attempts: int,
        metrics: Metrics,
        service: str,
        halt: threading.Event,
        on_error: Callable[[BaseException], None],
        on_embedded: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        super().__init__("inference-model", halt, on_error)
        self._busy = False
        self._on_embedded = on_embedded
        self._inbox, self._outbox = inbox, outbox
        self._task = task
        self._attempts = attempts
        self._metrics = metrics
        self._service = service

    @property
    def idle(self) -> bool:
        """Nothing to run: no batch in the model's hands and none waiting in its inbox."""
        return not self._busy and self._inbox.empty()

    def step(self) -> None:
        try:
            batch = self._inbox.get(timeout=_IDLE_S * 2)
        except queue.Empty:
            return
        self._busy = True
        try:
            self._run(batch)
        finally:
            self._busy = False

    def _run(self, batch: ModelBatch) -> None:
        outcomes: list[Any] = []
        model_us = 0
        if batch.works:
            outcomes, model_us = self._run_until_answered(batch)
            self._metrics.model_latency.labels(self._service).observe(model_us / 1e6)
            if self._on_embedded is not None:
                self._on_embedded([w.chunk.chunk_id for w in batch.works])
        task = self._task
        name, loaded, runtime, device = task.name, task.model_id, task.runtime, task.device
        # the forward pass (failed attempts included: the device was busy) shared by token counts
        shares = apportion(model_us, [w.chunk.token_count for w in batch.works])
        results: list[ChunkOutcome] = []
        for work, model_id, outcome, share in zip(batch.works, batch.model_ids, outcomes, shares, strict=True):
            if isinstance(outcome, Isolated):
                error = outcome.error
                code = error.code if isinstance(error, DocstreamError) else MODEL_ERROR
                message = f"model failed on this chunk alone {outcome.attempts} times: {error}"
                results.append(failed_result(work.chunk, model_id, code, message, model_us=share,
                                             device=device, task=name, spent=failure_output(error)))
            else:
                results.append(result_of(work.chunk, model_id, name, outcome, runtime, model_us=share, device=device))
        for work, output in batch.reused:
            results.append(result_of(work.chunk, task.model_id_for(work.request), name, output, None))
        for work in batch.unavailable:
            wanted = requested_model(work.chunk, name, loaded)
            message = f"model {wanted!r} is not loaded here (this process runs {loaded!r})"
            results.append(failed_result(work.chunk, wanted, MODEL_UNAVAILABLE, message, task=name))
        works = batch.works + tuple(w for w, _ in batch.reused) + batch.unavailable
        put_until(self._outbox, ResultBatch(works, tuple(results), batch.busy_us + model_us), self._halt)

    def _run_until_answered(self, batch: ModelBatch) -> tuple[list[Any], int]:
        """The batch's outcomes and the micros of the run that answered (waits for a backend excluded)."""
        down_since: float | None = None
        waits = 0
        while True:
            started = time.perf_counter()
            try:
                outcomes = self._run_model(batch)
            except BackendUnavailable as exc:
                waits += 1
                if down_since is None:
                    down_since = started
                    self._metrics.backend_up.labels(self._service).set(0)
                delay = backoff_delay(min(waits, 8), base_s=_BACKEND_WAIT_BASE_S, max_s=_BACKEND_WAIT_MAX_S)
                _log.warning("model_backend_unavailable", error_code=exc.code, error=str(exc)[:300],
                             batch=len(batch.works), waits=waits, down_s=round(time.perf_counter() - down_since, 1),
                             retry_in_s=round(delay, 2))
                if self._halt.wait(delay):
                    raise Halted from None
                continue
            if down_since is not None:
                self._metrics.backend_up.labels(self._service).set(1)
                _log.info("model_backend_answers", down_s=round(time.perf_counter() - down_since, 1), waits=waits)
            return outcomes, _micros_since(started)

    def _run_model(self, batch: ModelBatch) -> list[Any]:
        texts, requests = batch.prepared.texts, batch.prepared.requests
        whole = len(texts)

        def embed(indices: Sequence[int]) -> Sequence[Any]:
            if len(indices) == whole:
                return list(self._task.run(batch.prepared))
            part = self._task.prepare([texts[i] for i in indices], [requests[i] for i in indices])
            return list(self._task.run(part))

        def on_failure(indices: Sequence[int], error: BaseException) -> None:
            _log.warning("model_batch_failed", size=len(indices), error_type=type(error).__name__,
                         error=str(error)[:300])

        return embed_isolating(embed, whole, attempts=self._attempts, on_failure=on_failure)


@dataclass
class _Send:
    """One output owed by one record, and how to (re)send it."""

    send: Callable[[Callable[[KafkaError | None, Message], None]], None]
    tp: TopicPartitionKey
    offset: int
    effect: str
    topic: str
    attempt: int = 1
    on_ok: list[Callable[[], None]] = field(default_factory=list)


class ThroughputWriter:
    """This process's rate, tokens written per second over the last minute, written to the store every
    ``RATE_EVERY_S`` under its consumer group (``ResultStore.record_throughput``), for where jobs stand in their
    lanes (docs/operations.md "Where a job stands"). Driven by the write stage's thread, never by the consume loop:
    a slow store delays no fetch. A failed write is logged and made again at the next tick."""

    def __init__(self, store: JobsStore, group: str, *, clock: Callable[[], float] = time.monotonic,
                 instance: str | None = None) -> None:
        self._store = store
        self._group = group
        self._clock = clock
        self._instance = instance or uuid.uuid4().hex[:12]
        self._rate = TokenRate()
        self._due = clock()
        self._rate.observe(self._due, 0)

    def tick(self, total: int) -> None:
        """Write the rate if it is due; ``total``: tokens written so far."""
        now = self._clock()
        if now < self._due:
            return
        self._due = now + RATE_EVERY_S
        self._rate.observe(now, total)
        try:
            self._store.record_throughput(self._group, self._instance, self._rate.rate(), utc_now(), RATE_TTL_S)
        except StoreError as exc:
            _log.warning("throughput_write_failed", error_code=exc.code, error=str(exc)[:200])


def _enforce(store: ResultStore, doc_id: str, tenant: str, model_id: str) -> None:
    enforce(store, doc_id, tenant, model_id)


class WriteStage(_StageThread):
    """Q2 → store write (acknowledged) → produce ChunkResult (+ DLQ for failures) → ledger acks.

    ``after_write``: called after each batch's rows are written and before its records are produced (the chaos
    tests' crash switch: ``docstream_inference.faults.CrashSwitch``).
    """

    def __init__(
        self,
        *,
        inbox: queue.Queue[ResultBatch],
        store: ResultStore,
        producer: ReliableProducer,
        dlq: DlqRouter,
        serialize: Callable[[Any, str], bytes],
        results_topic: str,
        ledger: AckLedger,
        assignments: Assignments,
        retry: RetrySettings,
        metrics: Metrics,
        service: str,
        halt: threading.Event,
        on_error: Callable[[BaseException], None],
        after_write: Callable[[], None] | None = None,
        rate: ThroughputWriter | None = None,
    ) -> None:
        super().__init__("inference-write", halt, on_error)
        self._rate = rate
        self._inbox = inbox
        self._store = store
        self._producer = producer
        self._dlq = dlq
        self._serialize = serialize
        self._results_topic = results_topic
        self._ledger = ledger
        self._assignments = assignments
        self._retry = retry
        self._after_write = after_write
        self._metrics = metrics
        self._service = service
        self._failed: deque[_Send] = deque()
        self._out_counters: dict[str, Any] = {}
        self.tokens_written = 0
        """Tokens of the chunks whose rows this stage wrote: the running total of the process's rate."""

    def step(self) -> None:
        self._producer.poll(0)
        self._resend_failed()
        if self._rate is not None:
            self._rate.tick(self.tokens_written)
        try:
            batch = self._inbox.get(timeout=_IDLE_S)
        except queue.Empty:
            return
        self.write(batch)

    def write(self, batch: ResultBatch) -> None:
        """Write a batch's rows, then produce its records; acks go to the ledger as they come."""
        live = [(w, r) for w, r in zip(batch.works, batch.results, strict=True) if self._assignments.is_live(w)]
        if not live:
            return
        rows = [chunk_row(r) for _, r in live]
        started = time.perf_counter()
        self._retrying("store_write", lambda: self._store.upsert_chunks(rows))
        # after the write: a version deleted or retired since loses what was just written (docs/reliability.md
        # "Invariants": a delete is final); its records still go out, so that its job completes
        for doc_id, tenant, model_id in dict.fromkeys((r.chunk.doc_id, r.chunk.tenant, r.model_id) for _, r in live):
            self._retrying("store_fence", partial(_enforce, self._store, doc_id, tenant, model_id))
        write_us = _micros_since(started)
        self._metrics.write_latency.labels(self._service).observe(write_us / 1e6)
        # the batch's busy time here, each chunk its token share (the reducer adds each chunk once)
        shares = apportion(batch.busy_us + write_us, [r.chunk.token_count for _, r in live])
        for work, _ in live:
            self._ledger.ack(work.tp, work.offset, WRITE)
        self.tokens_written += sum(r.chunk.token_count for _, r in live)
        if self._after_write is not None:
            self._after_write()
        embedded_at = utc_now()
        sends = []
        for (work, result), share in zip(live, shares, strict=True):
            if not result.ok:
                self._dead_letter(work, result)
            value = self._serialize(result_record(result, embedded_at, share), self._results_topic)
            sends.append(_Send(send=self._producer_of(result.chunk.doc_id.encode("utf-8"), value),
                               tp=work.tp, offset=work.offset, effect=PRODUCE, topic=self._results_topic))
        self._deliver_all(sends)

    def _deliver_all(self, items: Sequence[_Send]) -> None:
        """``deliver`` each item: queued one after another while the producer takes them, and from the first one
        it refuses (a full queue, a kept error), each through ``deliver``'s retries."""
        if self._producer.error is None:
            for at, item in enumerate(items):
                try:
                    item.send(self._on_delivery(item))
                except Exception:  # noqa: BLE001 - not dropped: it and the rest go through deliver's retry policy
                    items = items[at:]
                    break
            else:
                return
        for item in items:
            self.deliver(item)

    def _producer_of(self, key: bytes, value: bytes) -> Callable[[Callable[[KafkaError | None, Message], None]], None]:
        def send(cb: Callable[[KafkaError | None, Message], None]) -> None:
            self._producer.produce(self._results_topic, key, value, on_delivery=cb)

        return send

    def _dead_letter(self, work: ConsumedChunk, result: ChunkOutcome) -> None:
        code = result.error_code or MODEL_ERROR
        error = PoisonRecord(result.error or code, code=code)
        self._ledger.expect(work.tp, work.offset, DLQ)
        self._metrics.records_failed.labels(self._service, code).inc()
        self.dead_letter(work.tp, work.offset, work.key, work.value, error, attempts=1)

    def dead_letter(
        self, tp: TopicPartitionKey, offset: int, key: bytes | None, value: bytes | None, error: BaseException,
        *, attempts: int,
    ) -> None:
        """Publish an input record to its DLQ; the ledger's DLQ effect is acked on delivery."""
        topic, partition = tp

        def send(cb: Callable[[KafkaError | None, Message], None]) -> None:
            self._dlq.publish(topic, partition, offset, key, value, error, attempts, on_delivery=cb)

        self.deliver(_Send(send=send, tp=tp, offset=offset, effect=DLQ, topic=f"{topic}.dlq",
                           on_ok=[lambda: self._metrics.dlq.labels(self._service, topic).inc()]))

    def deliver(self, item: _Send) -> None:
        """Produce one output (retrying a full queue); a failed delivery is sent again later, bounded."""
        on_delivery = self._on_delivery(item)

        def send_once() -> None:
            kept = self._producer.error
            if kept is not None:
                if isinstance(kept, FatalError):
                    raise kept
                self._producer.clear_error()  # its record is in self._failed and will be re-sent
            item.send(on_delivery)

        self._retrying("produce", send_once)

    def _on_delivery(self, item: _Send) -> Callable[[KafkaError | None, Message], None]:
        """The delivery callback of ``item``: a failure goes back to be sent again, a success is acked."""

        def on_delivery(err: KafkaError | None, _: Message) -> None:
            if err is not None:
                self._failed.append(item)
                return
            self._records_out(item.topic).inc()
            for hook in item.on_ok:
                hook()
            self._ledger.ack(item.tp, item.offset, item.effect)

        return on_delivery

    def _records_out(self, topic: str) -> Any:
        """``docstream_records_out_total``'s counter of ``topic``, found once (a lookup per record costs more than
        the count)."""
        counter = self._out_counters.get(topic)
        if counter is None:
            counter = self._out_counters[topic] = self._metrics.records_out.labels(self._service, topic)
        return counter

    def _resend_failed(self) -> None:
        while self._failed:
            item = self._failed.popleft()
            if self._assignments.generation(item.tp) is None:
                continue  # revoked: the new owner will produce it
            if item.attempt >= self._retry.max_attempts:
                raise FatalError(f"delivery to {item.topic} failed {item.attempt} times", code="retries_exhausted")
            self._metrics.retries.labels(self._service, "deliver").inc()
            self._pause(_backoff(item.attempt, self._retry))
            item.attempt += 1
            self.deliver(item)

    def _retrying(self, operation: str, call: Callable[[], None]) -> None:
        def on_retry(attempt: int, error: BaseException, delay_s: float) -> None:
            self._metrics.retries.labels(self._service, operation).inc()
            _log.warning("transient_fault_retry", operation=operation, attempt=attempt,
                         error_code=error_code_of(error), error=str(error)[:300], delay_s=round(delay_s, 3))

        outcome = run_with_retries(call, retry=self._retry, wait=self._pause, on_retry=on_retry)
        if outcome.interrupted:
            raise Halted
        if outcome.error is not None:
            raise FatalError(f"{operation} failed: {outcome.error}", code="write_failed") from outcome.error

    def _pause(self, delay_s: float) -> bool:
        deadline = time.monotonic() + delay_s
        while True:
            self._producer.poll(0)
            left = deadline - time.monotonic()
            if left <= 0:
                return self._halt.is_set()
            if self._halt.wait(min(left, _IDLE_S)):
                return True


def _micros_since(started: float) -> int:
    return max(round((time.perf_counter() - started) * 1_000_000), 0)


def _backoff(attempt: int, retry: RetrySettings) -> float:
    return backoff_delay(attempt, base_s=retry.base_delay_ms / 1000, max_s=retry.max_delay_ms / 1000)
