"""Quotas across API processes (docs/operations.md "Quotas and admission"), on real Kafka and Cassandra.

Two `docstream api` processes serve one tenant whose quota is 5 documents in flight; 16 submissions of one
document each reach them at once, half through each. The store's admission lease and ledger decide, not a
process's memory: exactly 5 are admitted (202), the other 11 answer 429 with Retry-After and enqueue nothing.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from docstream.admission import day_of
from docstream.avro import AvroSerde
from docstream.kafka.admin import ensure_topics
from docstream.records import DocumentSubmitted
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream.store.base import ApiKeyRow
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.kafka import kafka_settings, read_topic
from tests.fixtures.services import free_port, http_status, running_pipeline

pytestmark = pytest.mark.integration

QUOTA = 5
SUBMISSIONS = 16


def test_two_api_processes_hold_one_tenants_quota_together(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    tenant = f"q-{uuid.uuid4().hex[:10]}"
    new = generate_api_key()
    cassandra_store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, datetime.now(UTC)))
    ports = [free_port(), free_port()]
    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "quota",
                          DOCSTREAM_FAIRNESS__TENANTS=json.dumps({tenant: {"max_documents_in_flight": QUOTA}})
                          ) as pipeline:
        ensure_topics(kafka_settings(kafka_bootstrap, topic_prefix=pipeline.prefix, partitions=3).kafka,
                      pipeline.topics)
        for i, port in enumerate(ports):
            pipeline.add(f"api-{i}", "api", DOCSTREAM_API__HOST="127.0.0.1", DOCSTREAM_API__PORT=str(port)).start()
        for port in ports:
            pipeline.until(lambda p=port: http_status(f"http://127.0.0.1:{p}/readyz") == 200, "the APIs to be ready",
                           120, poll_s=0.5)

        def submit(i: int) -> httpx.Response:
            return httpx.post(f"http://127.0.0.1:{ports[i % 2]}/v1/jobs",
                              headers={"Authorization": f"Bearer {new.key}"},
                              files=[("files", (f"d{i}.txt", f"document {i} of a burst".encode(), "text/plain"))],
                              timeout=60)

        with ThreadPoolExecutor(SUBMISSIONS) as pool:
            responses = list(pool.map(submit, range(SUBMISSIONS)))
        statuses = Counter(r.status_code for r in responses)
        assert statuses == {202: QUOTA, 429: SUBMISSIONS - QUOTA}, [r.text for r in responses if r.status_code >= 500]
        for refused in (r for r in responses if r.status_code == 429):
            assert refused.headers["retry-after"] == "5"
            assert refused.json()["error_code"] == "quota_exceeded"
            assert refused.json()["limit"] == "max_documents_in_flight"
        # both processes answered some of each
        assert {i % 2 for i, r in enumerate(responses) if r.status_code == 202} | {
            i % 2 for i, r in enumerate(responses) if r.status_code == 429} == {0, 1}

        load = cassandra_store.tenant_load(tenant, day_of(datetime.now(UTC)))
        assert load.documents_in_flight == QUOTA
        assert len(cassandra_store.list_jobs(tenant, limit=100)) == QUOTA  # a refused submission made no job
        records = read_topic(kafka_bootstrap, pipeline.topics.submitted, serde=AvroSerde(Settings().kafka),
                             expected=QUOTA, linger_s=2, timeout_s=60).records
        assert sum(1 for r in records if isinstance(r, DocumentSubmitted) and r.tenant == tenant) == QUOTA
        capacity = httpx.get(f"http://127.0.0.1:{ports[1]}/v1/capacity",
                             headers={"Authorization": f"Bearer {new.key}"}, timeout=30).json()
        assert (capacity["documents"], capacity["documents_in_flight"]) == (0, QUOTA)
        pipeline.check_alive()
