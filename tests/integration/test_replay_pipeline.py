"""Replay on the whole pipeline (real Kafka + real Cassandra): process a job, replay the chunks topic under a
second model_id → both sets of rows, equal counts, no duplicates; a replay with the same model leaves the rows
as they were; `docstream search` finds a known chunk first among the pipeline's own rows.

`docstream chunker|inference|reducer` run as subprocesses under this test's own topic prefix, Faust app id and
object store; the session's Cassandra keyspace is shared, the job and its doc_ids are this test's own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docstream.avro.serde import AvroSerde
from docstream.records import DocumentCompleted
from docstream.replay import GroupAdmin, ResetTarget
from docstream.settings import CassandraSettings, Settings
from docstream.store.base import ChunkRow, DocumentResultRow, ResultStore
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import consume_messages, kafka_settings, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOCSTREAM = ROOT / ".venv" / "bin" / "docstream"
PARTITIONS = 3
MODEL = "all-MiniLM-L6-v2"
REPLAY_MODEL = "all-MiniLM-L6-v2@replay"  # the same bundled weights under another model_id
WAIT_S = 300


@dataclass
class Stack:
    """The three services of one test as subprocesses, and the commands a user would run beside them."""

    env: dict[str, str]
    folder: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    runs: int = 0

    @property
    def prefix(self) -> str:
        return self.env["DOCSTREAM_KAFKA__TOPIC_PREFIX"]

    def start(self, name: str, **extra: str) -> None:
        self.runs += 1
        log = self.folder / f"{name}-{self.runs}.log"
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen([str(DOCSTREAM), name], cwd=ROOT, env={**self.env, **extra},
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{self.tail(name)}"

    def tail(self, name: str) -> str:
        logs = sorted(self.folder.glob(f"{name}-*.log"))
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-30:]) if logs else ""

    def cli(self, *args: str, answer: str = "", **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DOCSTREAM), *args], cwd=ROOT, env={**self.env, "COLUMNS": "200", **extra},
                              input=answer, capture_output=True, text=True, timeout=300, check=False)

    def until(self, predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        def probe() -> Any:
            self.check_alive()
            return predicate()

        return wait_until(probe, timeout_s, what)


def stack_env(bootstrap: str, prefix: str, cassandra: CassandraSettings, root: Path) -> dict[str, str]:
    """DOCSTREAM_* settings of a test's own stack on the real Kafka and Cassandra."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    return {
        **base,
        "DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "DOCSTREAM_KAFKA__TOPIC_PREFIX": prefix,
        "DOCSTREAM_KAFKA__PARTITIONS": str(PARTITIONS),
        "DOCSTREAM_STORE__BACKEND": "cassandra",
        "DOCSTREAM_CASSANDRA__CONTACT_POINTS": json.dumps(list(cassandra.contact_points)),
        "DOCSTREAM_CASSANDRA__PORT": str(cassandra.port),
        "DOCSTREAM_CASSANDRA__KEYSPACE": cassandra.keyspace,
        "DOCSTREAM_CASSANDRA__REQUEST_TIMEOUT_S": "30",
        "DOCSTREAM_OBJECT_STORE__URL": str(root / "objects"),
        "DOCSTREAM_REDUCER__APP_ID": f"{prefix}-reducer",
        "DOCSTREAM_REDUCER__DATA_DIR": str(root / "reducer"),
        "DOCSTREAM_REDUCER__JOB_STATUS_INTERVAL_S": "0.5",
        # fp32: a second pass over the same chunks gives the same vectors to ~1e-6 (bf16 would not)
        "DOCSTREAM_INFERENCE__CPU_BF16": "false",
        "DOCSTREAM_LOG__FORMAT": "json",
        # the reducer's aiokafka cannot read lz4 batches without the `lz4` package: gzip here
        "DOCSTREAM_KAFKA__CLIENT_OPTIONS": json.dumps({"compression.type": "gzip"}),
    }


@contextmanager
def running_stack(bootstrap: str, cassandra: CassandraSettings, root: Path, name: str) -> Iterator[Stack]:
    """A Stack under a new prefix; every process still running at the end is stopped."""
    stack = Stack(stack_env(bootstrap, f"{name}-{uuid.uuid4().hex}", cassandra, root), root)
    try:
        yield stack
    finally:
        for service in list(stack.procs):
            stack.stop(service)


def submit(stack: Stack, root: Path, pages: tuple[int, ...]) -> str:
    """`docstream submit` PDFs of ``pages`` pages each as a new job; its job id."""
    paths = []
    for i, count in enumerate(pages):
        path = root / f"doc-{i}.pdf"
        path.write_bytes(make_pdf(count, seed=300 + i).data)
        paths.append(str(path))
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    done = stack.cli("submit", *paths, "--job-id", job_id)
    assert done.returncode == 0, done.stdout + done.stderr
    return job_id


def doc_ids(store: ResultStore, job_id: str) -> list[str]:
    return sorted(row.doc_id for row in store.iter_job_documents(job_id))


def results(store: ResultStore, docs: list[str], model_id: str) -> dict[str, DocumentResultRow | None]:
    return {doc: store.get_document_result(doc, model_id) for doc in docs}


def chunk_rows(store: ResultStore, docs: list[str], model_id: str) -> dict[str, list[ChunkRow]]:
    return {doc: list(store.iter_chunks(doc, model_id)) for doc in docs}


def all_completed(store: ResultStore, docs: list[str], model_id: str) -> bool:
    found = results(store, docs, model_id)
    return all(r is not None and r.status == "completed" for r in found.values())


def group_caught_up(settings: Settings, group: str, topic: str) -> bool:
    observed = GroupAdmin(settings.kafka).observe(topic, group, ResetTarget("latest"))
    return all(o.committed == o.high for o in observed)


def _assert_same_rows(before: dict[str, list[ChunkRow]], after: dict[str, list[ChunkRow]]) -> None:
    assert before.keys() == after.keys()
    for doc, rows in before.items():
        again = after[doc]
        assert [(r.chunk_index, r.chunk_id, r.text, r.page_start, r.page_end, r.status) for r in again] == [
            (r.chunk_index, r.chunk_id, r.text, r.page_start, r.page_end, r.status) for r in rows]
        np.testing.assert_allclose([r.embedding for r in again], [r.embedding for r in rows], atol=1e-4)


def test_replay_under_a_second_model_writes_beside_and_the_same_model_changes_nothing(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    with running_stack(kafka_bootstrap, cassandra_settings, tmp_path, "replay-e2e") as stack:
        settings = kafka_settings(kafka_bootstrap, topic_prefix=stack.prefix)
        chunks_topic, group = f"{stack.prefix}.chunks", f"{stack.prefix}-inference"
        for name in ("chunker", "inference", "reducer"):
            stack.start(name)
        job_id = submit(stack, tmp_path, (3, 2))
        docs = stack.until(lambda: (d := doc_ids(cassandra_store, job_id)) and len(d) == 2 and d, "job documents")
        stack.until(lambda: all_completed(cassandra_store, docs, MODEL), "the job under the first model")
        first = chunk_rows(cassandra_store, docs, MODEL)
        assert all(rows for rows in first.values())

        # replay the chunks topic under the second model_id: stop inference, reset its group, restart
        stack.stop("inference")
        replay = stack.cli("replay", "--service", "inference", "--to-offset", "earliest", "--model", REPLAY_MODEL,
                           "--yes")
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert f"DOCSTREAM_INFERENCE__MODEL_ID={REPLAY_MODEL}" in replay.stdout
        stack.start("inference", DOCSTREAM_INFERENCE__MODEL_ID=REPLAY_MODEL)
        stack.until(lambda: all_completed(cassandra_store, docs, REPLAY_MODEL), "the job under the second model")
        stack.until(lambda: group_caught_up(settings, group, chunks_topic), "the replay to reach the end")

        second = chunk_rows(cassandra_store, docs, REPLAY_MODEL)
        for doc in docs:
            assert cassandra_store.count_chunks(doc, REPLAY_MODEL) == cassandra_store.count_chunks(doc, MODEL)
            indexes = [r.chunk_index for r in second[doc]]
            assert indexes == list(range(len(first[doc])))  # every chunk once: no duplicates, none missing
            assert {r.model_id for r in second[doc]} == {REPLAY_MODEL}
            result = cassandra_store.get_document_result(doc, REPLAY_MODEL)
            assert result is not None and result.chunk_count == len(first[doc]) and result.failed_chunks == 0
        _assert_same_rows(first, second)  # same weights: the same vectors under the other id
        _assert_same_rows(first, chunk_rows(cassandra_store, docs, MODEL))  # the first rows untouched

        serde = AvroSerde(settings.kafka)
        completed_topic = f"{stack.prefix}.documents.completed"
        completed = [serde.deserialize(m.value(), completed_topic)
                     for m in consume_messages(kafka_bootstrap, completed_topic, 4)]
        assert all(isinstance(c, DocumentCompleted) for c in completed)
        assert {(c.doc_id, c.model_id) for c in completed} == {(d, m) for d in docs for m in (MODEL, REPLAY_MODEL)}

        # the same model again: the rows stay as they are
        before_results = results(cassandra_store, docs, REPLAY_MODEL)
        stack.stop("inference")
        again = stack.cli("replay", "--service", "inference", "--to-offset", "earliest", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        assert not group_caught_up(settings, group, chunks_topic)
        stack.start("inference", DOCSTREAM_INFERENCE__MODEL_ID=REPLAY_MODEL)
        stack.until(lambda: group_caught_up(settings, group, chunks_topic), "the second replay to reach the end")
        _assert_same_rows(second, chunk_rows(cassandra_store, docs, REPLAY_MODEL))
        after_results = results(cassandra_store, docs, REPLAY_MODEL)
        assert {d: (r.status, r.chunk_count, r.failed_chunks) for d, r in after_results.items() if r} == {
            d: (r.status, r.chunk_count, r.failed_chunks) for d, r in before_results.items() if r}

        # search among the pipeline's rows: a known chunk's text finds that chunk first, under either model
        known = first[docs[0]][1]
        for model in (MODEL, REPLAY_MODEL):
            found = stack.cli("search", known.text, "--job", job_id, "--model", model, "-k", "3", "--json")
            assert found.returncode == 0, found.stderr[-2000:]
            hits = json.loads(found.stdout)
            assert (hits[0]["doc_id"], hits[0]["chunk_index"], hits[0]["model_id"]) == (docs[0], 1, model)
            document = cassandra_store.get_document(docs[0])
            assert document is not None and hits[0]["filename"] == document.filename
            assert hits[0]["score"] > 0.99
