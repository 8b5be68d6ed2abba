"""Services started in one folder, `docstream submit --wait` run from another (issue 20, item 2).

`docstream chunker`, `inference` and `reducer` run as processes with their working directory in
folder A and no DOCSTREAM_OBJECT_STORE__URL (nor reducer.data_dir): the defaults apply. `docstream
submit --wait` runs in folder B with the same HOME, so both resolve the same object store, under
HOME (a folder of the test, not the real home). Real Kafka and Cassandra.

The second case makes the failure real: a submit whose object store is not the services' writes
documents the chunker refuses to read (`fetch_failed`); `--wait` exits 5 and names the setting.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from docstream.settings import CassandraSettings, user_dir
from docstream.store import ResultStore
from docstream_cli.ops.submit_outcome import EXIT_OK, EXIT_SOURCE_UNREADABLE
from tests.fixtures.documents import make_pdf
from tests.fixtures.services import Pipeline, service_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_WAIT_S = 480


@dataclass(frozen=True)
class TwoFolders:
    pipeline: Pipeline
    store: ResultStore
    home: Path
    services_folder: Path
    user_folder: Path


@pytest.fixture(scope="module")
def two_folders(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TwoFolders]:
    """chunker, inference and reducer running in folder A with the default object store and data folder
    (on the session's keyspace, migrated by ``cassandra_store`` first)."""
    root = tmp_path_factory.mktemp("two-folders")
    home, services_folder, user_folder = root / "home", root / "a", root / "b"
    for folder in (home, services_folder, user_folder):
        folder.mkdir()
    env = service_env(kafka_bootstrap, f"twofolders-{uuid.uuid4().hex[:12]}", cassandra_settings, root)
    for name in ("DOCSTREAM_OBJECT_STORE__URL", "DOCSTREAM_REDUCER__DATA_DIR", "XDG_DATA_HOME"):
        env.pop(name, None)
    # HOME is the test's; the runtime cache stays the real one, so inference does not measure again
    env.update(HOME=str(home), XDG_CACHE_HOME=str(user_dir("cache").parent))
    pipeline = Pipeline(env, root / "logs", cwd=services_folder)
    try:
        pipeline.start("chunker", "inference", "reducer")
        yield TwoFolders(pipeline, cassandra_store, home, services_folder, user_folder)
    finally:
        pipeline.stop()


def _documents(folder: Path, count: int, seed: int) -> Path:
    folder.mkdir()
    for i in range(count):
        (folder / f"doc-{i}.pdf").write_bytes(make_pdf(1 + i % 2, seed=seed + i).data)
    return folder


def _submit_and_wait(two: TwoFolders, docs: Path, job_id: str, **env: str) -> tuple[int, str, str]:
    done = two.pipeline.cli("submit", str(docs), "--job-id", job_id, "--wait", "--timeout", str(_WAIT_S),
                            timeout_s=_WAIT_S + 60, cwd=two.user_folder, **env)
    two.pipeline.check_alive()
    return done.returncode, done.stdout, " ".join(done.stderr.split())


def test_a_submit_from_another_folder_completes_with_the_default_object_store(two_folders: TwoFolders) -> None:
    docs = _documents(two_folders.user_folder / "docs", 3, seed=700)
    job_id = f"twofolders-{uuid.uuid4().hex[:12]}"

    code, stdout, stderr = _submit_and_wait(two_folders, docs, job_id)

    assert code == EXIT_OK, f"{stdout}\n{stderr[-3000:]}"
    assert f"job {job_id} completed: 3 completed, 0 partial, 0 failed" in stdout
    job = two_folders.store.get_job(job_id)
    assert job is not None and (job.status, job.completed) == ("completed", 3)
    objects = two_folders.home / ".local" / "share" / "docstream" / "objects"  # HOME's, for both folders
    sources = {two_folders.store.get_document(row.doc_id).source_uri  # type: ignore[union-attr]
               for row in two_folders.store.iter_job_documents(job_id)}
    assert len(sources) == 3 and all(uri.startswith(objects.as_uri() + "/") for uri in sources), sources
    assert not (two_folders.services_folder / ".docstream").exists()
    assert not (two_folders.user_folder / ".docstream").exists()


def test_a_source_the_chunker_cannot_read_ends_wait_with_5_and_names_the_setting(two_folders: TwoFolders) -> None:
    docs = _documents(two_folders.user_folder / "other-docs", 2, seed=720)
    elsewhere = two_folders.user_folder / "not-the-services-objects"
    job_id = f"twofolders-{uuid.uuid4().hex[:12]}"

    code, stdout, stderr = _submit_and_wait(two_folders, docs, job_id, DOCSTREAM_OBJECT_STORE__URL=str(elsewhere))

    assert code == EXIT_SOURCE_UNREADABLE, f"{stdout}\n{stderr[-3000:]}"
    assert f"job {job_id} completed: 0 completed, 0 partial, 2 failed" in stdout
    assert "hint: 2 documents failed (fetch_failed)" in stderr, stderr
    assert {row.error_code for row in two_folders.store.iter_job_documents(job_id)} == {"fetch_failed"}
    for named in ("object_store.url", "DOCSTREAM_OBJECT_STORE__URL", "object_store.allowed_roots", str(elsewhere)):
        assert named in stderr, named
