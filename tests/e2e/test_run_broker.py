"""`docstream run` on its own broker: the single-node Kafka it starts under ``<state-dir>/kafka``
(docstream_cli.embedded_kafka), which keeps the run's topics after the run.

Every command here runs with no DOCSTREAM_* setting (``bare_env``), as a user types it, so each run starts and
stops that broker itself, and the readers (``docstream dlq``) start it again for their own duration. Between
commands a test opens the folder's broker with ``EmbeddedKafka`` to write or read a topic as any Kafka client
does. The inputs are small generated PDFs: each test costs a few runs' fixed start (about 10 s each).

* a poisoned record on the run's intake: the next run dead-letters it, and ``docstream dlq list|show`` in the
  run's folder, with no option, find it;
* kill -9 of a run mid-job, then the same command again: every document completes exactly once on the completed
  topic (read_committed, decoded with fastavro and the schema file alone), and no broker JVM is left;
* two runs on one state dir at once: the second fails at once with ``state_dir_busy``, naming the first.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from docstream.topics import Topics
from docstream_cli.embedded_kafka import EmbeddedKafka
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import read_topic, wait_until
from tests.fixtures.services import DOCSTREAM, ROOT, ServiceProcess, bare_env, broker_jvms

pytestmark = pytest.mark.e2e

TOPICS = Topics()  # the run's topics: the default prefix, as a user's run has them
_COMPLETED_SCHEMA = ROOT / "schemas" / "DocumentCompleted.avsc"
_SINGLE_OBJECT_MAGIC = b"\xc3\x01"  # Avro single-object encoding: magic, 8-byte fingerprint, body


def _docstream(cwd: Path, *args: str, timeout_s: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DOCSTREAM), *args], cwd=cwd, env=env or bare_env(COLUMNS="200"),
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_a_poisoned_intake_record_is_dead_lettered_and_dlq_list_and_show_find_it_in_the_runs_folder(
    tmp_path: Path,
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "first.pdf").write_bytes(make_pdf(1, seed=61).data)
    _ok(_docstream(tmp_path, "run", "in", "--timeout", "300", timeout_s=400))
    kafka = tmp_path / ".docstream" / "kafka"
    # garbage on the intake between two runs, as a broken producer would leave it: the broker kept the topics
    with EmbeddedKafka(kafka) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
        delivered: list[Any] = []
        producer.produce(TOPICS.submitted, b"not avro", on_delivery=lambda err, _msg: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None], delivered
    # a new file: the next run has a document to wait for, after the garbage on the intake. The chunker's
    # first fetch, from its committed offsets, holds the garbage (it was there before the run), so the
    # garbage is dead-lettered in a batch committed before the new document's chunks are.
    (tmp_path / "in" / "second.pdf").write_bytes(make_pdf(1, seed=62).data)
    second = _ok(_docstream(tmp_path, "run", "in", "--timeout", "300", timeout_s=400))
    assert "resumed: 1 documents" in second.stdout, second.stdout[-2000:]

    listed = _ok(_docstream(tmp_path, "dlq", "list", TOPICS.submitted))  # no option: ./.docstream's run

    assert f"started for this command from {kafka.resolve()}" in " ".join(listed.stderr.split()), listed.stderr
    assert f"{TOPICS.submitted}.dlq: 1 records" in listed.stdout, listed.stdout
    assert re.search(rf"{re.escape(TOPICS.submitted)}\s*│\s*schema_unknown_format\s*│\s*1\s*│", listed.stdout), \
        listed.stdout
    shown = _ok(_docstream(tmp_path, "dlq", "show", TOPICS.submitted, "--json"))
    [record] = json.loads(shown.stdout)
    headers = record["headers"]
    assert (headers["error_code"], headers["original_topic"], headers["service"]) == (
        "schema_unknown_format", TOPICS.submitted, "chunker")
    assert record["value"] == "undecodable: " + b"not avro".hex(" ") + " (8 bytes)"
    assert not broker_jvms(kafka), "each reader stopped the broker it started"


def _results_count(db: Path) -> int:
    """Document results the run stored so far (0 before its store exists)."""
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
            return int(conn.execute("SELECT count(*) FROM document_results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # not migrated yet, or locked for a moment


def _completed_records(bootstrap: str) -> list[dict[str, Any]]:
    """Every committed record of the completed topic, decoded with fastavro and the schema file alone."""
    schema = fastavro.parse_schema(json.loads(_COMPLETED_SCHEMA.read_text(encoding="utf-8")))
    expected_fingerprint = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    records = []
    for message in read_topic(bootstrap, TOPICS.completed, isolation="read_committed", timeout_s=60).messages:
        value = message.value() or b""
        assert value[:2] == _SINGLE_OBJECT_MAGIC and value[2:10] == expected_fingerprint, value[:10].hex()
        records.append(fastavro.schemaless_reader(io.BytesIO(value[10:]), schema, None))
    return records


def test_a_run_killed_mid_job_then_run_again_completes_every_document_exactly_once(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    count = 8
    for i in range(count):
        (inputs / f"doc-{i}.pdf").write_bytes(make_pdf(2, seed=70 + i).data)
    state = tmp_path / ".docstream"
    arguments = ["in", "--out", "results.jsonl", "--timeout", "400"]
    env = bare_env(COLUMNS="200", DOCSTREAM_INFERENCE__MAX_BATCH_SIZE="4")
    first = ServiceProcess("run", env, tmp_path / "logs", args=arguments, cwd=tmp_path)
    first.start()
    try:
        wait_until(lambda: not first.alive() or _results_count(state / "docstream.db") >= 1, 300,
                   "a document completed by the first run", poll_s=0.02)
        assert first.alive(), f"the first run ended before it could be killed:\n{first.tail()}"
        done_before = _results_count(state / "docstream.db")
        assert done_before < count, "every document completed before the kill"
        os.kill(first.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]  # the run alone, as the OOM killer does
        first.reap()
    except BaseException:
        first.stop(10)
        raise

    try:
        second = _docstream(tmp_path, "run", *arguments, env=env, timeout_s=480)
        # the second run let go of its broker (SIGTERM) as it returned: every broker JVM of the folder ends,
        # checked before the group is killed, which would take a stray JVM too
        wait_until(lambda: not broker_jvms(state / "kafka"), 60, "every broker JVM of the folder to end")
    finally:
        first.stop(10)  # what the killed run left in its process group (the extraction child)

    _ok(second)
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines() if line.strip()]
    assert sorted(Path(r["filename"]).name for r in results) == [f"doc-{i}.pdf" for i in range(count)]
    assert {r["status"] for r in results} == {"completed"}, sorted((r["filename"], r["status"]) for r in results)
    resumed = re.search(r"resumed: (\d+) documents", second.stdout)
    assert resumed is not None and int(resumed.group(1)) >= done_before, second.stdout[-2000:]
    job_id = results[0]["job_id"]
    with EmbeddedKafka(state / "kafka") as broker:
        completed = _completed_records(broker.bootstrap_servers)
    per_doc: dict[str, int] = {}
    for record in completed:
        if record["job_id"] == job_id:
            per_doc[record["doc_id"]] = per_doc.get(record["doc_id"], 0) + 1
    assert per_doc == {r["doc_id"]: 1 for r in results}, "each document completed exactly once on the topic"


def test_a_second_run_on_a_busy_state_dir_fails_at_once_naming_the_first(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for i in range(2):
        (tmp_path / "in" / f"doc-{i}.pdf").write_bytes(make_pdf(1, seed=80 + i).data)
    first = ServiceProcess("run", bare_env(COLUMNS="200"), tmp_path / "logs", args=["in", "--timeout", "300"],
                           cwd=tmp_path)
    first.start()
    try:
        owner = tmp_path / ".docstream" / "kafka" / "broker.json"
        owner_pid = first.pid
        assert owner_pid is not None

        def _held() -> bool:
            # the first run is held (SIGSTOP) the moment its broker is up: two one-page documents could
            # otherwise finish, and free the folder, before the second run starts
            if not first.alive():
                return True
            if owner.exists():
                os.kill(owner_pid, signal.SIGSTOP)
                return True
            return False

        wait_until(_held, 120, "the first run's broker started")
        assert first.alive(), f"the first run ended before the second started:\n{first.tail()}"
        try:
            second = _docstream(tmp_path, "run", "in", "--timeout", "300", timeout_s=120)
        finally:
            os.kill(owner_pid, signal.SIGCONT)

        output = " ".join((second.stdout + second.stderr).split())
        assert second.returncode == 2, output[-3000:]
        assert "error state_dir_busy" in output, output[-3000:]
        assert f"in use by process {owner_pid}" in output, output[-3000:]
        assert "Traceback" not in output
        # the first run goes on undisturbed to its end
        code = first.proc.wait(300)  # type: ignore[union-attr]
        assert code == 0, first.tail()
    finally:
        first.stop(10)


def _results_by_model(db: Path) -> dict[str, set[str]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        rows = conn.execute("SELECT model_id, doc_id FROM document_results WHERE status = 'completed'").fetchall()
    found: dict[str, set[str]] = {}
    for model_id, doc_id in rows:
        found.setdefault(model_id, set()).add(doc_id)
    return found


def test_a_chunker_replay_under_a_new_model_in_the_runs_folder_processes_the_documents_again_beside_the_first(
    tmp_path: Path,
) -> None:
    (tmp_path / "in").mkdir()
    for i in range(2):
        (tmp_path / "in" / f"doc-{i}.pdf").write_bytes(make_pdf(2, seed=70 + i).data)
    _ok(_docstream(tmp_path, "run", "in", "--timeout", "300", timeout_s=400))
    db = tmp_path / ".docstream" / "docstream.db"
    first = _results_by_model(db)
    assert list(first) == ["all-MiniLM-L6-v2"] and len(first["all-MiniLM-L6-v2"]) == 2, first

    replayed = _ok(_docstream(tmp_path, "replay", "--service", "chunker", "--to-offset", "earliest", "--model",
                              "all-MiniLM-L6-v2@v2", "--yes", timeout_s=400))  # no option: ./.docstream's run

    assert "replayed 2 documents under model_id all-MiniLM-L6-v2@v2" in " ".join(replayed.stdout.split()), \
        replayed.stdout[-2000:]
    after = _results_by_model(db)
    assert after == {"all-MiniLM-L6-v2": first["all-MiniLM-L6-v2"], "all-MiniLM-L6-v2@v2": first["all-MiniLM-L6-v2"]}
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        chunks = dict(conn.execute("SELECT model_id, count(*) FROM chunks WHERE status = 'ok' GROUP BY model_id"))
    assert chunks["all-MiniLM-L6-v2@v2"] == chunks["all-MiniLM-L6-v2"] > 0, chunks
    assert not broker_jvms(tmp_path / ".docstream" / "kafka"), "the replay stopped the broker it started"
