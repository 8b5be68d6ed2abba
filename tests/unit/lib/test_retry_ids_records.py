"""Pure core: retry decisions, identities, record converters."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from docstream.errors import FatalError, PoisonRecord, RetryableError, SchemaError, StoreError
from docstream.ids import chunk_id, content_sha256, doc_id
from docstream.records import RECORD_TYPES, ChunkResult, JobStatus, utc_now
from docstream.retry import backoff_delay, is_retryable
from docstream.topics import Topics, dlq_topic


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (StoreError("down"), True),
        (RetryableError("blip"), True),
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (SchemaError("bad bytes"), False),
        (PoisonRecord("bad"), False),
        (FatalError("bug"), False),
        (ValueError("bug"), False),
    ],
)
def test_is_retryable(exc: BaseException, expected: bool) -> None:
    assert is_retryable(exc) is expected


def test_backoff_is_bounded_full_jitter() -> None:
    rng = random.Random(7)
    for attempt in range(1, 40):
        ceiling = min(5.0, 0.1 * 2 ** (attempt - 1))
        delays = [backoff_delay(attempt, base_s=0.1, max_s=5.0, rng=rng) for _ in range(50)]
        assert all(0.0 <= d <= ceiling for d in delays)
    spread = {round(backoff_delay(6, base_s=0.1, max_s=5.0, rng=rng), 3) for _ in range(50)}
    assert len(spread) > 10


def test_backoff_rejects_bad_attempt() -> None:
    with pytest.raises(ValueError):
        backoff_delay(0, base_s=0.1, max_s=1.0)


def test_ids_are_deterministic_and_distinct() -> None:
    sha = content_sha256(b"hello")
    assert sha == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert doc_id("job-1", sha) == doc_id("job-1", sha)
    assert doc_id("job-1", sha) != doc_id("job-2", sha)
    assert chunk_id(sha, "t=256,o=32", 0) == chunk_id(sha, "t=256,o=32", 0)
    assert chunk_id(sha, "t=256,o=32", 0) != chunk_id(sha, "t=128,o=32", 0)
    assert chunk_id(sha, "t=256,o=32", 0) != chunk_id(sha, "t=256,o=32", 1)


def test_record_round_trip_through_dict() -> None:
    record = ChunkResult(
        job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, model_id="m",
        status="ok", token_count=3, page_start=1, page_end=1, embedded_at=utc_now(), embedding=[0.5, 0.25],
    )
    assert ChunkResult.from_record(record.to_record()) == record
    assert record.key == "d"


def test_from_record_makes_naive_times_utc_and_ignores_unknown_fields() -> None:
    naive = datetime(2026, 1, 1, 12, 0, 0)
    status = JobStatus.from_record(
        {"job_id": "j", "state": "running", "document_count": 2, "updated_at": naive, "added_later": 1}
    )
    assert status.updated_at.tzinfo is UTC
    assert status.key == "j"


def test_record_types_match_schema_files() -> None:
    assert set(RECORD_TYPES) == {"DocumentSubmitted", "ChunkCreated", "ChunkResult", "DocumentChunked",
                                 "DocumentCompleted", "JobStatus"}


def test_topics() -> None:
    topics = Topics("p")
    assert topics.submitted == "p.documents.submitted"
    assert topics.results == "p.chunks.results"
    assert topics.legacy_results == "p.chunks.embedded"  # read by the reducer for one release
    assert topics.result_topics() == ("p.chunks.results", "p.chunks.embedded")
    assert {topics.results, topics.legacy_results} <= set(topics.all())  # ensure_topics creates both
    assert dlq_topic(topics.chunks) == "p.chunks.dlq"
    assert topics.lanes() == ("p.chunks.interactive", "p.chunks")
    assert (topics.lane("interactive"), topics.lane("batch"), topics.lane("anything else")) == (
        "p.chunks.interactive", "p.chunks", "p.chunks")
    assert topics.intakes() == ("p.documents.submitted.interactive", "p.documents.submitted")
    assert topics.chunked == "p.documents.chunked"
    assert len(set(topics.all())) == 10
