"""tools/gen_records.py: the records and the rows are written from schemas/ and the row declarations, and a field
added to a schema reaches every mapping (docs/architecture.md "Adding a field")."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any, get_type_hints

import pyarrow as pa
import pytest

from docstream import records
from docstream.records import RECORD_TYPES, ChunkCreated, ChunkResult, copy_fields
from docstream.store.base import ChunkRow, DocumentResultRow, JobDocumentRow
from docstream.store.layout import (
    CHUNK_ROW,
    DOCUMENT_RESULT_ROW,
    DOCUMENT_ROW,
    ROW_SPECS,
    RowSpec,
    Stored,
    row_docs,
    row_fields,
)
from docstream.store.rows import CHUNKS, RowMapping
from docstream.store.sqlite import SqliteStore
from docstream_ingest import export
from docstream_ingest.api.schemas import ChunkOut, chunk_fields
from docstream_ingest.arrow import arrow_schema
from docstream_ingest.export import DOCUMENT_SCHEMA, chunk_columns, document_columns
from tools import gen_records

ROOT = Path(__file__).resolve().parents[4]
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


def test_regenerating_the_records_and_rows_changes_nothing() -> None:
    """The checked-in modules are what the schemas and the declarations give: run `python -m tools.gen_records`."""
    for relative, text in gen_records.render(ROOT / "schemas").items():
        assert (ROOT / relative).read_text(encoding="utf-8") == text, f"{relative} is stale"


def test_the_check_mode_reports_a_stale_module_and_writes_nothing(tmp_path: Path) -> None:
    stale = tmp_path / gen_records.RECORDS_MODULE
    stale.parent.mkdir(parents=True)
    stale.write_text("stale\n", encoding="utf-8")
    assert gen_records.main(["--out", str(tmp_path), "--check"]) == 1
    assert stale.read_text(encoding="utf-8") == "stale\n"
    assert gen_records.main(["--out", str(tmp_path)]) == 0
    assert gen_records.main(["--out", str(tmp_path), "--check"]) == 0


def test_a_renamed_record_is_written_under_its_new_name_and_its_alias_makes_no_class(tmp_path: Path) -> None:
    """ChunkResult (aliases: ChunkEmbedded): one class, keyed ChunkResult in RECORD_TYPES; the old Python name is
    docstream.records' deprecated alias of that class. An alias that names another record is refused."""
    source = (ROOT / gen_records.RECORDS_MODULE).read_text(encoding="utf-8")
    assert "class ChunkResult(Record):" in source and "class ChunkEmbedded" not in source
    assert RECORD_TYPES["ChunkResult"] is ChunkResult and "ChunkEmbedded" not in RECORD_TYPES
    assert records.ChunkEmbedded is ChunkResult and ChunkResult.schema_name == "ChunkResult"
    for path in (ROOT / "schemas").glob("*.avsc"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    job_status = json.loads((tmp_path / "JobStatus.avsc").read_text(encoding="utf-8"))
    (tmp_path / "JobStatus.avsc").write_text(json.dumps({**job_status, "aliases": ["io.docstream.v1.ChunkCreated"]}))
    with pytest.raises(ValueError, match="ChunkCreated"):
        gen_records.load_schemas(tmp_path)


def test_a_record_field_keeps_its_avro_type_default_and_doc() -> None:
    hints = get_type_hints(ChunkCreated)
    table = next(f for f in fields(ChunkCreated) if f.name == "table")
    assert hints["page_verdicts"] == list[str] and hints["table"] == dict[str, Any] | None
    assert table.default is None and next(f for f in fields(ChunkCreated) if f.name == "created_at").default is MISSING
    source = (ROOT / gen_records.RECORDS_MODULE).read_text(encoding="utf-8")
    assert '    page_start: int\n    """1-based page where the chunk starts."""\n' in source


def test_every_row_declaration_resolves_and_names_why_it_leaves_a_field_out() -> None:
    schemas = gen_records.load_schemas(ROOT / "schemas")
    for spec in ROW_SPECS:
        assert row_fields(spec, schemas)
        assert all(reason for reasons in spec.not_held.values() for reason in reasons.values())


@pytest.mark.parametrize(("change", "message"), [
    ({"not_held": {"ChunkCreated": {"no_such_field": "x"}}}, "ChunkCreated has no field no_such_field"),
    ({"order": ("doc_id", "no_such_field")}, r"order names \['no_such_field'\]"),
    ({"stored": (Stored("extra", type="str"),)}, "a field of the store's own needs a type, default and doc"),
    ({"stored": (Stored("table_part", holds="ChunkCreated.nope"),)}, "ChunkCreated.nope is no record field"),
    ({"order": ("doc_id", "heading", "text")}, r"\['text'.*have no default but follow a field with one"),
])
def test_a_declaration_that_does_not_hold_together_is_refused(change: dict[str, Any], message: str) -> None:
    fields_of = {name: getattr(CHUNK_ROW, name) for name in ("name", "doc", "records", "not_held", "stored", "order")}
    spec = RowSpec(**(fields_of | change))
    with pytest.raises(ValueError, match=message):
        row_fields(spec, gen_records.load_schemas(ROOT / "schemas"))


# -- a field added to a scratch copy of a schema ------------------------------------------------------------------

REVIEWER = {"name": "reviewer", "type": ["null", "string"], "default": None, "doc": "Who reviewed the chunk."}


@dataclass(frozen=True)
class _Scratch:
    schemas: dict[str, dict[str, Any]]
    records: ModuleType
    rows: ModuleType


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def _generated(tmp_path: Path, record: str, added: dict[str, Any]) -> Iterator[_Scratch]:
    """The generator run on a copy of schemas/ whose ``record`` has the field ``added``, its modules imported."""
    schemas_dir = tmp_path / "schemas"
    schemas_dir.mkdir()
    for path in (ROOT / "schemas").glob("*.avsc"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        if schema["name"] == record:
            schema["fields"].append(added)
        (schemas_dir / path.name).write_text(json.dumps(schema), encoding="utf-8")
    assert gen_records.main(["--schemas", str(schemas_dir), "--out", str(tmp_path)]) == 0
    names = ("scratch_records", "scratch_rows")
    try:
        yield _Scratch(gen_records.load_schemas(schemas_dir), _load(names[0], tmp_path / gen_records.RECORDS_MODULE),
                       _load(names[1], tmp_path / gen_records.ROWS_MODULE))
    finally:
        for name in names:
            sys.modules.pop(name, None)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[_Scratch]:
    """The generator run on a copy of schemas/ whose ChunkCreated has a ``reviewer``, its modules imported."""
    with _generated(tmp_path, "ChunkCreated", REVIEWER) as generated:
        yield generated


def _migrated_sqlite_columns(tmp_path: Path) -> dict[str, set[str]]:
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    store.close()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: {row[1] for row in conn.execute(f"PRAGMA table_info({table})")} for table in tables}


def test_a_field_added_to_a_schema_reaches_the_record_the_row_the_columns_the_api_and_the_export(
        scratch: _Scratch, tmp_path: Path) -> None:
    # the generated record has it, typed, defaulted and documented by its Avro field
    record_type = scratch.records.ChunkCreated
    assert get_type_hints(record_type)["reviewer"] == str | None
    assert '    reviewer: str | None = None\n    """Who reviewed the chunk."""\n' in (
        tmp_path / gen_records.RECORDS_MODULE).read_text(encoding="utf-8")
    # the row declaration holds it (no edit of docstream.store.layout): the generated row has it, after the others
    row_type = scratch.rows.ChunkRow
    names = [f.name for f in fields(ChunkRow)]
    at = names.index("task")  # ChunkCreated's fields come before ChunkResult's
    assert [f.name for f in fields(row_type)] == [*names[:at], "reviewer", *names[at:]]
    chunk = record_type(job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="ab" * 32,
                        text="Ünïcode", page_start=1, page_end=1, char_start=0, char_end=7, token_count=3,
                        chunker_settings="s", created_at=T0, page_verdicts=["ok"], reviewer="ada")
    row = copy_fields(row_type, chunk, model_id="m", embedding=[0.5])
    assert row.reviewer == "ada"
    # its table has a column for it, and the migrations check names the column no migration adds yet
    mapping = RowMapping(row_type, "chunks", key=CHUNKS.key)
    assert "reviewer" in mapping.table.columns and set(mapping.table.columns) - set(CHUNKS.columns) == {"reviewer"}
    missing = [c for c in mapping.table.columns if c not in _migrated_sqlite_columns(tmp_path)["chunks"]]
    assert missing == ["reviewer"]
    # the API shows it, described by its Avro doc
    docs = row_docs(CHUNK_ROW, scratch.schemas)
    model = chunk_fields(row_type, docs)(ChunkOut)
    assert model.model_fields["reviewer"].description == "Who reviewed the chunk."
    assert list(model.model_fields) == [*list(ChunkOut.model_fields)[:-2], "reviewer", "text_start", "text_chars"]
    # the export writes it, typed by its Avro field
    columns, task_columns = chunk_columns(row_fields(CHUNK_ROW, scratch.schemas))
    assert columns[-1] == "reviewer" and "reviewer" not in task_columns
    exported = arrow_schema(columns, [scratch.schemas["ChunkResult"], scratch.schemas["ChunkCreated"]])
    assert exported.field("reviewer").type == pa.string()


REVIEWED_BY = {"name": "reviewed_by", "type": ["null", "string"], "default": None,
               "doc": "Who reviewed the document's results."}


def test_a_field_added_to_a_document_record_reaches_its_row_the_api_and_the_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _generated(tmp_path, "DocumentCompleted", REVIEWED_BY) as generated:
        # the document result row holds it (no edit of docstream.store.layout), after the others
        result_type = generated.rows.DocumentResultRow
        assert [f.name for f in fields(result_type)] == [*(f.name for f in fields(DocumentResultRow)), "reviewed_by"]
        # the API's document detail can show it: its row field is described by its Avro doc
        assert row_docs(DOCUMENT_RESULT_ROW, generated.schemas)["reviewed_by"] == "Who reviewed the document's results."
        # the export writes it after the columns the files have always had, typed by its Avro field
        columns, task_columns = document_columns(row_fields(DOCUMENT_ROW, generated.schemas),
                                                 row_fields(DOCUMENT_RESULT_ROW, generated.schemas))
        assert columns == (*DOCUMENT_SCHEMA.names, "reviewed_by") and "reviewed_by" not in task_columns
        records = [generated.schemas[name] for name in ("DocumentCompleted", "DocumentSubmitted")]
        exported = arrow_schema(columns, records)
        assert exported.field("reviewed_by").type == pa.string()
        # and its value is the result row's
        result = result_type(doc_id="d", model_id="m", job_id="j", status="completed", chunk_count=1, failed_chunks=0,
                             token_count=3, embedding=[0.5], chunker_settings="s", completed_at=T0,
                             reviewed_by="ada")
        monkeypatch.setattr(export, "_ADDED_DOCUMENT_COLUMNS", ("reviewed_by",))
        entry = JobDocumentRow(job_id="j", doc_id="d", status="completed", updated_at=T0)
        assert export.document_record(entry, None, result, "m")["reviewed_by"] == "ada"
        assert export.document_record(entry, None, None, "m")["reviewed_by"] is None


def test_the_document_export_refuses_a_column_the_rows_no_longer_have() -> None:
    schemas = gen_records.load_schemas(ROOT / "schemas")
    without = tuple(f for f in row_fields(DOCUMENT_ROW, schemas) if f.name != "media_type")
    with pytest.raises(ValueError, match="media_type"):
        document_columns(without, row_fields(DOCUMENT_RESULT_ROW, schemas))


def _chunk(**changes: Any) -> ChunkCreated:
    values: dict[str, Any] = dict(
        job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="0" * 64, text="t",
        page_start=1, page_end=1, char_start=0, char_end=1, token_count=2, chunker_settings="s",
        created_at=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
    )
    return ChunkCreated(**{**values, **changes})


def test_a_record_goes_to_its_dict_and_back_unchanged_every_field_by_name() -> None:
    chunk = _chunk(tasks=[{"name": "embed", "labels": []}], page_verdicts=["ok"])
    as_dict = chunk.to_record()
    assert list(as_dict) == [f.name for f in fields(ChunkCreated)]
    assert as_dict["page_verdicts"] is chunk.page_verdicts, "shallow: the record's own values"
    assert ChunkCreated.from_record(as_dict) == chunk


def test_a_timestamp_without_a_zone_is_read_as_utc_with_every_field_given_or_some_missing() -> None:
    naive = {**_chunk().to_record(), "created_at": datetime(2026, 1, 2, 3, 4, 5)}
    assert ChunkCreated.from_record(naive).created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    lacking = {k: v for k, v in naive.items() if k != "heading"}  # a field the dict lacks takes its default
    read = ChunkCreated.from_record({**lacking, "unknown": 1})  # a field the class lacks is ignored
    assert read.created_at.tzinfo is UTC and read.heading is None


def test_copy_fields_converts_only_where_the_target_type_asks() -> None:
    chunk = _chunk(page_verdicts=["ok", "mojibake"])
    row = copy_fields(ChunkRow, chunk, model_id="m", embedding=[1.0])
    assert row.page_verdicts == ("ok", "mojibake") and type(row.page_verdicts) is tuple
    assert (row.text, row.model_id, row.embedding) == ("t", "m", [1.0])
