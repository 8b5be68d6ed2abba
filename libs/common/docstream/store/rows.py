"""One mapping between the store's rows and its tables' columns, shared by every backend. Pure.

Each table is a :class:`Table` (name, columns in order, primary key). ``*_to_columns``
turns a row into its column values, in the table's column order (what a prepared
statement or a ``?`` placeholder list binds); ``*_from_columns`` builds the row back
from a fetched row read by column name (a ``dict`` from the Cassandra driver's
``dict_factory``, a ``sqlite3.Row``). What the backends store differently — timestamps,
the options map, absent optional text — is a :class:`ColumnEncoding` each backend
supplies; everything else is written and read the same way (docs/storage.md):

* optional text reads back as ``None`` whether stored as ``""`` or null;
* embeddings are little-endian float32 blobs (:mod:`docstream.store.codec`);
* an optional timestamp is null when absent, on every backend;
* a usage (jobs, job_documents) is five columns, written as zeros and empty maps when there is
  none (no null cells: no tombstones in a job's partition), read back as None when they hold
  nothing (rows written before the columns existed: nulls);
* a chunk's provenance (migration 006): ``text_source`` null reads as ``text_layer``, its pages'
  verdicts are one comma-separated text; a document's pages by verdict and by source are count maps;
* a task's results (migration 007): label scores a map, mentions and entities lists of tuples in the
  fields' order (Cassandra's UDTs, SQLite JSON arrays), written whole; float32 where Cassandra stores a
  ``float`` (chunk label scores, mention scores), so both backends read back the same values; a mention's
  ``cut`` is not stored; nulls (rows written before) read as task ``embed`` and empty values;
* a chunk's table (migration 009): ``kind`` null reads as ``text``; ``table_part`` is the JSON text of
  its Avro ``ChunkTable`` record on both backends (read whole, never queried by a field), null for a
  text chunk;
* a job document's ``tasks`` map is read with its row but never written by the row upsert: each entry
  (:func:`task_tally_to_json`) is written on its own by ``upsert_job_document_task``; a row it created
  holds no status and reads as ``submitted``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocState,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    TaskTally,
)
from docstream.store.codec import decode_embedding, encode_embedding, float32_values, none_if_empty
from docstream.tables import TablePart
from docstream.tasks.base import EntitySummary, Mention
from docstream.usage import Usage

__all__ = [
    "API_KEYS",
    "CHUNKS",
    "DOCUMENTS",
    "DOCUMENT_RESULTS",
    "JOBS",
    "JOB_DOCUMENTS",
    "USAGE_COLUMNS",
    "ColumnEncoding",
    "Columns",
    "Table",
    "api_key_from_columns",
    "api_key_to_columns",
    "chunk_from_columns",
    "chunk_to_columns",
    "document_from_columns",
    "document_result_from_columns",
    "document_result_to_columns",
    "document_to_columns",
    "job_document_from_columns",
    "job_document_to_columns",
    "job_from_columns",
    "job_to_columns",
    "table_part_from_json",
    "table_part_to_json",
    "task_tally_from_json",
    "task_tally_to_json",
    "usage_from_columns",
    "usage_to_columns",
]

USAGE_COLUMNS = ("pages", "chunks", "tokens", "model_us", "stage_us")
"""The columns of a usage, in binding order, in jobs and job_documents."""


@dataclass(frozen=True, slots=True)
class Table:
    """A table's name, its columns in the order ``*_to_columns`` gives their values, and its key.

    Attributes:
        name: the table's name (without a keyspace).
        columns: every column the row upsert writes, in binding order.
        key: the primary key's columns (partition key first).
        element_columns: columns read with the row but written element by element by a method of their
            own, never by the row upsert (``job_documents.tasks``).
    """

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    element_columns: tuple[str, ...] = ()

    @property
    def column_list(self) -> str:
        """The columns the row upsert writes, as a statement lists them: ``a, b, c``."""
        return ", ".join(self.columns)

    @property
    def select_list(self) -> str:
        """The columns a read selects: the written ones, then the element columns."""
        return ", ".join(self.columns + self.element_columns)

    @property
    def key_condition(self) -> str:
        """The condition that selects one row by its key: ``a = ? AND b = ?``."""
        return " AND ".join(f"{name} = ?" for name in self.key)


JOBS = Table(
    "jobs",
    ("job_id", "tenant", "created_at", "status", "document_count", "options", "webhook_url", "completed", "partial",
     "failed", "updated_at", *USAGE_COLUMNS),
    key=("job_id",),
)
JOB_DOCUMENTS = Table(
    "job_documents", ("job_id", "doc_id", "status", "updated_at", "filename", "error_code", *USAGE_COLUMNS),
    key=("job_id", "doc_id"), element_columns=("tasks",),
)
DOCUMENTS = Table(
    "documents",
    ("doc_id", "job_id", "source_uri", "content_sha256", "status", "updated_at", "media_type", "filename",
     "page_count", "error_code", "error", "pages_by_verdict", "pages_by_source"),
    key=("doc_id",),
)
DOCUMENT_RESULTS = Table(
    "document_results",
    ("doc_id", "model_id", "job_id", "status", "chunk_count", "failed_chunks", "token_count", "embedding",
     "chunker_settings", "completed_at", "content_sha256", "runtime", "task", "label_scores", "top_label",
     "top_chunks", "mentions", "entities", "mentions_truncated", "output"),
    key=("doc_id", "model_id"),
)
CHUNKS = Table(
    "chunks",
    ("doc_id", "model_id", "chunk_index", "chunk_id", "job_id", "text", "page_start", "page_end", "char_start",
     "char_end", "token_count", "embedding", "heading", "status", "error_code", "text_source", "ocr_engine",
     "page_verdicts", "page_reasons", "kind", "table_part", "task", "label_scores", "mentions", "output"),
    key=("doc_id", "model_id", "chunk_index"),
)
API_KEYS = Table("api_keys", ("key_id", "tenant", "key_hash", "created_at", "name", "revoked_at"), key=("key_id",))


class Columns(Protocol):
    """A fetched row, read by column name: a ``dict``, a ``sqlite3.Row``."""

    def __getitem__(self, column: str, /) -> Any:
        """The value of one column."""


@dataclass(frozen=True, slots=True)
class ColumnEncoding:
    """How one backend stores the values the backends store differently.

    Attributes:
        timestamp: a datetime as the backend binds it (it is already aware UTC or naive UTC).
        read_timestamp: a stored non-null timestamp as an aware UTC datetime.
        text: an optional text value as the backend binds it (``""`` or ``None`` for none).
        options: a job's options map as the backend binds it.
        read_options: a stored options value as a dict.
        counts: a map of counts (a usage's microseconds per device or stage) as the backend binds it.
        read_counts: a stored map of counts as a dict (null: empty).
        structure: a task's result value as the backend binds it: a map of numbers, a list of ints, a list
            of tuples (a UDT's fields in order), a map of text (Cassandra: as they are; SQLite: JSON text).
        read_structure: a stored ``structure`` value back as maps and sequences (null: ``None``).
    """

    timestamp: Callable[[datetime], Any]
    read_timestamp: Callable[[Any], datetime]
    text: Callable[[str | None], str | None]
    options: Callable[[Mapping[str, str]], Any]
    read_options: Callable[[Any], dict[str, str]]
    counts: Callable[[Mapping[str, int]], Any]
    read_counts: Callable[[Any], dict[str, int]]
    structure: Callable[[Any], Any]
    read_structure: Callable[[Any], Any]

    def optional_timestamp(self, value: datetime | None) -> Any:
        """``timestamp(value)``, or ``None`` for no value."""
        return None if value is None else self.timestamp(value)

    def read_optional_timestamp(self, value: Any) -> datetime | None:
        """``read_timestamp(value)``, or ``None`` for null."""
        return None if value is None else self.read_timestamp(value)


def usage_to_columns(usage: Usage | None, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A usage's values in ``USAGE_COLUMNS`` order; None is written as nothing counted."""
    usage = usage or Usage()
    return (usage.pages, usage.chunks, usage.tokens, encoding.counts(usage.model_us), encoding.counts(usage.stage_us))


def usage_from_columns(found: Columns, encoding: ColumnEncoding) -> Usage | None:
    """The usage of a fetched row, or None when its columns hold nothing (null or zero)."""
    usage = Usage(
        pages=found["pages"] or 0,
        chunks=found["chunks"] or 0,
        tokens=found["tokens"] or 0,
        model_us=encoding.read_counts(found["model_us"]),
        stage_us=encoding.read_counts(found["stage_us"]),
    )
    return None if usage.is_empty else usage


_TALLY_STATES = frozenset({"completed", "partial", "failed"})
_NO_STATUS: DocState = "submitted"
"""What a job_documents row without a status reads as (one ``upsert_job_document_task`` created)."""


def task_tally_to_json(tally: TaskTally) -> str:
    """A ``TaskTally`` as the JSON text of its ``tasks`` entry: ``{"status": ..., "usage": Usage.to_json()}``."""
    return json.dumps({"status": tally.status, "usage": tally.usage.to_json()}, sort_keys=True,
                      separators=(",", ":"))


def task_tally_from_json(text: str) -> TaskTally:
    """The ``TaskTally`` of a ``tasks`` entry written by :func:`task_tally_to_json`.

    Raises:
        ValueError: not a tally: bad JSON, an unknown status, a bad usage.
    """
    data = json.loads(text)
    if not isinstance(data, Mapping) or data.get("status") not in _TALLY_STATES:
        raise ValueError(f"not a task tally: {text[:200]!r}")
    return TaskTally(status=data["status"], usage=Usage.from_json(data.get("usage")))


def _tasks(value: Any) -> dict[str, TaskTally]:
    return {str(task): task_tally_from_json(entry) for task, entry in sorted((value or {}).items())}


def _scores(value: Any) -> dict[str, float]:
    return {str(label): float(score) for label, score in (value or {}).items()}


def _float32_scores(scores: Mapping[str, float]) -> dict[str, float]:
    # chunks.label_scores is map<text, float> in Cassandra: both backends keep the float32 values
    if not scores:  # every embed chunk: no numpy call on the hot path
        return {}
    return dict(zip(scores, float32_values(list(scores.values())), strict=True))


def _mention_values(mentions: Sequence[Mention]) -> list[tuple[Any, ...]]:
    # entity_mention's fields in order; the score is a CQL float (float32); ``cut`` is not stored
    if not mentions:
        return []
    listed = list(mentions)
    scores = float32_values([m.score for m in listed])
    return [(m.text, m.label, m.start, m.end, m.page, score) for m, score in zip(listed, scores, strict=True)]


def _mentions(value: Any) -> tuple[Mention, ...]:
    return tuple(Mention(str(v[0]), str(v[1]), int(v[2]), int(v[3]), int(v[4]), float(v[5])) for v in value or ())


def _entity_values(entities: Iterable[EntitySummary]) -> list[tuple[Any, ...]]:
    return [(e.label, e.text, e.count, list(e.pages)) for e in entities]


def _entities(value: Any) -> tuple[EntitySummary, ...]:
    return tuple(EntitySummary(str(v[0]), str(v[1]), int(v[2]), tuple(int(p) for p in v[3] or ()))
                 for v in value or ())


def _ints(value: Sequence[Any] | None) -> tuple[int, ...]:
    return tuple(int(x) for x in value or ())


def job_to_columns(row: JobRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A jobs row's values in ``JOBS.columns`` order."""
    return (
        row.job_id,
        row.tenant,
        encoding.timestamp(row.created_at),
        row.status,
        row.document_count,
        encoding.options(row.options),
        encoding.text(row.webhook_url),
        row.completed,
        row.partial,
        row.failed,
        encoding.optional_timestamp(row.updated_at),
        *usage_to_columns(row.usage, encoding),
    )


def job_from_columns(found: Columns, encoding: ColumnEncoding) -> JobRow:
    """A jobs row from its fetched columns."""
    return JobRow(
        job_id=found["job_id"],
        tenant=found["tenant"],
        created_at=encoding.read_timestamp(found["created_at"]),
        status=found["status"],
        document_count=found["document_count"],
        options=encoding.read_options(found["options"]),
        webhook_url=none_if_empty(found["webhook_url"]),
        completed=found["completed"],
        partial=found["partial"],
        failed=found["failed"],
        updated_at=encoding.read_optional_timestamp(found["updated_at"]),
        usage=usage_from_columns(found, encoding),
    )


def job_document_to_columns(row: JobDocumentRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A job_documents row's values in ``JOB_DOCUMENTS.columns`` order."""
    return (
        row.job_id,
        row.doc_id,
        row.status,
        encoding.timestamp(row.updated_at),
        encoding.text(row.filename),
        encoding.text(row.error_code),
        *usage_to_columns(row.usage, encoding),
    )


def job_document_from_columns(found: Columns, encoding: ColumnEncoding) -> JobDocumentRow:
    """A job_documents row from its fetched columns (``tasks`` included: ``JOB_DOCUMENTS.select_list``).

    Raises:
        ValueError: a ``tasks`` entry is not a task tally.
    """
    return JobDocumentRow(
        job_id=found["job_id"],
        doc_id=found["doc_id"],
        status=found["status"] or _NO_STATUS,
        updated_at=encoding.read_timestamp(found["updated_at"]),
        filename=none_if_empty(found["filename"]),
        error_code=none_if_empty(found["error_code"]),
        usage=usage_from_columns(found, encoding),
        tasks=_tasks(encoding.read_structure(found["tasks"])),
    )


def document_to_columns(row: DocumentRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A documents row's values in ``DOCUMENTS.columns`` order."""
    return (
        row.doc_id,
        row.job_id,
        row.source_uri,
        row.content_sha256,
        row.status,
        encoding.timestamp(row.updated_at),
        encoding.text(row.media_type),
        encoding.text(row.filename),
        row.page_count,
        encoding.text(row.error_code),
        encoding.text(row.error),
        encoding.counts(row.pages_by_verdict),
        encoding.counts(row.pages_by_source),
    )


def document_from_columns(found: Columns, encoding: ColumnEncoding) -> DocumentRow:
    """A documents row from its fetched columns."""
    return DocumentRow(
        doc_id=found["doc_id"],
        job_id=found["job_id"],
        source_uri=found["source_uri"],
        content_sha256=found["content_sha256"],
        status=found["status"],
        updated_at=encoding.read_timestamp(found["updated_at"]),
        media_type=none_if_empty(found["media_type"]),
        filename=none_if_empty(found["filename"]),
        page_count=found["page_count"],
        error_code=none_if_empty(found["error_code"]),
        error=none_if_empty(found["error"]),
        pages_by_verdict=encoding.read_counts(found["pages_by_verdict"]),
        pages_by_source=encoding.read_counts(found["pages_by_source"]),
    )


def document_result_to_columns(row: DocumentResultRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A document_results row's values in ``DOCUMENT_RESULTS.columns`` order."""
    return (
        row.doc_id,
        row.model_id,
        row.job_id,
        row.status,
        row.chunk_count,
        row.failed_chunks,
        row.token_count,
        encode_embedding(row.embedding),
        row.chunker_settings,
        encoding.timestamp(row.completed_at),
        encoding.text(row.content_sha256),
        encoding.text(row.runtime),
        row.task,
        encoding.structure(dict(row.label_scores)),
        encoding.text(row.top_label),
        encoding.structure(list(row.top_chunks)),
        encoding.structure(_mention_values(row.mentions)),
        encoding.structure(_entity_values(row.entities)),
        row.mentions_truncated,
        encoding.text(row.output),
    )


def document_result_from_columns(found: Columns, encoding: ColumnEncoding) -> DocumentResultRow:
    """A document_results row from its fetched columns.

    Raises:
        ValueError: the stored embedding is not float32 bytes.
    """
    return DocumentResultRow(
        doc_id=found["doc_id"],
        model_id=found["model_id"],
        job_id=found["job_id"],
        status=found["status"],
        chunk_count=found["chunk_count"],
        failed_chunks=found["failed_chunks"],
        token_count=found["token_count"],
        embedding=decode_embedding(found["embedding"]),
        chunker_settings=found["chunker_settings"],
        completed_at=encoding.read_timestamp(found["completed_at"]),
        content_sha256=none_if_empty(found["content_sha256"]),
        runtime=none_if_empty(found["runtime"]),
        task=found["task"] or "embed",
        label_scores=_scores(encoding.read_structure(found["label_scores"])),
        top_label=none_if_empty(found["top_label"]),
        top_chunks=_ints(encoding.read_structure(found["top_chunks"])),
        mentions=_mentions(encoding.read_structure(found["mentions"])),
        entities=_entities(encoding.read_structure(found["entities"])),
        mentions_truncated=bool(found["mentions_truncated"]),
        output=none_if_empty(found["output"]),
    )


def chunk_to_columns(row: ChunkRow, embedding: bytes, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """A chunks row's values in ``CHUNKS.columns`` order.

    ``embedding`` is the row's embedding as stored (:func:`~docstream.store.codec.encode_embedding`):
    the caller encodes it once, for a backend that also binds the vector elsewhere.
    """
    return (
        row.doc_id,
        row.model_id,
        row.chunk_index,
        row.chunk_id,
        row.job_id,
        row.text,
        row.page_start,
        row.page_end,
        row.char_start,
        row.char_end,
        row.token_count,
        embedding,
        encoding.text(row.heading),
        row.status,
        encoding.text(row.error_code),
        row.text_source,
        encoding.text(row.ocr_engine),
        ",".join(row.page_verdicts),
        ",".join(row.page_reasons),
        row.kind,
        encoding.text(table_part_to_json(row.table_part)),
        row.task,
        encoding.structure(_float32_scores(row.label_scores)),
        encoding.structure(_mention_values(row.mentions)),
        encoding.text(row.output),
    )


def chunk_from_columns(found: Columns, encoding: ColumnEncoding) -> ChunkRow:
    """A chunks row from its fetched columns (mentions without ``cut``: it is not stored).

    Raises:
        ValueError: the stored embedding is not float32 bytes, or the table part is not its JSON.
    """
    return ChunkRow(
        doc_id=found["doc_id"],
        model_id=found["model_id"],
        chunk_index=found["chunk_index"],
        chunk_id=found["chunk_id"],
        job_id=found["job_id"],
        text=found["text"],
        page_start=found["page_start"],
        page_end=found["page_end"],
        char_start=found["char_start"],
        char_end=found["char_end"],
        token_count=found["token_count"],
        embedding=decode_embedding(found["embedding"]),
        heading=none_if_empty(found["heading"]),
        status=found["status"],
        error_code=none_if_empty(found["error_code"]),
        text_source=found["text_source"] or "text_layer",
        ocr_engine=none_if_empty(found["ocr_engine"]),
        page_verdicts=tuple(found["page_verdicts"].split(",")) if found["page_verdicts"] else (),
        page_reasons=tuple(found["page_reasons"].split(",")) if found["page_reasons"] else (),
        kind=found["kind"] or "text",
        table_part=table_part_from_json(none_if_empty(found["table_part"])),
        task=found["task"] or "embed",
        label_scores=_scores(encoding.read_structure(found["label_scores"])),
        mentions=_mentions(encoding.read_structure(found["mentions"])),
        output=none_if_empty(found["output"]),
    )


def table_part_to_json(part: TablePart | None) -> str | None:
    """A chunk's table part as the JSON text its column holds (its Avro ``ChunkTable`` record); None: none."""
    if part is None:
        return None
    return json.dumps(part.to_record(), ensure_ascii=False, separators=(",", ":"))


def table_part_from_json(text: str | None) -> TablePart | None:
    """The table part of a ``table_part`` column written by :func:`table_part_to_json` (None: none).

    Raises:
        ValueError: not a table part's JSON.
    """
    if text is None:
        return None
    try:
        return TablePart.from_record(json.loads(text))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a table part: {text[:200]!r}") from exc


def api_key_to_columns(row: ApiKeyRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    """An api_keys row's values in ``API_KEYS.columns`` order."""
    return (
        row.key_id,
        row.tenant,
        row.key_hash,
        encoding.timestamp(row.created_at),
        encoding.text(row.name),
        encoding.optional_timestamp(row.revoked_at),
    )


def api_key_from_columns(found: Columns, encoding: ColumnEncoding) -> ApiKeyRow:
    """An api_keys row from its fetched columns."""
    return ApiKeyRow(
        key_id=found["key_id"],
        tenant=found["tenant"],
        key_hash=found["key_hash"],
        created_at=encoding.read_timestamp(found["created_at"]),
        name=none_if_empty(found["name"]),
        revoked_at=encoding.read_optional_timestamp(found["revoked_at"]),
    )
