"""`docstream status` and `docstream results` against both stores (SQLite and the real Cassandra)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from docstream.store import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, JobRow, ResultStore
from docstream.store.base import QueuedJobRow, TaskTally
from docstream.tasks.base import EntitySummary, Mention, TaskRequest
from docstream.tasks.selection import tasks_option
from docstream.tenants.usage import Usage
from docstream_cli.app import app
from docstream_ingest.export import TASK_DOCUMENT_SCHEMA, chunks_path

pytestmark = pytest.mark.integration

DIM = 384


def _seed(store: ResultStore, documents: int, chunks: int) -> str:
    job_id = f"job-{uuid.uuid4().hex}"
    created = datetime.now(UTC) - timedelta(seconds=10)
    store.upsert_job(JobRow(job_id, "acme", created, "completed", documents, options={"model_id": "m1"},
                            completed=documents - 1, failed=1, updated_at=created + timedelta(seconds=5)))
    for i in range(documents):
        doc_id = f"{job_id}-d{i:02d}"
        failed = i == 0
        status = "failed" if failed else "completed"
        store.upsert_document(DocumentRow(doc_id, job_id, f"file:///{doc_id}.pdf", "cd" * 32, status, created,
                                          filename=f"{doc_id}.pdf", page_count=1,
                                          error_code="corrupt" if failed else None))
        store.upsert_job_document(JobDocumentRow(job_id, doc_id, status, created, filename=f"{doc_id}.pdf",
                                                 error_code="corrupt" if failed else None))
        if failed:
            continue
        vector = [float(i) / 100] * DIM
        store.upsert_document_result(DocumentResultRow(doc_id, "m1", job_id, "completed", chunks, 0, 7 * chunks,
                                                       vector, "", created))
        store.upsert_chunks([ChunkRow(doc_id, "m1", c, f"{doc_id}-c{c}", job_id, f"chunk {c} of {doc_id}", 1, 1,
                                      10 * c, 10 * c + 9, 7, vector) for c in range(chunks)])
    return job_id


@pytest.fixture
def cli_store(store: ResultStore, request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> ResultStore:
    """The ``store`` fixture, with DOCSTREAM_* pointing the CLI at the same store."""
    for name in [n for n in __import__("os").environ if n.startswith("DOCSTREAM_")]:
        monkeypatch.delenv(name)
    if "cassandra" in request.node.callspec.id:
        settings = request.getfixturevalue("cassandra_settings")
        monkeypatch.setenv("DOCSTREAM_STORE__BACKEND", "cassandra")
        monkeypatch.setenv("DOCSTREAM_CASSANDRA__CONTACT_POINTS", json.dumps(list(settings.contact_points)))
        monkeypatch.setenv("DOCSTREAM_CASSANDRA__PORT", str(settings.port))
        monkeypatch.setenv("DOCSTREAM_CASSANDRA__KEYSPACE", settings.keyspace)
    else:
        monkeypatch.setenv("DOCSTREAM_STORE__BACKEND", "sqlite")
        monkeypatch.setenv("DOCSTREAM_STORE__SQLITE_PATH", str(tmp_path / "store.db"))
    return store


def test_results_jsonl_to_stdout_with_chunks(cli_store: ResultStore) -> None:
    job_id = _seed(cli_store, documents=5, chunks=4)
    result = CliRunner().invoke(app, ["results", job_id, "--chunks"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout_bytes.decode().splitlines()]
    documents = [x for x in lines if x["record"] == "document"]
    assert [d["doc_id"] for d in documents] == [f"{job_id}-d{i:02d}" for i in range(5)]
    assert documents[0]["status"] == "failed" and documents[0]["error_code"] == "corrupt"
    assert documents[1]["embedding"] == pytest.approx([0.01] * DIM) and documents[1]["model_id"] == "m1"
    chunks = [x for x in lines if x["record"] == "chunk"]
    assert len(chunks) == 16 and chunks[0]["text"] == f"chunk 0 of {job_id}-d01"
    assert [c["chunk_index"] for c in chunks[:4]] == [0, 1, 2, 3]


def test_results_parquet_files(cli_store: ResultStore, tmp_path: Path) -> None:
    job_id = _seed(cli_store, documents=4, chunks=2)
    target = tmp_path / "out.parquet"
    result = CliRunner().invoke(app, ["results", job_id, "--format", "parquet", "--chunks", "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert pq.read_table(target).num_rows == 4
    assert pq.read_table(chunks_path(target)).num_rows == 6


def _seed_entities(store: ResultStore, documents: int) -> str:
    """A job of embed and entities: ``_seed``'s rows, with the entities results beside them (one chunk each)."""
    job_id = _seed(store, documents=documents, chunks=2)
    job = store.get_job(job_id)
    assert job is not None
    tasks = tasks_option([TaskRequest("embed"), TaskRequest("entities")])
    store.upsert_job(replace(job, options={**job.options, "tasks": tasks}))
    mention = Mention("Ada Lovelace", "PERSON", 12, 24, 1, 0.5)
    for i in range(1, documents):
        doc_id = f"{job_id}-d{i:02d}"
        store.upsert_document_result(DocumentResultRow(
            doc_id, "ner@1", job_id, "completed", 1, 0, 7, [], "", datetime.now(UTC), task="entities",
            mentions=(mention,), entities=(EntitySummary("PERSON", "ada lovelace", 1, (1,)),)))
        store.upsert_chunks([ChunkRow(doc_id, "ner@1", 0, f"{doc_id}-n0", job_id, "chunk", 1, 1, 0, 9, 7, [],
                                      task="entities", mentions=(mention,))])
        store.upsert_job_document_task(job_id, doc_id, "entities", TaskTally("completed"), datetime.now(UTC))
    return job_id


def _jsonl(output: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.decode().splitlines()]


def test_results_per_task(cli_store: ResultStore, tmp_path: Path) -> None:
    job_id = _seed_entities(cli_store, documents=3)
    runner = CliRunner()
    every = runner.invoke(app, ["results", job_id, "--chunks"])
    assert every.exit_code == 0, every.output
    lines = _jsonl(every.stdout_bytes)
    assert [(x["record"], x["task"], x["model_id"]) for x in lines if x["doc_id"] == f"{job_id}-d01"] == [
        ("document", "embed", "m1"), ("chunk", "embed", "m1"), ("chunk", "embed", "m1"),
        ("document", "entities", "ner@1"), ("chunk", "entities", "ner@1")]
    failed = [(x["task"], x["status"]) for x in lines if x["doc_id"] == f"{job_id}-d00"]
    assert failed == [("embed", "failed"), ("entities", "failed")]
    entities = runner.invoke(app, ["results", job_id, "--task", "entities"])
    assert entities.exit_code == 0, entities.output
    found = _jsonl(entities.stdout_bytes)
    assert [x["task"] for x in found] == ["entities"] * 3
    assert found[1]["mentions"] == [{"text": "Ada Lovelace", "label": "PERSON", "start": 12, "end": 24, "page": 1,
                                     "score": 0.5}]
    embed = runner.invoke(app, ["results", job_id, "--task", "embed"])
    assert embed.exit_code == 0 and all("task" not in x for x in _jsonl(embed.stdout_bytes))
    target = tmp_path / "tasks.parquet"
    parquet = runner.invoke(app, ["results", job_id, "--task", "embed", "--task", "entities", "--format", "parquet",
                                  "--out", str(target)])
    assert parquet.exit_code == 0, parquet.output
    assert pq.read_table(target).schema.equals(TASK_DOCUMENT_SCHEMA) and pq.read_table(target).num_rows == 6
    assert runner.invoke(app, ["results", job_id, "--task", "No Such"]).exit_code == 1


def test_results_and_status_of_an_unknown_job(cli_store: ResultStore) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["results", "no-such-job"]).exit_code == 4
    assert runner.invoke(app, ["status", "no-such-job"]).exit_code == 4
    assert runner.invoke(app, ["results", "x", "--format", "parquet"]).exit_code == 1  # parquet needs --out


def test_status_shows_state_counts_and_rate(cli_store: ResultStore) -> None:
    job_id = _seed(cli_store, documents=6, chunks=1)
    result = CliRunner().invoke(app, ["status", job_id], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    for expected in ("completed", "documents", "docs/s", "1.20"):  # 6 documents in 5 s
        assert expected in text, text


def test_status_shows_the_eta_of_a_running_job(cli_store: ResultStore) -> None:
    job_id = f"job-{uuid.uuid4().hex}"
    created = datetime.now(UTC) - timedelta(seconds=10)
    cli_store.upsert_job(JobRow(job_id, "acme", created, "running", 12, completed=6, updated_at=created))
    result = CliRunner().invoke(app, ["status", job_id], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    eta = next(line for line in result.stdout.splitlines() if " eta " in line)
    assert re.search(r"eta\s+│\s+\d+s\s", eta), eta  # docstream.jobs.progress's ETA, as format_duration shows it


def test_status_shows_what_the_job_cost(cli_store: ResultStore) -> None:
    job_id = _seed(cli_store, documents=2, chunks=1)
    row = cli_store.get_job(job_id)
    assert row is not None and row.usage is None
    runner = CliRunner()
    assert "usage" in runner.invoke(app, ["status", job_id], env={"COLUMNS": "200"}).stdout
    usage = Usage(pages=3, chunks=4, tokens=1234, model_us={"cpu": 2_500_000},
                  stage_us={"chunker": 400_000, "inference": 3_000_000})
    cli_store.upsert_job(replace(row, usage=usage))
    result = runner.invoke(app, ["status", job_id], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = {" ".join(line.strip("│ ").split()) for line in result.stdout.splitlines()}
    for expected in ("pages │ 3", "chunks │ 4", "tokens │ 1234", "model-seconds │ 2.500 s on cpu",
                     "stage seconds │ chunker 0.400 s, inference 3.000 s"):
        assert expected in lines, result.stdout


def test_status_shows_where_a_running_job_stands_in_its_lane(cli_store: ResultStore,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the reducer's rows of a deployment of its own (docs/operations.md "Where a job stands")
    prefix = f"stand-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("DOCSTREAM_KAFKA__TOPIC_PREFIX", prefix)
    now = datetime.now(UTC)
    backfill, mine, urgent = (f"job-{uuid.uuid4().hex}" for _ in range(3))
    cli_store.upsert_queued_job(QueuedJobRow(f"{prefix}.chunks", backfill, "bulk", now - timedelta(minutes=5),
                                             120_000, 3, now))
    cli_store.upsert_queued_job(QueuedJobRow(f"{prefix}.chunks", mine, "acme", now - timedelta(minutes=1), 900, 0,
                                             now))
    cli_store.upsert_queued_job(QueuedJobRow(f"{prefix}.chunks.interactive", urgent, "acme",
                                             now - timedelta(minutes=2), 5_000, 0, now))
    cli_store.record_throughput(f"{prefix}-inference", "inference-1", 1_000.0, now, 60)  # the embed group
    cli_store.upsert_job(JobRow(mine, "acme", now - timedelta(minutes=1), "running", 2))
    cli_store.upsert_job(JobRow(urgent, "acme", now - timedelta(minutes=2), "running", 1,
                                options={"priority": "interactive"}))
    runner = CliRunner()

    def rows(job_id: str) -> set[str]:
        result = runner.invoke(app, ["status", job_id], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return {" ".join(line.strip("│ ").split()) for line in result.stdout.splitlines()}

    # the batch job: the backfill ahead of it, and the interactive tokens served meanwhile (batch keeps 0.2 of
    # the model: 4 interactive tokens for each of its own, up to the 5,000 waiting)
    batch = rows(mine)
    assert {"lane │ batch", "queue │ 125,000 tokens ahead; 900 of its own chunked"} <= batch, batch
    assert any(re.fullmatch(r"starts │ in 2m 05s \(\d\d:\d\d:\d\d UTC\)", line) for line in batch), batch
    # the interactive job is first in its lane: it starts now
    assert {"lane │ interactive", "queue │ first in its lane; 5,000 of its own chunked", "starts │ now"} <= rows(urgent)
