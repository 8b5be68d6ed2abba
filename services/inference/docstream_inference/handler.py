"""What is unique to inference: a chunk and its task's output (or its failure) as a row and a record."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from docstream.avro.segments import Float32Vector
from docstream.errors import InputError
from docstream.records import ChunkCreated, ChunkResult, copy_fields
from docstream.store.base import ChunkRow
from docstream.tables import TablePart
from docstream.tasks.base import (
    EMBED,
    MAX_LABELS,
    ChunkOutput,
    Mention,
    Span,
    TaskRequest,
    place_spans,
    requested_tasks,
)
from docstream.tasks.legacy import job_model_id_for
from docstream.tenants.usage import STAGE_INFERENCE, add_counts

__all__ = [
    "MAX_OUTPUT_BYTES",
    "MODEL_ERROR",
    "MODEL_UNAVAILABLE",
    "TASK_OUTPUT_INVALID",
    "ChunkOutcome",
    "chunk_row",
    "failed_result",
    "ok_result",
    "output_of_row",
    "request_for",
    "requested_model",
    "result_of",
    "result_record",
]

MODEL_ERROR = "model_error"
"""error_code of a chunk that made the model fail on its own, after retries."""

MODEL_UNAVAILABLE = "model_unavailable"
"""error_code of a chunk asking for a model_id this process has not loaded."""

TASK_OUTPUT_INVALID = "task_output_invalid"
"""error_code of a chunk whose task output breaks the contract (non-finite scores, too large, not JSON)."""

MAX_OUTPUT_BYTES = 64 * 1024
"""Largest JSON of a user task's output for one chunk."""


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    """The outcome of one chunk for one task: its output, or an error code and message.

    ``runtime``: the label of the runtime that made it (None when not made here); ``model_us``: its share of
    its batch's forward pass on ``device`` (0 and None when no model ran for it).
    """

    chunk: ChunkCreated
    model_id: str
    embedding: Sequence[float] = field(default_factory=list)  # shared, never copied: row and record use this one
    error_code: str | None = None
    error: str | None = None
    runtime: str | None = None
    model_us: int = 0
    device: str | None = None
    task: str = EMBED
    label_scores: Mapping[str, float] = field(default_factory=dict)
    mentions: tuple[Mention, ...] = ()
    output: str | None = None
    """A user task's output, JSON."""

    @property
    def ok(self) -> bool:
        """The chunk has its output."""
        return self.error_code is None


def request_for(chunk: ChunkCreated, task: str, *, run_unrequested: bool = False) -> TaskRequest | None:
    """The request of ``task`` in the chunk's job, or None when the job did not ask for it (the chunk is skipped).

    With ``run_unrequested`` (a replay of a new task over old chunks) every chunk is run, with the job's
    request when it has one, else a bare one. A chunk whose tasks field is invalid is treated as embed only.
    """
    try:
        requests = requested_tasks(chunk.tasks)
    except (InputError, KeyError, TypeError):  # a foreign writer's record: read as one naming no task
        requests = requested_tasks(())
    for request in requests:
        if request.name == task:
            return request
    return TaskRequest(task) if run_unrequested else None


def requested_model(chunk: ChunkCreated, task: str, loaded_model_id: str) -> str:
    """The model_id a chunk's result of ``task`` is recorded under: the one its job names for the task
    (``legacy.job_model_id_for``: ChunkCreated.model_id names an embedding model), else the loaded one."""
    return job_model_id_for(task, chunk.model_id) or loaded_model_id


def result_of(chunk: ChunkCreated, model_id: str, task: str, output: ChunkOutput, runtime: str | None, *,
              model_us: int = 0, device: str | None = None) -> ChunkOutcome:
    """The result of one chunk's output: spans placed in the document, a user output as JSON, checked.

    A broken output (non-finite or negative scores, too many labels, output not JSON or over
    ``MAX_OUTPUT_BYTES``) is a failed result with ``task_output_invalid``, never a row.
    """
    scores = dict(output.label_scores)
    if len(scores) > MAX_LABELS or any(not math.isfinite(v) or v < 0 for v in scores.values()):
        return failed_result(chunk, model_id, TASK_OUTPUT_INVALID, f"label scores out of contract: {scores!r}"[:500],
                             model_us=model_us, device=device, task=task)
    text: str | None = None
    if output.output is not None:
        try:
            text = _output_json(output.output)
        except ValueError as exc:
            return failed_result(chunk, model_id, TASK_OUTPUT_INVALID, str(exc), model_us=model_us, device=device,
                                 task=task)
    mentions = _placed(chunk, output.spans) if output.spans else ()
    embedding = output.embedding if isinstance(output.embedding, (list, Float32Vector)) else list(output.embedding)
    return ChunkOutcome(chunk=chunk, model_id=model_id, embedding=embedding, runtime=runtime, model_us=model_us,
                       device=device, task=task, label_scores=scores, mentions=mentions, output=text)


def _output_json(value: Any) -> str:
    """A task output as the row and the record keep it: compact JSON of at most ``MAX_OUTPUT_BYTES``.

    Raises:
        ValueError: it is not JSON, or it is longer.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"output is not JSON: {exc}") from exc
    if len(text.encode("utf-8")) > MAX_OUTPUT_BYTES:
        raise ValueError(f"output JSON is over {MAX_OUTPUT_BYTES} bytes")
    return text


def _placed(chunk: ChunkCreated, spans: Sequence[Span]) -> tuple[Mention, ...]:
    return place_spans(chunk.text, spans, char_start=chunk.char_start, page_start=chunk.page_start,
                       page_breaks=chunk.page_breaks, first=chunk.chunk_index == 0,
                       last=chunk.chunk_index == chunk.chunk_count - 1)


def output_of_row(row: ChunkRow) -> ChunkOutput:
    """The output a stored ok chunk row holds, as the task gave it (spans back in the chunk's offsets), so a
    resumed run reuses it instead of running the model again."""
    spans = tuple(Span(m.start - row.char_start, m.end - row.char_start, m.label, m.score) for m in row.mentions)
    value: Any = None if row.output is None else json.loads(row.output)
    return ChunkOutput(embedding=row.embedding, label_scores=dict(row.label_scores), spans=spans, output=value)


def ok_result(chunk: ChunkCreated, model_id: str, embedding: Sequence[float], runtime: str | None = None, *,
              model_us: int = 0, device: str | None = None) -> ChunkOutcome:
    """A chunk embedded by ``model_id`` (``embedding`` is kept, not copied) on ``runtime`` (a ``Runtime.label``;
    None: reused from the store, not made here), its share of the forward pass ``model_us`` on ``device``."""
    return ChunkOutcome(chunk=chunk, model_id=model_id, embedding=embedding, runtime=runtime, model_us=model_us,
                       device=device)


def failed_result(chunk: ChunkCreated, model_id: str, error_code: str, error: str, *, model_us: int = 0,
                  device: str | None = None, task: str = EMBED, spent: Mapping[str, Any] | None = None) -> ChunkOutcome:
    """A chunk that failed with ``error_code`` (after ``model_us`` of forward passes on ``device``, if any);
    ``spent``: what its failed attempts cost, as its task said (``tasks.base.failure_output``), kept as its
    output when it is JSON of at most ``MAX_OUTPUT_BYTES``."""
    output: str | None = None
    if spent:
        try:
            output = _output_json(spent)
        except ValueError:
            output = None  # not what the contract allows: the failure stands without its cost
    return ChunkOutcome(chunk=chunk, model_id=model_id, error_code=error_code, error=error[:2000], model_us=model_us,
                       device=device, task=task, output=output)


def chunk_row(result: ChunkOutcome) -> ChunkRow:
    """The chunks row of a result (a failed chunk keeps its text, its error_code, and as its output what its
    failed attempts cost when its task says: the generate task's tokens)."""
    return copy_fields(
        ChunkRow, result.chunk, model_id=result.model_id, embedding=result.embedding,
        status="ok" if result.ok else "failed", error_code=result.error_code, table_part=_table_part(result.chunk),
        task=result.task, label_scores=dict(result.label_scores), mentions=result.mentions, output=result.output,
    )


def _table_part(chunk: ChunkCreated) -> TablePart | None:
    if chunk.table is None:
        return None
    try:
        return TablePart.from_record(chunk.table)
    except (KeyError, TypeError, ValueError):  # a foreign writer's record: the chunk keeps its text
        return None


def result_record(result: ChunkOutcome, embedded_at: datetime, inference_us: int = 0) -> ChunkResult:
    """The ChunkResult record of an outcome (key: doc_id); ``inference_us``: its share of the batch's busy time here."""
    chunk = result.chunk
    stage_us = add_counts(chunk.stage_us, {STAGE_INFERENCE: inference_us}) if inference_us else chunk.stage_us
    return copy_fields(
        ChunkResult, chunk, result, model_id=result.model_id, status="ok" if result.ok else "failed",
        embedded_at=embedded_at, embedding=result.embedding, stage_us=stage_us, tasks=_task_names(chunk),
        mentions=[m.to_record() for m in result.mentions],
    )


def _task_names(chunk: ChunkCreated) -> list[str]:
    if not chunk.tasks:
        return []  # embed only: the record stays as it was before tasks
    return [str(t.get("name", "")) for t in chunk.tasks]
