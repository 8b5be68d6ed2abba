"""`docstream run` with the embed model behind an endpoint (a real Infinity server), then with the local model.

On the embedded stack (SQLite, and the session's shared broker: ``shared_broker_env``): the endpoint run
completes every document under ``endpoint/all-MiniLM-L6-v2``; a second run in the same folder, on the same topics,
with the local model adds its results beside them (a job of its own, under the local model's model_id), and the
two document vectors agree.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docstream.store import SqliteStore
from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.services import DOCSTREAM, shared_broker_env

pytestmark = pytest.mark.e2e

PAGES = {
    "shipping": [["The freight company moved its containers through the northern port.",
                  "Shipping costs rose for the third quarter in a row."],
                 ["The warehouse handled twice the orders it was built for."]],
    "biology": [["Photosynthesis converts light energy into chemical energy in the leaves."],
                ["The cell divides after its chromosomes are copied.", "Mitochondria make most of its energy."]],
}


def _run(folder: Path, env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(DOCSTREAM), "run", "in", "--timeout", "300"], cwd=folder,
                          env={**env, **extra}, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _job_id(folder: Path) -> str:
    return str(json.loads((folder / ".docstream" / "run.json").read_text())["job_id"])


def test_an_endpoint_run_and_a_local_run_sit_side_by_side(tmp_path: Path, infinity: Any, kafka_bootstrap: str) -> None:
    (tmp_path / "in").mkdir()
    for name, pages in PAGES.items():
        (tmp_path / "in" / f"{name}.pdf").write_bytes(make_pdf_of_paragraphs(pages).data)
    env = shared_broker_env(kafka_bootstrap, "endpoint", COLUMNS="200")
    done = _run(tmp_path, env, DOCSTREAM_INFERENCE__ENDPOINT__URL=infinity.url,
                DOCSTREAM_INFERENCE__ENDPOINT__API_KEY=infinity.api_key)
    assert infinity.api_key not in done.stdout + done.stderr  # the key is never logged
    endpoint_job = _job_id(tmp_path)
    _run(tmp_path, env)  # the local model, same folder: a job of its own, its results beside the endpoint's
    local_job = _job_id(tmp_path)
    assert local_job != endpoint_job
    store = SqliteStore(tmp_path / ".docstream" / "docstream.db")
    try:
        by_job = {job: {row.filename: row.doc_id for row in store.iter_job_documents(job)}
                  for job in (endpoint_job, local_job)}
        assert set(by_job[endpoint_job]) == set(by_job[local_job]) and len(by_job[local_job]) == len(PAGES)
        for filename, doc_id in by_job[endpoint_job].items():
            results = {r.model_id: r for r in store.list_document_results(doc_id)}
            results.update({r.model_id: r for r in store.list_document_results(by_job[local_job][filename])})
            assert set(results) == {"endpoint/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"}, filename
            assert {r.status for r in results.values()} == {"completed"}
            remote = np.asarray(results["endpoint/all-MiniLM-L6-v2"].embedding)
            local = np.asarray(results["all-MiniLM-L6-v2"].embedding)
            assert remote.shape == local.shape == (384,)
            cosine = float(remote @ local / (np.linalg.norm(remote) * np.linalg.norm(local)))
            assert cosine >= 0.999
    finally:
        store.close()
