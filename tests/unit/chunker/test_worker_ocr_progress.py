"""OCR progress: each OCR page is counted as it starts and written to the document's rows (docstream status)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from docstream.metrics import Metrics
from docstream.records import DocumentSubmitted
from docstream.settings import ChunkerSettings
from docstream.store import DocumentRow, JobDocumentRow, JobRow
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics
from docstream_chunker.chunking import Chunk
from docstream_chunker.extraction import ChunkedDocument, OcrPageStarted
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.provenance import ChunkSource, DocumentSources
from docstream_chunker.worker import ChunkRequest
from docstream_cli.ops.status import _status_table, in_ocr, ocr_rows
from docstream_cli.runner import ocr_pages_started
from tests.fixtures.clock import FakeClock

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
PAGES = 6


class _OcrExtractor:
    """Starts OCR on every page, looking at the rows between pages, as the child's messages would arrive."""

    def __init__(self, store: SqliteStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.seen: list[tuple[str, dict[str, int], int | None]] = []

    def extract(
        self, request: ChunkRequest, *, on_ocr_page: Callable[[OcrPageStarted], None] | None = None
    ) -> ChunkedDocument:
        assert on_ocr_page is not None
        for page in range(1, PAGES + 1):
            on_ocr_page(OcrPageStarted(page, page, PAGES))
            row = self.store.get_document(request.doc_id or "")
            assert row is not None
            self.seen.append((row.status, dict(row.pages_by_source), row.page_count))
            self.clock.now += 1.0  # a page of OCR takes a second
        return ChunkedDocument(
            page_count=PAGES, media_type="application/pdf", chunker_settings="cs",
            chunks=(Chunk(0, "text", 1, PAGES, 0, 4, 1),), chunk_sources=(ChunkSource("ocr", "tesseract", ("ok",)),),
            sources=DocumentSources({"no_text_layer": PAGES}, {"ocr": PAGES}, ocr_pages=PAGES),
        )

    def close(self) -> None:
        return None


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    return store


def _submitted() -> DocumentSubmitted:
    return DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="file:///scan.pdf", content_sha256="ab" * 32,
                             size_bytes=10, submitted_at=AT, filename="scan.pdf")


def test_ocr_pages_are_counted_and_written_to_the_rows_while_the_document_is_read(tmp_path: Path) -> None:
    store, clock, metrics = _store(tmp_path), FakeClock(), Metrics()
    extractor = _OcrExtractor(store, clock)
    ChunkerHandler(ChunkerSettings(), Topics(), store, extractor, metrics=metrics, monotonic=clock).handle(_submitted())

    # the first OCR page is written at once, then at most every 2 s
    assert [(status, source.get("ocr"), pages) for status, source, pages in extractor.seen] == [
        ("chunking", 1, PAGES), ("chunking", 1, PAGES), ("chunking", 3, PAGES), ("chunking", 3, PAGES),
        ("chunking", 5, PAGES), ("chunking", 5, PAGES)]
    assert ocr_pages_started(metrics) == PAGES
    row, [entry] = store.get_document("doc-1"), list(store.iter_job_documents("job-1"))
    assert row is not None
    assert (row.status, row.pages_by_source, entry.status) == ("chunked", {"ocr": PAGES}, "chunked")


def test_a_redelivered_document_keeps_its_final_rows(tmp_path: Path) -> None:
    store, clock = _store(tmp_path), FakeClock()
    submitted = _submitted()
    store.upsert_document(DocumentRow(doc_id="doc-1", job_id="job-1", source_uri=submitted.source_uri,
                                      content_sha256=submitted.content_sha256, status="completed", updated_at=AT))
    extractor = _OcrExtractor(store, clock)
    ChunkerHandler(ChunkerSettings(), Topics(), store, extractor, monotonic=clock).handle(submitted)
    assert {status for status, _, _ in extractor.seen} == {"completed"}


def test_status_names_the_documents_in_ocr(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for doc_id, status, ocr in [("d1", "chunking", 37), ("d2", "chunking", 0), ("d3", "chunked", 150)]:
        store.upsert_document(DocumentRow(doc_id=doc_id, job_id="job-1", source_uri=f"file:///{doc_id}",
                                          content_sha256="ab" * 32, status=status, updated_at=AT,  # type: ignore[arg-type]
                                          filename=f"{doc_id}.pdf", page_count=150,
                                          pages_by_source={"ocr": ocr} if ocr else {}))
        store.upsert_job_document(JobDocumentRow(job_id="job-1", doc_id=doc_id, status=status,  # type: ignore[arg-type]
                                                 updated_at=AT, filename=f"{doc_id}.pdf"))
    found = in_ocr(store, "job-1")
    assert [row.doc_id for row in found] == ["d1"]  # d2 has not reached OCR, d3 is chunked
    assert ocr_rows(found) == [("in OCR", "d1.pdf: OCR started on 37 of its 150 pages")]
    many = [found[0]] * 7
    assert ocr_rows(many)[-1] == ("in OCR", "and 2 more documents")
    job = JobRow(job_id="job-1", tenant="t", status="running", document_count=3, created_at=AT)
    console = Console(record=True, width=120)
    console.print(_status_table(job, found))
    assert "d1.pdf: OCR started on 37 of its 150 pages" in console.export_text()
