"""The API in front of the whole pipeline: submit over HTTP, poll to completion, fetch the results; cancel.

`docstream chunker`, `docstream inference` and `docstream reducer` run as subprocesses on the
real Kafka and the real Cassandra (tests/fixtures/services.py), under this test's own topic
prefix and Faust app id; the API runs in a uvicorn thread with the same settings.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from docstream.kafka.admin import ensure_topics
from docstream.settings import CassandraSettings
from docstream.store.base import ApiKeyRow, ResultStore
from docstream.topics import Topics
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.contexts import api_sections
from tests.fixtures.documents import make_not_a_document, make_pdf
from tests.fixtures.kafka import kafka_settings, wait_until
from tests.fixtures.services import Pipeline, service_env
from tests.integration.test_api import ServerThread

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3


def _job_when(client: httpx.Client, job_id: str, pipeline: Pipeline, done: set[str]) -> dict[str, Any]:
    """Poll GET /v1/jobs/{id} every 0.5 s, as a client would, until its status is in ``done`` (300 s at most)."""
    deadline = time.monotonic() + 300
    while True:
        pipeline.check_alive()
        body: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if body["status"] in done:
            return body
        assert time.monotonic() < deadline, f"job {job_id} still {body['status']} after 300 s: {body}"
        time.sleep(0.5)


def test_submit_poll_to_completion_and_fetch_results_and_a_cancelled_job_is_skipped(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    prefix = f"api-e2e-{uuid.uuid4().hex}"
    pipeline = Pipeline(service_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, partitions=PARTITIONS),
                        tmp_path)
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix, partitions=PARTITIONS).with_overrides(
        object_store={"url": str(tmp_path / "objects")},
        store={"backend": "cassandra"},
        cassandra=cassandra_settings.model_dump(),
    )
    ensure_topics(settings.kafka, Topics(prefix))
    tenant = f"e2e-{uuid.uuid4().hex[:12]}"
    new = generate_api_key()
    cassandra_store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, datetime.now(UTC)))
    pdfs = [make_pdf(2, seed=seed).data for seed in (41, 42)]

    with ServerThread(create_app(api_sections(settings), store=cassandra_store)) as server, \
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {new.key}"}, timeout=60) as client:
        # cancelled before any service runs: the chunker must skip all of it
        cancelled = client.post("/v1/jobs", files=[("files", ("c.pdf", make_pdf(1, seed=43).data, "x/y"))])
        cancelled_id = cancelled.json()["job_id"]
        assert client.post(f"/v1/jobs/{cancelled_id}/cancel").status_code == 202

        try:
            pipeline.start("chunker", "inference", "reducer")
            files = [("files", (f"doc-{i}.pdf", data, "application/pdf")) for i, data in enumerate(pdfs)]
            files.append(("files", ("notes.pdf", make_not_a_document(), "application/pdf")))
            accepted = client.post("/v1/jobs", files=files, data={"chunk_max_tokens": "64"})
            assert accepted.status_code == 202, accepted.text
            job_id = accepted.json()["job_id"]

            job = _job_when(client, job_id, pipeline, {"completed"})
            assert (job["document_count"], job["completed"], job["failed"], job["pending"]) == (3, 2, 1, 0)
            assert [e["filename"] for e in job["errors"]] == ["notes.pdf"]
            assert job["errors"][0]["error_code"]

            lines = [json.loads(line) for line in
                     client.get(f"/v1/jobs/{job_id}/results", params={"include": "chunks"}).text.splitlines()]
            documents = {d["filename"]: d for d in lines if d["record"] == "document"}
            chunks = [c for c in lines if c["record"] == "chunk"]
            assert sorted(documents) == ["doc-0.pdf", "doc-1.pdf", "notes.pdf"]
            for name in ("doc-0.pdf", "doc-1.pdf"):
                document = documents[name]
                assert document["status"] == "completed" and len(document["embedding"]) == 384
                mine = [c for c in chunks if c["doc_id"] == document["doc_id"]]
                assert [c["chunk_index"] for c in mine] == list(range(document["chunk_count"]))
                assert all(len(c["embedding"]) == 384 and c["token_count"] <= 64 for c in mine)
            assert documents["notes.pdf"]["status"] == "failed"

            wait_until(lambda: {(row.status, row.error_code) for row in cassandra_store.iter_job_documents(
                cancelled_id)} == {("skipped", "job_cancelled")}, 60, "the cancelled job's document to be skipped")
            assert client.get(f"/v1/jobs/{cancelled_id}").json()["status"] == "cancelled"
            assert client.get(f"/v1/jobs/{cancelled_id}/results").text == ""
        finally:
            pipeline.stop()
