"""Pure aggregation: chunk results into documents, documents into job progress (docs/reducer.md).

Nothing here does I/O or reads a clock: the reducer's agents keep these values in Faust
tables (as the JSON of ``to_json()``) and pass times in.

* ``DocumentState`` gathers the ``ChunkResult`` records of one (doc_id, model_id): which
  indices arrived (a bitmap, 1 bit per chunk: 1.25 KB for a 10 000-chunk document), failed
  chunks, token totals and the state of the task's fold (``docstream.tasks``: for embed the
  running token-weighted sum of the chunk embeddings). ``apply`` folds one record in and returns
  the ``DocumentCompleted`` when the last index arrives. Duplicates change nothing (the fold sees
  each index once); a disagreeing ``chunk_count`` raises.
* A task whose fold keeps no answer in its state (``StoredAnswersFold``: generate) has its document's answers
  read back from the store's chunk rows when the document completes: ``collect_answers`` picks them out of the
  rows, ``with_answers`` makes the ``DocumentCompleted`` of them. The state stays counts, bitmaps and token
  totals, the same size whatever the document's length.
* ``CompletionMarker`` is what stays of a document after completion: enough to recognise
  (and ignore) a redelivered chunk of it until the marker expires.
* ``JobProgress`` counts a job's terminal documents and adds up what they cost (a
  ``docstream.tenants.usage.Usage``); the reducer keeps what it heard of each document per task (a
  ``DocumentTasks``) in a separate table row, and counts the document once every task its job
  asked for is terminal, with the combined ``DocumentTally``: a duplicated ``DocumentCompleted``
  counts once while the job's own row stays a few bytes, whatever the job's size.
* ``StatusThrottle`` decides when a job's changed counts are published.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeGuard, get_args

from docstream.errors import FatalError, PoisonRecord
from docstream.records import ChunkResult, DocumentCompleted, DocumentStatus, JobStatus, output_too_large
from docstream.tasks.base import EMBED, FoldInput, Mention, StoredAnswersFold, TaskFold, TaskOutputError
from docstream.tasks.fold_embed import EmbeddingDimensionError, pack_floats, unpack_floats
from docstream.tasks.legacy import pre_task_state, task_of, tasks_of
from docstream.tasks.reduction import DOCUMENT_STEP, needs_document_step
from docstream.tenants.usage import UNKNOWN_DEVICE, Usage, across_tasks, add_counts, read_counts

__all__ = [
    "ALL_CHUNKS_FAILED",
    "ANY_TASK",
    "CHUNK_ANSWER_MISSING",
    "ChunkCountMismatchError",
    "ChunkIndexError",
    "CompletionMarker",
    "CorruptStateError",
    "DocumentState",
    "DocumentTally",
    "DocumentTasks",
    "EmbeddingDimensionError",
    "JobProgress",
    "StatusThrottle",
    "StoredAnswers",
    "UsageRecordError",
    "apply",
    "collect_answers",
    "count_document",
    "decode_entry",
    "document_key",
    "fold_input",
    "job_document_key",
    "job_status",
    "note_chunked",
    "record_document",
    "settle_waiting",
    "with_answers",
]

ALL_CHUNKS_FAILED = "all_chunks_failed"
"""error_code of a document none of whose chunks could be embedded."""

CHUNK_ANSWER_MISSING = "chunk_answer_missing"
"""error_code of an ok chunk whose answer was not in the store when its document completed (``collect_answers``)."""

_STATE_VERSION = 1
_TERMINAL: tuple[DocumentStatus, ...] = get_args(DocumentStatus)


class ChunkCountMismatchError(PoisonRecord):
    """A chunk result disagrees with its document's ``chunk_count``; it is never merged."""

    code = "chunk_count_mismatch"


class ChunkIndexError(PoisonRecord):
    """A chunk result whose ``chunk_index`` is outside ``0..chunk_count-1`` (or chunk_count < 1)."""

    code = "chunk_index_out_of_range"


class UsageRecordError(PoisonRecord):
    """A chunk result whose accounting fields are not counts: negative, too many stages, a device name too long."""

    code = "usage_invalid"


class CorruptStateError(FatalError):
    """A table value that is not a state this module wrote (a bug or a foreign writer)."""

    code = "reducer_state_corrupt"


def document_key(doc_id: str, model_id: str) -> str:
    """Table key of a document's aggregation: a replay with a new model aggregates beside the old one."""
    return f"{doc_id}|{model_id}"


def job_document_key(job_id: str, doc_id: str) -> str:
    """Table key of one document's terminal status inside its job."""
    return f"{job_id}|{doc_id}"


def _to_ms(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return round(aware.timestamp() * 1000)


def _from_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def _repack(values: Sequence[float]) -> str:
    return pack_floats(tuple(float(x) for x in values))


def _has_bit(bitmap: bytes, index: int) -> bool:
    return bool(bitmap[index >> 3] & (1 << (index & 7)))


def _set_bit(bitmap: bytes, index: int) -> bytes:
    out = bytearray(bitmap)
    out[index >> 3] |= 1 << (index & 7)
    return bytes(out)


def _clear_bit(bitmap: bytes, index: int) -> bytes:
    out = bytearray(bitmap)
    out[index >> 3] &= ~(1 << (index & 7)) & 0xFF
    return bytes(out)


@dataclass(frozen=True, slots=True)
class DocumentState:
    """What has arrived of one document's chunk results (one model).

    Attributes:
        doc_id: the document.
        job_id: its job.
        model_id: the model of the results.
        chunk_count: the document's total number of chunks.
        received: bitmap of arrived indices (bit ``i % 8`` of byte ``i // 8``).
        received_count: number of set bits in ``received``.
        failed_chunks: arrived chunks whose inference failed.
        token_count: tokens over the ok chunks.
        fold: the JSON state of the task's fold over the ok chunks, and the failed ones that carry what they
            cost (``TaskFold``; None until one arrives); for embed
            ``{"w": total weight, "sum": packed token-weighted sum of the vectors}``.
        latest_ms: latest ``embedded_at`` seen, epoch ms: the completion time, whatever the arrival order.
        first_error_code: error_code of the first failed chunk that arrived.
        failed: bitmap of the indices whose result was a failure (a later ok result replaces one).
        completed_ms: event time its DocumentCompleted was emitted, epoch ms; 0 before.
        partition: source partition at that emission (expiry deletes through it); -1 before.
        chunker_settings: the chunker settings the chunks carry ("" until one carries them: records
            written before ChunkEmbedded v2 do not).
        runtime: the runtime label the chunk results carry, the first that arrived with one ("" until then:
            failed and reused chunks, and records written before ChunkEmbedded v3, carry none).
        model_us: forward-pass microseconds per device over the arrived chunk results (each index once;
            an ok result that replaces a failure adds its own).
        stage_us: busy microseconds per stage over the arrived chunk results, likewise.
        task: the task of the results (``docstream.tasks``).
        tasks: the names of every task the document's job asks for (empty: embed only).
    """

    doc_id: str
    job_id: str
    model_id: str
    chunk_count: int
    received: bytes
    received_count: int = 0
    failed_chunks: int = 0
    token_count: int = 0
    fold: Any = None
    latest_ms: int = 0
    first_error_code: str | None = None
    failed: bytes = b""
    completed_ms: int = 0
    partition: int = -1
    chunker_settings: str = ""
    runtime: str = ""
    model_us: Mapping[str, int] = field(default_factory=dict)
    stage_us: Mapping[str, int] = field(default_factory=dict)
    task: str = EMBED
    tasks: tuple[str, ...] = ()

    @classmethod
    def empty(cls, doc_id: str, job_id: str, model_id: str, chunk_count: int, *, task: str = EMBED,
              tasks: Sequence[str] = ()) -> DocumentState:
        """A state with nothing received yet.

        Raises:
            ChunkIndexError: ``chunk_count`` < 1.
        """
        if chunk_count < 1:
            raise ChunkIndexError(f"document {doc_id}: chunk_count {chunk_count} < 1")
        size = (chunk_count + 7) // 8
        return cls(doc_id, job_id, model_id, chunk_count, bytes(size), failed=bytes(size), task=task,
                   tasks=tuple(tasks))

    @property
    def is_complete(self) -> bool:
        """Every index 0..chunk_count-1 has arrived."""
        return self.received_count >= self.chunk_count

    def has(self, index: int) -> bool:
        """Whether chunk ``index`` has arrived."""
        return 0 <= index < self.chunk_count and _has_bit(self.received, index)

    def has_failed(self, index: int) -> bool:
        """Whether chunk ``index`` arrived as a failure (and no ok result replaced it yet)."""
        return self.has(index) and _has_bit(self.failed, index)

    def emitted(self, completed_ms: int, partition: int) -> DocumentState:
        """This state, marked as emitted at event time ``completed_ms`` from ``partition``."""
        return replace(self, completed_ms=completed_ms, partition=partition)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (the Faust table value); embed keeps the keys of states before tasks."""
        data: dict[str, Any] = {
            "v": _STATE_VERSION,
            "kind": "state",
            "doc_id": self.doc_id,
            "job_id": self.job_id,
            "model_id": self.model_id,
            "chunk_count": self.chunk_count,
            "received": base64.b64encode(self.received).decode("ascii"),
            "received_count": self.received_count,
            "failed_chunks": self.failed_chunks,
            "token_count": self.token_count,
            "latest_ms": self.latest_ms,
            "first_error_code": self.first_error_code,
            "failed": base64.b64encode(self.failed).decode("ascii"),
            "completed_ms": self.completed_ms,
            "partition": self.partition,
            "chunker_settings": self.chunker_settings,
            "runtime": self.runtime,
            "model_us": dict(self.model_us),
            "stage_us": dict(self.stage_us),
        }
        if pre_task_state(self.task):
            fold = self.fold or {"w": 0.0, "sum": ""}
            data.update(weight_total=float(fold["w"]), embedding_sum=fold["sum"])
        else:
            data.update(task=self.task, fold=self.fold)
        if self.tasks:
            data["tasks"] = list(self.tasks)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DocumentState:
        """Rebuild from ``to_json()``.

        Raises:
            CorruptStateError: the dict is not a state of this version.
        """
        try:
            if data.get("v") != _STATE_VERSION or data.get("kind") != "state":
                raise ValueError(f"not a v{_STATE_VERSION} document state")
            received = base64.b64decode(str(data["received"]), validate=True)
            failed = base64.b64decode(str(data.get("failed", "")), validate=True) or bytes(len(received))
            task = task_of(str(data["task"]) if data.get("task") else None)
            fold: Any = data.get("fold")
            if pre_task_state(task):
                packed = data.get("embedding_sum", "")
                if not isinstance(packed, str):
                    packed = _repack(packed)  # a JSON list: states written before the packing
                unpack_floats(packed)  # a corrupt sum fails here, not at completion
                fold = {"w": float(data.get("weight_total", 0.0)), "sum": packed} if packed else None
            state = cls(
                doc_id=str(data["doc_id"]),
                job_id=str(data["job_id"]),
                model_id=str(data["model_id"]),
                chunk_count=int(data["chunk_count"]),
                received=received,
                received_count=int(data["received_count"]),
                failed_chunks=int(data["failed_chunks"]),
                token_count=int(data["token_count"]),
                fold=fold,
                latest_ms=int(data["latest_ms"]),
                first_error_code=None if data.get("first_error_code") is None else str(data["first_error_code"]),
                failed=failed,
                completed_ms=int(data.get("completed_ms", 0)),
                partition=int(data.get("partition", -1)),
                chunker_settings=str(data.get("chunker_settings") or ""),
                runtime=str(data.get("runtime") or ""),
                model_us=read_counts(data.get("model_us"), "model_us", limit=None),
                stage_us=read_counts(data.get("stage_us"), "stage_us", limit=None),
                task=task,
                tasks=tuple(str(t) for t in data.get("tasks") or ()),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise CorruptStateError(f"corrupt document state: {exc}") from exc
        if not len(state.received) == len(state.failed) == (state.chunk_count + 7) // 8:
            raise CorruptStateError(f"document state {state.doc_id}: bitmap does not fit chunk_count")
        return state


@dataclass(frozen=True, slots=True)
class CompletionMarker:
    """What remains of a completed document: recognises redelivered chunks until it expires.

    Attributes:
        status: the document's terminal status.
        chunk_count: its chunk count (a redelivery that disagrees is still an error).
        completed_ms: event time of the record that completed it, epoch ms (expiry runs on event time).
        partition: the source partition, so expiry deletes the key through its own changelog partition.
    """

    status: DocumentStatus
    chunk_count: int
    completed_ms: int
    partition: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (the Faust table value)."""
        return {"v": _STATE_VERSION, "kind": "done", "status": self.status, "chunk_count": self.chunk_count,
                "completed_ms": self.completed_ms, "partition": self.partition}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompletionMarker:
        """Rebuild from ``to_json()``.

        Raises:
            CorruptStateError: the dict is not a marker of this version.
        """
        try:
            if data.get("v") != _STATE_VERSION or data.get("kind") != "done":
                raise ValueError(f"not a v{_STATE_VERSION} completion marker")
            status = str(data["status"])
            if status not in _TERMINAL:
                raise ValueError(f"unknown status {status!r}")
            return cls(status, int(data["chunk_count"]), int(data["completed_ms"]),
                       int(data["partition"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStateError(f"corrupt completion marker: {exc}") from exc

    def expired(self, now_ms: int, ttl_ms: int) -> bool:
        """Whether the marker is older than ``ttl_ms`` at event time ``now_ms``."""
        return now_ms - self.completed_ms > ttl_ms


def decode_entry(data: Mapping[str, Any]) -> DocumentState | CompletionMarker:
    """The document table value ``data`` as a state or a marker.

    Raises:
        CorruptStateError: neither.
    """
    if data.get("kind") == "done":
        return CompletionMarker.from_json(data)
    return DocumentState.from_json(data)


def _check(state: DocumentState | CompletionMarker | None, chunk: ChunkResult) -> None:
    if chunk.chunk_count < 1 or not 0 <= chunk.chunk_index < chunk.chunk_count:
        raise ChunkIndexError(
            f"document {chunk.doc_id}: chunk_index {chunk.chunk_index} outside 0..{chunk.chunk_count - 1}"
        )
    try:
        read_counts(chunk.stage_us, "stage_us")
        read_counts({chunk.device or UNKNOWN_DEVICE: chunk.model_us}, "model_us")
    except ValueError as exc:
        raise UsageRecordError(f"document {chunk.doc_id}: chunk {chunk.chunk_index}: {exc}") from exc
    if state is not None and state.chunk_count != chunk.chunk_count:
        raise ChunkCountMismatchError(
            f"document {chunk.doc_id}: chunk {chunk.chunk_index} says chunk_count {chunk.chunk_count}, "
            f"earlier chunks said {state.chunk_count}"
        )


def apply(
    state: DocumentState | CompletionMarker | None, chunk: ChunkResult, fold: TaskFold,
) -> tuple[DocumentState | CompletionMarker | None, DocumentCompleted | None]:
    """Fold one chunk result into its document's state.

    Args:
        state: the document's current state, its completion marker, or None (nothing yet).
        chunk: the chunk result.
        fold: the fold of the chunk's task (``docstream.tasks.registry.task_fold(chunk.task)``).

    Returns:
        ``(new_state, completed)``. A duplicate (an index already in, or any chunk of a
        document reduced to its completion marker) returns ``state`` itself and None. When the
        last index arrives, ``completed`` is the document's ``DocumentCompleted`` and
        ``new_state`` the full state. An ok result for an index that arrived as a failure (a
        dead letter replayed) replaces the failure; on a complete document it gives a new
        ``DocumentCompleted`` with the corrected status.

    Raises:
        ChunkCountMismatchError: ``chunk.chunk_count`` differs from the state's (never merged).
        ChunkIndexError: the index is outside ``0..chunk_count-1``.
        TaskOutputError: the fold refuses the chunk's output (``EmbeddingDimensionError`` for embed: an ok
            chunk's embedding length differs from earlier ones, or is empty).
    """
    _check(state, chunk)
    if isinstance(state, CompletionMarker):
        return state, None
    current = state or DocumentState.empty(chunk.doc_id, chunk.job_id, chunk.model_id, chunk.chunk_count,
                                           task=chunk.task, tasks=chunk.tasks)
    if current.has(chunk.chunk_index):
        if chunk.status != "ok" or not current.has_failed(chunk.chunk_index):
            return state, None
        updated = _fold(current, chunk, fold, replaces_failure=True)
        return updated, (_completed(updated, fold) if updated.is_complete else None)
    updated = _fold(current, chunk, fold)
    return updated, (_completed(updated, fold) if updated.is_complete else None)


def waits_for_document_step(completed: DocumentCompleted) -> bool:
    """Whether the task's fold left its document a document-level step to make (``reduction.needs_document_step``:
    a generate document of several chunk summaries, or of disagreeing chunk values)."""
    if completed.output is None or DOCUMENT_STEP not in completed.output:
        return False
    return needs_document_step(json.loads(completed.output))


def fold_input(chunk: ChunkResult) -> FoldInput:
    """What a fold sees of an ok chunk result, or of a failed one with an output (what it cost: ``failed``).

    Raises:
        TaskOutputError: a mention or the user output that does not decode.
    """
    try:
        mentions = tuple(Mention.from_record(m) for m in chunk.mentions)
        output = None if chunk.output is None else json.loads(chunk.output)
    except (KeyError, TypeError, ValueError) as exc:
        raise TaskOutputError(f"document {chunk.doc_id}: chunk {chunk.chunk_index}: bad task output: {exc}") from exc
    return FoldInput(index=chunk.chunk_index, token_count=chunk.token_count, page_start=chunk.page_start,
                     page_end=chunk.page_end, embedding=chunk.embedding, label_scores=chunk.label_scores,
                     mentions=mentions, output=output, failed=chunk.status != "ok")


def _fold(state: DocumentState, chunk: ChunkResult, fold: TaskFold, *,
          replaces_failure: bool = False) -> DocumentState:
    common: dict[str, Any] = {"latest_ms": max(state.latest_ms, _to_ms(chunk.embedded_at)),
                              "chunker_settings": state.chunker_settings or chunk.chunker_settings,
                              "runtime": state.runtime or chunk.runtime or ""}
    if chunk.model_us > 0:
        common["model_us"] = add_counts(state.model_us, {chunk.device or UNKNOWN_DEVICE: chunk.model_us})
    if chunk.stage_us:
        common["stage_us"] = add_counts(state.stage_us, {k: v for k, v in chunk.stage_us.items() if v > 0})
    if replaces_failure:
        failed_chunks = state.failed_chunks - 1
        common.update(failed=_clear_bit(state.failed, chunk.chunk_index), failed_chunks=failed_chunks,
                      first_error_code=state.first_error_code if failed_chunks else None)
    else:
        common.update(received=_set_bit(state.received, chunk.chunk_index), received_count=state.received_count + 1)
    if chunk.status != "ok":
        if chunk.output is not None:  # what the failure cost, as its task said: the fold counts it
            common["fold"] = _add(state, chunk, fold)
        return replace(state, failed_chunks=state.failed_chunks + 1, failed=_set_bit(state.failed, chunk.chunk_index),
                       first_error_code=state.first_error_code or chunk.error_code or "chunk_failed", **common)
    return replace(state, token_count=state.token_count + max(chunk.token_count, 0), fold=_add(state, chunk, fold),
                   **common)


def _add(state: DocumentState, chunk: ChunkResult, fold: TaskFold) -> Any:
    try:
        return fold.add(fold.empty() if state.fold is None else state.fold, fold_input(chunk))
    except TaskOutputError as exc:
        raise type(exc)(f"document {chunk.doc_id}: {exc.message}", code=exc.code) from exc


@dataclass(frozen=True, slots=True)
class StoredAnswers:
    """What a document's stored chunk rows gave of its answers (``collect_answers``).

    Attributes:
        answers: ``(chunk index, answer)`` of each chunk the state counts as ok whose row holds its answer, by index.
        missing: the chunks the state counts as ok whose row was absent, failed or held no answer, by index.
        size: bytes of the answers read (their compact JSON).
        over: the answers passed the byte budget and reading stopped (``answers`` and ``missing`` are then empty).
    """

    answers: tuple[tuple[int, Any], ...] = ()
    missing: tuple[int, ...] = ()
    size: int = 0
    over: bool = False


def collect_answers(state: DocumentState, fold: StoredAnswersFold, rows: Iterable[tuple[int, str, str | None]], *,
                    max_bytes: int) -> StoredAnswers:
    """The answers of ``state``'s ok chunks (received, not failed) among ``rows``: ``(chunk_index, status, output
    JSON)`` of the document's stored chunk rows, in any order. A row of an index the state does not count as ok is
    passed over (a failure the reducer has not heard replaced yet). An ok chunk whose row is absent, failed, or
    holds no answer the fold takes (``answer_of``) is ``missing``. Reading stops once the answers pass
    ``max_bytes`` (``over``): the document's output would too, and nothing more of it is held.
    """
    answers: dict[int, Any] = {}
    size = 0
    fold_state = fold.empty() if state.fold is None else state.fold
    for index, status, output in rows:
        if status != "ok" or output is None or index in answers or not state.has(index) or state.has_failed(index):
            continue
        try:
            answer = fold.answer_of(fold_state, json.loads(output))
            size += len(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        except (TaskOutputError, TypeError, ValueError):
            continue  # counted missing below: the same rows give the same document
        if size > max_bytes:
            return StoredAnswers(size=size, over=True)
        answers[index] = answer
    missing = tuple(i for i in range(state.chunk_count) if i not in answers and state.has(i)
                    and not state.has_failed(i))
    return StoredAnswers(tuple(sorted(answers.items())), missing, size)


def with_answers(state: DocumentState, fold: StoredAnswersFold, found: StoredAnswers, *,
                 limit: int) -> DocumentCompleted:
    """The DocumentCompleted of a complete ``state`` with the answers ``collect_answers`` ``found``.

    An ok chunk whose answer is ``missing`` counts as a failed chunk of the document (``CHUNK_ANSWER_MISSING``,
    unless an earlier failure gave the first code); answers over the budget fail the document with
    ``output_too_large`` (``records.output_too_large``; its tokens kept) under the record ``limit``.

    Raises:
        TaskOutputError: the fold refuses the answers.
    """
    if found.over:
        return output_too_large(_completed(state, fold), found.size, limit)
    if found.missing:
        state = replace(state, failed_chunks=state.failed_chunks + len(found.missing),
                        first_error_code=state.first_error_code or CHUNK_ANSWER_MISSING)
    return _completed(state, fold, answers=found.answers)


def _completed(state: DocumentState, fold: TaskFold, *,
               answers: Sequence[tuple[int, Any]] | None = None) -> DocumentCompleted:
    embedded = state.chunk_count - state.failed_chunks
    status: DocumentStatus
    error_code: str | None = None
    error: str | None = None
    if state.failed_chunks == 0:
        status = "completed"
    elif embedded > 0:
        status = "partial"
        error = f"{state.failed_chunks} of {state.chunk_count} chunks failed ({state.first_error_code})"
    else:
        status, error_code = "failed", ALL_CHUNKS_FAILED
        error = f"all {state.chunk_count} chunks failed ({state.first_error_code})"
    try:
        fold_state = fold.empty() if state.fold is None else state.fold
        if answers is not None and isinstance(fold, StoredAnswersFold):
            result = fold.finish_with(fold_state, answers, chunk_count=state.chunk_count)
        else:
            result = fold.finish(fold_state, chunk_count=state.chunk_count)
        output = None if result.output is None else json.dumps(result.output, ensure_ascii=False, allow_nan=False,
                                                               separators=(",", ":"))
    except TaskOutputError as exc:
        raise type(exc)(f"document {state.doc_id}: {exc.message}", code=exc.code) from exc
    except (TypeError, ValueError) as exc:  # a user fold's result that is not JSON
        raise TaskOutputError(f"document {state.doc_id}: the {state.task} result is not JSON: {exc}") from exc
    return DocumentCompleted(
        job_id=state.job_id,
        doc_id=state.doc_id,
        status=status,
        completed_at=_from_ms(state.latest_ms),
        model_id=state.model_id,
        chunk_count=state.chunk_count,
        failed_chunks=state.failed_chunks,
        token_count=state.token_count,
        embedding=list(result.embedding),
        error_code=error_code,
        error=error,
        chunker_settings=state.chunker_settings or None,
        runtime=state.runtime or None,
        model_us=dict(state.model_us),
        stage_us=dict(state.stage_us),
        task=state.task,
        tasks=list(state.tasks),
        label_scores=dict(result.label_scores),
        top_label=result.top_label,
        top_chunks=list(result.top_chunks),
        mentions=[m.to_record(chunk=False) for m in result.mentions],
        entities=[e.to_record() for e in result.entities],
        mentions_truncated=result.mentions_truncated,
        output=output,
    )


@dataclass(frozen=True, slots=True)
class JobProgress:
    """Counts of a job's terminal documents.

    Attributes:
        job_id: the job.
        tenant: its tenant.
        document_count: documents in the job, from the jobs row; 0 while unknown.
        completed: documents completed.
        partial: documents completed with failed chunks.
        failed: documents failed (chunker failures included).
        final: the final JobStatus has been published; later records are ignored.
        webhook_done: the webhook has been called (or given up on) for the final status.
        usage: what the counted documents cost, each document's latest tally once.
        waiting_tokens: tokens of the documents chunked and not counted yet: what the job has waiting for the
            model (docs/operations.md "Where a job stands").
    """

    job_id: str
    tenant: str = "default"
    document_count: int = 0
    completed: int = 0
    partial: int = 0
    failed: int = 0
    final: bool = False
    webhook_done: bool = False
    usage: Usage = field(default_factory=Usage)
    waiting_tokens: int = 0

    @property
    def terminal(self) -> int:
        """Documents in a terminal state."""
        return self.completed + self.partial + self.failed

    @property
    def is_complete(self) -> bool:
        """Every document of a job of known size is terminal."""
        return self.document_count > 0 and self.terminal >= self.document_count

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (the Faust table value)."""
        return {"v": _STATE_VERSION, "job_id": self.job_id, "tenant": self.tenant,
                "document_count": self.document_count, "completed": self.completed, "partial": self.partial,
                "failed": self.failed, "final": self.final, "webhook_done": self.webhook_done,
                "usage": self.usage.to_json(), "waiting_tokens": self.waiting_tokens}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobProgress:
        """Rebuild from ``to_json()``.

        Raises:
            CorruptStateError: the dict is not a job progress of this version.
        """
        try:
            if data.get("v") != _STATE_VERSION:
                raise ValueError(f"not a v{_STATE_VERSION} job progress")
            return cls(str(data["job_id"]), str(data["tenant"]), int(data["document_count"]),
                       int(data["completed"]), int(data["partial"]), int(data["failed"]), bool(data["final"]),
                       bool(data["webhook_done"]), Usage.from_json(data.get("usage")),
                       int(data.get("waiting_tokens") or 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStateError(f"corrupt job progress: {exc}") from exc


def record_document(progress: JobProgress, previous: DocumentStatus | None, status: DocumentStatus) -> JobProgress:
    """Count one document's terminal status.

    Args:
        progress: the job's counts.
        previous: the status already counted for this document, or None.
        status: the status just reported.

    Returns:
        ``progress`` itself when nothing changes (a duplicate), else the new counts; a
        document whose status changes (a replay) moves from one count to the other.

    Raises:
        ValueError: a status that is not terminal.
    """
    if status not in _TERMINAL or (previous is not None and previous not in _TERMINAL):
        raise ValueError(f"not a terminal status: {status!r} (previous {previous!r})")
    if previous == status:
        return progress
    counts = {"completed": progress.completed, "partial": progress.partial, "failed": progress.failed}
    if previous is not None:
        counts[previous] -= 1
    counts[status] += 1
    return replace(progress, completed=counts["completed"], partial=counts["partial"], failed=counts["failed"])


@dataclass(frozen=True, slots=True)
class DocumentTally:
    """What a job has counted of one document: its terminal status and what it cost.

    Attributes:
        status: the terminal status.
        usage: the document's usage (``docstream.tenants.usage.document_usage`` of its DocumentCompleted).
    """

    status: DocumentStatus
    usage: Usage = field(default_factory=Usage)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (the job-documents table value)."""
        return {"status": self.status, "usage": self.usage.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> DocumentTally:
        """Rebuild from ``to_json()``; a bare status string (written before accounting existed) has no usage.

        Raises:
            CorruptStateError: neither.
        """
        try:
            if isinstance(data, str):
                status, usage = data, Usage()
            else:
                status, usage = str(data["status"]), Usage.from_json(data.get("usage"))
            if not _is_terminal(status):
                raise ValueError(f"unknown status {status!r}")
            return cls(status, usage)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStateError(f"corrupt document tally: {exc}") from exc


ANY_TASK = "*"
"""Task key of a result that holds for every task: the document failed before inference (chunker)."""


@dataclass(frozen=True, slots=True)
class DocumentTasks:
    """What a job has heard of one document, task by task, and what it has counted of it.

    Attributes:
        required: the names of the tasks the document's job asks for.
        results: task name → (its tally, its error_code); ``ANY_TASK`` for a failure before inference.
        counted: the combined tally the job counts for the document; None while not every task is terminal.
        chunked_tokens: the document's tokens, once the chunker said it was chunked (DocumentChunked); None
            before, or when it was counted first.
    """

    required: tuple[str, ...] = tasks_of(())
    results: Mapping[str, tuple[DocumentTally, str | None]] = field(default_factory=dict)
    counted: DocumentTally | None = None
    chunked_tokens: int | None = None

    def with_result(self, task: str | None, tally: DocumentTally, error_code: str | None,
                    required: Sequence[str]) -> DocumentTasks:
        """This document with one task's result (``task`` None: a failure before inference, for every task)."""
        results = dict(self.results)
        results[task or ANY_TASK] = (tally, error_code)
        return replace(self, required=tuple(required) or self.required or tasks_of(()), results=results)

    def combined(self) -> tuple[DocumentTally, str | None] | None:
        """The document's tally in its job and its error_code, once every required task is terminal, else None.

        A failure before inference stands for every task. Else: completed when every task completed, failed
        when every task failed, partial otherwise; the usage is ``docstream.tenants.usage.across_tasks``; the error
        code is the first failed task's (in the order the job named them).
        """
        if ANY_TASK in self.results:
            return self.results[ANY_TASK]
        if any(task not in self.results for task in self.required):
            return None
        tallies = [self.results[task][0] for task in self.required]
        statuses = {t.status for t in tallies}
        status: DocumentStatus = statuses.pop() if len(statuses) == 1 else "partial"
        codes = [self.results[task][1] for task in self.required if self.results[task][1]]
        usage = across_tasks(t.usage for t in tallies) if len(tallies) > 1 else tallies[0].usage
        return DocumentTally(status, usage), (codes[0] if codes else None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (the job-documents table value)."""
        return {"v": 2, "required": list(self.required),
                "results": {task: {**tally.to_json(), "error_code": code}
                            for task, (tally, code) in sorted(self.results.items())},
                "counted": None if self.counted is None else self.counted.to_json(),
                "chunked_tokens": self.chunked_tokens}

    @classmethod
    def from_json(cls, data: Any) -> DocumentTasks:
        """Rebuild from ``to_json()``; a ``DocumentTally`` (written before tasks) is a counted embed document.

        Raises:
            CorruptStateError: neither.
        """
        if not isinstance(data, Mapping) or data.get("v") != 2:
            tally = DocumentTally.from_json(data)
            return cls(tasks_of(()), {task_of(None): (tally, None)}, tally)
        try:
            results = {str(task): (DocumentTally.from_json(value), value.get("error_code"))
                       for task, value in dict(data["results"]).items()}
            counted = None if data.get("counted") is None else DocumentTally.from_json(data["counted"])
            chunked = data.get("chunked_tokens")
            return cls(tuple(str(t) for t in data["required"]), results, counted,
                       None if chunked is None else int(chunked))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptStateError(f"corrupt document tasks: {exc}") from exc


def _is_terminal(status: str) -> TypeGuard[DocumentStatus]:
    return status in _TERMINAL


def note_chunked(progress: JobProgress, entry: DocumentTasks, tokens: int) -> tuple[JobProgress, DocumentTasks]:
    """A document of the job was chunked: its tokens wait for the model until it is counted.

    Returns ``(progress, entry)`` themselves when the notice changes nothing: the document was heard chunked
    before (a redelivered or rechunked document) or was counted already (the notice came late, or a replay).
    """
    if entry.counted is not None or entry.chunked_tokens is not None:
        return progress, entry
    tokens = max(0, int(tokens))
    return (replace(progress, waiting_tokens=progress.waiting_tokens + tokens),
            replace(entry, chunked_tokens=tokens))


def settle_waiting(progress: JobProgress, entry: DocumentTasks) -> JobProgress:
    """A document is counted for the first time: its chunked tokens no longer wait (``entry`` as before it was
    counted; nothing to take out when the chunker's notice has not come)."""
    if entry.counted is not None or not entry.chunked_tokens:
        return progress
    return replace(progress, waiting_tokens=max(0, progress.waiting_tokens - entry.chunked_tokens))


def count_document(progress: JobProgress, previous: DocumentTally | None, current: DocumentTally) -> JobProgress:
    """Count one document's terminal status and usage in its job.

    Args:
        progress: the job's counts and usage.
        previous: what the job counted of this document before, or None.
        current: what was just reported.

    Returns:
        ``progress`` itself when the report changes nothing (a duplicate: the same tally again),
        else the new progress: the document's previous tally taken out, the current one put in. A
        document reported again with a new status or usage (a dead letter replayed) is counted
        once, with its latest figures, whatever was counted before.
    """
    if previous == current:
        return progress
    counted = record_document(progress, None if previous is None else previous.status, current.status)
    usage = progress.usage.plus(current.usage) if previous is None else \
        progress.usage.minus(previous.usage).plus(current.usage)
    return replace(counted, usage=usage)


def job_status(progress: JobProgress, updated_at: datetime, *, final: bool = False) -> JobStatus:
    """The JobStatus record of ``progress`` (state completed when ``final``), with its usage."""
    return JobStatus(
        job_id=progress.job_id,
        state="completed" if final else "running",
        document_count=progress.document_count,
        updated_at=updated_at,
        tenant=progress.tenant,
        completed=progress.completed,
        partial=progress.partial,
        failed=progress.failed,
        final=final,
        pages=progress.usage.pages,
        chunks=progress.usage.chunks,
        tokens=progress.usage.tokens,
        model_us=dict(progress.usage.model_us),
        stage_us=dict(progress.usage.stage_us),
        chat_tokens=dict(progress.usage.chat_tokens),
    )


class StatusThrottle:
    """When to publish a job's changed counts: at most once per ``interval_s`` per job.

    Changes inside the interval are remembered as pending; ``due_pending`` hands them out
    once their interval has passed, so the last change of a quiet job is not held back.
    Times are seconds of any monotonic clock the caller injects.

    Args:
        interval_s: least time between two publications of one job.

    Raises:
        ValueError: a negative interval.
    """

    def __init__(self, interval_s: float) -> None:
        if interval_s < 0:
            raise ValueError("interval_s must be >= 0")
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._pending: set[str] = set()

    def changed(self, key: str, now: float) -> bool:
        """Record a change of ``key``; True when it should be published now (then it counts as published)."""
        last = self._last.get(key)
        if last is None or now - last >= self._interval:
            self._last[key] = now
            self._pending.discard(key)
            return True
        self._pending.add(key)
        return False

    def due_pending(self, now: float) -> list[str]:
        """Pending keys whose interval has passed, marked published (sorted)."""
        due = sorted(k for k in self._pending if now - self._last.get(k, now - self._interval) >= self._interval)
        for key in due:
            self._pending.discard(key)
            self._last[key] = now
        return due

    def forget(self, key: str) -> None:
        """Drop what is known of ``key`` (its job is final)."""
        self._last.pop(key, None)
        self._pending.discard(key)

    def __len__(self) -> int:
        return len(self._last)
