"""Streaming export of a job's results from the store: JSON Lines or Parquet (docs/reducer.md "Export").

Documents are read page by page (``iter_job_documents``) and each document's chunks one
document at a time (``iter_chunks``); what is written leaves memory at once (JSON Lines)
or after each bounded row group (Parquet). A job of any size is never held in memory.

* JSON Lines: one object per line; ``"record": "document"``, followed, with ``chunks``, by
  that document's ``"record": "chunk"`` lines.
* Parquet: the documents in ``out``; with ``chunks`` the chunks in a second file beside it,
  ``<name>.chunks.parquet`` (one schema per file).

Tasks (docs/reducer.md "Export per task"): an export of the ``embed`` task alone (a job of embed only, or
``tasks=["embed"]``) writes the records above, one per document, unchanged. Any other export writes one
document record per (document, task result): the document's result rows (``list_document_results``) of
the chosen tasks (``tasks``; None: every task of the document), each with ``task`` and that task's fields
(``TASK_DOCUMENT_SCHEMA``), and a record without results for a task of the job that has none yet; its
chunks follow each record, with their own task fields (``TASK_CHUNK_SCHEMA``). A Parquet export of tasks
can also go to a file per task (``per_task_files``: ``<stem>.<task>.parquet``, ``docstream run --out``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from docstream.avro.schemas import SchemaSet
from docstream.errors import InputError
from docstream.records import JobOptions
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, JobRow, ResultStore
from docstream.store.layout import CHUNK_ROW, DOCUMENT_RESULT_ROW, DOCUMENT_ROW, RowField, row_fields
from docstream.tables import TablePart
from docstream.tasks.base import EntitySummary, Mention, check_task_name
from docstream.tasks.legacy import job_model_id_for, keeps_pre_task_layout, tasks_of
from docstream.tasks.selection import job_task_names
from docstream_ingest.arrow import arrow_schema

__all__ = [
    "CHUNK_SCHEMA",
    "DOCUMENT_NOT_EXPORTED",
    "DOCUMENT_SCHEMA",
    "ENTITY_TYPE",
    "MENTION_TYPE",
    "TABLE_CELL_TYPE",
    "TABLE_TYPE",
    "TASK_CHUNK_SCHEMA",
    "TASK_DOCUMENT_SCHEMA",
    "ExportFormat",
    "ExportSummary",
    "chunk_columns",
    "chunk_record",
    "chunks_path",
    "document_columns",
    "document_record",
    "document_task_results",
    "export_results",
    "resolve_model_id",
    "task_chunk_record",
    "task_document_record",
    "task_path",
]

ExportFormat = Literal["jsonl", "parquet"]

_AVRO = SchemaSet.load()
_DOCUMENT_RECORDS = (_AVRO.get("DocumentCompleted").raw, _AVRO.get("DocumentSubmitted").raw)
_CHUNK_RECORDS = (_AVRO.get("ChunkResult").raw, _AVRO.get("ChunkCreated").raw)
_SCHEMAS = {schema.name: schema.raw for schema in _AVRO}
_CHUNK_ROW_FIELDS = row_fields(CHUNK_ROW, _SCHEMAS)
_CHUNK_FIELDS = {f.export_name: f.name for f in _CHUNK_ROW_FIELDS}
"""Every ``ChunkRow`` field (``docstream.store.layout.CHUNK_ROW``) by its export column: the name of the record field
it holds (``table`` for ``table_part``)."""

_CHUNK_FILE = ("job_id", "doc_id", "model_id", "chunk_index", "chunk_id", "status", "error_code", "text", "heading",
               "page_start", "page_end", "text_source", "ocr_engine", "page_verdicts", "page_reasons", "kind", "table",
               "char_start", "char_end", "token_count", "embedding")
"""The order of the columns of a chunks file as files have always had them (an export of embed alone is the file it
was before tasks); a field the chunk row gets later follows them. Order only: which columns there are is the row's."""
_TASK_CHUNK_COLUMNS = ("task", "label_scores", "mentions", "output")
"""The chunk row's fields only a task export writes, after every other column."""


def chunk_columns(fields: Sequence[RowField]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The chunk export's columns, from the chunk row's fields (:func:`docstream.store.layout.row_fields`): those of
    every chunks file, and those a task export adds; each named as the record field the row field holds.

    Raises:
        ValueError: a column of the file's order is no longer a field of the row.
    """
    return _columns([f.export_name for f in fields], _CHUNK_FILE, _TASK_CHUNK_COLUMNS, (), "the chunk row")


def _columns(names: Sequence[str], file_order: tuple[str, ...], task_only: tuple[str, ...],
             left_out: Sequence[str], rows: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``file_order``, then the ``names`` none of the three lists holds; and ``task_only``.

    Raises:
        ValueError: a name of the three lists is not one of ``names`` (fields of ``rows``).
    """
    gone = [name for name in (*file_order, *task_only, *left_out) if name not in names]
    if gone:
        raise ValueError(f"export columns {gone} are not fields of {rows}")
    known = {*file_order, *task_only, *left_out}
    return (*file_order, *(name for name in names if name not in known)), task_only


_CHUNK_COLUMNS, _TASK_COLUMNS = chunk_columns(_CHUNK_ROW_FIELDS)

_DOCUMENT_FILE = ("job_id", "doc_id", "status", "error_code", "error", "filename", "source_uri", "content_sha256",
                  "media_type", "page_count", "pages_by_verdict", "pages_by_source", "model_id", "chunk_count",
                  "failed_chunks", "token_count", "completed_at", "embedding")
"""The order of the columns of a documents file as files have always had them; a field the document rows get later
follows them. Order only: which columns there are is the rows'."""
_TASK_DOCUMENT_COLUMNS = ("task", "label_scores", "top_label", "top_chunks", "mentions", "entities",
                          "mentions_truncated", "output")
"""The document result row's fields only a task export writes, after every other column."""
DOCUMENT_NOT_EXPORTED: Mapping[str, str] = {
    "updated_at": "the documents row's last write, not a fact of the document",
    "generation": "the version's place among its source's, for the store's choice of the current one",
    "deleted_at": "a deleted document has no results left to export (its chunks and results go with it)",
    "source_key": "the source's key, shown by the API's document detail and the sources view",
    "previous_doc_id": "the version it replaced, shown by the API's document detail and the sources view",
    "chunker_settings": "the canonical chunker settings, for deciding what to reprocess",
    "runtime": "the runtime the embeddings were made with: how the results were made, not what they are",
}
"""The document rows' fields (``DocumentRow``, ``DocumentResultRow``) no export writes, and why; every other field of
theirs is a column."""


def document_columns(document_fields: Sequence[RowField],
                     result_fields: Sequence[RowField]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The document export's columns, from the fields of the documents and document results rows
    (:func:`docstream.store.layout.row_fields`) less ``DOCUMENT_NOT_EXPORTED``: those of every documents file, and
    those a task export adds.

    Raises:
        ValueError: a column of the file's order is no longer a field of the rows, or an unexported one is.
    """
    names = list(dict.fromkeys(f.name for f in (*document_fields, *result_fields)))
    return _columns(names, _DOCUMENT_FILE, _TASK_DOCUMENT_COLUMNS, tuple(DOCUMENT_NOT_EXPORTED), "the document rows")


_DOCUMENT_COLUMNS, _TASK_DOCUMENT_FIELDS = document_columns(row_fields(DOCUMENT_ROW, _SCHEMAS),
                                                            row_fields(DOCUMENT_RESULT_ROW, _SCHEMAS))
_ADDED_DOCUMENT_COLUMNS = _DOCUMENT_COLUMNS[len(_DOCUMENT_FILE):]

DOCUMENT_SCHEMA = arrow_schema(_DOCUMENT_COLUMNS, _DOCUMENT_RECORDS)
"""Columns of the documents Parquet file (and keys of a JSON Lines document record): the document rows' fields
(``document_columns``), each typed by the field of its name in DocumentCompleted, else DocumentSubmitted
(``docstream_ingest.arrow``)."""

CHUNK_SCHEMA = arrow_schema(_CHUNK_COLUMNS, _CHUNK_RECORDS)
"""Columns of the chunks Parquet file (and keys of a JSON Lines chunk record): the chunk row's fields
(``chunk_columns``), each typed by the field of its name in ChunkResult, else ChunkCreated."""

TABLE_TYPE = CHUNK_SCHEMA.field("table").type
"""A table chunk's part of its table (the Avro ``ChunkTable``; docs/chunking.md "Tables")."""
TABLE_CELL_TYPE = TABLE_TYPE.field("cells").type.value_type
"""A table cell (the Avro ``TableCell``)."""

TASK_DOCUMENT_SCHEMA = pa.schema([
    *DOCUMENT_SCHEMA,
    *arrow_schema(_TASK_DOCUMENT_FIELDS, _DOCUMENT_RECORDS),
])
"""Columns of a documents file of tasks: ``DOCUMENT_SCHEMA``'s, then the task and its fields (``output``: a user
task's JSON text, as stored: Arrow has no type for any JSON value)."""

MENTION_TYPE = TASK_DOCUMENT_SCHEMA.field("mentions").type.value_type
"""An entity mention in document offsets (the Avro ``EntityMention``; a chunk's ``cut`` is not stored)."""
ENTITY_TYPE = TASK_DOCUMENT_SCHEMA.field("entities").type.value_type
"""A distinct entity of a document (the Avro ``EntitySummary``)."""

TASK_CHUNK_SCHEMA = pa.schema([
    *CHUNK_SCHEMA,
    *arrow_schema(_TASK_COLUMNS, _CHUNK_RECORDS, sources={"mentions": _AVRO.get("DocumentCompleted").raw}),
])
"""Columns of a chunks file of tasks: ``CHUNK_SCHEMA``'s, then the task and its fields (mentions typed as a
document's: a chunk's ``cut`` is not stored)."""


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export wrote.

    Attributes:
        documents: document records written.
        chunks: chunk records written.
        model_id: the model whose results were exported (of embed; ``""`` when a task export knows none).
        paths: files written (empty when writing to a stream).
        tasks: see below.
    """

    documents: int
    chunks: int
    model_id: str
    paths: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    """The tasks asked for (empty: every task of each document); ``(embed,)`` for an export of embed only."""


def resolve_model_id(store: ResultStore, job_id: str, model_id: str | None, default_model_id: str | None) -> str:
    """The model whose results to export: given, else the job's ``model_id`` option, else the default.

    Raises:
        InputError: the job does not exist (``job_not_found``) or no model is known (``model_unknown``).
    """
    chosen = _model_of(_job(store, job_id), model_id, default_model_id)
    if not chosen:
        raise InputError(f"job {job_id}: no model_id option and no default model", code="model_unknown")
    return chosen


def _job(store: ResultStore, job_id: str) -> JobRow:
    job = store.get_job(job_id)
    if job is None:
        raise InputError(f"no job {job_id}", code="job_not_found")
    return job


def _model_of(job: JobRow, model_id: str | None, default_model_id: str | None) -> str | None:
    return model_id or JobOptions.from_mapping(job.options).model_id or default_model_id


def document_task_results(
    results: Sequence[DocumentResultRow], *, tasks: Sequence[str] | None, job_tasks: Sequence[str],
    model_id: str | None = None,
) -> list[tuple[str, DocumentResultRow | None]]:
    """Which of a document's result rows a task export writes: (task, row) by task, then model_id.

    Args:
        results: the document's result rows (``list_document_results``).
        tasks: the tasks asked for; None: every task of the document.
        job_tasks: the job's tasks: one asked for (or, with ``tasks`` None, any) without a row gets ``(task, None)``.
        model_id: only rows of this model (and no ``None`` entries but embed's).
    """
    wanted = None if tasks is None else set(tasks)
    kept = [r for r in results if (wanted is None or r.task in wanted) and (model_id is None or r.model_id == model_id)]
    found = {r.task for r in kept}
    asked = job_tasks if tasks is None else tasks
    # a job's model_id (ChunkCreated.model_id) names its embedding model, no other task's
    missing = [t for t in asked if t not in found and (model_id is None or job_model_id_for(t, model_id) is not None)]
    entries: list[tuple[str, DocumentResultRow | None]] = [(r.task, r) for r in kept]
    entries += [(task, None) for task in dict.fromkeys(missing)]
    return sorted(entries, key=lambda e: (e[0], e[1].model_id if e[1] is not None else ""))


def document_record(
    entry: JobDocumentRow, document: DocumentRow | None, result: DocumentResultRow | None, model_id: str | None
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
        **{name: _added_value(name, document, result) for name in _ADDED_DOCUMENT_COLUMNS},
    }


def _added_value(name: str, document: DocumentRow | None, result: DocumentResultRow | None) -> Any:
    """A column the document rows got after the file's own (``document_columns``): the result's field of its name,
    else the document's, else None."""
    for row in (result, document):
        if row is not None and hasattr(row, name):
            return _exported(getattr(row, name))
    return None


def _exported(value: Any) -> Any:
    """A row value as an export record holds it: sequences as lists, a table part, mention or entity as its record."""
    if isinstance(value, tuple):
        return [_exported(item) for item in value]
    if isinstance(value, Mention):
        return value.to_record(chunk=False)
    if isinstance(value, (TablePart, EntitySummary)):
        return value.to_record()
    if isinstance(value, dict):
        return dict(value)
    return value


def _chunk_values(chunk: ChunkRow, columns: Sequence[str]) -> dict[str, Any]:
    record = {name: _exported(getattr(chunk, _CHUNK_FIELDS.get(name, name))) for name in columns}
    record["embedding"] = list(chunk.embedding) if chunk.embedding else None
    return record


def chunk_record(chunk: ChunkRow) -> dict[str, Any]:
    """One chunk's export record (``CHUNK_SCHEMA`` keys: the ``ChunkRow`` fields of their names)."""
    return _chunk_values(chunk, CHUNK_SCHEMA.names)


def task_document_record(
    entry: JobDocumentRow, document: DocumentRow | None, task: str, result: DocumentResultRow | None,
    *, model_id: str | None, job_tasks: Sequence[str],
) -> dict[str, Any]:
    """One (document, task) export record (``TASK_DOCUMENT_SCHEMA`` keys).

    Without a result row: ``model_id`` (known for embed only, else None), the task's status in the job's
    tallies, else the document's when the job asks for the task, else None; the task's fields empty.
    """
    record = document_record(entry, document, result, result.model_id if result is not None else model_id)
    if result is None:
        tally = entry.tasks.get(task)
        record["status"] = tally.status if tally is not None else entry.status if task in job_tasks else None
        return {**record, "task": task, "label_scores": None, "top_label": None, "top_chunks": None,
                "mentions": None, "entities": None, "mentions_truncated": None, "output": None}
    return {
        **record,
        "task": task,
        "label_scores": dict(result.label_scores),
        "top_label": result.top_label,
        "top_chunks": list(result.top_chunks),
        "mentions": _exported(result.mentions),
        "entities": _exported(result.entities),
        "mentions_truncated": result.mentions_truncated,
        "output": result.output,
    }


def task_chunk_record(chunk: ChunkRow) -> dict[str, Any]:
    """One chunk's record of a task export (``TASK_CHUNK_SCHEMA`` keys)."""
    return _chunk_values(chunk, TASK_CHUNK_SCHEMA.names)


def chunks_path(path: Path) -> Path:
    """Where Parquet chunks go beside the documents file ``path``: ``<stem>.chunks.parquet``."""
    return path.with_name(f"{path.stem}.chunks.parquet")


def task_path(path: Path, task: str) -> Path:
    """The documents file of one task beside ``path`` (``per_task_files``): ``<stem>.<task><suffix>``; its
    chunks go to ``chunks_path`` of it (``<stem>.<task>.chunks.parquet``). Task names are ``[a-z0-9_-]``."""
    return path.with_name(f"{path.stem}.{check_task_name(task)}{path.suffix}")


@dataclass(frozen=True, slots=True)
class _Selection:
    """What an export writes: embed alone (the records of before tasks) or task records."""

    by_task: bool
    model_id: str | None
    tasks: tuple[str, ...] | None
    job_tasks: tuple[str, ...]
    only_model: str | None


def _select(job: JobRow, tasks: Sequence[str] | None, model_id: str | None,
            default_model_id: str | None) -> _Selection:
    chosen = None if tasks is None else tuple(dict.fromkeys(check_task_name(t) for t in tasks))
    if chosen == ():
        chosen = None
    job_tasks = job_task_names(job)
    by_task = not keeps_pre_task_layout(chosen or job_tasks)
    model = _model_of(job, model_id, default_model_id)
    if not by_task and not model:
        raise InputError(f"job {job.job_id}: no model_id option and no default model", code="model_unknown")
    return _Selection(by_task, model, chosen, job_tasks, model_id)


def _records(store: ResultStore, job_id: str, selection: _Selection, chunks: bool,
             page_size: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """("document" | "chunk", record) in export order, one document's records at a time."""
    for entry in store.iter_job_documents(job_id, page_size=page_size):
        document = store.get_document(entry.doc_id)
        if not selection.by_task:
            model = selection.model_id or ""
            result = store.get_document_result(entry.doc_id, model)
            yield "document", document_record(entry, document, result, model)
            if chunks:
                for chunk in store.iter_chunks(entry.doc_id, model):
                    yield "chunk", chunk_record(chunk)
            continue
        rows = document_task_results(store.list_document_results(entry.doc_id), tasks=selection.tasks,
                                     job_tasks=selection.job_tasks, model_id=selection.only_model)
        for task, row in rows:
            known = job_model_id_for(task, selection.model_id)
            yield "document", task_document_record(entry, document, task, row, model_id=known,
                                                   job_tasks=selection.job_tasks)
            if chunks and row is not None:
                for chunk in store.iter_chunks(entry.doc_id, row.model_id):
                    yield "chunk", task_chunk_record(chunk)


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


class _ParquetPerTask(_Writer):
    """A documents file, and a chunks file with ``chunks``, per task (``task_path``), each opened with its first
    record; ``paths`` names them in that order."""

    def __init__(self, path: Path, chunks: bool, size: int) -> None:
        super().__init__()
        self._path = path
        self._chunks = chunks
        self._size = size
        self._files: dict[str, _Parquet] = {}
        self.paths: list[str] = []

    def _of(self, task: str) -> _Parquet:
        found = self._files.get(task)
        if found is None:
            target = task_path(self._path, task)
            chunk_groups = _RowGroups(str(chunks_path(target)), TASK_CHUNK_SCHEMA, self._size) if self._chunks else None
            found = self._files[task] = _Parquet(_RowGroups(str(target), TASK_DOCUMENT_SCHEMA, self._size),
                                                 chunk_groups)
            self.paths += [str(target)] + ([str(chunks_path(target))] if self._chunks else [])
        return found

    def document(self, record: dict[str, Any]) -> None:
        super().document(record)
        self._of(str(record["task"])).document(record)

    def chunk(self, record: dict[str, Any]) -> None:
        super().chunk(record)
        self._of(str(record["task"])).chunk(record)

    def close(self) -> None:
        for writer in self._files.values():
            writer.close()


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
    tasks: Sequence[str] | None = None,
    row_group_size: int = 1000,
    page_size: int = 500,
    per_task_files: bool = False,
) -> ExportSummary:
    """Stream a job's documents (and chunks) from ``store`` to ``out``.

    Args:
        store: the result store.
        job_id: the job.
        out: a file path, or a binary stream (JSON Lines, or Parquet without chunks).
        fmt: ``jsonl`` or ``parquet``.
        chunks: also export every chunk (text, pages, embedding, the task's fields).
        model_id: whose results; default: the job's ``model_id`` option, else ``default_model_id`` (embed);
            in a task export, given: only the rows of this model.
        default_model_id: the service default model.
        tasks: the tasks whose results to export; None: every task of each document (the job's tasks
            without results get a record too). Embed alone writes the records of an export before tasks.
        row_group_size: rows per Parquet row group (documents; chunks use the same bound).
        page_size: documents per store page.
        per_task_files: Parquet of tasks to a path: a documents file (and a chunks file) per task,
            ``task_path(out, task)``, instead of one file of every task. Embed alone keeps its one file;
            JSON Lines is always one file (a line per document and task).

    Raises:
        InputError: unknown job or model, a bad task name, an unknown format, or Parquet chunks asked for
            on a stream.
        StoreError: the store failed (transient).
    """
    if fmt not in ("jsonl", "parquet"):
        raise InputError(f"unknown format {fmt!r}: jsonl or parquet", code="invalid_format")
    if row_group_size < 1:
        raise InputError("row_group_size must be >= 1", code="invalid_row_group_size")
    selection = _select(_job(store, job_id), tasks, model_id, default_model_id)
    path = Path(out) if isinstance(out, (str, Path)) else None
    if fmt == "parquet" and (chunks or per_task_files) and path is None:
        raise InputError("parquet with chunks or a file per task writes several files: give a file path",
                         code="invalid_output")
    paths: list[str] = []
    handle: IO[bytes] | None = None
    if fmt == "jsonl":
        if path is not None:
            handle = path.open("wb")
            paths.append(str(path))
        writer: _Writer = _JsonLines(handle or out)  # type: ignore[arg-type]
    elif per_task_files and selection.by_task:
        assert path is not None
        writer = _ParquetPerTask(path, chunks, row_group_size)
    else:
        document_schema = TASK_DOCUMENT_SCHEMA if selection.by_task else DOCUMENT_SCHEMA
        chunk_schema = TASK_CHUNK_SCHEMA if selection.by_task else CHUNK_SCHEMA
        documents = _RowGroups(str(path) if path is not None else out, document_schema, row_group_size)
        chunk_groups = _RowGroups(str(chunks_path(path)), chunk_schema, row_group_size) if chunks and path else None
        paths += [str(path)] if path is not None else []
        paths += [str(chunks_path(path))] if chunk_groups is not None and path is not None else []
        writer = _Parquet(documents, chunk_groups)
    try:
        for kind, record in _records(store, job_id, selection, chunks, page_size):
            if kind == "document":
                writer.document(record)
            else:
                writer.chunk(record)
    finally:
        writer.close()
        if handle is not None:
            handle.close()
    if isinstance(writer, _ParquetPerTask):
        paths = writer.paths
    exported = selection.tasks or (() if selection.by_task else tasks_of(()))
    return ExportSummary(writer.documents, writer.chunks, selection.model_id or "", tuple(paths), exported)
