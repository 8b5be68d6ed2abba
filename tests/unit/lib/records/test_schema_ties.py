"""One schema per record: every copy of a field is derived from it or tied to it by a test.

* the records and the rows that hold their fields are written from the schemas and the row declarations
  (``tools/gen_records.py``, ``docstream.store.layout``; ``test_generated_records.py``);
* a store row's columns come from its dataclass (``RowMapping``), and both backends' migrated tables hold them;
* the export's Parquet columns are the chunk row's fields, typed by the records' Avro fields;
* the API's chunk fields are the chunk row's (less those it hides), its document fields name row fields, or are
  named here as the API's own.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields, make_dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from docstream.avro.schemas import SchemaSet
from docstream.records import copy_fields
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, JobRow
from docstream.store.layout import DOCUMENT_ROW, JOB_ROW, row_docs
from docstream.store.rows import MAPPINGS, RowMapping
from docstream.store.sqlite import SqliteStore
from docstream_ingest.api.schemas import (
    CHUNK_HIDDEN,
    DETAIL_HIDDEN,
    DOCUMENT_HIDDEN,
    JOB_HIDDEN,
    RESULT_PICKS,
    ChunkOut,
    ChunkTableOut,
    DocumentDetail,
    DocumentOut,
    JobSummary,
    TableCellOut,
)
from docstream_ingest.export import (
    _CHUNK_FIELDS,
    CHUNK_SCHEMA,
    DOCUMENT_NOT_EXPORTED,
    DOCUMENT_SCHEMA,
    TASK_CHUNK_SCHEMA,
    TASK_DOCUMENT_SCHEMA,
)

API_OWN: dict[type[Any], set[str]] = {
    ChunkOut: {"table", "text_start", "text_chars"},
    DocumentOut: set(),
    DocumentDetail: {"chunks", "next_chunks_cursor"},
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


def test_the_export_columns_are_row_fields_typed_by_the_avro_fields() -> None:
    for schema in (CHUNK_SCHEMA, TASK_CHUNK_SCHEMA):
        assert {_CHUNK_FIELDS.get(name, name) for name in schema.names} <= _names(ChunkRow)
    assert {_CHUNK_FIELDS[name] for name in TASK_CHUNK_SCHEMA.names} == _names(ChunkRow), "a task export: every one"
    rows = _names(DocumentRow) | _names(DocumentResultRow) | _names(JobDocumentRow)
    for schema in (DOCUMENT_SCHEMA, TASK_DOCUMENT_SCHEMA):
        assert set(schema.names) <= rows
    documents = _names(DocumentRow) | _names(DocumentResultRow)
    assert set(TASK_DOCUMENT_SCHEMA.names) == documents - set(DOCUMENT_NOT_EXPORTED), "a task export: every one"
    # the widths are the records': an Avro long is int64, an int int32, a float float32
    assert CHUNK_SCHEMA.field("char_start").type == pa.int64() and CHUNK_SCHEMA.field("page_start").type == pa.int32()
    assert TASK_CHUNK_SCHEMA.field("label_scores").type == pa.map_(pa.string(), pa.float32())
    assert TASK_DOCUMENT_SCHEMA.field("label_scores").type == pa.map_(pa.string(), pa.float64())


@pytest.mark.parametrize("model", [ChunkOut, DocumentOut, DocumentDetail], ids=lambda m: m.__name__)
def test_the_api_fields_name_row_fields_or_are_the_apis_own(model: Any) -> None:
    rows = _names(ChunkRow) if model is ChunkOut else _names(DocumentRow) | _names(DocumentResultRow) | _names(
        JobDocumentRow)
    assert set(model.model_fields) - rows == API_OWN[model]


def test_a_chunk_of_the_api_shows_every_row_field_it_does_not_hide() -> None:
    shown = set(ChunkOut.model_fields) - API_OWN[ChunkOut]
    assert shown == _names(ChunkRow) - set(CHUNK_HIDDEN) - {"table_part"}  # shown as table
    schema = json.loads((Path(__file__).resolve().parents[4] / "schemas" / "ChunkCreated.avsc").read_text())
    doc = next(f["doc"] for f in schema["fields"] if f["name"] == "page_verdicts")
    assert ChunkOut.model_fields["page_verdicts"].description == doc, "described by its Avro doc"


@pytest.mark.parametrize(("model", "hidden"), [(DocumentOut, DOCUMENT_HIDDEN), (DocumentDetail, DETAIL_HIDDEN)],
                         ids=["DocumentOut", "DocumentDetail"])
def test_a_document_of_the_api_shows_every_row_field_it_does_not_hide_and_its_results_counts(
    model: Any, hidden: dict[str, str]
) -> None:
    shown = set(model.model_fields) - API_OWN[model] - {"model_id"}  # the detail's: its result row's, the job's model
    assert shown == (_names(DocumentRow) - set(hidden)) | set(RESULT_PICKS)
    docs = row_docs(DOCUMENT_ROW, {schema.name: schema.raw for schema in SchemaSet.load()})
    assert model.model_fields["error_code"].description == docs["error_code"], "described as the row declares it"
    counted = model.model_fields["chunk_count"]
    assert not counted.is_required() or counted.annotation == int | None, "null before the result"


def test_a_row_field_of_a_type_no_column_stores_is_refused_at_once() -> None:
    odd = make_dataclass("Odd", [("doc_id", str), ("when", "set[int]")], frozen=True,
                         namespace={"__module__": __name__})
    with pytest.raises(TypeError, match=r"Odd\.when: no column type stores a field of type set\[int\]"):
        RowMapping(odd, "odd", key=("doc_id",))


def test_copy_fields_refuses_a_field_two_sources_have_unless_the_caller_gives_it() -> None:
    left = make_dataclass("Left", [("doc_id", str), ("page_verdicts", "tuple[str, ...]")], frozen=True)
    right = make_dataclass("Right", [("doc_id", str)], frozen=True)
    target = make_dataclass("Target", [("doc_id", str), ("page_verdicts", "list[str]")], frozen=True,
                            namespace={"__module__": __name__})
    with pytest.raises(TypeError, match=r"Target\.doc_id: both Left, Right have it"):
        copy_fields(target, left("a", ("ok",)), right("b"))
    assert copy_fields(target, left("a", ("ok",)), right("b"), doc_id="b") == target("b", ["ok"])


def test_a_job_of_the_api_shows_every_jobs_row_field_it_does_not_hide_described_as_declared() -> None:
    own = {"pending", "elapsed_s", "rate_docs_per_s", "eta_s", "tasks", "priority", "queue"}
    assert set(JobSummary.model_fields) == (_names(JobRow) - set(JOB_HIDDEN)) | own
    docs = row_docs(JOB_ROW, {schema.name: schema.raw for schema in SchemaSet.load()})
    assert JobSummary.model_fields["completed"].description == docs["completed"] == "Documents completed."
    assert JobSummary.model_fields["status"].description == docs["status"]


def test_a_table_part_of_the_api_is_the_avro_records_fields_and_docs() -> None:
    schema = json.loads((Path(__file__).resolve().parents[4] / "schemas" / "ChunkCreated.avsc").read_text())
    table = next(f for f in schema["fields"] if f["name"] == "table")["type"][1]
    cell = next(f for f in table["fields"] if f["name"] == "cells")["type"]["items"]
    for model, record in ((ChunkTableOut, table), (TableCellOut, cell)):
        assert list(model.model_fields) == [f["name"] for f in record["fields"]]
        assert all(model.model_fields[f["name"]].description == f["doc"] for f in record["fields"])
        assert all(model.model_fields[f["name"]].is_required() == ("default" not in f) for f in record["fields"])
