"""Where the accounting figures are made: the chunker's stage time and inference's model and stage time.

Fakes of the extractor, the store and the producer (no broker); docs/operations.md "What a job cost".
"""

from __future__ import annotations

import queue
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docstream.errors import DocumentError
from docstream.kafka.dlq import DlqRouter
from docstream.metrics import Metrics
from docstream.records import ChunkCreated, ChunkResult, DocumentChunked, DocumentCompleted, DocumentSubmitted
from docstream.settings import ChunkerSettings, RetrySettings
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics
from docstream_chunker.chunking import Chunk
from docstream_chunker.extraction import ChunkedDocument
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import ChunkRequest
from docstream_inference.handler import ok_result
from docstream_inference.ledger import AckLedger
from docstream_inference.stages import Assignments, ConsumedChunk, ResultBatch, WriteStage
from tests.unit.inference.test_pipeline_commit_order import FakeProducer, FakeStore

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


class _Extractor:
    def __init__(self, tokens: list[int] | None) -> None:
        self.tokens = tokens

    def extract(self, request: ChunkRequest, **_: object) -> ChunkedDocument:
        if self.tokens is None:
            raise DocumentError("encrypted", code="encrypted")
        chunks = tuple(Chunk(i, f"text {i}", 1, 1, 0, 6, n) for i, n in enumerate(self.tokens))
        return ChunkedDocument(page_count=2, media_type="application/pdf", chunker_settings="cs", chunks=chunks)

    def close(self) -> None:
        return None


def _submitted() -> DocumentSubmitted:
    return DocumentSubmitted(job_id="job-1", doc_id="doc-1", source_uri="file:///x", content_sha256="ab" * 32,
                             size_bytes=10, submitted_at=AT, tenant="acme", filename="a.pdf")


def test_the_chunker_shares_its_time_on_a_document_over_its_chunks(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    outputs = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor([10, 30, 0])).handle(_submitted())
    *chunk_outputs, chunked = outputs
    chunks = [o.value for o in chunk_outputs]
    assert all(isinstance(c, ChunkCreated) for c in chunks)
    # last, the document's notice: what waits for the model (docs/operations.md "Where a job stands")
    assert chunked.topic == Topics().chunked and chunked.key == "doc-1"
    assert isinstance(chunked.value, DocumentChunked)
    assert (chunked.value.job_id, chunked.value.chunk_count, chunked.value.tenant, chunked.value.priority) == (
        "job-1", 3, "acme", "batch")
    assert chunked.value.token_count == sum(c.token_count for c in chunks)  # type: ignore[union-attr]
    shares = [c.stage_us.get("chunker", 0) for c in chunks]  # type: ignore[union-attr]
    assert sum(shares) > 0 and set().union(*(c.stage_us for c in chunks)) <= {"chunker"}  # type: ignore[union-attr]


def test_a_document_the_chunker_fails_carries_its_chunker_time(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    (output,) = ChunkerHandler(ChunkerSettings(), Topics(), store, _Extractor(None)).handle(_submitted())
    assert isinstance(output.value, DocumentCompleted) and output.value.status == "failed"
    assert set(output.value.stage_us) == {"chunker"}
    row = next(store.iter_job_documents("job-1"))
    assert row.usage is not None and row.usage.stage_us == output.value.stage_us


def _chunk(i: int, tokens: int) -> ChunkCreated:
    return ChunkCreated(job_id="j", doc_id="d", chunk_id=f"c{i}", chunk_index=i, chunk_count=3, content_sha256="s",
                        text=f"text {i}", page_start=1, page_end=1, char_start=0, char_end=6, token_count=tokens,
                        chunker_settings="cs", created_at=AT, stage_us={"chunker": 11})


def test_each_chunk_embedded_carries_its_share_of_the_batch_and_the_model_time() -> None:
    ledger, assignments, records = AckLedger(), Assignments(), []
    tp = ("t.chunks", 0)
    assignments.assign([tp])
    generation = assignments.generation(tp)
    assert generation is not None

    def serialize(record: Any, topic: str) -> bytes:
        records.append(record)
        return b"x"

    producer = FakeProducer()
    stage = WriteStage(
        inbox=queue.Queue(), store=FakeStore(ledger), producer=producer,  # type: ignore[arg-type]
        dlq=DlqRouter(producer, "inference", clock=lambda: 1.0), serialize=serialize,  # type: ignore[arg-type]
        results_topic="t.chunks.results", ledger=ledger, assignments=assignments,
        retry=RetrySettings(max_attempts=3, base_delay_ms=1, max_delay_ms=2),
        metrics=Metrics(), service="inference", halt=threading.Event(), on_error=lambda exc: None,
    )
    works = [ConsumedChunk(tp, i, generation, b"k", b"v", _chunk(i, n), 0.0) for i, n in enumerate([100, 300, 0])]
    for work in works:
        ledger.track(tp, work.offset)
    results = [ok_result(w.chunk, "m", [0.1], "torch/cpu/fp32/2t", model_us=us, device="cpu")
               for w, us in zip(works, [250, 750, 3], strict=True)]
    stage.write(ResultBatch(tuple(works), tuple(results), busy_us=10_000))

    assert all(isinstance(r, ChunkResult) for r in records)
    assert [r.model_us for r in records] == [250, 750, 3] and {r.device for r in records} == {"cpu"}
    inference = [r.stage_us["inference"] for r in records]
    assert sum(inference) >= 10_000 and inference[1] > inference[0] > inference[2]
    assert all(r.stage_us["chunker"] == 11 for r in records)  # the chunker's share travels on
