"""Streaming export of a job's results from the store: JSON Lines or Parquet (docs/reducer.md "Export").

Documents are read page by page (``iter_job_documents``) and each document's chunks one
document at a time (``iter_chunks``); what is written leaves memory at once (JSON Lines)
or after each bounded row group (Parquet). A job of any size is never held in memory.

* JSON Lines: one object per line; ``"record": "document"``, followed, with ``chunks``, by
  that document's ``"record": "chunk"`` lines.
* Parquet: the documents in ``out``; with ``chunks`` the chunks in a second file beside it,
  ``<name>.chunks.parquet`` (one schema per file).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from docstream.errors import InputError
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, ResultStore

__all__ = [
    "CHUNK_SCHEMA",
    "DOCUMENT_SCHEMA",
    "ExportFormat",
    "ExportSummary",
    "chunk_record",
    "chunks_path",
    "document_record",
    "export_results",
    "resolve_model_id",
]

ExportFormat = Literal["jsonl", "parquet"]

DOCUMENT_SCHEMA = pa.schema([
    ("job_id", pa.string()),
    ("doc_id", pa.string()),
    ("status", pa.string()),
    ("error_code", pa.string()),
    ("error", pa.string()),
    ("filename", pa.string()),
    ("source_uri", pa.string()),
    ("content_sha256", pa.string()),
    ("media_type", pa.string()),
    ("page_count", pa.int32()),
    ("pages_by_verdict", pa.map_(pa.string(), pa.int32())),
    ("pages_by_source", pa.map_(pa.string(), pa.int32())),
    ("model_id", pa.string()),
    ("chunk_count", pa.int32()),
    ("failed_chunks", pa.int32()),
    ("token_count", pa.int64()),
    ("completed_at", pa.timestamp("ms", tz="UTC")),
    ("embedding", pa.list_(pa.float32())),
])
"""Columns of the documents Parquet file (and keys of a JSON Lines document record)."""

CHUNK_SCHEMA = pa.schema([
    ("job_id", pa.string()),
    ("doc_id", pa.string()),
    ("model_id", pa.string()),
    ("chunk_index", pa.int32()),
    ("chunk_id", pa.string()),
    ("status", pa.string()),
    ("error_code", pa.string()),
    ("text", pa.string()),
    ("heading", pa.string()),
    ("page_start", pa.int32()),
    ("page_end", pa.int32()),
    ("text_source", pa.string()),
    ("ocr_engine", pa.string()),
    ("page_verdicts", pa.list_(pa.string())),
    ("char_start", pa.int64()),
    ("char_end", pa.int64()),
    ("token_count", pa.int32()),
    ("embedding", pa.list_(pa.float32())),
])
"""Columns of the chunks Parquet file (and keys of a JSON Lines chunk record)."""


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export wrote.

    Attributes:
        documents: document records written.
        chunks: chunk records written.
        model_id: the model whose results were exported.
        paths: files written (empty when writing to a stream).
    """

    documents: int
    chunks: int
    model_id: str
    paths: tuple[str, ...] = ()


def resolve_model_id(store: ResultStore, job_id: str, model_id: str | None, default_model_id: str | None) -> str:
    """The model whose results to export: given, else the job's ``model_id`` option, else the default.

    Raises:
        InputError: the job does not exist (``job_not_found``) or no model is known (``model_unknown``).
    """
    job = store.get_job(job_id)
    if job is None:
        raise InputError(f"no job {job_id}", code="job_not_found")
    chosen = model_id or job.options.get("model_id") or default_model_id
    if not chosen:
        raise InputError(f"job {job_id}: no model_id option and no default model", code="model_unknown")
    return chosen


def document_record(
    entry: JobDocumentRow, document: DocumentRow | None, result: DocumentResultRow | None, model_id: str
) -> dict[str, Any]:
    """One document's export record (``DOCUMENT_SCHEMA`` keys); fields the store lacks are None."""
    return {
        "job_id": entry.job_id,
        "doc_id": entry.doc_id,
        "status": result.status if result is not None else entry.status,
        "error_code": (document.error_code if document is not None else None) or entry.error_code,
        "error": document.error if document is not None else None,
        "filename": entry.filename or (document.filename if document is not None else None),
        "source_uri": document.source_uri if document is not None else None,
        "content_sha256": document.content_sha256 if document is not None else None,
        "media_type": document.media_type if document is not None else None,
        "page_count": document.page_count if document is not None else None,
        "pages_by_verdict": dict(document.pages_by_verdict) if document is not None else None,
        "pages_by_source": dict(document.pages_by_source) if document is not None else None,
        "model_id": model_id,
        "chunk_count": result.chunk_count if result is not None else None,
        "failed_chunks": result.failed_chunks if result is not None else None,
        "token_count": result.token_count if result is not None else None,
        "completed_at": result.completed_at if result is not None else None,
        "embedding": list(result.embedding) if result is not None and result.embedding else None,
    }


def chunk_record(chunk: ChunkRow) -> dict[str, Any]:
    """One chunk's export record (``CHUNK_SCHEMA`` keys)."""
    return {
        "job_id": chunk.job_id,
        "doc_id": chunk.doc_id,
        "model_id": chunk.model_id,
        "chunk_index": chunk.chunk_index,
        "chunk_id": chunk.chunk_id,
        "status": chunk.status,
        "error_code": chunk.error_code,
        "text": chunk.text,
        "heading": chunk.heading,
        "page_start": chunk.page_start,
        "page_end": chunk.page_end,
        "text_source": chunk.text_source,
        "ocr_engine": chunk.ocr_engine,
        "page_verdicts": list(chunk.page_verdicts),
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "token_count": chunk.token_count,
        "embedding": list(chunk.embedding) if chunk.embedding else None,
    }


def chunks_path(path: Path) -> Path:
    """Where Parquet chunks go beside the documents file ``path``: ``<stem>.chunks.parquet``."""
    return path.with_name(f"{path.stem}.chunks.parquet")


def _documents(store: ResultStore, job_id: str, model_id: str, page_size: int) -> Iterator[dict[str, Any]]:
    for entry in store.iter_job_documents(job_id, page_size=page_size):
        document = store.get_document(entry.doc_id)
        result = store.get_document_result(entry.doc_id, model_id)
        yield document_record(entry, document, result, model_id)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, default=_json_default, ensure_ascii=False).encode("utf-8") + b"\n"


class _Writer:
    """Counts what goes out; subclasses write it."""

    def __init__(self) -> None:
        self.documents = 0
        self.chunks = 0

    def document(self, record: dict[str, Any]) -> None:
        self.documents += 1

    def chunk(self, record: dict[str, Any]) -> None:
        self.chunks += 1

    def close(self) -> None:
        return None


class _JsonLines(_Writer):
    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__()
        self._stream = stream

    def document(self, record: dict[str, Any]) -> None:
        super().document(record)
        self._stream.write(_line({"record": "document", **record}))

    def chunk(self, record: dict[str, Any]) -> None:
        super().chunk(record)
        self._stream.write(_line({"record": "chunk", **record}))

    def close(self) -> None:
        self._stream.flush()


class _RowGroups:
    """A ParquetWriter fed rows, writing a row group every ``size`` rows."""

    def __init__(self, sink: Any, schema: pa.Schema, size: int) -> None:
        self._writer = pq.ParquetWriter(sink, schema, compression="zstd")
        self._schema = schema
        self._size = size
        self._rows: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self.flush()
        self._writer.close()


class _Parquet(_Writer):
    def __init__(self, documents: _RowGroups, chunks: _RowGroups | None) -> None:
        super().__init__()
        self._documents = documents
        self._chunks = chunks

    def document(self, record: dict[str, Any]) -> None:
        super().document(record)
        self._documents.add(record)

    def chunk(self, record: dict[str, Any]) -> None:
        super().chunk(record)
        assert self._chunks is not None
        self._chunks.add(record)

    def close(self) -> None:
        self._documents.close()
        if self._chunks is not None:
            self._chunks.close()


def export_results(
    store: ResultStore,
    job_id: str,
    out: str | Path | IO[bytes],
    *,
    fmt: ExportFormat = "jsonl",
    chunks: bool = False,
    model_id: str | None = None,
    default_model_id: str | None = None,
    row_group_size: int = 1000,
    page_size: int = 500,
) -> ExportSummary:
    """Stream a job's documents (and chunks) from ``store`` to ``out``.

    Args:
        store: the result store.
        job_id: the job.
        out: a file path, or a binary stream (JSON Lines, or Parquet without chunks).
        fmt: ``jsonl`` or ``parquet``.
        chunks: also export every chunk (text, pages, embedding).
        model_id: whose results; default: the job's ``model_id`` option, else ``default_model_id``.
        default_model_id: the service default model.
        row_group_size: rows per Parquet row group (documents; chunks use the same bound).
        page_size: documents per store page.

    Raises:
        InputError: unknown job or model, an unknown format, or Parquet chunks asked for on a stream.
        StoreError: the store failed (transient).
    """
    if fmt not in ("jsonl", "parquet"):
        raise InputError(f"unknown format {fmt!r}: jsonl or parquet", code="invalid_format")
    if row_group_size < 1:
        raise InputError("row_group_size must be >= 1", code="invalid_row_group_size")
    model = resolve_model_id(store, job_id, model_id, default_model_id)
    path = Path(out) if isinstance(out, (str, Path)) else None
    if fmt == "parquet" and chunks and path is None:
        raise InputError("parquet with chunks writes two files: give a file path", code="invalid_output")
    paths: list[str] = []
    handle: IO[bytes] | None = None
    if fmt == "jsonl":
        if path is not None:
            handle = path.open("wb")
            paths.append(str(path))
        writer: _Writer = _JsonLines(handle or out)  # type: ignore[arg-type]
    else:
        documents = _RowGroups(str(path) if path is not None else out, DOCUMENT_SCHEMA, row_group_size)
        chunk_groups = _RowGroups(str(chunks_path(path)), CHUNK_SCHEMA, row_group_size) if chunks and path else None
        paths += [str(path)] if path is not None else []
        paths += [str(chunks_path(path))] if chunk_groups is not None and path is not None else []
        writer = _Parquet(documents, chunk_groups)
    try:
        for record in _documents(store, job_id, model, page_size):
            writer.document(record)
            if chunks:
                for chunk in store.iter_chunks(record["doc_id"], model):
                    writer.chunk(chunk_record(chunk))
    finally:
        writer.close()
        if handle is not None:
            handle.close()
    return ExportSummary(writer.documents, writer.chunks, model, tuple(paths))
