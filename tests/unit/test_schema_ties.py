"""One schema per record: every copy of a field is derived from it or tied to it by a test.

* a store row's columns come from its dataclass (``RowMapping``), and both backends' migrated tables hold them;
* every field of a record is held by its store row, or named here with the reason it is not;
* the export's Parquet columns are typed by the records' Avro fields and hold the rows' fields of their names;
* the API's chunk and document fields name row fields, or are named here as the API's own;
* a field added to a scratch copy of a schema reaches every mapping (docs/architecture.md "Adding a field").
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, fields, make_dataclass
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from docstream.avro.arrow import arrow_schema
from docstream.export import _CHUNK_FIELDS, CHUNK_SCHEMA, DOCUMENT_SCHEMA, TASK_CHUNK_SCHEMA, TASK_DOCUMENT_SCHEMA
from docstream.records import ChunkCreated, ChunkEmbedded, DocumentCompleted, DocumentSubmitted, carry
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow
from docstream.store.rows import CHUNKS, MAPPINGS, ColumnEncoding, RowMapping
from docstream.store.sqlite import SqliteStore
from docstream_ingest.api.schemas import ChunkOut, DocumentOut

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)

AS_SQLITE = ColumnEncoding(
    timestamp=lambda value: value.isoformat(timespec="milliseconds"), read_timestamp=datetime.fromisoformat,
    text=lambda value: value or None, options=json.dumps, read_options=json.loads, counts=json.dumps,
    read_counts=lambda value: json.loads(value) if value else {}, structure=json.dumps,
    read_structure=lambda value: json.loads(value) if value else None,
)
AS_CASSANDRA = ColumnEncoding(
    timestamp=lambda value: value, read_timestamp=lambda value: value, text=lambda value: value or "", options=dict,
    read_options=dict, counts=dict, read_counts=lambda value: dict(value or {}), structure=lambda value: value,
    read_structure=lambda value: value,
)

NOT_HELD: dict[tuple[type[Any], type[Any]], dict[str, str]] = {
    (ChunkCreated, ChunkRow): {
        "chunk_count": "the document's, in its documents row once chunked",
        "content_sha256": "the document's, in its documents row",
        "chunker_settings": "in document_results, once per document",
        "created_at": "a transport time; the row's time is its write",
        "stage_us": "folded into the document's and job's usage",
        "tasks": "the job's, in its options",
        "page_breaks": "used by the entities task to give mentions their pages, then not needed",
        "table": "held as table_part, its typed record (TablePart)",
        "previous_doc_id": "the document's, in its documents row",
        "tenant": "the job's, in its jobs row",
        "priority": "the job's, in its options",
    },
    (ChunkEmbedded, ChunkRow): {
        "chunk_count": "the document's, in its documents row once chunked",
        "embedded_at": "a transport time",
        "error": "the row keeps error_code; the text stays in the record on its topic",
        "chunker_settings": "in document_results, once per document",
        "runtime": "in document_results, once per document",
        "model_us": "folded into the document's and job's usage",
        "device": "folded into the usage's per-device microseconds",
        "stage_us": "folded into the document's and job's usage",
        "tasks": "the job's, in its options",
    },
    (DocumentCompleted, DocumentResultRow): {
        "source_uri": "the document's, in its documents row",
        "filename": "the document's, in its documents row",
        "page_count": "the document's, in its documents row",
        "error_code": "the document's, in its documents and job_documents rows",
        "error": "the document's, in its documents row",
        "model_us": "in job_documents' usage",
        "stage_us": "in job_documents' usage",
        "pages_by_verdict": "the document's, in its documents row",
        "pages_by_source": "the document's, in its documents row",
        "tasks": "the job's, in its options",
    },
    (DocumentSubmitted, DocumentRow): {
        "size_bytes": "checked at intake, not kept",
        "submitted_at": "the row's updated_at",
        "tenant": "the job's, in its jobs row",
        "priority": "the job's, in its options",
        "model_id": "the job's, in its options",
        "chunk_max_tokens": "the job's, in its options",
        "chunk_overlap_tokens": "the job's, in its options",
        "tasks": "the job's, in its options",
    },
}
"""Record fields a store row does not hold, and why: a field added to a record must land here or in the row."""

API_OWN: dict[type[Any], set[str]] = {
    ChunkOut: {"table", "text_start", "text_chars"},
    DocumentOut: set(),
}
"""API response fields named for users, not after a row field."""


def _names(cls: type[Any]) -> set[str]:
    return {f.name for f in fields(cls)}


def _migrated_sqlite_columns(tmp_path: Path) -> dict[str, set[str]]:
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    store.close()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: {row[1] for row in conn.execute(f"PRAGMA table_info({table})")} for table in tables}


def _missing_columns(mappings: list[RowMapping[Any]], found: dict[str, set[str]]) -> list[str]:
    return [f"{m.table.name}.{column}" for m in mappings for column in m.table.columns + m.table.element_columns
            if column not in found.get(m.table.name, set())]


def test_the_sqlite_migrations_give_every_table_a_column_for_every_field_its_mapping_writes(tmp_path: Path) -> None:
    """Cassandra's: ``tests/integration/test_store_contract.py`` reads its system_schema."""
    assert _missing_columns(list(MAPPINGS), _migrated_sqlite_columns(tmp_path)) == []


@pytest.mark.parametrize(("record", "row"), list(NOT_HELD), ids=[f"{r.__name__}-{w.__name__}" for r, w in NOT_HELD])
def test_every_record_field_is_held_by_its_row_or_named_with_the_reason(record: type[Any], row: type[Any]) -> None:
    not_held = NOT_HELD[(record, row)]
    assert set(not_held) <= _names(record), "a field named here that the record no longer has"
    assert not set(not_held) & _names(row), "a field named here that the row holds"
    assert _names(record) - _names(row) - set(not_held) == set(), "a record field neither held nor named here"


def test_the_export_columns_are_row_fields_typed_by_the_avro_fields() -> None:
    for schema in (CHUNK_SCHEMA, TASK_CHUNK_SCHEMA):
        assert {_CHUNK_FIELDS.get(name, name) for name in schema.names} <= _names(ChunkRow)
    rows = _names(DocumentRow) | _names(DocumentResultRow) | _names(JobDocumentRow)
    for schema in (DOCUMENT_SCHEMA, TASK_DOCUMENT_SCHEMA):
        assert set(schema.names) <= rows
    # the widths are the records': an Avro long is int64, an int int32, a float float32
    assert CHUNK_SCHEMA.field("char_start").type == pa.int64() and CHUNK_SCHEMA.field("page_start").type == pa.int32()
    assert TASK_CHUNK_SCHEMA.field("label_scores").type == pa.map_(pa.string(), pa.float32())
    assert TASK_DOCUMENT_SCHEMA.field("label_scores").type == pa.map_(pa.string(), pa.float64())


@pytest.mark.parametrize("model", [ChunkOut, DocumentOut], ids=lambda m: m.__name__)
def test_the_api_fields_name_row_fields_or_are_the_apis_own(model: Any) -> None:
    rows = _names(ChunkRow) if model is ChunkOut else _names(DocumentRow) | _names(DocumentResultRow) | _names(
        JobDocumentRow)
    assert set(model.model_fields) - rows == API_OWN[model]


# -- a field added to a scratch copy of a schema --------------------------------------------------------------

REVIEWER = {"name": "reviewer", "type": ["null", "string"], "default": None, "doc": "Who reviewed the chunk."}


def _scratch_chunk_schema() -> dict[str, Any]:
    schema = json.loads((ROOT / "schemas" / "ChunkCreated.avsc").read_text())
    schema["fields"].append(REVIEWER)
    return schema


def _scratch(cls: type[Any], name: str) -> type[Any]:
    """``cls`` with ``reviewer: str | None = None`` added, as a developer adds it to the record and the row."""
    extra = [("reviewer", "str | None", field(default=None))]
    return make_dataclass(name, [(f.name, f.type, f) for f in fields(cls)] + extra, frozen=True,
                          namespace={"__module__": cls.__module__})


@dataclass(frozen=True)
class _Scratch:
    schema: dict[str, Any]
    record: type[Any]
    row: type[Any]


@pytest.fixture
def scratch() -> _Scratch:
    return _Scratch(_scratch_chunk_schema(), _scratch(ChunkCreated, "ChunkCreated"), _scratch(ChunkRow, "ChunkRow"))


def _chunk(record: type[Any]) -> Any:
    return record(job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="ab" * 32,
                  text="Ünïcode", page_start=1, page_end=1, char_start=0, char_end=7, token_count=3,
                  chunker_settings="s", created_at=T0, page_verdicts=["ok"], reviewer="ada")


def test_a_field_added_to_a_scratch_schema_reaches_the_record_the_row_the_columns_and_the_export(
        scratch: _Scratch, tmp_path: Path) -> None:
    # the record check (tests/unit/test_architecture.py) fails until the record has it ...
    assert {f["name"] for f in scratch.schema["fields"]} - _names(ChunkCreated) == {"reviewer"}
    assert {f["name"] for f in scratch.schema["fields"]} == _names(scratch.record)
    # ... then it travels in the Avro record
    chunk = _chunk(scratch.record)
    buffer = BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(scratch.schema), chunk.__dict__ | {"table": None})
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, fastavro.parse_schema(scratch.schema))["reviewer"] == "ada"
    # the record-to-row check fails until the row has it (or it is named in NOT_HELD) ...
    assert "reviewer" in _names(scratch.record) - _names(ChunkRow) - set(NOT_HELD[(ChunkCreated, ChunkRow)])
    # ... then the row carries it from the record, its table has a column for it, both backends round-trip it
    row = carry(scratch.row, chunk, model_id="m", embedding=[0.5])
    assert row.reviewer == "ada"
    mapping = RowMapping(scratch.row, "chunks", key=CHUNKS.key)
    assert mapping.table.columns == (*CHUNKS.columns, "reviewer")
    for encoding in (AS_SQLITE, AS_CASSANDRA):
        stored = dict(zip(mapping.table.columns, mapping.to_columns(row, encoding), strict=True))
        assert mapping.from_columns(stored, encoding) == row
    # the migrations check names the column no migration adds yet
    assert _missing_columns([mapping], _migrated_sqlite_columns(tmp_path)) == ["chunks.reviewer"]
    # and an export column of its name takes its Avro type
    exported = arrow_schema((*CHUNK_SCHEMA.names, "reviewer"), [scratch.schema,
                                                                json.loads((ROOT / "schemas" /
                                                                            "ChunkEmbedded.avsc").read_text())])
    assert exported.field("reviewer").type == pa.string()


def test_a_row_field_of_a_type_no_column_stores_is_refused_at_once() -> None:
    odd = make_dataclass("Odd", [("doc_id", str), ("when", "set[int]")], frozen=True,
                         namespace={"__module__": __name__})
    with pytest.raises(TypeError, match=r"Odd\.when: no column type stores a field of type set\[int\]"):
        RowMapping(odd, "odd", key=("doc_id",))


def test_carry_refuses_a_field_two_sources_have_unless_the_caller_gives_it() -> None:
    left = make_dataclass("Left", [("doc_id", str), ("page_verdicts", "tuple[str, ...]")], frozen=True)
    right = make_dataclass("Right", [("doc_id", str)], frozen=True)
    target = make_dataclass("Target", [("doc_id", str), ("page_verdicts", "list[str]")], frozen=True,
                            namespace={"__module__": __name__})
    with pytest.raises(TypeError, match=r"Target\.doc_id: both Left, Right have it"):
        carry(target, left("a", ("ok",)), right("b"))
    assert carry(target, left("a", ("ok",)), right("b"), doc_id="b") == target("b", ["ok"])
