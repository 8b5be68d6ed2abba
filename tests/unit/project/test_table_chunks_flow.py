"""A table chunk's kind and cells, from the chunker's ChunkCreated through Avro, the chunks row, the export, the API."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from docstream.avro import AvroSerde
from docstream.kafka.loop import Output
from docstream.records import ChunkCreated, DocumentSubmitted
from docstream.settings import ChunkerSettings, KafkaSettings
from docstream.store.base import DocumentResultRow, DocumentRow, JobDocumentRow, JobRow, SourceRow
from docstream.store.sources import delete_source
from docstream.store.sqlite import SqliteStore
from docstream.tables import TableCell, TablePart
from docstream.topics import Topics
from docstream_chunker.chunking import Chunk
from docstream_chunker.extraction import ChunkedDocument
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import ChunkRequest
from docstream_inference.handler import chunk_row, ok_result
from docstream_ingest.api.routes import _chunk_out
from docstream_ingest.export import chunks_path, export_results
from tests.unit.ingest.test_export import FakeStore

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
PART = TablePart(
    page=2, bbox=(54.0, 128.2, 309.1, 236.2), caption="Table 1: Cities", header=("Name", "Город"), rows=3, columns=2,
    row_start=1, row_end=3, part=0, parts=1,
    cells=(TableCell(0, 0, text="Name"), TableCell(0, 1, text="Город"), TableCell(1, 0, 2, 1, "Kyiv"),
           TableCell(1, 1, text="a"), TableCell(2, 1, text="b")),
)
MARKDOWN = "Table 1: Cities\n\n| Name | Город |\n|---|---|\n| Kyiv | a |\n|  | b |"


class _Extractor:
    def extract(self, request: ChunkRequest, **_: object) -> ChunkedDocument:
        return ChunkedDocument(
            page_count=2, media_type="application/pdf", chunker_settings="cs;tables=v1",
            chunks=(Chunk(0, "before", 1, 1, 0, 6, 1), Chunk(1, MARKDOWN, 2, 2, 8, 8 + len(MARKDOWN), 20,
                                                           kind="table", table=PART)),
        )

    def close(self) -> None:
        return None


def _chunks(outputs: Sequence[Output]) -> list[ChunkCreated]:
    return [o.value for o in outputs if isinstance(o.value, ChunkCreated)]


def _chunk_created(tmp_path: Path, previous_doc_id: str | None = None) -> list[ChunkCreated]:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    submitted = DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="file:///x", content_sha256="ab" * 32,
                                  size_bytes=10, submitted_at=AT, source_key="file:///in/x.pdf",
                                  previous_doc_id=previous_doc_id)
    try:
        outputs = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor()).handle(submitted)
    finally:
        store.close()
    return [o.value for o in outputs if isinstance(o.value, ChunkCreated)]


def test_the_chunker_says_which_chunk_is_a_table_and_hands_its_cells_on(tmp_path: Path) -> None:
    text, table = _chunk_created(tmp_path)
    assert (text.kind, text.table) == ("text", None)
    assert table.kind == "table" and table.table == PART.to_record()
    serde = AvroSerde(KafkaSettings())
    assert serde.deserialize(serde.serialize(table, "t"), "t") == table


def test_every_chunk_of_a_new_version_names_the_earlier_version_whose_results_it_may_reuse(tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    assert {c.previous_doc_id for c in _chunk_created(tmp_path / "new", "doc-0")} == {"doc-0"}
    assert {c.previous_doc_id for c in _chunk_created(tmp_path)} == {None}


def test_an_external_producers_record_of_a_known_source_becomes_its_next_version_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    store.swap_source(None, SourceRow("default", "s3://b/x.pdf", "doc-0", "cd" * 32, "job-0", AT, generation=2))
    submitted = DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="s3://b/x.pdf", content_sha256="ab" * 32,
                                  size_bytes=10, submitted_at=AT, source_key="s3://b/x.pdf")  # no earlier version named
    handler = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor())
    try:
        first = _chunks(handler.handle(submitted))
        again = _chunks(handler.handle(submitted))  # redelivered: the same version it followed
        older = replace(submitted, doc_id="doc-00", job_id="job-00", content_sha256="ef" * 32)
        store.upsert_document(DocumentRow("doc-00", "job-00", "s3://b/x.pdf", "ef" * 32, "completed", AT,
                                          source_key="s3://b/x.pdf"))
        store.set_document_generation("doc-00", 1)
        replayed = _chunks(handler.handle(older))  # a replay of an older version: it stays older
        source, row = store.get_source("default", "s3://b/x.pdf"), store.get_document("doc-1")
    finally:
        store.close()
    assert {c.previous_doc_id for c in first} == {c.previous_doc_id for c in again} == {"doc-0"}  # type: ignore[union-attr]
    assert {c.previous_doc_id for c in replayed} == {None}  # type: ignore[union-attr]
    assert source is not None and source.doc_id == "doc-1"
    assert row is not None and (row.source_key, row.previous_doc_id) == ("s3://b/x.pdf", "doc-0")


def test_a_deleted_version_that_ended_is_never_chunked_again_and_one_in_flight_ends_failed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    handler = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor())
    submitted = DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="s3://b/x.pdf", content_sha256="ab" * 32,
                                  size_bytes=10, submitted_at=AT, source_key="s3://b/x.pdf")
    in_flight = replace(submitted, doc_id="doc-2", content_sha256="cd" * 32)
    try:
        store.upsert_job(JobRow("job-1", "default", AT, "running", 2))
        assert _chunks(handler.handle(submitted))
        store.upsert_document(replace(store.get_document("doc-1"), status="completed"))  # type: ignore[arg-type]
        delete_source(store, "default", "s3://b/x.pdf")
        # a replay of the chunker: the deleted version's text never goes out again, its rows stay as they were
        assert handler.handle(submitted) == []
        assert store.get_document("doc-1").status == "completed"  # type: ignore[union-attr]
        # a version submitted before the delete and read after it: no chunk, it ends failed so that its job ends
        store.upsert_document(DocumentRow("doc-2", "job-1", "s3://b/x.pdf", "cd" * 32, "submitted", AT,
                                          source_key="s3://b/x.pdf", previous_doc_id="doc-1"))
        store.set_document_generation("doc-2", 1)
        outputs = handler.handle(replace(in_flight, previous_doc_id="doc-1"))
        assert [(o.value.status, o.value.error_code) for o in outputs] == [("failed", "source_deleted")]  # type: ignore[union-attr]
        # one a pass chunked before the delete (a redelivery, a replay): the reducer ends it, not the chunker (each
        # document ends once), and its chunks go out again, since that pass may have died before they all went out
        store.upsert_document(replace(store.get_document("doc-2"), status="chunked"))  # type: ignore[arg-type]
        again = _chunks(handler.handle(replace(in_flight, previous_doc_id="doc-1")))
        assert again and {c.doc_id for c in again} == {"doc-2"}  # type: ignore[union-attr]
        assert store.get_document("doc-2").status == "chunked"  # type: ignore[union-attr]
    finally:
        store.close()


def test_the_chunks_row_keeps_the_table_and_the_store_reads_it_back(tmp_path: Path) -> None:
    _, created = _chunk_created(tmp_path)
    row = chunk_row(ok_result(created, "m", [0.25, 0.5]))
    assert row.kind == "table" and row.table_part == PART
    store = SqliteStore(tmp_path / "rows.db")
    store.migrate()
    try:
        store.upsert_chunks([row])
        (back,) = list(store.iter_chunks("doc-1", "m"))
    finally:
        store.close()
    assert back.kind == "table" and back.table_part == PART and back.text == MARKDOWN
    assert chunk_row(ok_result(ChunkCreated.from_record({**created.to_record(), "table": {"page": 1}}), "m",
                               [])).table_part is None, "a foreign writer's bad table: the chunk keeps its text"


def _store_with(created: ChunkCreated) -> FakeStore:
    store = FakeStore()
    store.jobs["job-1"] = JobRow("job-1", "acme", AT, "completed", 1, options={"model_id": "m"})
    store.entries.append(JobDocumentRow("job-1", "doc-1", "completed", AT, filename="t.pdf"))
    store.documents["doc-1"] = DocumentRow("doc-1", "job-1", "file:///t.pdf", "ab" * 32, "completed", AT)
    store.results[("doc-1", "m")] = DocumentResultRow("doc-1", "m", "job-1", "completed", 1, 0, 20, [0.5], "cs", AT)
    store.chunks[("doc-1", "m")] = [chunk_row(ok_result(created, "m", [0.25, 0.5]))]
    return store


def test_the_export_writes_kind_and_table_in_json_lines_and_parquet(tmp_path: Path) -> None:
    _, created = _chunk_created(tmp_path)
    out = io.BytesIO()
    export_results(_store_with(created), "job-1", out, chunks=True)  # type: ignore[arg-type]
    chunk = [json.loads(line) for line in out.getvalue().splitlines()][1]
    assert chunk["record"] == "chunk" and chunk["kind"] == "table"
    assert chunk["table"]["header"] == ["Name", "Город"] and chunk["table"]["cells"][2]["row_span"] == 2
    target = tmp_path / "r.parquet"
    export_results(_store_with(created), "job-1", target, fmt="parquet", chunks=True)  # type: ignore[arg-type]
    (row,) = pq.read_table(chunks_path(target)).to_pylist()
    assert row["kind"] == "table" and row["table"]["caption"] == "Table 1: Cities"
    assert row["table"]["cells"][2] == {"row": 1, "col": 0, "row_span": 2, "col_span": 1, "text": "Kyiv"}


def test_the_api_shows_a_chunks_kind_and_table(tmp_path: Path) -> None:
    text, created = _chunk_created(tmp_path)
    shown = _chunk_out(chunk_row(ok_result(created, "m", [])))
    assert shown.kind == "table" and shown.table is not None
    assert shown.table.header == ["Name", "Город"] and shown.table.cells[2].row_span == 2
    plain = _chunk_out(chunk_row(ok_result(text, "m", [])))
    assert plain.kind == "text" and plain.table is None


def test_the_api_shows_a_stored_text_source_or_kind_outside_its_enumeration_as_the_default(tmp_path: Path) -> None:
    text, _ = _chunk_created(tmp_path)
    row = chunk_row(ok_result(text, "m", []))
    ocr = _chunk_out(replace(row, text_source="ocr", kind="table"))
    assert (ocr.text_source, ocr.kind) == ("ocr", "table")
    foreign = _chunk_out(replace(row, text_source="scanner", kind="figure"))
    assert (foreign.text_source, foreign.kind) == ("text_layer", "text")
