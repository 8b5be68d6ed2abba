"""What the reducer's agents do with one record; the Faust wiring is in app.py (docs/reducer.md).

* ``DocumentReducer``: ChunkResult → document state (table) → store rows → DocumentCompleted.
* ``CompletedRelay``: DocumentCompleted (ours and the chunker's failures) and DocumentChunked → the by-job topic,
  keyed by job_id.
* ``JobReducer``: by-job records → per-job counts (table) → jobs row, throttled JobStatus, final
  JobStatus and the webhook; the job's tokens waiting in its lane (``lane_queue``), for where a job stands
  (``docstream.jobs.standing``).

Tables are plain mutable mappings here (Faust tables in the service, dicts in tests). A handler
returns only when every effect of its record is done: rows acknowledged, outputs delivered.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeGuard, TypeVar, get_args

from docstream.avro import AvroSerde
from docstream.errors import ConfigError, FatalError, InputError, PoisonRecord, SchemaError, StoreError
from docstream.kafka.dlq import dlq_headers
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import (
    ChunkResult,
    DocumentChunked,
    DocumentCompleted,
    DocumentStatus,
    JobOptions,
    output_too_large,
    record_limit,
    utc_now,
)
from docstream.retry import backoff_delay, is_retryable
from docstream.settings import RetrySettings
from docstream.store import DocumentRow, JobRow, JobsStore, ResultsStore, ResultStore
from docstream.store.base import QueuedJobRow
from docstream.store.completion import record_completion
from docstream.tasks.base import StoredAnswersFold, TaskFold
from docstream.tasks.legacy import tasks_of
from docstream.tasks.registry import task_fold
from docstream.tasks.selection import job_task_names
from docstream.tenants.admission import day_of
from docstream.tenants.usage import Usage, document_usage
from docstream.topics import Topics, dlq_topic
from docstream_reducer.aggregation import (
    ANY_TASK,
    CompletionMarker,
    CorruptStateError,
    DocumentState,
    DocumentTally,
    DocumentTasks,
    JobProgress,
    StatusThrottle,
    StoredAnswers,
    apply,
    collect_answers,
    count_document,
    decode_entry,
    document_key,
    job_document_key,
    job_status,
    note_chunked,
    settle_waiting,
    waits_for_document_step,
    with_answers,
)
from docstream_reducer.webhook import WebhookNotifier

__all__ = [
    "CHUNKED",
    "RECONCILE",
    "RECONCILE_AFTER_S",
    "SERVICE",
    "CompletedRelay",
    "DocumentReducer",
    "Incoming",
    "JobReducer",
    "Sink",
    "StoreCalls",
]

SERVICE = "reducer"
MARKER_TTL_MS = 3600 * 1000
"""How long (event time) a completed document's marker catches redelivered chunks."""
RECONCILE = "reconcile"
"""``kind`` of a by-job control record: recount the job from its job_documents rows."""
CHUNKED = "chunked"
"""``kind`` of a by-job record relayed from DocumentChunked: a document's tokens wait for the model."""
RECONCILE_AFTER_S = 30.0
"""A job whose counts did not move for this long is recounted from the store (then 2x, 4x, ... up to 10 min)."""
_RECONCILE_MAX_S = 600.0
_TERMINAL_STATUSES: tuple[DocumentStatus, ...] = get_args(DocumentStatus)

_log = get_logger(__name__)
_T = TypeVar("_T")
Table = MutableMapping[Any, Any]


@dataclass(frozen=True, slots=True)
class Incoming:
    """One consumed record: where it came from and its raw bytes."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class _Ending:
    """A document that completed in a batch: its key and state, its record (with what its documents row knows once
    its rows are written), and the record that completed it with its index in the batch."""

    key: str
    state: DocumentState
    completed: DocumentCompleted
    msg: Incoming
    index: int


class _Batch:
    """What a batch of the documents agent holds until its end: the documents it left open (state, index of their
    last record) and those it completed, in order; a later record of either reads what the batch made of it."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[DocumentState, int]] = {}
        self.ending: list[_Ending] = []
        self._latest: dict[str, DocumentState | CompletionMarker] = {}

    def entry(self, key: str, table: Table) -> DocumentState | CompletionMarker | None:
        """The document's entry as the batch left it, else as the table holds it."""
        held = self._latest.get(key)
        if held is not None:
            return held
        raw = table.get(key)
        return None if raw is None else decode_entry(raw)

    def keep_open(self, key: str, state: DocumentState, index: int) -> None:
        """The document stays open at ``state``, last changed by the batch's record ``index``."""
        self.open[key] = (state, index)
        self._latest[key] = state

    def end(self, done: _Ending, entry: DocumentState | CompletionMarker) -> None:
        """``done`` completed; a later record of it in the batch reads ``entry``."""
        self.open.pop(done.key, None)
        self.ending.append(done)
        self._latest[done.key] = entry


class Sink(Protocol):
    """Produces a record and returns once the broker acknowledged it."""

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        transactional: bool = False,
    ) -> None:
        """Produce; ``transactional`` joins the current partition's transaction when exactly-once is on."""


class StoreCalls:
    """Runs blocking ResultStore calls in a thread, retrying transient faults with backoff.

    Raises (from ``__call__``):
        FatalError: the store kept failing for ``retry.max_attempts`` attempts.
    """

    def __init__(
        self,
        store: ResultStore,
        retry: RetrySettings,
        executor: Executor | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self._retry = retry
        self._executor = executor
        self._sleep = sleep
        self._rng = rng

    async def once(self, fn: Callable[..., _T], *args: Any) -> _T:
        """One try, in the store's executor: for writes that may wait for the next round (estimates)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))

    async def __call__(self, fn: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        attempt = 1
        while True:
            try:
                return await loop.run_in_executor(self._executor, partial(fn, *args))
            except Exception as exc:  # the retry loop: classify, back off or give up
                if not is_retryable(exc):
                    raise
                if attempt >= self._retry.max_attempts:
                    raise FatalError(f"store kept failing after {attempt} attempts: {exc}",
                                     code="store_unavailable") from exc
                delay = backoff_delay(attempt, base_s=self._retry.base_delay_ms / 1000,
                                      max_s=self._retry.max_delay_ms / 1000, rng=self._rng)
                _log.warning("store_call_retried", operation=getattr(fn, "__name__", "store"), attempt=attempt,
                             delay_s=round(delay, 3), error=str(exc)[:200])
                await self._sleep(delay)
                attempt += 1


async def dead_letter(sink: Sink, msg: Incoming, error: BaseException, metrics: Metrics | None,
                      *, now_ms: int) -> None:
    """Send ``msg`` to ``<topic>.dlq`` with the DLQ headers (docs/messaging.md "DLQ"); returns once delivered."""
    headers = dlq_headers(topic=msg.topic, partition=msg.partition, offset=msg.offset, error=error, attempts=1,
                          service=SERVICE, timestamp_ms=now_ms)
    await sink.send(dlq_topic(msg.topic), msg.key, msg.value, headers=headers)
    _log.warning("record_dead_lettered", topic=msg.topic, partition=msg.partition, offset=msg.offset,
                 error_code=getattr(error, "code", "unhandled_error"))
    if metrics is not None:
        metrics.dlq.labels(SERVICE, msg.topic).inc()


def _stay(_index: int) -> None:
    """``handle_batch``'s default ``entering``: nothing to switch."""


class DocumentReducer:
    """ChunkResult records into DocumentCompleted ones.

    Args:
        table: document key → DocumentState or CompletionMarker JSON (the Faust table).
        serde: Avro serde.
        store: the result store, behind retries.
        sink: producer.
        completed_topic: where DocumentCompleted goes.
        document_step_topic: where a DocumentCompleted goes whose task has a document-level step left to make
            (``reduction.needs_document_step``: generate), for the document stage.
        metrics: counters, optional.
        marker_ttl_ms: event-time life of completion markers.
        exactly_once: Faust runs exactly-once: the state change is written before the
            DocumentCompleted (one transaction holds both whenever Faust commits); at-least-once
            writes it after, so that a crash in between repeats the record rather than losing it.
        custom_tasks: user tasks by name (``tasks.custom``), for their folds.
        max_message_bytes: the bound of a produced record (``kafka.max_message_bytes``): a DocumentCompleted past
            ``records.record_limit`` of it fails its document with ``output_too_large`` instead.
    """

    def __init__(self, table: Table, serde: AvroSerde, store: StoreCalls, sink: Sink, completed_topic: str,
                 *, document_step_topic: str, metrics: Metrics | None = None, marker_ttl_ms: int = MARKER_TTL_MS,
                 exactly_once: bool = False, custom_tasks: dict[str, str] | None = None,
                 max_message_bytes: int = 8 * 1024 * 1024) -> None:
        self._limit = record_limit(max_message_bytes)
        self._custom = dict(custom_tasks or {})
        self._folds: dict[str, TaskFold] = {}
        self._table = table
        self._serde = serde
        self._store = store
        self._sink = sink
        self._completed_topic = completed_topic
        self._document_step_topic = document_step_topic
        self._metrics = metrics
        self._ttl_ms = marker_ttl_ms
        self._exactly_once = exactly_once
        self._markers: dict[int, list[tuple[int, str]]] = {}

    async def handle(self, msg: Incoming) -> None:
        """Fold one ChunkResult record in; complete its document when it is the last one."""
        await self.handle_batch([msg])

    async def handle_batch(self, msgs: Sequence[Incoming], entering: Callable[[int], None] = _stay) -> None:
        """Fold a batch of ChunkResult records in, in order; write each open document's state once, at the end.

        The documents that complete in the batch end after its last record is folded: their rows are written at
        once (those of one document one after the other), then each is marked and produced in the order it
        completed, as by ``handle``. One that stays open is written after them: its state in between lives here
        only, and the caller acknowledges the batch's records after this returns, so a crash in between leaves
        them unacknowledged and they are read and folded again (the fold ignores an index it holds; a document
        whose completion was not produced completes again; docs/reducer.md "Batches").

        Args:
            msgs: the records, in the order they were read.
            entering: called with a record's index in ``msgs`` before its table changes are made, and with the
                index of a document's last record before its state is written (the Faust agent makes that record
                the current event: a table change goes to the changelog partition of the current record).
        """
        batch = _Batch()
        for index, msg in enumerate(msgs):
            entering(index)
            await self._handle(msg, index, batch)
        await self._end(batch.ending, entering)
        for key, (state, index) in batch.open.items():
            entering(index)
            self._table[key] = state.to_json()

    async def _handle(self, msg: Incoming, index: int, batch: _Batch) -> None:
        self._expire_markers(msg.partition, msg.timestamp_ms)
        try:
            chunk = self._decode(msg)
            key = document_key(chunk.doc_id, chunk.model_id)
            entry = batch.entry(key, self._table)
            fold = self._fold(chunk.task)
            state, completed = apply(entry, chunk, fold)
            if completed is not None and isinstance(fold, StoredAnswersFold):
                assert isinstance(state, DocumentState)
                completed = await self._with_answers(state, fold)
        except PoisonRecord as exc:
            await dead_letter(self._sink, msg, exc, self._metrics, now_ms=msg.timestamp_ms)
            return
        if state is entry:
            _log.debug("chunk_duplicate_ignored", doc_id=chunk.doc_id, chunk_index=chunk.chunk_index)
            return
        assert isinstance(state, DocumentState)
        if completed is None:
            batch.keep_open(key, state, index)
            return
        completed = self._bounded(completed)
        batch.end(_Ending(key, state, completed, msg, index), self._emitted(state, completed, msg))

    async def _end(self, ending: Sequence[_Ending], entering: Callable[[int], None]) -> None:
        """Write the rows of the documents that completed in a batch, then mark and produce each in turn.

        The rows of different documents are written at once; a document that completed twice in the batch (a
        failed chunk's ok replay, two models) has its rows written in order. When a write fails for good, the
        others are waited for and the first failure raised: no document of the batch is marked or produced,
        and the batch is read again.
        """
        chains: dict[str, list[_Ending]] = {}
        for done in ending:
            if not waits_for_document_step(done.completed):
                chains.setdefault(done.completed.doc_id, []).append(done)
        outcomes = await asyncio.gather(*(self._record(chain) for chain in chains.values()), return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            raise failure
        for done in ending:
            entering(done.index)
            await self._publish(done)

    async def _record(self, chain: Sequence[_Ending]) -> None:
        """Write the rows of one document's completions, in order; each takes what its documents row knows."""
        for done in chain:
            done.completed = await self._store(record_completion, self._store.store, done.completed, utc_now())

    async def _publish(self, done: _Ending) -> None:
        # the document stage writes its rows and publishes it once its document-level step is done
        step = waits_for_document_step(done.completed)
        topic = self._document_step_topic if step else self._completed_topic
        completed, msg = done.completed, done.msg
        value = self._serde.serialize(completed, topic)
        # Exactly-once: the state change goes BEFORE the record. Faust commits a transaction whenever
        # its commit timer fires, also while this handler awaits the send; written after it, a
        # commit there took the DocumentCompleted without the marker, and after a crash the input
        # was handled again and the document completed twice (short kill -9 chaos run,
        # docs/reliability.md). At-least-once keeps the record first: a crash between the two then
        # repeats the record instead of losing it.
        if self._exactly_once:
            self._mark_emitted(done)
        # same partition as the source record: under exactly-once the output, the state change and
        # the input offset belong to one transaction (docs/reducer.md "Exactly-once")
        await self._sink.send(topic, completed.doc_id.encode(), value, partition=msg.partition, transactional=True)
        if not self._exactly_once:
            self._mark_emitted(done)
        _log.info("document_step_pending" if step else "document_completed",
                  job_id=completed.job_id, doc_id=completed.doc_id, status=completed.status,
                  chunk_count=completed.chunk_count, failed_chunks=completed.failed_chunks)
        if self._metrics is not None:
            self._metrics.records_out.labels(SERVICE, topic).inc()

    async def _with_answers(self, state: DocumentState, fold: StoredAnswersFold) -> DocumentCompleted:
        """The complete document with its answers read back from its chunk rows. The inference service writes a
        chunk's row, acknowledged, before it produces the chunk's record (``stages.WriteStage.write``), and reads
        and writes go at one consistency level (LOCAL_QUORUM by default): the rows of every chunk the reducer
        heard are there. One that is not (a version retired or a source deleted meanwhile, a foreign writer)
        counts as a failed chunk, ``chunk_answer_missing``, so the same rows always give the same document."""
        found = await self._store(_stored_answers, self._store.store, state, fold, self._limit)
        if found.over:
            _log.warning("document_output_too_large", job_id=state.job_id, doc_id=state.doc_id, size=found.size,
                         limit=self._limit)
        if found.missing:
            _log.warning("chunk_answers_missing", job_id=state.job_id, doc_id=state.doc_id, model_id=state.model_id,
                         missing=len(found.missing), first=found.missing[0])
        return with_answers(state, fold, found, limit=self._limit)

    def _bounded(self, completed: DocumentCompleted) -> DocumentCompleted:
        """``completed``, or its document failed with ``output_too_large`` when its record would pass the limit:
        a record the broker refuses would stop the agent, and every document behind it."""
        size = len(self._serde.serialize(completed, self._completed_topic))
        if size <= self._limit:
            return completed
        _log.warning("document_output_too_large", job_id=completed.job_id, doc_id=completed.doc_id, size=size,
                     limit=self._limit)
        return output_too_large(completed, size, self._limit)

    @staticmethod
    def _emitted(state: DocumentState, completed: DocumentCompleted, msg: Incoming) -> DocumentState | CompletionMarker:
        """What the table holds of a document once it is produced: its marker, or, when it ended failed or partial,
        its state marked emitted (the sums stay: a failed chunk that succeeds later, a replayed dead letter, still
        counts)."""
        if completed.status == "completed":
            return CompletionMarker("completed", completed.chunk_count, msg.timestamp_ms, msg.partition)
        return state.emitted(msg.timestamp_ms, msg.partition)

    def _mark_emitted(self, done: _Ending) -> None:
        self._table[done.key] = self._emitted(done.state, done.completed, done.msg).to_json()
        heapq.heappush(self._markers.setdefault(done.msg.partition, []), (done.msg.timestamp_ms, done.key))

    def _fold(self, task: str) -> TaskFold:
        """The fold of ``task``, found once.

        Raises:
            PoisonRecord: ``task_unavailable``: no task by that name here (the record goes to the DLQ, to be
                replayed once the task is installed).
        """
        fold = self._folds.get(task)
        if fold is None:
            try:
                fold = self._folds[task] = task_fold(task, self._custom)
            except (ConfigError, InputError) as exc:
                raise PoisonRecord(f"no fold for task {task!r}: {exc}", code="task_unavailable") from exc
        return fold

    def _decode(self, msg: Incoming) -> ChunkResult:
        if msg.value is None:
            raise SchemaError("record without a value", code="schema_empty_value")
        record = self._serde.deserialize(msg.value, msg.topic)
        if not isinstance(record, ChunkResult):
            raise SchemaError(f"expected ChunkResult, got {type(record).__name__}", code="schema_unexpected_record",
                              raw=msg.value)
        return record

    def rebuild_markers(self) -> int:
        """Index the completed entries restored into the table (after recovery); returns how many."""
        self._markers = {}
        for key, raw in list(self._table.items()):
            done = _emitted(raw)
            if done is not None:
                self._markers.setdefault(done[1], []).append((done[0], str(key)))
        for heap in self._markers.values():
            heapq.heapify(heap)
        return sum(len(h) for h in self._markers.values())

    def _expire_markers(self, partition: int, now_ms: int) -> None:
        # only this partition's markers: a deletion goes to the changelog partition of the current record
        heap = self._markers.get(partition)
        while heap and now_ms - heap[0][0] > self._ttl_ms:
            completed_ms, key = heapq.heappop(heap)
            if _emitted(self._table.get(key)) == (completed_ms, partition):
                del self._table[key]


def _is_terminal(status: str) -> TypeGuard[DocumentStatus]:
    return status in _TERMINAL_STATUSES


def _stored_answers(store: ResultsStore, state: DocumentState, fold: StoredAnswersFold,
                    max_bytes: int) -> StoredAnswers:
    """``collect_answers`` over the document's chunk rows, read page by page (in the store's thread)."""
    rows = ((row.chunk_index, row.status, row.output) for row in store.iter_chunks(state.doc_id, state.model_id))
    return collect_answers(state, fold, rows, max_bytes=max_bytes)


_Heard = tuple[str, list[tuple[str | None, DocumentTally, str | None]], list[str]]
"""What the jobs agent heard of one document: its doc_id, its tasks' results (task None: for every task; each
with its tally and error_code), and the names of its job's tasks."""


def _terminal_documents(store: JobsStore, job_id: str, required: list[str]) -> list[_Heard]:
    """What the job's job_documents rows say of each document: each task's entry, and a terminal status of the
    row itself where it has no entries (a failure before inference, or a job written before tasks)."""
    found: list[_Heard] = []
    for row in store.iter_job_documents(job_id):
        results: list[tuple[str | None, DocumentTally, str | None]] = [
            (task, DocumentTally(t.status, t.usage), None) for task, t in sorted(row.tasks.items())]
        if not row.tasks and _is_terminal(row.status):
            results.append((None, DocumentTally(row.status, row.usage or Usage()), row.error_code))
        if results:
            found.append((row.doc_id, results, required))
    return found


def _emitted(raw: Any) -> tuple[int, int] | None:
    """(event time, partition) of a table entry whose DocumentCompleted is out, else None."""
    if not isinstance(raw, dict):
        return None
    entry = decode_entry(raw)
    if isinstance(entry, CompletionMarker):
        return entry.completed_ms, entry.partition
    return (entry.completed_ms, entry.partition) if entry.completed_ms else None


class CompletedRelay:
    """Re-keys DocumentCompleted and DocumentChunked records by job_id onto the by-job topic (the repartition
    step)."""

    def __init__(self, serde: AvroSerde, sink: Sink, by_job_topic: str, *, metrics: Metrics | None = None) -> None:
        self._serde = serde
        self._sink = sink
        self._topic = by_job_topic
        self._metrics = metrics

    async def handle(self, msg: Incoming) -> None:
        """Forward one DocumentCompleted or DocumentChunked as a small JSON record keyed by job_id."""
        try:
            if msg.value is None:
                raise SchemaError("record without a value", code="schema_empty_value")
            record = self._serde.deserialize(msg.value, msg.topic)
            if not isinstance(record, DocumentCompleted | DocumentChunked):
                raise SchemaError(f"expected DocumentCompleted or DocumentChunked, got {type(record).__name__}",
                                  code="schema_unexpected_record", raw=msg.value)
        except PoisonRecord as exc:
            await dead_letter(self._sink, msg, exc, self._metrics, now_ms=msg.timestamp_ms)
            return
        if isinstance(record, DocumentChunked):
            chunked = {"kind": CHUNKED, "job_id": record.job_id, "doc_id": record.doc_id,
                       "tokens": record.token_count}
            await self._sink.send(self._topic, record.job_id.encode(), json.dumps(chunked).encode())
            return
        body = {"job_id": record.job_id, "doc_id": record.doc_id, "status": record.status,
                "error_code": record.error_code, "usage": document_usage(record).to_json(),
                "task": record.task, "tasks": list(record.tasks)}
        # at-least-once hop (awaited before the input is acknowledged); JobReducer counts a doc_id once
        await self._sink.send(self._topic, record.job_id.encode(), json.dumps(body).encode())


class JobReducer:
    """Per-job counts, the jobs row, JobStatus and the webhook.

    Args:
        jobs: job_id → JobProgress JSON (Faust table).
        job_documents: "job_id|doc_id" → terminal status (Faust table); a job's entries are
            deleted once its final status is out.
        serde: Avro serde.
        store: the result store, behind retries.
        sink: producer.
        jobs_topic: where JobStatus goes.
        by_job_topic: the reducer's by-job topic (reconcile requests go there, keyed by job_id).
        throttle_s: least time between two running statuses of one job.
        clock: monotonic seconds (injected in tests).
        reconcile_after_s: a job whose counts do not move for this long is recounted from the store.
        webhooks: the webhook caller, or None to never call webhooks.
        metrics: counters, optional.
        limited: whether a tenant has quotas (its ended documents leave its admission ledger).
        topics: the deployment's topics: its lanes name the ``lane_queue`` partitions.
    """

    def __init__(self, jobs: Table, job_documents: Table, serde: AvroSerde, store: StoreCalls, sink: Sink,
                 jobs_topic: str, *, by_job_topic: str, throttle_s: float, clock: Callable[[], float],
                 reconcile_after_s: float = RECONCILE_AFTER_S, webhooks: WebhookNotifier | None = None,
                 metrics: Metrics | None = None, limited: Callable[[str], bool] | None = None,
                 topics: Topics | None = None) -> None:
        self._topics = topics or Topics()
        self._limited = limited
        self._queued: set[str] = set()
        self._waiting: dict[str, tuple[str, str, int]] = {}  # job_id → (lane, tenant, waiting tokens): the gauge
        self._gauged: set[tuple[str, str]] = set()
        self._jobs = jobs
        self._docs = job_documents
        self._serde = serde
        self._store = store
        self._sink = sink
        self._topic = jobs_topic
        self._throttle = StatusThrottle(throttle_s)
        self._lookups = StatusThrottle(max(5.0, throttle_s))
        self._clock = clock
        self._webhooks = webhooks
        self._metrics = metrics
        self._rows: dict[str, JobRow | None] = {}
        self._publishing = asyncio.Lock()
        self._finishing: set[str] = set()
        self._by_job_topic = by_job_topic
        self._reconcile_s = reconcile_after_s
        self._changed: dict[str, float] = {}
        self._stalled: dict[str, float] = {}

    async def handle(self, msg: Incoming) -> None:
        """Count one document's terminal status in its job (or reconcile the job from the store)."""
        body = self._parse(msg)
        job_id = str(body["job_id"])
        progress = await self._progress(job_id)
        if progress.final:
            _log.debug("job_record_after_final_ignored", job_id=job_id)
            return
        if body.get("kind") == CHUNKED:
            self._note_chunked(progress, str(body["doc_id"]), int(body["tokens"]))
            return
        reconcile = body.get("kind") == RECONCILE
        heard: list[_Heard]
        if reconcile:
            row = await self._job_row(job_id)
            required = list(job_task_names(row) if row is not None else tasks_of(()))
            heard = await self._store(_terminal_documents, self._store.store, job_id, required)
        else:
            task = body.get("task")
            heard = [(str(body["doc_id"]), [(None if task is None else str(task), DocumentTally.from_json(body),
                                             body.get("error_code"))],
                      [str(t) for t in body.get("tasks") or ()])]
        # a recount starts from nothing: the store's rows are the truth, and the per-document entries of the
        # job-documents table may be ahead of the job's counts (at-least-once: a kill between the two table
        # writes kept the entry and lost the count, and the redelivered record then looked like a duplicate)
        updated = replace(progress, completed=0, partial=0, failed=0, usage=Usage()) if reconcile else progress
        for doc_id, results, required_tasks in heard:
            doc_key = job_document_key(job_id, doc_id)
            raw = self._docs.get(doc_key)
            entry = DocumentTasks() if raw is None else DocumentTasks.from_json(raw)
            previous = entry.counted
            for task_name, tally, error_code in results:
                entry = entry.with_result(task_name, tally, error_code, required_tasks)
            combined = entry.combined()
            if combined is None:
                if reconcile and previous is not None:
                    updated = count_document(updated, None, previous)  # what the records said stays
                else:
                    self._docs[doc_key] = entry.to_json()  # not every task is in yet: nothing to count
                continue
            current, code = combined
            if reconcile and previous is not None and previous.status == current.status:
                current = previous  # what the records said stays
            counted = count_document(updated, None if reconcile else previous, current)
            if previous is None:
                counted = settle_waiting(counted, entry)
            self._docs[doc_key] = replace(entry, counted=current).to_json()
            if counted is not updated:
                if previous != current:
                    self._count_usage(progress.tenant, previous, current)
                    await self._end_in_flight(progress.tenant, doc_id, current)
                updated = counted
                if len(entry.required) > 1 and ANY_TASK not in entry.results and previous != current:
                    await self._write_document_status(job_id, doc_id, current, code)  # (the chunker wrote its own)
        if reconcile and (updated.completed, updated.partial, updated.failed, updated.usage) == (
                progress.completed, progress.partial, progress.failed, progress.usage):
            updated = progress  # the recount found what the counts already say
        if body.get("kind") == RECONCILE:
            _log.info("job_reconciled", job_id=job_id, added=updated.terminal - progress.terminal,
                      terminal=updated.terminal, document_count=updated.document_count)
        if updated is progress:
            return
        self._queued.add(job_id)
        self._stalled.pop(job_id, None)
        self._changed[job_id] = self._clock()
        if updated.is_complete:
            updated = await self._refresh_count(updated, force=True)
        if updated.is_complete:
            await self._finish(updated)
            return
        self._jobs[job_id] = updated.to_json()
        if self._throttle.changed(job_id, self._clock()):
            await self._publish(updated)

    def _note_chunked(self, progress: JobProgress, doc_id: str, tokens: int) -> None:
        """A document of the job was chunked: its tokens wait until it is counted (written by ``flush``)."""
        doc_key = job_document_key(progress.job_id, doc_id)
        raw = self._docs.get(doc_key)
        entry = DocumentTasks() if raw is None else DocumentTasks.from_json(raw)
        noted, entry_after = note_chunked(progress, entry, tokens)
        if entry_after is entry:
            return
        self._docs[doc_key] = entry_after.to_json()
        self._jobs[progress.job_id] = noted.to_json()
        self._queued.add(progress.job_id)

    async def _write_queue(self) -> None:
        """Write the lane_queue rows of the jobs whose waiting tokens changed. A store that fails here keeps them
        for the next flush: they are estimates, not worth stalling the agent."""
        store, now = self._store.store, utc_now()
        for job_id in sorted(self._queued):
            raw = self._jobs.get(job_id)
            row = await self._job_row(job_id)
            progress = None if raw is None else JobProgress.from_json(raw)
            if progress is None or progress.final or row is None or job_id in self._finishing:
                self._queued.discard(job_id)
                self._waiting.pop(job_id, None)
                continue
            lane = JobOptions.from_mapping(row.options).lane
            queued = QueuedJobRow(lane=self._topics.lane(lane), job_id=job_id, tenant=row.tenant,
                                  created_at=row.created_at, waiting_tokens=progress.waiting_tokens,
                                  ended_documents=progress.terminal, updated_at=now)
            self._waiting[job_id] = (lane, row.tenant, progress.waiting_tokens)
            try:
                await self._store.once(store.upsert_queued_job, queued)
            except StoreError as exc:
                _log.warning("lane_queue_write_failed", job_id=job_id, error_code=exc.code, error=str(exc)[:200])
                break
            self._queued.discard(job_id)
        self._gauge_waiting()

    def _gauge_waiting(self) -> None:
        """``docstream_queued_tokens{lane,tenant}``: the waiting tokens of the jobs this process counts (their
        figures as last written; a tenant with none leaves the gauge)."""
        if self._metrics is None:
            return
        sums: dict[tuple[str, str], int] = {}
        for lane, tenant, tokens in self._waiting.values():
            sums[(lane, tenant)] = sums.get((lane, tenant), 0) + tokens
        gauge = self._metrics.queued_tokens
        for lane, tenant in self._gauged - sums.keys():
            gauge.remove(SERVICE, lane, tenant)
        for (lane, tenant), tokens in sums.items():
            gauge.labels(SERVICE, lane, tenant).set(tokens)
        self._gauged = set(sums)

    async def flush(self) -> None:
        """Publish statuses held back by the throttle; ask stalled jobs to reconcile with the store; write where
        jobs stand in their lanes."""
        await self._write_queue()
        now = self._clock()
        for job_id in self._throttle.due_pending(now):
            async with self._publishing:
                # read under the lock: the agent may have published the final status meanwhile
                raw = self._jobs.get(job_id)
                progress = None if raw is None else JobProgress.from_json(raw)
                if progress is not None and not progress.final and job_id not in self._finishing:
                    await self._publish_locked(progress)
        for job_id, changed in list(self._changed.items()):
            wait = self._stalled.get(job_id, self._reconcile_s)
            if now - changed < wait:
                continue
            # a count that stopped moving: a relayed record may have been lost (at-least-once hops,
            # rebalances); the job_documents rows are the source of truth, so recount from them
            self._changed[job_id] = now
            self._stalled[job_id] = min(wait * 2, _RECONCILE_MAX_S)
            body = {"kind": RECONCILE, "job_id": job_id}
            await self._sink.send(self._by_job_topic, job_id.encode(), json.dumps(body).encode())

    async def _write_document_status(self, job_id: str, doc_id: str, tally: DocumentTally,
                                     error_code: str | None) -> None:
        """A document of a job of several tasks is terminal for all: its job_documents and documents rows say so."""
        store, now = self._store, utc_now()
        await store(store.store.update_job_document_status, job_id, doc_id, tally.status, error_code, tally.usage, now)
        document: DocumentRow | None = await store(store.store.get_document, doc_id)
        if document is not None:
            await store(store.store.upsert_document, replace(document, status=tally.status, updated_at=now,
                                                             error_code=error_code))

    async def _end_in_flight(self, tenant: str, doc_id: str, tally: DocumentTally) -> None:
        """A document of a tenant with quotas ended: it leaves the tenant's documents in flight, and its tokens count
        on today's figure (docs/operations.md "Quotas and admission")."""
        if self._limited is None or not self._limited(tenant):
            return
        store = self._store
        await store(store.store.end_document, tenant, doc_id, day_of(utc_now()), tally.usage.tokens)

    def _count_usage(self, tenant: str, previous: DocumentTally | None, current: DocumentTally) -> None:
        """Prometheus: what the document added to its tenant's totals (a document counted again adds its growth)."""
        if self._metrics is None:
            return
        added = current.usage if previous is None else current.usage.minus(previous.usage)
        self._metrics.count_usage(SERVICE, tenant, added, new_document=previous is None)

    @staticmethod
    def _parse(msg: Incoming) -> dict[str, Any]:
        try:
            body = json.loads(msg.value or b"")
            if not isinstance(body, dict) or not isinstance(body.get("job_id"), str):
                raise ValueError("no job_id")
            if body.get("kind") == CHUNKED:
                if not isinstance(body.get("doc_id"), str) or not isinstance(body.get("tokens"), int):
                    raise ValueError("chunked without doc_id or tokens")
            elif body.get("kind") != RECONCILE and body.get("status") not in _TERMINAL_STATUSES:
                raise ValueError(f"status {body.get('status')!r}")
            return body
        except (ValueError, TypeError) as exc:
            raise CorruptStateError(f"bad by-job record at {msg.topic}[{msg.partition}]@{msg.offset}") from exc

    async def _job_row(self, job_id: str, *, fresh: bool = False) -> JobRow | None:
        if fresh or job_id not in self._rows:
            self._rows[job_id] = await self._store(self._store.store.get_job, job_id)
        return self._rows[job_id]

    async def _progress(self, job_id: str) -> JobProgress:
        raw = self._jobs.get(job_id)
        if raw is not None:
            progress = JobProgress.from_json(raw)
            if progress.document_count == 0 and not progress.final:
                progress = await self._refresh_count(progress, force=False)
            return progress
        row = await self._job_row(job_id)
        self._lookups.changed(job_id, self._clock())
        if row is None:
            return JobProgress(job_id)
        return JobProgress(job_id, tenant=row.tenant, document_count=row.document_count)

    async def _refresh_count(self, progress: JobProgress, *, force: bool) -> JobProgress:
        # read the jobs row only when the count is unknown (throttled) or the job looks complete
        if not force and not self._lookups.changed(progress.job_id, self._clock()):
            return progress
        row = await self._job_row(progress.job_id, fresh=True)
        if row is None or row.document_count == progress.document_count:
            return progress
        return replace(progress, document_count=row.document_count, tenant=row.tenant)

    async def _publish(self, progress: JobProgress, *, final: bool = False) -> None:
        async with self._publishing:
            await self._publish_locked(progress, final=final)

    async def _publish_locked(self, progress: JobProgress, *, final: bool = False) -> None:
        status = job_status(progress, utc_now(), final=final)
        row = await self._job_row(progress.job_id)
        if row is not None:
            state = "cancelled" if row.status == "cancelled" else status.state
            await self._store(self._store.store.upsert_job, replace(
                row, status=state, completed=status.completed, partial=status.partial, failed=status.failed,
                updated_at=status.updated_at, usage=progress.usage))
        await self._sink.send(self._topic, progress.job_id.encode(), self._serde.serialize(status, self._topic))
        if self._metrics is not None:
            self._metrics.records_out.labels(SERVICE, self._topic).inc()
        _log.info("job_status_published", job_id=progress.job_id, final=final, completed=status.completed,
                  partial=status.partial, failed=status.failed, document_count=status.document_count)

    async def _finish(self, progress: JobProgress) -> None:
        self._finishing.add(progress.job_id)
        final = replace(progress, final=True)
        await self._publish(final, final=True)
        row = self._rows.get(progress.job_id)
        if row is not None:
            lane = self._topics.lane(JobOptions.from_mapping(row.options).lane)
            await self._store(self._store.store.delete_queued_job, lane, progress.job_id)
        self._queued.discard(progress.job_id)
        self._waiting.pop(progress.job_id, None)
        if not final.webhook_done and row is not None and row.webhook_url and self._webhooks is not None:
            try:
                await self._webhooks.notify(row.webhook_url, job_status(final, utc_now(), final=True))
            except InputError as exc:
                _log.error("webhook_refused", job_id=progress.job_id, error_code=exc.code, error=exc.message)
        self._jobs[progress.job_id] = replace(final, webhook_done=True).to_json()
        prefix = job_document_key(progress.job_id, "")
        for key in [k for k in list(self._docs.keys()) if str(k).startswith(prefix)]:
            del self._docs[key]
        self._throttle.forget(progress.job_id)
        self._lookups.forget(progress.job_id)
        self._rows.pop(progress.job_id, None)
        self._changed.pop(progress.job_id, None)
        self._stalled.pop(progress.job_id, None)
        self._finishing.discard(progress.job_id)
