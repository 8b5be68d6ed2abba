"""A job of two tasks on the real stack: `docstream submit --task embed --task entities` through the chunker, one
inference service per task (each its own consumer group) and the reducer, on real Kafka and Cassandra.

Exactly one DocumentCompleted per (doc_id, model_id), both tasks' results typed in Cassandra, and the job
completes once every document is terminal for both tasks.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from docstream import ids
from docstream.avro import AvroSerde
from docstream.records import DocumentCompleted, JobStatus
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.kafka import read_topic
from tests.fixtures.services import running_pipeline
from tests.fixtures.task_documents import KNOWN_MENTIONS, TOPIC_PAGES

pytestmark = pytest.mark.integration


def test_a_job_of_two_tasks_completes_each_document_once_per_task(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    doc_ids: dict[str, str] = {}
    job_id = f"tasks-{uuid.uuid4().hex[:12]}"
    for topic in ("sport", "finance"):
        data = make_pdf_of_paragraphs(TOPIC_PAGES[topic]).data
        (folder / f"{topic}.pdf").write_bytes(data)
        doc_ids[topic] = ids.doc_id(job_id, ids.content_sha256(data))
    serde = AvroSerde(Settings().kafka)

    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "tasks") as pipeline:
        pipeline.add("inference-entities", "inference", DOCSTREAM_TASKS__TASK="entities")
        pipeline.start("chunker", "inference", "inference-entities", "reducer")
        pipeline.submit([folder], job_id, "--task", "embed", "--task", "entities")

        def completed() -> list[DocumentCompleted] | None:
            records = read_topic(kafka_bootstrap, pipeline.topics.completed, serde=serde, timeout_s=30).records
            found = [r for r in records if isinstance(r, DocumentCompleted) and r.job_id == job_id]
            return found if len({(r.doc_id, r.model_id) for r in found}) == 4 else None

        def final_status() -> list[JobStatus] | None:
            records = read_topic(kafka_bootstrap, pipeline.topics.jobs, serde=serde, timeout_s=30).records
            return [r for r in records if isinstance(r, JobStatus) and r.job_id == job_id and r.final] or None

        pipeline.until(completed, "a DocumentCompleted per document and task", 400)
        final = pipeline.until(final_status, "the final JobStatus", 90, poll_s=0.5)
        pipeline.check_alive()
        done = completed() or []  # read again after the job is final: nothing was doubled meanwhile

    per_key = Counter((r.doc_id, r.model_id) for r in done)
    assert set(per_key.values()) == {1}, per_key
    assert {r.task for r in done} == {"embed", "entities"} and {r.status for r in done} == {"completed"}
    assert (final[-1].completed, final[-1].document_count) == (2, 2) and len(final) == 1
    for topic, doc_id in doc_ids.items():
        results = {r.task: r for r in cassandra_store.list_document_results(doc_id)}
        assert set(results) == {"embed", "entities"}
        mentions = {(m.label, m.text, m.page) for m in results["entities"].mentions}
        assert set(KNOWN_MENTIONS[topic]) <= mentions, (topic, mentions)
        row = next(r for r in cassandra_store.iter_job_documents(job_id) if r.doc_id == doc_id)
        assert row.status == "completed" and set(row.tasks) == {"embed", "entities"}
        entity_chunks = list(cassandra_store.iter_chunks(doc_id, results["entities"].model_id))
        assert entity_chunks and all(c.task == "entities" and not c.embedding for c in entity_chunks)


def test_a_replay_runs_a_new_task_over_chunks_already_on_the_topic_beside_the_old_results(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    data = make_pdf_of_paragraphs(TOPIC_PAGES["finance"]).data
    (folder / "finance.pdf").write_bytes(data)
    job_id = f"replay-{uuid.uuid4().hex[:12]}"
    doc_id = ids.doc_id(job_id, ids.content_sha256(data))
    serde = AvroSerde(Settings().kafka)

    def completed(task: str) -> list[DocumentCompleted]:
        records = read_topic(kafka_bootstrap, pipeline.topics.completed, serde=serde, timeout_s=30).records
        return [r for r in records if isinstance(r, DocumentCompleted) and r.job_id == job_id and r.task == task]

    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "treplay") as pipeline:
        pipeline.start("chunker", "inference", "reducer")
        pipeline.submit([folder], job_id)  # embed only
        pipeline.until(lambda: completed("embed") or None, "the embed DocumentCompleted", 300)
        before = cassandra_store.list_document_results(doc_id)
        assert [r.task for r in before] == ["embed"]

        replay = pipeline.cli("replay", "--service", "inference", "--task", "entities", "--to-offset", "earliest",
                              "--yes")
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert f"{pipeline.prefix}-inference-entities" in replay.stdout
        assert "docstream inference --task entities --every-chunk" in replay.stdout
        pipeline.add("inference-entities", "inference", DOCSTREAM_TASKS__TASK="entities",
                     DOCSTREAM_TASKS__RUN_UNREQUESTED="true").start()
        done = pipeline.until(lambda: completed("entities") or None, "the entities DocumentCompleted", 300)
        pipeline.check_alive()

    assert len(done) == 1 and done[0].status == "completed" and done[0].model_id != before[0].model_id
    results = {r.task: r for r in cassandra_store.list_document_results(doc_id)}
    assert set(results) == {"embed", "entities"}
    assert results["embed"] == before[0]  # the old results are left as they were
    assert set(KNOWN_MENTIONS["finance"]) <= {(m.label, m.text, m.page) for m in results["entities"].mentions}
