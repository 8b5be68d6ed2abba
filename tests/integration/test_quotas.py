"""Quotas across API processes (docs/operations.md "Quotas and admission"), on real Kafka and Cassandra; and
the slots of documents that end on any path free, on both stores (issue 44).

Two `docstream api` processes serve one tenant whose quota is 5 documents in flight; 16 submissions of one
document each reach them at once, half through each. The store's admission lease and ledger decide, not a
process's memory: exactly 5 are admitted (202), the other 11 answer 429 with Retry-After and enqueue nothing.
"""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from docstream.avro import AvroSerde
from docstream.errors import FatalError, QuotaExceeded, RetryableError
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer
from docstream.records import DocumentSubmitted
from docstream.settings import CassandraSettings, FairnessSettings, Settings
from docstream.store import ResultStore
from docstream.store.base import ApiKeyRow, DocState, DocumentRow, JobRow
from docstream.tenants.admission import Slot, TenantLoad, day_of
from docstream.topics import Topics
from docstream_chunker.extraction import OcrPageStarted
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import ChunkRequest
from docstream_ingest.admission import admit
from docstream_ingest.apikeys import generate_api_key
from docstream_ingest.intake import IntakeClients, Upload, submit_uploads
from docstream_ingest.request import JobRequest
from tests.fixtures.contexts import intake_context
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


# -- quota slots end (issue 44): every terminal path frees a document's slot, on both stores -----------------------

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _fairness(tenant: str, **limits: int) -> FairnessSettings:
    return Settings().with_overrides(fairness={"tenants": {tenant: limits}}).fairness


def _in_flight(store: ResultStore, tenant: str) -> int:
    return store.tenant_load(tenant, day_of(T0)).documents_in_flight


class _NoExtraction:
    """The chunker's extractor where no document may be extracted (a cancelled job's are skipped first)."""

    def extract(self, request: ChunkRequest, *,
                on_ocr_page: Callable[[OcrPageStarted], None] | None = None) -> NoReturn:
        raise AssertionError(f"extracted {request.doc_id} of a cancelled job")

    def close(self) -> None:
        """Nothing to release."""


def test_a_cancelled_jobs_skipped_documents_free_their_slots(store: ResultStore) -> None:
    tenant, job_id = f"q-{uuid.uuid4().hex[:10]}", f"job-{uuid.uuid4().hex}"
    fairness = _fairness(tenant, max_documents_in_flight=QUOTA)
    submitted = [DocumentSubmitted(job_id=job_id, doc_id=f"{job_id}-{i}", source_uri=f"file:///objects/{i}",
                                   content_sha256=f"{i:064x}", size_bytes=10, submitted_at=T0, tenant=tenant)
                 for i in range(QUOTA)]
    admit(store, fairness, tenant, job_id, [s.doc_id for s in submitted], T0)
    store.upsert_job(JobRow(job_id, tenant, T0, "running", QUOTA))
    store.set_job_status(job_id, tenant, "cancelled", T0)
    with pytest.raises(QuotaExceeded):
        admit(store, fairness, tenant, f"{job_id}-next", ["next"], T0)
    handler = ChunkerHandler(Settings().chunker, Topics("q"), store, _NoExtraction(), limited=fairness.limited,
                             clock=lambda: T0 + timedelta(seconds=1))
    for record in submitted:
        assert handler.handle(record) == []
    assert {store.get_document(s.doc_id).status for s in submitted} == {"skipped"}  # type: ignore[union-attr]
    assert _in_flight(store, tenant) == 0
    admit(store, fairness, tenant, f"{job_id}-next", ["next"], T0)  # the next submission fits


def test_a_submission_whose_records_are_not_delivered_frees_its_slots(
    store: ResultStore, kafka_bootstrap: str, create_topics: Callable[..., list[str]], tmp_path: Path,
) -> None:
    tenant, prefix = f"q-{uuid.uuid4().hex[:10]}", f"quota-{uuid.uuid4().hex[:10]}"
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix).with_overrides(
        fairness={"tenants": {tenant: {"max_documents_in_flight": QUOTA}}},
        object_store={"url": str(tmp_path / "objects")})
    # the broker refuses every record of this topic: a real delivery failure
    create_topics(kafka_bootstrap, Topics(prefix).submitted, config={"max.message.bytes": "100"})
    producer = ReliableProducer(settings.kafka, overrides={"message.timeout.ms": 20_000})
    clients = IntakeClients(intake_context(settings), store, producer, AvroSerde(settings.kafka), flush_timeout_s=30.0,
                            clock=lambda: T0)
    uploads = [Upload(f"d{i}.txt", io.BytesIO(f"document {i} of a refused submission".encode())) for i in range(3)]
    try:
        with pytest.raises((FatalError, RetryableError)):
            submit_uploads(uploads, JobRequest(tenant=tenant), clients)
    finally:
        producer.close(timeout=5)
    assert _in_flight(store, tenant) == 0
    admit(store, settings.fairness, tenant, "job-next", [f"next-{i}" for i in range(QUOTA)], T0)  # all of it fits


def test_an_admission_at_the_limit_frees_the_slots_of_documents_that_ended(store: ResultStore) -> None:
    tenant, job_id = f"q-{uuid.uuid4().hex[:10]}", f"job-{uuid.uuid4().hex}"
    fairness = _fairness(tenant, max_documents_in_flight=QUOTA)
    states: dict[str, tuple[DocState, datetime]] = {
        "completed": ("completed", T0 + timedelta(minutes=1)),
        "skipped": ("skipped", T0 + timedelta(minutes=1)),
        "failed": ("failed", T0 + timedelta(minutes=1)),
        "chunked": ("chunked", T0 + timedelta(minutes=1)),  # still running
        "readmitted": ("completed", T0 - timedelta(hours=1)),  # ended before this admission: runs again
    }
    doc_ids = {name: f"{job_id}-{name}" for name in states}
    store.admit_documents(tenant, job_id, list(doc_ids.values()), T0)
    for name, (status, at) in states.items():
        store.upsert_document(DocumentRow(doc_ids[name], job_id, "file:///objects/x", "ab" * 32, status, at))
    # three ended without their slots freed (a reducer that never saw them): three new documents fit
    admit(store, fairness, tenant, f"{job_id}-next", ["n1", "n2", "n3"], T0 + timedelta(minutes=2))
    assert _in_flight(store, tenant) == QUOTA
    with pytest.raises(QuotaExceeded):
        admit(store, fairness, tenant, f"{job_id}-next", ["n4"], T0 + timedelta(minutes=2))


def test_released_slots_leave_flight_uncounted_and_in_flight_lists_admitted_rows_only(store: ResultStore) -> None:
    tenant, job_id = f"q-{uuid.uuid4().hex[:10]}", f"job-{uuid.uuid4().hex}"
    store.admit_documents(tenant, job_id, ["d1", "d2", "d3"], T0)
    store.set_document_tokens(tenant, "d1", 400)
    store.set_document_tokens(tenant, "replayed", 900)  # tokens alone: not a slot
    assert store.list_in_flight(tenant, 10) == [Slot(d, job_id, T0) for d in ("d1", "d2", "d3")]
    assert len(store.list_in_flight(tenant, 2)) <= 2
    store.release_documents(tenant, ["d1", "d2", "never-admitted"])
    store.release_documents(tenant, ["d1"])  # again: nothing changes
    assert store.tenant_load(tenant, day_of(T0)) == TenantLoad(1, 0, 0)  # no tokens counted on the day
    assert store.list_in_flight(tenant, 10) == [Slot("d3", job_id, T0)]
