"""GET /v1/jobs/{id}/results: a job's finished documents as JSON Lines, streamed from the store.

The lines are those of ``docstream_ingest.export`` (the same keys as `docstream export`): one
``{"record": "document", ...}`` line per finished document (status completed, partial or
failed), in doc_id order, each followed, with ``include_chunks``, by its
``{"record": "chunk", ...}`` lines in chunk_index order. Documents are read page by page and
chunks one store page at a time, and every line leaves at once: neither a job nor one
document's chunks are held in memory. Documents not finished yet are left out, so the
endpoint can be read while a job runs.

A job of several tasks (docs/tasks.md) gets one document line per (document, task), with the task's
fields (``docstream_ingest.export.task_document_record``), each followed by that task's chunk lines.

If the store fails after the first byte is sent, the status is already 200: the stream then
ends with ``{"record": "error", "error_code": ..., "message": ...}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from docstream.errors import DocstreamError
from docstream.logging import get_logger
from docstream.store.base import DocumentResultRow, JobDocumentRow, ResultsStore, ResultStore
from docstream.tasks.legacy import job_model_id_for, keeps_pre_task_layout, tasks_of
from docstream_ingest.export import (
    chunk_record,
    document_record,
    document_task_results,
    task_chunk_record,
    task_document_record,
)

__all__ = ["FINISHED", "iter_result_lines"]

FINISHED = frozenset({"completed", "partial", "failed"})
_NOT_STARTED = frozenset({"submitted", "skipped"})
_log = get_logger(__name__)


def _default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _line(kind: str, record: dict[str, Any]) -> bytes:
    embedding = record.get("embedding")
    if embedding and not all(math.isfinite(v) for v in embedding):
        record = {**record, "embedding": None}  # JSON has no NaN: one broken vector must not break the stream
    text = json.dumps({"record": kind, **record}, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      default=_default)
    return text.encode("utf-8") + b"\n"


def _finished(store: ResultsStore, entry: JobDocumentRow, model_id: str) -> tuple[DocumentResultRow | None, bool]:
    """The document's result, and whether the document is finished."""
    if entry.status in _NOT_STARTED:
        return None, False
    result = store.get_document_result(entry.doc_id, model_id)
    # the reducer writes document_results before it moves job_documents on: either one tells
    return result, result is not None or entry.status in FINISHED


def _document_lines(store: ResultsStore, entry: JobDocumentRow, model_id: str, include_chunks: bool) -> Iterator[bytes]:
    result, finished = _finished(store, entry, model_id)
    if not finished:
        return
    yield _line("document", document_record(entry, store.get_document(entry.doc_id), result, model_id))
    if include_chunks and result is not None:
        for chunk in store.iter_chunks(entry.doc_id, model_id):
            yield _line("chunk", chunk_record(chunk))


def _task_lines(store: ResultsStore, entry: JobDocumentRow, model_id: str, include_chunks: bool,
                job_tasks: Sequence[str]) -> Iterator[bytes]:
    if entry.status in _NOT_STARTED:
        return
    results = store.list_document_results(entry.doc_id)
    if not results and entry.status not in FINISHED:
        return
    document = store.get_document(entry.doc_id)
    for task, result in document_task_results(results, tasks=None, job_tasks=job_tasks):
        known = job_model_id_for(task, model_id)  # another task's model_id is known once it has a row
        yield _line("document", task_document_record(entry, document, task, result, model_id=known,
                                                     job_tasks=job_tasks))
        if include_chunks and result is not None:
            for chunk in store.iter_chunks(entry.doc_id, result.model_id):
                yield _line("chunk", task_chunk_record(chunk))


def iter_result_lines(
    store: ResultStore, job_id: str, *, model_id: str, include_chunks: bool = False, page_size: int = 200,
    job_tasks: Sequence[str] = tasks_of(()),
) -> Iterator[bytes]:
    """The JSONL body, line by line (see the module docstring); never raises once started.

    Args:
        store: the result store.
        job_id: the job (its tenant already checked).
        model_id: whose results (the job's model, or the service default).
        include_chunks: follow each document's line by its chunks' lines.
        page_size: job_documents rows read per query.
        job_tasks: the job's tasks (``docstream.tasks.selection.job_task_names``); other than embed alone, a
            line per (document, task).
    """
    try:
        for entry in store.iter_job_documents(job_id, page_size=page_size):
            if keeps_pre_task_layout(job_tasks):
                yield from _document_lines(store, entry, model_id, include_chunks)
            else:
                yield from _task_lines(store, entry, model_id, include_chunks, job_tasks)
    except DocstreamError as exc:
        _log.warning("results_stream_failed", job_id=job_id, error_code=exc.code, error=exc.message)
        yield _line("error", {"error_code": exc.code, "message": exc.message})
