"""`docstream run` end to end on the embedded stack (a single-node Kafka under the state dir + SQLite), as a user
runs it.

The first run, and the runs that fail, start the Kafka of their state dir as a user's run does (and must stop
it); the kill -9 test runs on the session's shared broker (``shared_broker_env``). tests/e2e/test_run_broker.py
holds the tests about the run's own broker.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.documents import (
    make_corrupt_pdf,
    make_encrypted_pdf,
    make_image_only_pdf,
    make_not_a_document,
    make_pdf,
)
from tests.fixtures.kafka import wait_until
from tests.fixtures.services import DOCSTREAM, ServiceProcess, bare_env, broker_jvms, shared_broker_env

pytestmark = pytest.mark.e2e

def _results(path: Path) -> dict[str, dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {Path(str(doc["filename"])).name: doc for doc in lines}


def test_run_reports_good_and_bad_documents_and_exits_non_zero(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"good-{i}.pdf").write_bytes(make_pdf(2 + i, seed=i, toc=True).data)
    bad = {
        "encrypted.pdf": ("encrypted", make_encrypted_pdf()),
        "truncated.pdf": ("corrupt", make_corrupt_pdf()),
        "scan.pdf": ("no_text", make_image_only_pdf()),
        "random.bin": ("not_a_document", make_not_a_document()),
    }
    for name, (_, data) in bad.items():
        (inputs / name).write_bytes(data)
    out = tmp_path / "not-yet" / "results.jsonl"  # its folder is made

    proc = subprocess.run(
        [DOCSTREAM, "run", str(inputs), "--out", str(out), "--state-dir", str(tmp_path / "state"), "--timeout", "400"],
        cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=480,
    )

    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = _results(out)
    assert len(results) == 7
    for i in range(3):
        doc = results[f"good-{i}.pdf"]
        assert doc["status"] == "completed"
        assert doc["chunk_count"] and int(str(doc["chunk_count"])) >= 1
        assert len(doc["embedding"]) == 384  # type: ignore[arg-type]
    for name, (code, _) in bad.items():
        assert results[name]["status"] == "failed", name
        assert results[name]["error_code"] == code, name
    assert "completed" in proc.stdout and "failed" in proc.stdout
    for name in bad:
        assert name in proc.stdout, f"summary names {name}"
    kafka = tmp_path / "state" / "kafka"  # the run's own broker: let go of (SIGTERM), its topics kept in the state dir
    wait_until(lambda: not broker_jvms(kafka), 60, "the run's broker to end")
    assert (kafka / "data" / "docstream.documents.completed-0").is_dir()


def _stored_chunk_ids(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT chunk_id FROM chunks WHERE status = 'ok'")}


def test_run_resumes_after_kill_without_embedding_a_stored_chunk_twice(tmp_path: Path, kafka_bootstrap: str) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i in range(8):
        (inputs / f"doc-{i}.pdf").write_bytes(make_pdf(4, seed=100 + i).data)
    state, out, log = tmp_path / "state", tmp_path / "results.jsonl", tmp_path / "embedded.log"
    arguments = [str(inputs), "--out", str(out), "--state-dir", str(state), "--timeout", "400"]
    command = [DOCSTREAM, "run", *arguments]
    env = shared_broker_env(kafka_bootstrap, "run-kill", DOCSTREAM_FAULTS__EMBED_LOG=str(log),
                            DOCSTREAM_INFERENCE__MAX_BATCH_SIZE="4")

    first = ServiceProcess("run", env, tmp_path / "logs", args=arguments, cwd=tmp_path)
    first.start()
    try:
        wait_until(lambda: not first.alive() or (log.exists() and len(log.read_text().split()) >= 20), 300,
                   "20 chunks embedded by the first run")
        assert first.alive(), f"the first run ended before it could be killed:\n{first.tail()}"
        first.kill9()  # the whole process group: the run and everything it started
    finally:
        first.stop(10)
    stored_before = _stored_chunk_ids(state / "docstream.db")
    embedded_before = log.read_text().split()
    assert stored_before, "some chunks were stored before the kill"

    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480)

    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    results = _results(out)
    assert len(results) == 8
    assert {doc["status"] for doc in results.values()} == {"completed"}
    embedded_after = log.read_text().split()[len(embedded_before):]
    assert not set(embedded_after) & stored_before, "a chunk stored before the kill was embedded again"
    all_chunks = _stored_chunk_ids(state / "docstream.db")
    assert all_chunks == set(embedded_before) | set(embedded_after)
    total = sum(int(str(doc["chunk_count"])) for doc in results.values())
    assert len(all_chunks) == total
    recomputed = len(set(embedded_before) & set(embedded_after))
    # only chunks in flight at the kill (embedded, not yet stored) may be computed twice
    assert recomputed <= len(set(embedded_before) - stored_before)


def _broken_model(folder: Path) -> Path:
    """The bundled model's folder with its weights replaced by garbage: the tokenizer loads, the model does not."""
    from docstream.models.files import resolve_model_path

    source = resolve_model_path(None)
    folder.mkdir()
    for item in source.iterdir():
        if item.name == "model.safetensors":
            (folder / item.name).write_bytes(b"these are not weights" * 100)
        else:
            (folder / item.name).symlink_to(item, target_is_directory=item.is_dir())
    return folder


def test_a_model_that_fails_to_load_fails_the_run_with_its_error(tmp_path: Path) -> None:
    (tmp_path / "one.pdf").write_bytes(make_pdf(1, seed=5).data)
    model = _broken_model(tmp_path / "broken-model")
    command = [DOCSTREAM, "run", str(tmp_path / "one.pdf"), "--model", str(model), "--state-dir",
               str(tmp_path / "state"), "--timeout", "300"]

    proc = subprocess.run(command, cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=360)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "error model_unavailable" in output or "error model_load_failed" in output, output[-3000:]
    assert "Traceback" not in output
    events = [json.loads(line) for line in (tmp_path / "state" / "run.log").read_text().splitlines()]
    assert any(e["event"] == "model_load_failed" for e in events)
    assert any(e["event"] == "embedded_broker_released" for e in events), "the run stopped what it started"
    wait_until(lambda: not broker_jvms(tmp_path / "state" / "kafka"), 60, "the run's broker to end")


def test_a_service_that_fails_to_start_fails_the_run_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "one.pdf").write_bytes(make_pdf(1, seed=6).data)
    state = tmp_path / "state"
    state.mkdir()
    (state / "reducer").write_text("a file where the reducer keeps its folder")  # its start fails
    command = [DOCSTREAM, "run", str(tmp_path / "one.pdf"), "--state-dir", str(state), "--timeout", "300"]

    proc = subprocess.run(command, cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=360)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "error service_failed: the reducer failed" in " ".join(output.split()), output[-3000:]
    assert "Traceback" not in output
    events = [json.loads(line) for line in (state / "run.log").read_text().splitlines()]
    assert any(e["event"] == "service_failed" and e["service"] == "reducer" for e in events)
    assert any(e["event"] == "embedded_broker_released" for e in events), "the run stopped what it started"
    wait_until(lambda: not broker_jvms(tmp_path / "state" / "kafka"), 60, "the run's broker to end")
