"""POST /v1/jobs/{id}/cancel as the chunker sees it: documents of a cancelled job are skipped.

The chunker reads a job's status at most once per job_status_ttl_s (a fake clock here); a
fake extractor stands for extraction, which these tests never reach for a cancelled job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.errors import DocumentError
from docstream.records import DocumentCompleted, DocumentSubmitted
from docstream.settings import ChunkerSettings
from docstream.store.base import JobRow
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics
from docstream_chunker.extraction import ChunkedDocument
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import ChunkRequest
from tests.fixtures.clock import FakeClock

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


class FailingExtractor:
    """Counts extractions; every document 'fails' (cheap, and a visible output)."""

    def __init__(self) -> None:
        self.calls = 0

    def extract(self, request: ChunkRequest, **_: object) -> ChunkedDocument:
        self.calls += 1
        raise DocumentError("not a document", code="not_a_document")

    def close(self) -> None:
        return None


def _submitted(n: int) -> DocumentSubmitted:
    return DocumentSubmitted(job_id="job-1", doc_id=f"doc-{n}", source_uri="file:///x", content_sha256="ab" * 32,
                             size_bytes=10, submitted_at=AT, tenant="acme", filename=f"{n}.pdf")


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    sqlite = SqliteStore(tmp_path / "store.db")
    sqlite.migrate()
    sqlite.upsert_job(JobRow("job-1", "acme", AT, "running", 3, updated_at=AT))
    return sqlite


def test_documents_of_a_cancelled_job_are_skipped_once_the_status_is_reread(store: SqliteStore) -> None:
    extractor, clock = FailingExtractor(), FakeClock()
    handler = ChunkerHandler(ChunkerSettings(), Topics(), store, extractor, job_status_ttl_s=2.0, monotonic=clock,
                             clock=lambda: AT)
    first = handler.handle(_submitted(1))
    assert [type(out.value) for out in first] == [DocumentCompleted] and extractor.calls == 1

    store.set_job_status("job-1", "acme", "cancelled", AT)
    clock.now = 1.0  # within the TTL: the cached "running" still holds
    assert len(handler.handle(_submitted(2))) == 1 and extractor.calls == 2

    clock.now = 2.5
    assert handler.handle(_submitted(3)) == []
    assert extractor.calls == 2
    rows = {row.doc_id: row for row in store.iter_job_documents("job-1")}
    assert (rows["doc-3"].status, rows["doc-3"].error_code) == ("skipped", "job_cancelled")
    document = store.get_document("doc-3")
    assert document is not None and document.status == "skipped"
    store.close()


def test_a_job_without_a_row_is_not_cancelled(store: SqliteStore) -> None:
    extractor = FailingExtractor()
    handler = ChunkerHandler(ChunkerSettings(), Topics(), store, extractor)
    record = DocumentSubmitted(job_id="external", doc_id="d", source_uri="file:///x", content_sha256="ab" * 32,
                               size_bytes=1, submitted_at=AT)
    assert len(handler.handle(record)) == 1 and extractor.calls == 1
    store.close()
