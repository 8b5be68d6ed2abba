"""After `docstream run`, the next commands a user types find that run's store, with no settings at all.

The run itself goes to the session's shared broker (``shared_broker_env``: settings that name a Kafka cluster,
a topic prefix and a reducer app id of its own); every command after it runs as a subprocess with no DOCSTREAM_*
variable (``bare_env``): the defaults point at a Cassandra, which may be up or down; each command must answer
from the run's SQLite file and say so, and ``dlq``/``replay`` read the broker and topics its ``run.json``
recorded. tests/e2e/test_run_broker.py has the readers of a run on its own broker.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from docstream.topics import Topics
from tests.fixtures.documents import make_pdf
from tests.fixtures.services import DOCSTREAM, bare_env, shared_broker_env

pytestmark = pytest.mark.e2e

_DIMS = 384  # the bundled all-MiniLM-L6-v2


def _docstream(cwd: Path, *args: str, timeout_s: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DOCSTREAM), *args], cwd=cwd, env=env or bare_env(COLUMNS="200"), capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _excerpt(text: str) -> str:
    """A chunk's words less a tenth at each end, about the overlap it shares with each neighbour.

    On the generated text, such an excerpt of every chunk finds its chunk first; a shorter one (the middle
    half) missed 3 chunks in 35 (measured). The committed examples/ repeat sentences across chunks too often
    for any excerpt to single one out.
    """
    words = text.split()
    cut = len(words) // 10
    return " ".join(words[cut: len(words) - cut])


@pytest.fixture(scope="module")
def run_env(kafka_bootstrap: str) -> dict[str, str]:
    """The settings of this module's runs: the shared broker, under a topic prefix of their own."""
    return shared_broker_env(kafka_bootstrap, "readers", COLUMNS="200")


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> tuple[Path, str]:
    """A folder where `docstream run in/` ran over three generated PDFs; its job id."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "in").mkdir()
    for i in range(3):
        (folder / "in" / f"report-{i}.pdf").write_bytes(make_pdf(3 + i, seed=40 + i, toc=True).data)
    run = _ok(_docstream(folder, "run", "in", "--timeout", "400", timeout_s=480, env=run_env))
    job_id = json.loads((folder / ".docstream" / "run.json").read_text())["job_id"]
    assert f"docstream status {job_id}" in run.stdout, "the run names the next commands"
    return folder, job_id


def _store_line(folder: Path) -> str:
    return f"store: sqlite {(folder / '.docstream' / 'docstream.db').resolve()} (docstream run of "


def _export(folder: Path, job_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    done = _ok(_docstream(folder, "results", job_id, "--chunks"))
    assert _store_line(folder) in done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # stdout holds the JSON Lines only
    return ([r for r in records if r["record"] == "document"], [r for r in records if r["record"] == "chunk"])


def test_results_with_chunks_come_from_the_runs_store(made_run: tuple[Path, str]) -> None:
    folder, job_id = made_run

    documents, chunks = _export(folder, job_id)

    assert sorted(Path(d["filename"]).name for d in documents) == [f"report-{i}.pdf" for i in range(3)]
    assert {d["status"] for d in documents} == {"completed"}
    assert len(chunks) == sum(d["chunk_count"] for d in documents) > 3
    for chunk in chunks:
        assert chunk["text"].strip() and chunk["token_count"] > 0
        assert 1 <= chunk["page_start"] <= chunk["page_end"]
        assert len(chunk["embedding"]) == _DIMS


def test_search_finds_the_chunk_its_query_was_written_from(made_run: tuple[Path, str]) -> None:
    folder, job_id = made_run
    _, chunks = _export(folder, job_id)
    target = max(chunks, key=lambda c: len(c["text"].split()))

    done = _ok(_docstream(folder, "search", _excerpt(target["text"]), "--json", "-k", "3"))

    assert _store_line(folder) in done.stderr
    hits = json.loads(done.stdout)
    assert hits[0]["chunk_id"] == target["chunk_id"], hits
    assert hits[0]["job_id"] == job_id


def _status_fields(stdout: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^\W*(\w[\w/ ]*?)\s*│\s*(\S[^│]*?)\s*│?\s*$", stdout, re.MULTILINE)}


def test_status_says_the_run_completed_with_its_counts(made_run: tuple[Path, str]) -> None:
    folder, job_id = made_run

    done = _ok(_docstream(folder, "status", job_id))

    assert _store_line(folder) in done.stderr
    fields = _status_fields(done.stdout)
    assert (fields["state"], fields["documents"], fields["completed"], fields["failed"]) == ("completed", "3", "3",
                                                                                              "0")


def test_state_dir_reads_the_run_from_another_folder(made_run: tuple[Path, str], tmp_path: Path) -> None:
    folder, job_id = made_run

    done = _ok(_docstream(tmp_path, "status", job_id, "--state-dir", str(folder / ".docstream")))

    assert _store_line(folder) in done.stderr
    assert _status_fields(done.stdout)["state"] == "completed"
    elsewhere = _docstream(tmp_path, "results", job_id, "--state-dir", str(tmp_path))
    assert elsewhere.returncode == 2 and "holds no docstream run" in elsewhere.stderr


def test_dlq_and_replay_read_the_topics_of_the_run_on_the_broker_it_recorded(
    made_run: tuple[Path, str], run_env: dict[str, str],
) -> None:
    folder, job_id = made_run
    bootstrap, prefix = run_env["DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS"], run_env["DOCSTREAM_KAFKA__TOPIC_PREFIX"]
    recorded = json.loads((folder / ".docstream" / "run.json").read_text())
    assert (recorded["broker"], recorded["topic_prefix"]) == (bootstrap, prefix)
    topics = Topics(prefix)
    documents, chunks = _export(folder, job_id)

    listed = _ok(_docstream(folder, "dlq", "list", topics.chunks))  # no settings: the run's broker and prefix
    planned = _ok(_docstream(folder, "replay", "--service", "inference", "--to-offset", "earliest", "--dry-run"))

    for done in (listed, planned):
        line = " ".join(done.stderr.split())
        assert f"broker: kafka {bootstrap} (docstream run of" in line and f"job {job_id})" in line, line
    assert not (folder / ".docstream" / "kafka").exists(), "a run on a named cluster has no broker of its own"
    assert f"{topics.chunks}.dlq: 0 records" in listed.stdout, listed.stdout
    assert f"replay inference: group {prefix}-inference on {topics.chunks} → earliest" in " ".join(
        planned.stdout.split()), planned.stdout
    total = re.search(r"│\s*total\s*│(?:\s*│){3}\s*(\d+)\s*│", planned.stdout)
    assert total is not None, planned.stdout
    assert int(total.group(1)) == len(chunks) == sum(d["chunk_count"] for d in documents)  # each chunk once
    assert "dry run: nothing changed" in planned.stdout


def test_run_with_chunks_writes_chunk_rows_to_parquet_beside_the_documents(
    made_run: tuple[Path, str], run_env: dict[str, str],
) -> None:
    folder, job_id = made_run
    _, exported = _export(folder, job_id)

    done = _ok(_docstream(folder, "run", "in", "--chunks", "--out", "out/results.parquet", "--timeout", "400",
                          timeout_s=480, env=run_env))  # the same job: resumed from the store, nothing embedded again

    assert "out/results.chunks.parquet" in done.stdout
    documents = pq.read_table(folder / "out" / "results.parquet")
    chunks = pq.read_table(folder / "out" / "results.chunks.parquet").to_pylist()
    assert documents.num_rows == 3
    assert sorted(c["chunk_id"] for c in chunks) == sorted(c["chunk_id"] for c in exported)
    assert all(c["text"] and c["token_count"] and c["page_start"] and len(c["embedding"]) == _DIMS for c in chunks)
    assert _status_fields(_ok(_docstream(folder, "status", job_id)).stdout)["state"] == "completed"
