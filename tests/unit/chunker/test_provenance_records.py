"""The chunker hands each chunk's provenance on (ChunkCreated) and records the document's (documents row, metrics)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from docstream.metrics import Metrics
from docstream.records import ChunkCreated, DocumentSubmitted
from docstream.settings import ChunkerSettings, Settings
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics
from docstream_chunker.chunking import Chunk
from docstream_chunker.extraction import ChunkedDocument
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.provenance import ChunkSource, DocumentSources
from docstream_chunker.worker import ChunkRequest

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


class _Extractor:
    def extract(self, request: ChunkRequest, **_: object) -> ChunkedDocument:
        return ChunkedDocument(
            page_count=3, media_type="application/pdf", chunker_settings="cs",
            chunks=(Chunk(0, "first", 1, 2, 0, 5, 1), Chunk(1, "second", 3, 3, 7, 13, 1)),
            chunk_sources=(ChunkSource("text_layer", None, ("ok", "ok"), page_furniture=("Chapter 1, page 1", "2")),
                           ChunkSource("ocr", "tesseract", ("ok",))),
            sources=DocumentSources({"ok": 3}, {"ocr": 1, "text_layer": 2}, ocr_pages=1),
        )

    def close(self) -> None:
        return None


def test_chunks_and_the_document_record_where_their_text_came_from(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    metrics = Metrics()
    submitted = DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="file:///x", content_sha256="ab" * 32,
                                  size_bytes=10, submitted_at=AT)

    outputs = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor(), metrics=metrics).handle(submitted)

    chunks = [o.value for o in outputs if o.topic == Topics().chunks]
    assert all(isinstance(c, ChunkCreated) for c in chunks)
    assert [(c.text_source, c.ocr_engine, c.page_verdicts) for c in chunks] == [  # type: ignore[union-attr]
        ("text_layer", None, ["ok", "ok"]), ("ocr", "tesseract", ["ok"])]
    assert [c.page_furniture for c in chunks] == [["Chapter 1, page 1", "2"], []]  # type: ignore[union-attr]
    row = store.get_document("doc-1")
    assert row is not None and row.pages_by_verdict == {"ok": 3}
    assert row.pages_by_source == {"ocr": 1, "text_layer": 2}
    engine = Settings().chunker.ocr.engine
    assert metrics.registry.get_sample_value("docstream_ocr_pages_total", {"service": "chunker", "engine": engine}) == 1
    assert metrics.registry.get_sample_value(
        "docstream_page_verdicts_total", {"service": "chunker", "verdict": "ok"}) == 3


def test_an_interactive_documents_chunks_travel_on_the_interactive_lane_with_their_tenant(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    topics = Topics("p")
    handler = ChunkerHandler(ChunkerSettings(), topics, store, _Extractor(), metrics=Metrics())
    for priority, topic in (("interactive", "p.chunks.interactive"), ("batch", "p.chunks")):
        submitted = DocumentSubmitted(job_id=f"job-{priority}", doc_id=f"doc-{priority}", source_uri="file:///x",
                                      content_sha256="ab" * 32, size_bytes=10, submitted_at=AT, tenant="acme",
                                      priority=priority)
        outputs = handler.handle(submitted)
        assert {o.topic for o in outputs} == {topic, "p.documents.chunked"}
        assert {(c.tenant, c.priority) for c in (o.value for o in outputs) if isinstance(c, ChunkCreated)} == {
            ("acme", priority)}
