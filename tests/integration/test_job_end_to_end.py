"""A 50-document job end to end on real Kafka + Cassandra: submit → chunker → inference → reducer.

`docstream chunker`, `docstream inference` and `docstream reducer` run as separate processes
(exactly-once reducer, 3 partitions per topic) under this test's own topic prefix; the job is
submitted with `docstream submit`. Checked from the outside, as a downstream consumer would:
exactly one DocumentCompleted per doc_id on the completed topic (read_committed), the final
JobStatus on the jobs topic says 50 completed, and the store holds every chunk row once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from docstream.avro import AvroSerde
from docstream.models.runtime import Runtime
from docstream.records import AnyRecord, DocumentCompleted, JobStatus
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream_chunker.chunking import CHUNKER_VERSION
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import read_topic
from tests.fixtures.services import Pipeline, running_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCUMENTS = 50
MODEL_ID = Settings().inference.model_id
SETTINGS_PREFIX = (f"chunker=v{CHUNKER_VERSION};max_tokens={Settings().chunker.max_tokens};"
                   f"overlap={Settings().chunker.overlap_tokens};")


def _read_all(bootstrap: str, topic: str) -> list[AnyRecord]:
    """Every committed record of ``topic`` now (read_committed, from the start, to its end)."""
    return read_topic(bootstrap, topic, serde=AvroSerde(Settings().kafka), timeout_s=60).records


def _final_status(pipeline: Pipeline, bootstrap: str, job_id: str) -> JobStatus | None:
    finals = [r for r in _read_all(bootstrap, pipeline.topics.jobs)
              if isinstance(r, JobStatus) and r.job_id == job_id and r.final]
    return finals[-1] if finals else None


def test_a_job_of_50_documents_completes_once_each_end_to_end(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(DOCUMENTS):
        (folder / f"doc-{i:02d}.pdf").write_bytes(make_pdf(1 + i % 3, seed=500 + i).data)
    job_id = f"e2e50-{uuid.uuid4().hex[:12]}"

    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "e2e50",
                          DOCSTREAM_KAFKA__TRANSACTIONS="true") as pipeline:
        pipeline.start("chunker", "inference", "reducer")
        pipeline.submit([folder], job_id)
        final = pipeline.until(lambda: _final_status(pipeline, kafka_bootstrap, job_id), "the final JobStatus", 600)

        assert (final.state, final.document_count, final.completed, final.partial, final.failed) == (
            "completed", DOCUMENTS, DOCUMENTS, 0, 0), final
        completed = [r for r in _read_all(kafka_bootstrap, pipeline.topics.completed)
                     if isinstance(r, DocumentCompleted) and r.job_id == job_id]
        per_doc = Counter(r.doc_id for r in completed)
        assert len(per_doc) == DOCUMENTS and set(per_doc.values()) == {1}, per_doc
        assert {r.status for r in completed} == {"completed"}
        # the chunker's settings reach the completed record (and the document_results row below)
        (settings,) = {r.chunker_settings for r in completed}
        assert settings is not None and settings.startswith(SETTINGS_PREFIX), settings
        # so does the runtime the inference process chose (one process: one label)
        (runtime,) = {r.runtime for r in completed}
        assert runtime is not None and Runtime.from_label(runtime).label == runtime, runtime
        pipeline.check_alive()

    job = cassandra_store.get_job(job_id)
    assert job is not None and (job.status, job.document_count, job.completed) == ("completed", DOCUMENTS, DOCUMENTS)
    rows = list(cassandra_store.iter_job_documents(job_id))
    assert len(rows) == DOCUMENTS and {r.status for r in rows} == {"completed"}
    for record in completed:
        chunks = list(cassandra_store.iter_chunks(record.doc_id, MODEL_ID))
        assert [c.chunk_index for c in chunks] == list(range(record.chunk_count)), record.doc_id
        result = cassandra_store.get_document_result(record.doc_id, MODEL_ID)
        assert result is not None and result.status == "completed" and len(result.embedding) == 384
        assert result.chunker_settings == settings
        assert result.runtime == runtime
