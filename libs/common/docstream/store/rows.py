"""One mapping between the store's rows and its tables' columns, shared by every backend. Pure.

Each table's :class:`RowMapping` is derived from its row's dataclass (``docstream.store.base``): a column per
field, in field order, stored by the field's type (:class:`ColumnType`, stated once per type in ``_TYPES``).
``to_columns`` turns a row into its column values, in the table's column order (what a prepared
statement or a ``?`` placeholder list binds); ``from_columns`` builds the row back
from a fetched row read by column name (a ``dict`` from the Cassandra driver's
``dict_factory``, a ``sqlite3.Row``). What the backends store differently — timestamps,
the options map, absent optional text — is a :class:`ColumnEncoding` each backend
supplies; everything else is written and read the same way (docs/storage.md):

* optional text reads back as ``None`` whether stored as ``""`` or null;
* embeddings are little-endian float32 blobs (:mod:`docstream.store.codec`);
* an optional timestamp is null when absent, on every backend;
* a usage (jobs, job_documents) is six columns, written as zeros and empty maps when there is
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
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

from docstream.records.base import compiled
from docstream.store.base import (
    FLOAT32,
    ApiKeyRow,
    ChunkRow,
    DocState,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    QueuedJobRow,
    SourceRow,
    TaskTally,
)
from docstream.store.codec import decode_embedding, encode_embedding, float32_values
from docstream.store.layout import TEXTS
from docstream.tables import TablePart
from docstream.tasks.base import EntitySummary, Mention
from docstream.tenants.usage import Usage

__all__ = [
    "API_KEYS",
    "API_KEY_ROWS",
    "CHUNKS",
    "CHUNK_ROWS",
    "DOCUMENTS",
    "DOCUMENT_RESULTS",
    "DOCUMENT_RESULT_ROWS",
    "DOCUMENT_ROWS",
    "JOBS",
    "JOB_DOCUMENTS",
    "JOB_DOCUMENT_ROWS",
    "JOB_ROWS",
    "LANE_QUEUE",
    "MAPPINGS",
    "QUEUE_ROWS",
    "SOURCES",
    "SOURCE_ROWS",
    "USAGE_COLUMNS",
    "ColumnEncoding",
    "ColumnType",
    "Columns",
    "RowMapping",
    "Table",
    "column_type",
    "table_part_from_json",
    "table_part_to_json",
    "task_tally_from_json",
    "task_tally_to_json",
    "usage_from_columns",
    "usage_to_columns",
]

R = TypeVar("R")

USAGE_COLUMNS = ("pages", "chunks", "tokens", "model_us", "stage_us", "chat_tokens")
"""The columns of a usage, in binding order, in jobs and job_documents."""


@dataclass(frozen=True, slots=True)
class Table:
    """A table's name, its columns in the order ``to_columns`` gives their values, and its key.

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

    def key_of(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """The key's values (``key`` order) of a row's ``values`` in ``columns`` order."""
        return tuple(values[self.columns.index(name)] for name in self.key)


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
    return (usage.pages, usage.chunks, usage.tokens, encoding.counts(usage.model_us), encoding.counts(usage.stage_us),
            encoding.counts(usage.chat_tokens))


def usage_from_columns(found: Columns, encoding: ColumnEncoding) -> Usage | None:
    """The usage of a fetched row, or None when its columns hold nothing (null or zero)."""
    usage = Usage(
        pages=found["pages"] or 0,
        chunks=found["chunks"] or 0,
        tokens=found["tokens"] or 0,
        model_us=encoding.read_counts(found["model_us"]),
        stage_us=encoding.read_counts(found["stage_us"]),
        chat_tokens=encoding.read_counts(found["chat_tokens"]),
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
    # a Cassandra map<text, float>: both backends keep the float32 values
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


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(text) for text in value) if isinstance(value, list) else ()


def _mentions(value: Any) -> tuple[Mention, ...]:
    return tuple(Mention(str(v[0]), str(v[1]), int(v[2]), int(v[3]), int(v[4]), float(v[5])) for v in value or ())


def _entity_values(entities: Iterable[EntitySummary]) -> list[tuple[Any, ...]]:
    return [(e.label, e.text, e.count, list(e.pages)) for e in entities]


def _entities(value: Any) -> tuple[EntitySummary, ...]:
    return tuple(EntitySummary(str(v[0]), str(v[1]), int(v[2]), tuple(int(p) for p in v[3] or ()))
                 for v in value or ())


def _ints(value: Sequence[Any] | None) -> tuple[int, ...]:
    return tuple(int(x) for x in value or ())


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


# -- column types: how a value of each field type is stored, stated once per type -------------------------


@dataclass(frozen=True, slots=True)
class ColumnType:
    """How the values of one field type are stored, on every backend.

    Attributes:
        name: what the type is called (in errors and docs/architecture.md "Adding a field").
        write: a field's value as its column binds it, through the backend's encoding.
        read: a fetched non-null column value back as the field's value.
        reads_null: ``read`` also reads a null, for a field without a default (an embedding: none); else a
            null reads as None.
    """

    name: str
    write: Callable[[Any, ColumnEncoding], Any]
    read: Callable[[Any, ColumnEncoding], Any]
    reads_null: bool = False


def _as_is(value: Any, encoding: ColumnEncoding) -> Any:
    return value


_PLAIN = ColumnType("plain", _as_is, _as_is)
_FLAG = ColumnType("flag", _as_is, lambda value, encoding: bool(value))
_TEXT = ColumnType("optional text", lambda value, encoding: encoding.text(value), lambda value, encoding: value or None)
_TIMESTAMP = ColumnType("timestamp", lambda value, encoding: encoding.timestamp(value),
                        lambda value, encoding: encoding.read_timestamp(value))
_OPTIONAL_TIMESTAMP = ColumnType("optional timestamp", lambda value, encoding: encoding.optional_timestamp(value),
                                 lambda value, encoding: encoding.read_timestamp(value))
_OPTIONS = ColumnType("options map", lambda value, encoding: encoding.options(value),
                      lambda value, encoding: encoding.read_options(value))
_COUNTS = ColumnType("count map", lambda value, encoding: encoding.counts(value),
                     lambda value, encoding: encoding.read_counts(value))
_WORDS = ColumnType("comma-separated words", lambda value, encoding: ",".join(value),
                    lambda value, encoding: tuple(value.split(",")) if value else ())
_TEXTS = ColumnType("list of texts", lambda value, encoding: encoding.structure(list(value)),
                    lambda value, encoding: _texts(encoding.read_structure(value)))
_EMBEDDING = ColumnType("float32 blob", lambda value, encoding: encode_embedding(value),
                        lambda value, encoding: decode_embedding(value), reads_null=True)
_SCORES = ColumnType("score map", lambda value, encoding: encoding.structure(dict(value)),
                     lambda value, encoding: _scores(encoding.read_structure(value)))
_FLOAT32_SCORES = ColumnType("float32 score map", lambda value, encoding: encoding.structure(_float32_scores(value)),
                             lambda value, encoding: _scores(encoding.read_structure(value)))
_INTS = ColumnType("int list", lambda value, encoding: encoding.structure(list(value)),
                   lambda value, encoding: _ints(encoding.read_structure(value)))
_MENTIONS = ColumnType("entity_mention list", lambda value, encoding: encoding.structure(_mention_values(value)),
                       lambda value, encoding: _mentions(encoding.read_structure(value)))
_ENTITIES = ColumnType("entity_summary list", lambda value, encoding: encoding.structure(_entity_values(value)),
                       lambda value, encoding: _entities(encoding.read_structure(value)))
_TABLE_PART = ColumnType("table part JSON", lambda value, encoding: encoding.text(table_part_to_json(value)),
                         lambda value, encoding: table_part_from_json(value or None))
_TALLIES = ColumnType("task tally map", _as_is, lambda value, encoding: _tasks(encoding.read_structure(value)))

_TYPES: dict[Any, ColumnType] = {
    str: _PLAIN,
    int: _PLAIN,
    bool: _FLAG,
    int | None: _PLAIN,
    str | None: _TEXT,
    datetime: _TIMESTAMP,
    datetime | None: _OPTIONAL_TIMESTAMP,
    dict[str, str]: _OPTIONS,
    dict[str, int]: _COUNTS,
    dict[str, float]: _SCORES,
    Annotated[dict[str, float], FLOAT32]: _FLOAT32_SCORES,
    Sequence[float]: _EMBEDDING,
    tuple[str, ...]: _WORDS,
    Annotated[tuple[str, ...], TEXTS]: _TEXTS,
    tuple[int, ...]: _INTS,
    tuple[Mention, ...]: _MENTIONS,
    tuple[EntitySummary, ...]: _ENTITIES,
    TablePart | None: _TABLE_PART,
    dict[str, TaskTally]: _TALLIES,
}
"""The column type of each field type a row may have: a field of any other type is refused at import."""


def _normal(hint: Any) -> Any:
    """A field's type as ``_TYPES`` names it: a ``Literal`` of strings is ``str``; ``Optional[X]`` is ``X | None``."""
    origin = get_origin(hint)
    if origin is Literal:
        return str
    if origin in (Union, types.UnionType):
        members = tuple(_normal(arg) for arg in get_args(hint))
        if len(members) == 2 and type(None) in members:
            inner = next(m for m in members if m is not type(None))
            return inner | None
    return hint


def column_type(hint: Any) -> ColumnType:
    """The column type of a row field's type.

    Raises:
        TypeError: no column type stores it (add one to ``_TYPES``: docs/architecture.md "Adding a field").
    """
    try:
        return _TYPES[_normal(hint)]
    except (KeyError, TypeError):
        raise TypeError(f"no column type stores a field of type {hint!r}") from None


_USAGE = "usage"
"""A ``Usage | None`` field: six columns (``USAGE_COLUMNS``), not one."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: ColumnType
    default: Callable[[], Any] | None
    """What a null reads as, made anew for each row (a default map is never shared between rows); None: the
    field has no default."""

    def read(self, raw: Any, encoding: ColumnEncoding) -> Any:
        if raw is None:
            # a row written before the column existed; a field without a default reads null as its type does
            if self.default is not None:
                return self.default()
            return self.kind.read(None, encoding) if self.kind.reads_null else None
        return self.kind.read(raw, encoding)


def _null_default(f: Field[Any], reads_as: Mapping[str, Any]) -> Callable[[], Any] | None:
    """What a null column of field ``f`` reads as: its default, its default factory, or ``reads_as[name]``."""
    if f.default is not MISSING:
        value = f.default
        return lambda: value
    if f.default_factory is not MISSING:
        return f.default_factory
    if f.name in reads_as:
        given = reads_as[f.name]
        return lambda: given
    return None


class RowMapping(Generic[R]):
    """A row type and its table: the columns, in the row's field order, each stored by its field's type.

    Derived from the row's dataclass fields and their types (``column_type``), so a field added to a row is a
    column of its table without another line here; the migrations add the column (docs/architecture.md
    "Adding a field"; ``tests/unit/lib/records/test_schema_ties.py`` checks both backends' tables hold every column).

    * a field named ``usage`` (``Usage | None``) is the six ``USAGE_COLUMNS``;
    * a field of a name in ``element_columns`` is read with the row but never written by the row upsert;
    * a null column (a row written before its migration) reads as the field's default, or as
      ``null_reads_as[name]`` for a field without one; an optional field reads null as None.

    Args:
        row_type: the row's dataclass.
        name: the table's name.
        key: the primary key's columns (partition key first).
        element_columns: fields written element by element by a method of their own.
        null_reads_as: what a null column reads as, for fields without a default.

    Raises:
        TypeError: a field's type has no column type.
    """

    def __init__(self, row_type: type[R], name: str, *, key: tuple[str, ...], element_columns: tuple[str, ...] = (),
                 null_reads_as: Mapping[str, Any] | None = None) -> None:
        hints = get_type_hints(row_type, include_extras=True)
        self.row_type = row_type
        self._fields: list[_Field] = []
        columns: list[str] = []
        reads_as = dict(null_reads_as or {})
        for f in fields(row_type):  # type: ignore[arg-type]
            if f.name == _USAGE:
                columns.extend(USAGE_COLUMNS)
                continue
            try:
                kind = column_type(hints[f.name])
            except TypeError as exc:
                raise TypeError(f"{row_type.__name__}.{f.name}: {exc}") from None
            self._fields.append(_Field(f.name, kind, _null_default(f, reads_as)))
            if f.name not in element_columns:
                columns.append(f.name)
        self._written = [f for f in self._fields if f.name not in element_columns]
        self._has_usage = USAGE_COLUMNS[0] in columns
        self._usage_at = columns.index(USAGE_COLUMNS[0]) if self._has_usage else 0
        self.table = Table(name, tuple(columns), key, element_columns)
        self._writers: dict[frozenset[str], Callable[[Any, ColumnEncoding, Any], tuple[Any, ...]]] = {}

    def to_columns(self, row: R, encoding: ColumnEncoding, *,
                   encoded: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        """A row's values in ``table.columns`` order.

        ``encoded``: columns whose stored values the caller already made (a chunk's embedding, encoded once
        for a backend that also binds the vector elsewhere).
        """
        given = frozenset(encoded) if encoded else frozenset()
        write = self._writers.get(given)
        if write is None:
            write = self._writers[given] = self._writer(given)
        return write(row, encoding, encoded)

    def _writer(self, given: frozenset[str]) -> Callable[[Any, ColumnEncoding, Any], tuple[Any, ...]]:
        """``to_columns`` for the columns ``given`` as encoded, compiled once (as ``dataclasses`` writes
        ``__init__``): a plain field is read as it is, any other through its column type, with no loop."""
        names: dict[str, Any] = {"usage_to_columns": usage_to_columns}
        values = []
        for f in self._written:
            if f.name in given:
                values.append(f"encoded[{f.name!r}]")
            elif f.kind is _PLAIN:
                values.append(f"row.{f.name}")
            else:
                names[f"write_{f.name}"] = f.kind.write
                values.append(f"write_{f.name}(row.{f.name}, encoding)")
        if self._has_usage:
            values.insert(self._usage_at, f"*usage_to_columns(row.{_USAGE}, encoding)")
        writer: Callable[[Any, ColumnEncoding, Any], tuple[Any, ...]] = compiled(
            "write", "row, encoding, encoded", f"({', '.join(values)},)", names)
        return writer

    def from_columns(self, found: Columns, encoding: ColumnEncoding) -> R:
        """A row from its fetched columns (the element columns included: ``table.select_list``).

        Raises:
            ValueError: a stored value is not what its type writes (an embedding blob, a table part, a tally).
        """
        values = {f.name: f.read(found[f.name], encoding) for f in self._fields}
        if self._has_usage:
            values[_USAGE] = usage_from_columns(found, encoding)
        return self.row_type(**values)


JOB_ROWS = RowMapping(JobRow, "jobs", key=("job_id",))
JOB_DOCUMENT_ROWS = RowMapping(JobDocumentRow, "job_documents", key=("job_id", "doc_id"), element_columns=("tasks",),
                               null_reads_as={"status": "submitted"})
"""A row ``upsert_job_document_task`` created holds no status: it reads as ``submitted``."""
DOCUMENT_ROWS = RowMapping(DocumentRow, "documents", key=("doc_id",), element_columns=("generation", "deleted_at"))
DOCUMENT_RESULT_ROWS = RowMapping(DocumentResultRow, "document_results", key=("doc_id", "model_id"))
CHUNK_ROWS = RowMapping(ChunkRow, "chunks", key=("doc_id", "model_id", "chunk_index"))
API_KEY_ROWS = RowMapping(ApiKeyRow, "api_keys", key=("key_id",))
SOURCE_ROWS = RowMapping(SourceRow, "sources", key=("tenant", "source_key"))
QUEUE_ROWS = RowMapping(QueuedJobRow, "lane_queue", key=("lane", "job_id"))

MAPPINGS: tuple[RowMapping[Any], ...] = (JOB_ROWS, JOB_DOCUMENT_ROWS, DOCUMENT_ROWS, DOCUMENT_RESULT_ROWS, CHUNK_ROWS,
                                         API_KEY_ROWS, SOURCE_ROWS, QUEUE_ROWS)
"""Every table's mapping (the schema tests walk them)."""

JOBS = JOB_ROWS.table
JOB_DOCUMENTS = JOB_DOCUMENT_ROWS.table
DOCUMENTS = DOCUMENT_ROWS.table
DOCUMENT_RESULTS = DOCUMENT_RESULT_ROWS.table
CHUNKS = CHUNK_ROWS.table
API_KEYS = API_KEY_ROWS.table
SOURCES = SOURCE_ROWS.table
LANE_QUEUE = QUEUE_ROWS.table

