"""The one row mapping both stores share: columns by name, backend encodings injected."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from docstream.store import rows
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    SourceRow,
    TaskTally,
)
from docstream.store.codec import encode_embedding, float32_values
from docstream.store.rows import (
    CHUNKS,
    DOCUMENT_RESULTS,
    DOCUMENTS,
    JOB_DOCUMENTS,
    USAGE_COLUMNS,
    ColumnEncoding,
    Columns,
    Table,
)
from docstream.tables import TableCell, TablePart
from docstream.tasks.base import EntitySummary, Mention
from docstream.tenants.usage import Usage

T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 13, 0, 0, 456000, tzinfo=UTC)

# the two ways the backends store what they store differently (cassandra.py, sqlite.py)
AS_CASSANDRA = ColumnEncoding(
    timestamp=lambda value: value,
    read_timestamp=lambda value: value.replace(tzinfo=UTC),
    text=lambda value: value or "",
    options=dict,
    read_options=lambda value: dict(value or {}),
    counts=dict,
    read_counts=lambda value: dict(value or {}),
    structure=lambda value: value,
    read_structure=lambda value: value,
)
AS_SQLITE = ColumnEncoding(
    timestamp=lambda value: value.isoformat(timespec="milliseconds"),
    read_timestamp=datetime.fromisoformat,
    text=lambda value: value or None,
    options=lambda value: json.dumps(dict(sorted(value.items()))),
    read_options=lambda value: dict(json.loads(value)),
    counts=lambda value: json.dumps(dict(sorted(value.items()))),
    read_counts=lambda value: dict(json.loads(value)) if value else {},
    structure=lambda value: json.dumps(value, sort_keys=True),
    read_structure=lambda value: json.loads(value) if value else None,
)
ENCODINGS = pytest.mark.parametrize("encoding", [AS_CASSANDRA, AS_SQLITE], ids=["cassandra", "sqlite"])

JOB = JobRow(
    job_id="job-1", tenant="acme", created_at=T0, status="running", document_count=3,
    options={"priority": "high", "chunker.max_tokens": "256"}, webhook_url="https://example.invalid/hook",
    completed=1, partial=2, failed=4, updated_at=T1,
    usage=Usage(pages=12, chunks=30, tokens=7000, model_us={"cpu": 2_500_000, "cuda:0": 10},
                stage_us={"chunker": 400_000, "inference": 2_600_000}, chat_tokens={"prompt": 90, "completion": 7}),
)
JOB_DOCUMENT = JobDocumentRow(
    job_id="job-1", doc_id="doc-1", status="failed", updated_at=T0, filename="a.pdf", error_code="encrypted",
    usage=Usage(stage_us={"chunker": 9_000}),
)
TASKS = {"entities": TaskTally("partial", Usage(chunks=3, model_us={"cpu": 70})), "embed": TaskTally("completed")}
DOCUMENT = DocumentRow(
    doc_id="doc-1", job_id="job-1", source_uri="file:///a.pdf", content_sha256="ab" * 32, status="failed",
    updated_at=T0, media_type="application/pdf", filename="a.pdf", page_count=12, error_code="corrupt",
    error="xref table broken", pages_by_verdict={"ok": 10, "no_text_layer": 2},
    pages_by_source={"ocr": 2, "text_layer": 10}, source_key="file:///in/a.pdf", previous_doc_id="doc-0",
)
RESULT = DocumentResultRow(
    doc_id="doc-1", model_id="model@1", job_id="job-1", status="partial", chunk_count=7, failed_chunks=1,
    token_count=1234, embedding=float32_values([0.1, -0.2, 0.3]), chunker_settings="max_tokens=256",
    completed_at=T0, content_sha256="cd" * 32, runtime="torch/cpu/fp32/2t",
)
MENTIONS = (Mention("Ada Lovelace", "PERSON", 10, 22, 1, float32_values([0.9])[0]),
            Mention("London", "GPE", 300, 306, 2, 1.0))
ENTITY_RESULT = replace(
    RESULT, task="entities", embedding=[], label_scores={"a": 0.25, "b": 0.75}, top_label="b", top_chunks=(4, 1),
    mentions=MENTIONS, mentions_truncated=True, output='{"risk": 0.5}',
    entities=(EntitySummary("PERSON", "ada lovelace", 2, (1, 3)), EntitySummary("GPE", "london", 1, (2,))),
)
CHUNK = ChunkRow(
    doc_id="doc-1", model_id="model@1", chunk_index=5, chunk_id="chunk-5", job_id="job-1", text="Ünïcode ✓",
    page_start=2, page_end=3, char_start=100, char_end=199, token_count=42, embedding=float32_values([0.5, 1 / 3]),
    heading="Introduction", status="failed", error_code="model_error", text_source="ocr", ocr_engine="tesseract",
    page_verdicts=("no_text_layer", "ok"),
    page_reasons=("ocr_reads_better", "text_layer"),
    page_furniture=("Chapter 2: Fields, rows and columns 3", "17"),
)
TABLE_CHUNK = replace(
    CHUNK, kind="table", text="| Name | Город |\n|---|---|\n| a | b |",
    table_part=TablePart(
        page=2, bbox=(54.0, 128.25, 309.5, 236.0), caption="Table 1: Ünïcode", header=("Name", "Город"), rows=3,
        columns=2, row_start=1, row_end=3, part=0, parts=2,
        cells=(TableCell(0, 0, text="Name"), TableCell(0, 1, text="Город"), TableCell(1, 0, 2, 1, "a"),
               TableCell(1, 1, text="b"), TableCell(2, 1, text="")),
    ),
)
TASK_CHUNK = replace(CHUNK, task="classify", embedding=[], label_scores={"a": float32_values([0.1])[0], "b": 0.5},
                     mentions=MENTIONS, output='[1, 2]')
API_KEY = ApiKeyRow(key_id="key-1", tenant="acme", key_hash="h" * 64, created_at=T0, name="ci", revoked_at=T1)
SOURCE = SourceRow(tenant="acme", source_key="s3://bucket/a.pdf", doc_id="doc-1", content_sha256="ab" * 32,
                   job_id="job-1", updated_at=T0)

Mapper = tuple[Table, Any, Callable[[Any, ColumnEncoding], tuple[Any, ...]], Callable[[Columns, ColumnEncoding], Any]]


def _chunk_to_columns(row: ChunkRow, encoding: ColumnEncoding) -> tuple[Any, ...]:
    return rows.CHUNK_ROWS.to_columns(row, encoding, encoded={"embedding": encode_embedding(row.embedding)})


def _mapper(mapping: rows.RowMapping[Any], row: Any) -> Mapper:
    return (mapping.table, row, mapping.to_columns, mapping.from_columns)


MAPPERS: list[Mapper] = [
    _mapper(rows.JOB_ROWS, JOB),
    _mapper(rows.JOB_DOCUMENT_ROWS, JOB_DOCUMENT),
    _mapper(rows.DOCUMENT_ROWS, DOCUMENT),
    _mapper(rows.DOCUMENT_RESULT_ROWS, RESULT),
    (rows.CHUNKS, CHUNK, _chunk_to_columns, rows.CHUNK_ROWS.from_columns),
    _mapper(rows.API_KEY_ROWS, API_KEY),
    _mapper(rows.SOURCE_ROWS, SOURCE),
]
BY_TABLE = pytest.mark.parametrize("mapper", MAPPERS, ids=[m[0].name for m in MAPPERS])

# optional fields: None on write, None on read (stored "" by Cassandra, NULL by SQLite)
OPTIONAL_TEXT = {
    "jobs": ["webhook_url"],
    "job_documents": ["filename", "error_code"],
    "documents": ["media_type", "filename", "error_code", "error", "source_key", "previous_doc_id"],
    "document_results": ["content_sha256", "runtime", "top_label", "output"],
    "chunks": ["heading", "error_code", "output"],
    "api_keys": ["name"],
    "sources": [],
}
OPTIONAL_TIMESTAMPS = {"jobs": ["updated_at"], "api_keys": ["revoked_at"]}


def _stored(mapper: Mapper, row: Any, encoding: ColumnEncoding) -> dict[str, Any]:
    table, _, to_columns, _ = mapper
    # element columns (job_documents.tasks) are not written by the row upsert: a new row holds none
    return dict(zip(table.columns, to_columns(row, encoding), strict=True)) | dict.fromkeys(table.element_columns)


@BY_TABLE
def test_a_table_has_a_column_per_field_in_field_order(mapper: Mapper) -> None:
    table, row, _, _ = mapper
    # a usage is five columns
    names = [name for f in fields(row) for name in (USAGE_COLUMNS if f.name == "usage" else (f.name,))]
    assert table.columns + table.element_columns == tuple(names)
    assert set(table.key) <= set(table.columns)
    assert table.column_list == ", ".join(table.columns)
    assert table.select_list == ", ".join(table.columns + table.element_columns)


@BY_TABLE
@ENCODINGS
def test_values_land_in_their_named_columns_and_read_back(mapper: Mapper, encoding: ColumnEncoding) -> None:
    _, row, _, from_columns = mapper
    stored = _stored(mapper, row, encoding)
    for name, value in stored.items():
        # a usage's columns hold the fields of the row's usage (jobs, job_documents)
        expected = getattr(row.usage, name) if name in USAGE_COLUMNS else getattr(row, name)
        if name == "embedding":
            assert value == encode_embedding(expected)
        elif isinstance(expected, datetime):
            assert value == encoding.timestamp(expected)
        elif name == "options":
            assert value == encoding.options(expected)
        elif name in ("model_us", "stage_us", "chat_tokens", "pages_by_verdict", "pages_by_source"):
            assert value == encoding.counts(expected)
        elif name in ("page_verdicts", "page_reasons"):
            assert value == ",".join(expected)
        elif name == "page_furniture":  # free texts, commas and all: a JSON list
            assert value == encoding.structure(list(expected))
        elif name in ("label_scores", "top_chunks", "mentions", "entities", "tasks"):
            continue  # a task's structures: their round trip is below
        elif name in ("top_label", "output"):
            assert value == encoding.text(expected)
        elif name == "table_part":
            assert value == encoding.text(rows.table_part_to_json(expected))
        else:
            assert value == expected, name
    assert from_columns(stored, encoding) == row


@BY_TABLE
@ENCODINGS
def test_absent_optional_values_round_trip_as_none(mapper: Mapper, encoding: ColumnEncoding) -> None:
    table, row, _, from_columns = mapper
    absent = {name: None for name in OPTIONAL_TEXT[table.name] + OPTIONAL_TIMESTAMPS.get(table.name, [])}
    row = replace(row, **absent)
    stored = _stored(mapper, row, encoding)
    for name in OPTIONAL_TEXT[table.name]:
        assert stored[name] == encoding.text(None)
    for name in OPTIONAL_TIMESTAMPS.get(table.name, []):
        assert stored[name] is None
    assert from_columns(stored, encoding) == row


@BY_TABLE
@pytest.mark.parametrize("empty", ["", None])
def test_optional_text_stored_empty_or_null_reads_as_none(mapper: Mapper, empty: str | None) -> None:
    table, row, _, from_columns = mapper
    stored = _stored(mapper, row, AS_SQLITE) | {name: empty for name in OPTIONAL_TEXT[table.name]}
    found = from_columns(stored, AS_SQLITE)
    assert all(getattr(found, name) is None for name in OPTIONAL_TEXT[table.name])


def test_job_options_and_timestamps_go_through_the_backend_encoding() -> None:
    stored = _stored(MAPPERS[0], JOB, AS_SQLITE)
    assert stored["options"] == '{"chunker.max_tokens": "256", "priority": "high"}'
    assert stored["created_at"] == "2024-05-01T12:00:00.123+00:00"
    assert stored["updated_at"] == "2024-05-01T13:00:00.456+00:00"
    as_cassandra = _stored(MAPPERS[0], replace(JOB, options={}), AS_CASSANDRA)
    assert as_cassandra["options"] == {}
    naive = as_cassandra | {"created_at": datetime(2024, 5, 1, 12, 0, 0, 123000), "options": None}
    found = rows.JOB_ROWS.from_columns(naive, AS_CASSANDRA)
    assert found.created_at == T0
    assert found.options == {}


@pytest.mark.parametrize("encoding", [AS_CASSANDRA, AS_SQLITE], ids=["cassandra", "sqlite"])
@pytest.mark.parametrize("mapper", MAPPERS[:2], ids=["jobs", "job_documents"])
def test_no_usage_is_written_as_zeros_and_reads_back_as_none(mapper: Mapper, encoding: ColumnEncoding) -> None:
    """Zeros and empty maps, never nulls (no tombstones in Cassandra); rows written before the usage columns
    existed (nulls) read back as None too."""
    _, row, _, from_columns = mapper
    stored = _stored(mapper, replace(row, usage=None), encoding)
    assert [stored[name] for name in USAGE_COLUMNS] == [0, 0, 0, *[encoding.counts({})] * 3]
    assert from_columns(stored, encoding).usage is None
    assert from_columns(stored | dict.fromkeys(USAGE_COLUMNS), encoding).usage is None


def test_a_bad_embedding_blob_is_refused() -> None:
    stored = _stored(MAPPERS[4], CHUNK, AS_SQLITE) | {"embedding": b"\x00\x01\x02"}
    with pytest.raises(ValueError, match="float32"):
        rows.CHUNK_ROWS.from_columns(stored, AS_SQLITE)


def test_sqlite_rows_are_read_by_name_whatever_the_select_order() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        conn.row_factory = sqlite3.Row
        columns = list(reversed(rows.CHUNKS.columns))
        conn.execute(f"CREATE TABLE chunks ({', '.join(columns)})")
        values = _stored(MAPPERS[4], CHUNK, AS_SQLITE)
        conn.execute(f"INSERT INTO chunks ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                     [values[name] for name in columns])
        found = conn.execute("SELECT rowid, * FROM chunks").fetchone()
    finally:
        conn.close()
    assert rows.CHUNK_ROWS.from_columns(found, AS_SQLITE) == CHUNK


def test_columns_protocol_takes_plain_mappings() -> None:
    found: Mapping[str, Any] = _stored(MAPPERS[5], API_KEY, AS_CASSANDRA)
    assert rows.API_KEY_ROWS.from_columns(found, AS_CASSANDRA) == API_KEY


@ENCODINGS
def test_a_table_chunk_round_trips_with_its_cells(encoding: ColumnEncoding) -> None:
    stored = _stored(MAPPERS[4], TABLE_CHUNK, encoding)
    assert stored["kind"] == "table"
    assert json.loads(stored["table_part"])["cells"][2] == {"row": 1, "col": 0, "row_span": 2, "col_span": 1,
                                                            "text": "a"}
    assert "Город" in stored["table_part"]  # JSON kept readable, not \u-escaped
    assert rows.CHUNK_ROWS.from_columns(stored, encoding) == TABLE_CHUNK


def test_a_text_chunk_stores_no_table_and_rows_before_009_read_as_text() -> None:
    """Migration 009 adds kind and table_part: nulls in older rows read as a text chunk without a table."""
    stored = _stored(MAPPERS[4], CHUNK, AS_SQLITE)
    assert stored["kind"] == "text" and stored["table_part"] is None
    stored.update(kind=None, table_part=None)
    assert rows.CHUNK_ROWS.from_columns(stored, AS_SQLITE) == CHUNK
    as_cassandra = _stored(MAPPERS[4], CHUNK, AS_CASSANDRA)
    assert as_cassandra["table_part"] == ""
    assert rows.CHUNK_ROWS.from_columns(as_cassandra, AS_CASSANDRA) == CHUNK


def test_a_table_part_that_is_not_its_json_is_refused() -> None:
    stored = _stored(MAPPERS[4], CHUNK, AS_SQLITE) | {"table_part": '{"page": 1}'}
    with pytest.raises(ValueError, match="not a table part"):
        rows.CHUNK_ROWS.from_columns(stored, AS_SQLITE)


def test_rows_written_before_provenance_read_as_text_layer() -> None:
    """Migration 006 adds the provenance columns: nulls in older rows read as text_layer, no engine, no counts."""
    stored = dict(zip(CHUNKS.columns, _chunk_to_columns(CHUNK, AS_SQLITE), strict=True))
    stored.update(text_source=None, ocr_engine=None, page_verdicts=None, page_reasons=None)
    assert rows.CHUNK_ROWS.from_columns(stored, AS_SQLITE) == replace(CHUNK, text_source="text_layer", ocr_engine=None,
                                                      page_verdicts=(), page_reasons=())
    found = dict(zip(DOCUMENTS.columns, rows.DOCUMENT_ROWS.to_columns(DOCUMENT, AS_SQLITE), strict=True))
    found.update(pages_by_verdict=None, pages_by_source=None, generation=None, deleted_at=None)
    assert rows.DOCUMENT_ROWS.from_columns(found, AS_SQLITE) == replace(DOCUMENT, pages_by_verdict={},
                                                                        pages_by_source={})


TASK_ROWS = [(MAPPERS[3], ENTITY_RESULT), (MAPPERS[4], TASK_CHUNK)]


@pytest.mark.parametrize(("mapper", "row"), TASK_ROWS, ids=["document_results", "chunks"])
@ENCODINGS
def test_task_results_round_trip(mapper: Mapper, row: Any, encoding: ColumnEncoding) -> None:
    assert mapper[3](_stored(mapper, row, encoding), encoding) == row


def test_task_structures_are_stored_in_the_udts_field_order() -> None:
    """Cassandra binds tuples in entity_mention's / entity_summary's field order; SQLite keeps the same as JSON."""
    as_cassandra = _stored(MAPPERS[3], ENTITY_RESULT, AS_CASSANDRA)
    assert as_cassandra["mentions"][0] == ("Ada Lovelace", "PERSON", 10, 22, 1, MENTIONS[0].score)
    assert as_cassandra["entities"][0] == ("PERSON", "ada lovelace", 2, [1, 3])
    assert (as_cassandra["task"], as_cassandra["top_chunks"], as_cassandra["mentions_truncated"]) == (
        "entities", [4, 1], True)
    as_sqlite = _stored(MAPPERS[3], ENTITY_RESULT, AS_SQLITE)
    assert json.loads(as_sqlite["mentions"])[1] == ["London", "GPE", 300, 306, 2, 1.0]
    assert json.loads(as_sqlite["label_scores"]) == {"a": 0.25, "b": 0.75}


@ENCODINGS
def test_chunk_label_and_mention_scores_are_float32_and_cut_is_not_stored(encoding: ColumnEncoding) -> None:
    row = replace(TASK_CHUNK, label_scores={"a": 0.1}, mentions=(replace(MENTIONS[1], score=0.3, cut=True),))
    found = rows.CHUNK_ROWS.from_columns(_stored(MAPPERS[4], row, encoding), encoding)
    assert found.label_scores == {"a": float32_values([0.1])[0]}
    assert found.mentions == (replace(MENTIONS[1], score=float32_values([0.3])[0], cut=False),)


@ENCODINGS
def test_rows_written_before_task_results_read_as_embed(encoding: ColumnEncoding) -> None:
    """Migration 007 adds the task columns: nulls in older rows read as task embed and empty values."""
    result = _stored(MAPPERS[3], RESULT, encoding) | dict.fromkeys(DOCUMENT_RESULTS.columns[12:])
    assert rows.DOCUMENT_RESULT_ROWS.from_columns(result, encoding) == RESULT
    chunk = _stored(MAPPERS[4], CHUNK, encoding) | dict.fromkeys(("task", "label_scores", "mentions", "output"))
    assert rows.CHUNK_ROWS.from_columns(chunk, encoding) == CHUNK
    assert rows.JOB_DOCUMENT_ROWS.from_columns(_stored(MAPPERS[1], JOB_DOCUMENT, encoding), encoding).tasks == {}


@ENCODINGS
def test_a_job_documents_tasks_map_reads_as_tallies(encoding: ColumnEncoding) -> None:
    entries = {task: rows.task_tally_to_json(tally) for task, tally in TASKS.items()}
    stored = _stored(MAPPERS[1], JOB_DOCUMENT, encoding) | {"tasks": encoding.structure(entries)}
    found = rows.JOB_DOCUMENT_ROWS.from_columns(stored, encoding)
    assert found == replace(JOB_DOCUMENT, tasks=TASKS)
    assert list(found.tasks) == ["embed", "entities"]  # by name, whatever order the map came in
    assert JOB_DOCUMENTS.element_columns == ("tasks",) and "tasks" not in JOB_DOCUMENTS.columns


def test_a_job_document_without_status_reads_as_submitted() -> None:
    """``upsert_job_document_task`` on a missing row creates it without a status (Cassandra)."""
    stored = _stored(MAPPERS[1], JOB_DOCUMENT, AS_CASSANDRA) | {"status": None}
    assert rows.JOB_DOCUMENT_ROWS.from_columns(stored, AS_CASSANDRA).status == "submitted"


def test_a_task_tally_is_json_with_the_usage_and_refuses_other_text() -> None:
    tally = TASKS["entities"]
    text = rows.task_tally_to_json(tally)
    assert json.loads(text) == {"status": "partial", "usage": tally.usage.to_json()}
    assert rows.task_tally_from_json(text) == tally
    for bad in ('{"status": "running"}', "[]", '{"status": "completed", "usage": {"pages": -1}}'):
        with pytest.raises(ValueError):
            rows.task_tally_from_json(bad)


def test_rows_read_from_nulls_never_share_a_default_map() -> None:
    stored = _stored(MAPPERS[0], JOB, AS_CASSANDRA) | {"options": None}
    first, second = (rows.JOB_ROWS.from_columns(stored, AS_CASSANDRA) for _ in range(2))
    assert first.options == second.options == {} and first.options is not second.options
