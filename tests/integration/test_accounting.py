"""What a real job cost, on both stacks (docs/operations.md "What a job cost").

Real stack: `docstream chunker`, `inference` and `reducer` as processes on the real Kafka and Cassandra,
a job of three PDFs and one file that is no document, submitted with `docstream submit`. Embedded stack:
`docstream run` over the same kind of folder. Either way the job's figures (the final JobStatus, the
jobs row) must equal what its own rows add up to: tokens = the chunk rows' token counts, chunks = the
chunk rows, pages = the documents' page counts; the model ran (model-seconds > 0) on the CPU, and
both stages (chunker, inference) took time. No wall-clock figure is compared with anything.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from docstream.avro import AvroSerde
from docstream.records import JobStatus
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore, SqliteStore
from docstream.tenants.usage import STAGE_CHUNKER, STAGE_INFERENCE, Usage
from tests.fixtures.documents import make_not_a_document, make_pdf
from tests.fixtures.kafka import read_topic
from tests.fixtures.services import DOCSTREAM, Pipeline, running_pipeline, shared_broker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL_ID = Settings().inference.model_id
PAGES = (1, 3, 2)


def _inputs(folder: Path) -> Path:
    folder.mkdir()
    for i, pages in enumerate(PAGES):
        (folder / f"doc-{i}.pdf").write_bytes(make_pdf(pages, seed=900 + i).data)
    (folder / "notes.pdf").write_bytes(make_not_a_document())
    return folder


def _own_count(store: ResultStore, job_id: str) -> Usage:
    """The job's figures from its rows: the documents' pages, the ok chunk rows and their tokens."""
    pages = chunks = tokens = 0
    for row in store.iter_job_documents(job_id):
        document = store.get_document(row.doc_id)
        assert document is not None
        pages += document.page_count or 0
        for chunk in store.iter_chunks(row.doc_id, MODEL_ID):
            chunks += 1
            tokens += chunk.token_count if chunk.status == "ok" else 0
    return Usage(pages=pages, chunks=chunks, tokens=tokens)


def _check_figures(usage: Usage | None, own: Usage) -> None:
    assert usage is not None
    assert (usage.pages, usage.chunks, usage.tokens) == (own.pages, own.chunks, own.tokens)
    assert own.pages == sum(PAGES) and own.tokens > 0
    assert usage.model_seconds > 0 and usage.device == "cpu"
    assert set(usage.stage_us) == {STAGE_CHUNKER, STAGE_INFERENCE} and all(usage.stage_us.values())


def _final_status(pipeline: Pipeline, bootstrap: str, job_id: str) -> JobStatus | None:
    records = read_topic(bootstrap, pipeline.topics.jobs, serde=AvroSerde(Settings().kafka), timeout_s=60).records
    finals = [r for r in records if isinstance(r, JobStatus) and r.job_id == job_id and r.final]
    return finals[-1] if finals else None


def test_a_job_on_kafka_and_cassandra_reports_what_it_cost(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    folder = _inputs(tmp_path / "docs")
    job_id = f"usage-{uuid.uuid4().hex[:12]}"
    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "usage") as pipeline:
        pipeline.start("chunker", "inference", "reducer")
        pipeline.submit([folder], job_id)
        final = pipeline.until(lambda: _final_status(pipeline, kafka_bootstrap, job_id), "the final JobStatus", 600)

    assert (final.completed, final.failed) == (3, 1)
    status_usage = Usage(final.pages, final.chunks, final.tokens, final.model_us, final.stage_us)
    own = _own_count(cassandra_store, job_id)
    _check_figures(status_usage, own)
    row = cassandra_store.get_job(job_id)
    assert row is not None and row.usage == status_usage
    per_document = [r.usage for r in cassandra_store.iter_job_documents(job_id)]
    assert all(u is not None for u in per_document)  # the failed one has its chunker time
    assert sum(u.tokens for u in per_document if u is not None) == own.tokens


def test_docstream_run_reports_what_the_job_cost(tmp_path: Path, kafka_bootstrap: str) -> None:
    folder = _inputs(tmp_path / "docs")
    state = tmp_path / "state"
    env = shared_broker_env(kafka_bootstrap, "accounting")
    proc = subprocess.run([DOCSTREAM, "run", str(folder), "--state-dir", str(state), "--timeout", "400"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # notes.pdf failed

    store = SqliteStore(state / "docstream.db")
    try:
        (job,) = store.list_jobs("default")
        own = _own_count(store, job.job_id)
        _check_figures(job.usage, own)
        assert (job.status, job.completed, job.failed) == ("completed", 3, 1)
    finally:
        store.close()
    assert job.usage is not None
    assert f"{job.usage.tokens} tokens" in proc.stdout and "model-seconds on cpu" in proc.stdout
