"""What is unique to inference: a chunk and its embedding (or its failure) as a row and a record."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from docstream.records import ChunkCreated, ChunkEmbedded
from docstream.store.base import ChunkRow
from docstream.usage import STAGE_INFERENCE, add_counts

__all__ = [
    "MODEL_ERROR",
    "MODEL_UNAVAILABLE",
    "ChunkResult",
    "chunk_row",
    "embedded_record",
    "failed_result",
    "ok_result",
    "requested_model",
]

MODEL_ERROR = "model_error"
"""error_code of a chunk that made the model fail on its own, after retries."""

MODEL_UNAVAILABLE = "model_unavailable"
"""error_code of a chunk asking for a model_id this process has not loaded."""


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """The outcome of one chunk: an embedding, or an error code and message; ``runtime``: the label of the
    runtime that made the embedding (None when not made here); ``model_us``: its share of its batch's
    forward pass on ``device`` (0 and None when no model ran for it)."""

    chunk: ChunkCreated
    model_id: str
    embedding: list[float] = field(default_factory=list)  # shared, never copied: row and record use this list
    error_code: str | None = None
    error: str | None = None
    runtime: str | None = None
    model_us: int = 0
    device: str | None = None

    @property
    def ok(self) -> bool:
        """The chunk has its embedding."""
        return self.error_code is None


def requested_model(chunk: ChunkCreated, loaded_model_id: str) -> str:
    """The model_id a chunk is recorded under: the one it asks for, else the loaded one."""
    return chunk.model_id or loaded_model_id


def ok_result(chunk: ChunkCreated, model_id: str, embedding: list[float], runtime: str | None = None, *,
              model_us: int = 0, device: str | None = None) -> ChunkResult:
    """A chunk embedded by ``model_id`` (``embedding`` is kept, not copied) on ``runtime`` (a ``Runtime.label``;
    None: reused from the store, not made here), its share of the forward pass ``model_us`` on ``device``."""
    return ChunkResult(chunk=chunk, model_id=model_id, embedding=embedding, runtime=runtime, model_us=model_us,
                       device=device)


def failed_result(chunk: ChunkCreated, model_id: str, error_code: str, error: str, *, model_us: int = 0,
                  device: str | None = None) -> ChunkResult:
    """A chunk that failed with ``error_code`` (after ``model_us`` of forward passes on ``device``, if any)."""
    return ChunkResult(chunk=chunk, model_id=model_id, error_code=error_code, error=error[:2000], model_us=model_us,
                       device=device)


def chunk_row(result: ChunkResult) -> ChunkRow:
    """The chunks row of a result (a failed chunk keeps its text, no embedding, and its error_code)."""
    chunk = result.chunk
    return ChunkRow(
        doc_id=chunk.doc_id,
        model_id=result.model_id,
        chunk_index=chunk.chunk_index,
        chunk_id=chunk.chunk_id,
        job_id=chunk.job_id,
        text=chunk.text,
        page_start=chunk.page_start,
        page_end=chunk.page_end,
        char_start=chunk.char_start,
        char_end=chunk.char_end,
        token_count=chunk.token_count,
        embedding=result.embedding,
        heading=chunk.heading,
        status="ok" if result.ok else "failed",
        error_code=result.error_code,
        text_source=chunk.text_source,
        ocr_engine=chunk.ocr_engine,
        page_verdicts=tuple(chunk.page_verdicts),
    )


def embedded_record(result: ChunkResult, embedded_at: datetime, inference_us: int = 0) -> ChunkEmbedded:
    """The ChunkEmbedded of a result (key: doc_id); ``inference_us``: its share of the batch's busy time here."""
    chunk = result.chunk
    stage_us = add_counts(chunk.stage_us, {STAGE_INFERENCE: inference_us}) if inference_us else chunk.stage_us
    return ChunkEmbedded(
        job_id=chunk.job_id,
        doc_id=chunk.doc_id,
        chunk_id=chunk.chunk_id,
        chunk_index=chunk.chunk_index,
        chunk_count=chunk.chunk_count,
        model_id=result.model_id,
        status="ok" if result.ok else "failed",
        token_count=chunk.token_count,
        page_start=chunk.page_start,
        page_end=chunk.page_end,
        embedded_at=embedded_at,
        embedding=result.embedding,
        error_code=result.error_code,
        error=result.error,
        chunker_settings=chunk.chunker_settings,
        runtime=result.runtime,
        model_us=result.model_us,
        device=result.device,
        stage_us=stage_us,
    )
