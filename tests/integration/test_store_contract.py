"""The ResultStore contract, run against both backends (SQLite and the real Cassandra).

Each test writes rows under ids of its own (uuid4), so tests share the session keyspace
without seeing each other's rows. Embeddings read back as float32 values, timestamps as
aware UTC with millisecond precision (docs/storage.md).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from docstream.errors import InputError, StoreError
from docstream.settings import CassandraSettings
from docstream.store import (
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    ResultStore,
    SqliteStore,
)
from docstream.store import schema as store_schema
from docstream.store import sqlite as sqlite_module
from docstream.store.base import QueuedJobRow, SourceRow, TaskTally
from docstream.store.codec import float32_values
from docstream.store.rows import (
    CHUNK_ROWS,
    CHUNKS,
    DOCUMENT_RESULT_ROWS,
    DOCUMENT_RESULTS,
    JOB_DOCUMENT_ROWS,
    JOB_DOCUMENTS,
    MAPPINGS,
    Table,
)
from docstream.store.table_store import TableStore
from docstream.tasks.base import EntitySummary, Mention
from docstream.tenants.admission import TenantLoad
from docstream.tenants.usage import Usage
from tests.fixtures.cassandra import STORE_PAGE_SIZE, cluster_of, drop_keyspace

pytestmark = pytest.mark.integration

DIM = 384
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _vector(seed: int, dim: int = DIM) -> list[float]:
    values = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return float32_values((values / np.linalg.norm(values)).tolist())


def _job(job_id: str, tenant: str, **changes: object) -> JobRow:
    row = JobRow(
        job_id=job_id,
        tenant=tenant,
        created_at=T0,
        status="running",
        document_count=3,
        options={"chunker.max_tokens": "256", "priority": "high"},
        webhook_url="https://example.invalid/hook",
        completed=1,
        partial=0,
        failed=0,
        updated_at=T0 + timedelta(seconds=5),
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def _document(doc_id: str, job_id: str, **changes: object) -> DocumentRow:
    row = DocumentRow(
        doc_id=doc_id,
        job_id=job_id,
        source_uri=f"file:///objects/{doc_id}.pdf",
        content_sha256="ab" * 32,
        status="chunked",
        updated_at=T0,
        media_type="application/pdf",
        filename="report.pdf",
        page_count=12,
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def _result(doc_id: str, model_id: str, job_id: str, **changes: object) -> DocumentResultRow:
    row = DocumentResultRow(
        doc_id=doc_id,
        model_id=model_id,
        job_id=job_id,
        status="completed",
        chunk_count=7,
        failed_chunks=0,
        token_count=1234,
        embedding=_vector(1),
        chunker_settings="max_tokens=256,overlap=32",
        completed_at=T0 + timedelta(minutes=1),
        content_sha256="cd" * 32,
        runtime="torch/cpu/fp32/2t",
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def _chunk(doc_id: str, model_id: str, job_id: str, index: int, **changes: object) -> ChunkRow:
    row = ChunkRow(
        doc_id=doc_id,
        model_id=model_id,
        chunk_index=index,
        chunk_id=f"{doc_id}:{index}",
        job_id=job_id,
        text=f"chunk {index} of {doc_id}: Ünïcode ✓",
        page_start=index,
        page_end=index + 1,
        char_start=index * 100,
        char_end=index * 100 + 99,
        token_count=40 + index,
        embedding=_vector(1000 + index),
        heading="Introduction" if index % 2 else None,
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def _chunks(doc_id: str, model_id: str, job_id: str, count: int) -> list[ChunkRow]:
    return [_chunk(doc_id, model_id, job_id, i) for i in range(count)]


# -- lifecycle -------------------------------------------------------------------------


def test_migrate_twice_and_ping(store: ResultStore) -> None:
    store.migrate()
    store.ping()
    assert isinstance(store, ResultStore)


def test_migrations_recorded_once_each(store: ResultStore) -> None:
    before = store.applied_migrations()  # type: ignore[attr-defined]
    store.migrate()
    after = store.applied_migrations()  # type: ignore[attr-defined]
    assert after == before
    assert "001_init" in after
    assert "004_result_runtime" in after
    assert "005_usage" in after
    assert "006_provenance" in after
    assert "007_task_results" in after
    if not isinstance(store, SqliteStore):
        assert f"002_chunk_vectors@{DIM}" in after


# -- jobs ------------------------------------------------------------------------------


def test_job_round_trip_and_missing(store: ResultStore) -> None:
    row = _job(_uid("job"), _uid("tenant"))
    store.upsert_job(row)
    assert store.get_job(row.job_id) == row
    assert store.get_job(_uid("job")) is None


def test_job_upsert_overwrites(store: ResultStore) -> None:
    row = _job(_uid("job"), _uid("tenant"))
    store.upsert_job(row)
    changed = replace(
        row, status="completed", completed=2, failed=1, options={}, webhook_url=None, updated_at=T0 + timedelta(hours=1)
    )
    store.upsert_job(changed)
    assert store.get_job(row.job_id) == changed


USAGE = Usage(pages=12, chunks=40, tokens=9_876_543_210, model_us={"cpu": 3_000_000, "cuda:0": 7},
              stage_us={"chunker": 1_500_000, "inference": 3_200_000},
              chat_tokens={"prompt": 4_000_000_000, "completion": 12})


def test_job_and_job_document_usage_round_trip_and_none_stays_none(store: ResultStore) -> None:
    job = _job(_uid("job"), _uid("tenant"))
    store.upsert_job(job)
    assert store.get_job(job.job_id) == job and job.usage is None
    store.upsert_job(replace(job, usage=USAGE))
    assert store.get_job(job.job_id) == replace(job, usage=USAGE)
    assert store.list_jobs(job.tenant) == [replace(job, usage=USAGE)]
    document = JobDocumentRow(job_id=job.job_id, doc_id=_uid("doc"), status="chunked", updated_at=T0)
    store.upsert_job_document(document)
    assert list(store.iter_job_documents(job.job_id)) == [document]
    done = replace(document, status="completed", usage=replace(USAGE, pages=1))
    store.upsert_job_document(done)
    assert list(store.iter_job_documents(job.job_id)) == [done]


def test_job_timestamps_truncated_to_milliseconds_utc(store: ResultStore) -> None:
    naive = datetime(2024, 5, 1, 12, 0, 0, 123456)
    row = _job(_uid("job"), _uid("tenant"), created_at=naive, updated_at=None)
    store.upsert_job(row)
    found = store.get_job(row.job_id)
    assert found is not None
    assert found.created_at == datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert found.updated_at is None


def test_list_jobs_by_tenant_pages(store: ResultStore) -> None:
    tenant, other = _uid("tenant"), _uid("tenant")
    jobs = [_job(f"job-{i:02d}-{uuid.uuid4().hex[:6]}", tenant) for i in range(7)]
    for row in reversed(jobs):
        store.upsert_job(row)
    store.upsert_job(_job(_uid("job"), other))

    pages: list[list[JobRow]] = []
    after: str | None = None
    while True:
        page = store.list_jobs(tenant, limit=3, after=after)
        if not page:
            break
        pages.append(page)
        after = page[-1].job_id
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [row for page in pages for row in page] == sorted(jobs, key=lambda r: r.job_id)
    assert store.list_jobs(tenant, limit=50, after=jobs[5].job_id) == [jobs[6]]
    assert store.list_jobs(_uid("tenant")) == []
    assert [r.tenant for r in store.list_jobs(other)] == [other]


# -- documents -------------------------------------------------------------------------


@pytest.mark.parametrize("count", [STORE_PAGE_SIZE * 2, STORE_PAGE_SIZE * 2 + 1, 0])
def test_iter_job_documents_pages(store: ResultStore, count: int) -> None:
    job_id = _uid("job")
    rows = [
        JobDocumentRow(job_id=job_id, doc_id=f"doc-{i:03d}", status="submitted", updated_at=T0, filename=f"{i}.pdf")
        for i in range(count)
    ]
    for row in reversed(rows):
        store.upsert_job_document(row)
    store.upsert_job_document(JobDocumentRow(job_id=_uid("job"), doc_id="doc-000", status="failed", updated_at=T0))

    assert list(store.iter_job_documents(job_id, page_size=STORE_PAGE_SIZE)) == rows
    assert list(store.iter_job_documents(job_id, page_size=1)) == rows
    assert list(store.iter_job_documents(job_id)) == rows


def test_job_document_upsert_overwrites(store: ResultStore) -> None:
    job_id = _uid("job")
    first = JobDocumentRow(job_id=job_id, doc_id=_uid("doc"), status="chunking", updated_at=T0, filename="a.pdf")
    store.upsert_job_document(first)
    failed = replace(first, status="failed", error_code="encrypted", updated_at=T0 + timedelta(seconds=1))
    store.upsert_job_document(failed)
    assert list(store.iter_job_documents(job_id)) == [failed]


def _at_or_past_chunked(row: DocumentRow | JobDocumentRow) -> bool:
    return row.status in ("chunked", "completed")


def test_a_conditional_write_writes_over_no_row_or_a_row_not_kept_and_keeps_a_kept_one(store: ResultStore) -> None:
    doc = _document(_uid("doc"), _uid("job"), status="submitted", page_count=None)
    chunked = replace(doc, status="chunked", page_count=3, updated_at=T0 + timedelta(seconds=1))

    assert store.write_document_unless(doc, _at_or_past_chunked)  # no row
    assert store.write_document_unless(chunked, _at_or_past_chunked)  # submitted: not kept
    assert not store.write_document_unless(replace(chunked, page_count=99), _at_or_past_chunked)
    assert store.get_document(doc.doc_id) == chunked

    job_doc = JobDocumentRow(doc.job_id, doc.doc_id, "chunked", T0, filename="report.pdf")
    assert store.write_job_document_unless(job_doc, _at_or_past_chunked)  # no row
    assert not store.write_job_document_unless(replace(job_doc, filename="other.pdf"), _at_or_past_chunked)
    assert list(store.iter_job_documents(doc.job_id)) == [job_doc]


def test_a_conditional_write_over_a_row_a_task_entry_created_keeps_the_entry(store: ResultStore) -> None:
    job_id, doc_id = _uid("job"), _uid("doc")
    tally = TaskTally("completed")
    store.upsert_job_document_task(job_id, doc_id, "embed", tally, T0)  # a row with no status: submitted
    row = JobDocumentRow(job_id, doc_id, "chunked", T0 + timedelta(seconds=1), filename="a.pdf")

    assert store.write_job_document_unless(row, _at_or_past_chunked)

    assert list(store.iter_job_documents(job_id)) == [replace(row, tasks={"embed": tally})]


def test_a_conditional_write_is_decided_again_on_a_row_moved_on_between_its_read_and_its_write(
    store: ResultStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert isinstance(store, TableStore)
    doc = _document(_uid("doc"), _uid("job"), status="submitted")
    store.upsert_document(doc)
    job_doc = JobDocumentRow(doc.job_id, doc.doc_id, "submitted", T0)
    store.upsert_job_document(job_doc)
    completed_at = T0 + timedelta(seconds=5)
    read = store._get
    raced: list[str] = []

    def read_then_complete(table: Table, key: tuple[str, ...], operation: str) -> object:
        found = read(table, key, operation)
        if operation.endswith("_unless") and operation not in raced:  # the reducer completes it, after the read
            raced.append(operation)
            store.upsert_document(replace(doc, status="completed", updated_at=completed_at))
            store.upsert_job_document(replace(job_doc, status="completed", updated_at=completed_at))
        return found

    monkeypatch.setattr(store, "_get", read_then_complete)

    assert not store.write_document_unless(replace(doc, status="chunked"), _at_or_past_chunked)
    assert not store.write_job_document_unless(replace(job_doc, status="chunked"), _at_or_past_chunked)

    assert raced == ["write_document_unless", "write_job_document_unless"]
    monkeypatch.undo()
    assert store.get_document(doc.doc_id) == replace(doc, status="completed", updated_at=completed_at)
    assert [r.status for r in store.iter_job_documents(doc.job_id)] == ["completed"]


def test_document_round_trip_overwrite_and_missing(store: ResultStore) -> None:
    row = _document(_uid("doc"), _uid("job"))
    store.upsert_document(row)
    assert store.get_document(row.doc_id) == row
    failed = replace(row, status="failed", page_count=None, error_code="corrupt", error="xref table broken")
    store.upsert_document(failed)
    assert store.get_document(row.doc_id) == failed
    cleared = replace(failed, status="completed", error_code=None, error=None, media_type=None, filename=None)
    store.upsert_document(cleared)
    assert store.get_document(row.doc_id) == cleared
    assert store.get_document(_uid("doc")) is None


def test_a_sources_row_is_written_by_compare_and_set_alone_and_a_document_names_its_source(
    store: ResultStore,
) -> None:
    key = f"file:///in/{_uid('report')}.pdf"
    first = SourceRow("acme", key, _uid("doc"), "ab" * 32, _uid("job"), datetime(2026, 12, 4, 9, tzinfo=UTC),
                      generation=1)
    assert store.swap_source(None, first) == (True, first)
    assert store.get_source("acme", key) == first
    assert store.get_source("other", key) is None and store.get_source("acme", key + "x") is None
    assert store.swap_source(None, first) == (True, first)  # the same write again (a retry that had landed)
    second = replace(first, doc_id=_uid("doc"), content_sha256="cd" * 32, job_id=_uid("job"), generation=2)
    written, standing = store.swap_source(None, second)  # expects no row: there is one
    assert not written and standing == first
    assert store.swap_source(first, second) == (True, second)  # the next version is the current one
    rival = replace(second, doc_id=_uid("doc"), generation=3)
    written, standing = store.swap_source(first, rival)  # behind the times: the second one stands
    assert not written and standing is not None and standing.generation == 2
    assert store.get_source("acme", key) == second
    deleted = replace(second, deleted_through=2)
    assert store.swap_source(second, deleted) == (True, deleted)
    assert not store.get_source("acme", key).live  # type: ignore[union-attr]
    row = replace(_document(second.doc_id, second.job_id), source_key=key, previous_doc_id=first.doc_id)
    store.upsert_document(row)
    assert store.get_document(row.doc_id) == row
    store.set_document_generation(row.doc_id, 2)
    store.mark_document_deleted(row.doc_id, datetime(2026, 12, 4, 10, tzinfo=UTC))
    store.upsert_document(row)  # a writer that read the row before: its upsert leaves both columns
    found = store.get_document(row.doc_id)
    assert found is not None and found.generation == 2
    assert found.deleted_at == datetime(2026, 12, 4, 10, tzinfo=UTC)


def test_a_documents_rows_of_every_model_are_deleted_at_once(store: ResultStore) -> None:
    doc_id = _uid("doc")
    for model in ("m1", "m2"):
        store.upsert_document_result(_result(doc_id, model, "j"))
    store.delete_document_rows(doc_id)
    assert store.list_document_results(doc_id) == []
    store.delete_document_rows(doc_id)  # again: nothing to delete, nothing fails


def test_a_tenants_admitted_documents_count_until_they_end_and_their_tokens_count_on_their_day(
    store: ResultStore,
) -> None:
    tenant, other, job = _uid("tenant"), _uid("tenant"), _uid("job")
    day = "2026-12-04"
    assert store.tenant_load(tenant, day) == TenantLoad(0, 0, 0)
    store.admit_documents(tenant, job, ["d1", "d2", "d3"], T0)
    store.admit_documents(tenant, job, ["d3"], T0)  # again: the same rows
    store.admit_documents(other, job, ["d9"], T0)
    assert store.tenant_load(tenant, day) == TenantLoad(3, 0, 0)
    store.set_document_tokens(tenant, "d1", 500)
    store.set_document_tokens(tenant, "d2", 300)
    store.set_document_tokens(tenant, "never-admitted", 10_000)  # a replay's chunking: not counted
    assert store.tenant_load(tenant, day) == TenantLoad(3, 800, 0)
    store.end_document(tenant, "d1", day, 500)
    store.end_document(tenant, "d1", day, 500)  # a redelivered end: counted once
    store.end_document(tenant, "d2", "2026-12-05", 300)
    assert store.tenant_load(tenant, day) == TenantLoad(1, 0, 500)
    assert store.tenant_load(tenant, "2026-12-05") == TenantLoad(1, 0, 300)
    assert store.tenant_load(other, day) == TenantLoad(1, 0, 0)


def test_one_admission_at_a_time_holds_a_tenants_lease(store: ResultStore) -> None:
    tenant = _uid("tenant")
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait(30)
        with store.admission_lease(tenant):
            order.append("second")

    waiter = threading.Thread(target=second)
    waiter.start()
    with store.admission_lease(tenant):
        inside.set()
        time.sleep(0.5)  # the other waits for the lease meanwhile
        order.append("first")
    waiter.join(30)
    assert order == ["first", "second"]
    with store.admission_lease(_uid("tenant")), store.admission_lease(tenant):
        pass  # free again; another tenant's lease is its own


# -- where jobs stand: the lanes' queues and the reducers' throughput ---------------------------------------------


def _queued(lane: str, job_id: str, created_at: datetime, **changes: object) -> QueuedJobRow:
    row = QueuedJobRow(lane=lane, job_id=job_id, tenant="acme", created_at=created_at, waiting_tokens=12_000_000_000,
                       ended_documents=0, updated_at=created_at + timedelta(seconds=3))
    return replace(row, **changes)  # type: ignore[arg-type]


def test_a_lanes_queue_lists_its_jobs_by_created_at_then_job_id_across_pages(store: ResultStore) -> None:
    # lanes of their own: the reducers of this session's other tests write "interactive" and "batch"
    lane, other = _uid("lane"), _uid("lane")
    rows = [_queued(lane, f"job-{i}", T0 + timedelta(minutes=(7 - i) // 2)) for i in range(STORE_PAGE_SIZE * 2 + 1)]
    for row in rows:
        store.upsert_queued_job(row)
    beside = _queued(other, "job-0", T0)
    store.upsert_queued_job(beside)
    assert store.list_queue(lane) == sorted(rows, key=lambda row: (row.created_at, row.job_id))
    assert store.list_queue(other) == [beside]
    assert store.list_queue(_uid("lane")) == []


def test_an_upserted_queued_job_replaces_its_row_and_a_deleted_one_leaves_its_lane(store: ResultStore) -> None:
    lane, other = _uid("lane"), _uid("lane")
    first, second = _queued(lane, "job-1", T0), _queued(lane, "job-2", T0 + timedelta(seconds=1))
    store.upsert_queued_job(first)
    store.upsert_queued_job(second)
    store.upsert_queued_job(_queued(other, "job-1", T0))
    progressed = replace(first, waiting_tokens=300, ended_documents=4, updated_at=T0 + timedelta(minutes=1))
    store.upsert_queued_job(progressed)
    store.upsert_queued_job(progressed)  # again: the same row
    assert store.list_queue(lane) == [progressed, second]
    store.delete_queued_job(lane, "job-1")
    store.delete_queued_job(lane, "job-1")  # again: nothing to delete, nothing fails
    assert store.list_queue(lane) == [second]
    assert [row.job_id for row in store.list_queue(other)] == ["job-1"]  # the other lane's job-1 stays


def test_throughput_sums_a_deployments_reducer_processes_and_a_process_writes_over_its_own_row(
        store: ResultStore) -> None:
    now, name, other = datetime.now(UTC), _uid("deploy"), _uid("deploy")
    first, second = _uid("reducer"), _uid("reducer")
    assert store.throughput(name, now) == 0.0
    store.record_throughput(name, first, 100.0, now, 10)
    store.record_throughput(name, second, 250.5, now, 10)
    store.record_throughput(other, first, 7.0, now, 10)  # another deployment's
    assert store.throughput(name, now) == pytest.approx(350.5)
    store.record_throughput(name, first, 40.0, now, 10)
    assert store.throughput(name, now) == pytest.approx(290.5)
    assert store.throughput(other, now) == pytest.approx(7.0)


def test_a_throughput_row_past_its_ttl_is_not_counted(store: ResultStore) -> None:
    now, name = datetime.now(UTC), _uid("deploy")
    store.record_throughput(name, _uid("reducer"), 100.0, now, 2)
    assert store.throughput(name, now) == pytest.approx(100.0)
    if isinstance(store, SqliteStore):
        later = now + timedelta(seconds=3)
    else:
        time.sleep(3)  # Cassandra's TTL expires it
        later = datetime.now(UTC)
    assert store.throughput(name, later) == 0.0


def test_provenance_of_documents_and_chunks_round_trips(store: ResultStore) -> None:
    row = _document(_uid("doc"), _uid("job"))
    store.upsert_document(row)
    assert store.get_document(row.doc_id) == row and row.pages_by_verdict == {} and row.pages_by_source == {}
    chunked = replace(row, pages_by_verdict={"ok": 2, "no_text_layer": 1}, pages_by_source={"ocr": 1, "text_layer": 2})
    store.upsert_document(chunked)
    assert store.get_document(row.doc_id) == chunked
    model = _uid("model")
    chunks = [_chunk(row.doc_id, model, row.job_id, 0),
              _chunk(row.doc_id, model, row.job_id, 1, text_source="ocr", ocr_engine="tesseract",
                     page_verdicts=("no_text_layer", "ok"))]
    store.upsert_chunks(chunks)
    assert list(store.iter_chunks(row.doc_id, model)) == chunks
    assert chunks[0].text_source == "text_layer" and chunks[0].ocr_engine is None


def test_document_results_per_model_side_by_side(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    old = _result(doc_id, "model-a@1", job_id)
    new = _result(doc_id, "model-b@2", job_id, embedding=_vector(7, dim=8), status="partial", failed_chunks=2)
    store.upsert_document_result(old)
    store.upsert_document_result(new)
    assert store.get_document_result(doc_id, "model-a@1") == old
    assert store.get_document_result(doc_id, "model-b@2") == new
    assert store.get_document_result(doc_id, "model-c@1") is None

    failed = replace(old, status="failed", embedding=[], content_sha256=None, runtime=None)
    store.upsert_document_result(failed)
    assert store.get_document_result(doc_id, "model-a@1") == failed
    assert store.get_document_result(doc_id, "model-b@2") == new


def test_document_result_embedding_is_float32(store: ResultStore) -> None:
    row = _result(_uid("doc"), _uid("model"), _uid("job"), embedding=[0.1, 1 / 3, -2.5e-8])
    store.upsert_document_result(row)
    found = store.get_document_result(row.doc_id, row.model_id)
    assert found is not None
    assert found.embedding == float32_values([0.1, 1 / 3, -2.5e-8])


# -- chunks ----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [STORE_PAGE_SIZE * 2, STORE_PAGE_SIZE * 2 + 1, 1])
def test_iter_chunks_pages_and_count(store: ResultStore, count: int) -> None:
    doc_id, model_id, job_id = _uid("doc"), _uid("model"), _uid("job")
    rows = _chunks(doc_id, model_id, job_id, count)
    store.upsert_chunks(list(reversed(rows)))
    assert list(store.iter_chunks(doc_id, model_id)) == rows
    assert store.count_chunks(doc_id, model_id) == count
    assert store.count_chunks(doc_id, _uid("model")) == 0
    assert list(store.iter_chunks(_uid("doc"), model_id)) == []


def test_list_chunks_pages_by_chunk_index(store: ResultStore) -> None:
    doc_id, model_id, job_id = _uid("doc"), _uid("model"), _uid("job")
    rows = _chunks(doc_id, model_id, job_id, 5)
    store.upsert_chunks(list(reversed(rows)))
    assert store.list_chunks(doc_id, model_id, limit=2) == rows[:2]
    assert store.list_chunks(doc_id, model_id, limit=2, after=1) == rows[2:4]
    assert store.list_chunks(doc_id, model_id, limit=10, after=3) == rows[4:]
    assert store.list_chunks(doc_id, model_id, after=4) == []
    assert store.list_chunks(doc_id, _uid("model")) == []
    with pytest.raises(ValueError):
        store.list_chunks(doc_id, model_id, limit=0)


def test_chunks_of_two_models_do_not_collide(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    model_a, model_b = _uid("model-a"), _uid("model-b")
    rows_a = _chunks(doc_id, model_a, job_id, 4)
    rows_b = [
        replace(r, model_id=model_b, text=f"other {r.chunk_index}", embedding=_vector(r.chunk_index))
        for r in rows_a[:3]
    ]
    store.upsert_chunks(rows_a)
    store.upsert_chunks(rows_b)
    assert list(store.iter_chunks(doc_id, model_a)) == rows_a
    assert list(store.iter_chunks(doc_id, model_b)) == rows_b
    assert (store.count_chunks(doc_id, model_a), store.count_chunks(doc_id, model_b)) == (4, 3)


def test_chunk_upsert_overwrites(store: ResultStore) -> None:
    doc_id, model_id, job_id = _uid("doc"), _uid("model"), _uid("job")
    rows = _chunks(doc_id, model_id, job_id, 3)
    store.upsert_chunks(rows)
    changed = [
        replace(rows[0], text="rewritten", heading="New heading", embedding=_vector(99)),
        replace(rows[1], status="failed", error_code="model_error", embedding=[], heading=None),
    ]
    store.upsert_chunks(changed)
    assert list(store.iter_chunks(doc_id, model_id)) == [*changed, rows[2]]
    assert store.count_chunks(doc_id, model_id) == 3


def test_upsert_no_chunks_is_a_no_op(store: ResultStore) -> None:
    store.upsert_chunks([])
    assert store.count_chunks(_uid("doc"), _uid("model")) == 0


def test_concurrent_chunk_writers(store: ResultStore) -> None:
    model_id, job_id = _uid("model"), _uid("job")
    docs = [_uid("doc") for _ in range(4)]
    errors: list[BaseException] = []

    def _write(doc_id: str) -> None:
        try:
            for start in range(0, 10, 2):
                store.upsert_chunks(_chunks(doc_id, model_id, job_id, 10)[start : start + 2])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=_write, args=(d,)) for d in docs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert [store.count_chunks(d, model_id) for d in docs] == [10, 10, 10, 10]


def _snapshot(store: ResultStore, job_id: str, tenant: str, doc_ids: list[str], models: list[str]) -> dict[str, object]:
    return {
        "job": store.get_job(job_id),
        "jobs": store.list_jobs(tenant),
        "job_documents": list(store.iter_job_documents(job_id, page_size=2)),
        "documents": [store.get_document(d) for d in doc_ids],
        "results": [store.get_document_result(d, m) for d in doc_ids for m in models],
        "chunks": [list(store.iter_chunks(d, m)) for d in doc_ids for m in models],
        "counts": [store.count_chunks(d, m) for d in doc_ids for m in models],
    }


def test_writing_everything_twice_leaves_the_same_state(store: ResultStore) -> None:
    job_id, tenant = _uid("job"), _uid("tenant")
    doc_ids, models = [_uid("doc") for _ in range(3)], [_uid("model-a"), _uid("model-b")]

    def _write_all() -> None:
        store.upsert_job(_job(job_id, tenant))
        for doc_id in doc_ids:
            store.upsert_job_document(JobDocumentRow(job_id=job_id, doc_id=doc_id, status="completed", updated_at=T0))
            store.upsert_document(_document(doc_id, job_id))
            for model_id in models:
                store.upsert_document_result(_result(doc_id, model_id, job_id))
                store.upsert_chunks(_chunks(doc_id, model_id, job_id, 5))

    _write_all()
    first = _snapshot(store, job_id, tenant, doc_ids, models)
    _write_all()
    second = _snapshot(store, job_id, tenant, doc_ids, models)
    assert second == first
    assert first["counts"] == [5] * 6
    assert len(first["job_documents"]) == 3  # type: ignore[arg-type]


# -- task results (migration 007) --------------------------------------------------------

MENTIONS = (Mention("Ada Lovelace", "PERSON", 10, 22, 1, float32_values([0.87])[0]),
            Mention("Ünïon Bank", "ORG", 1_000_000_000_000, 1_000_000_000_010, 40, 1.0))
ENTITIES = (EntitySummary("PERSON", "ada lovelace", 3, (1, 2, 7)), EntitySummary("ORG", "ünïon bank", 1, (40,)))


def test_document_results_of_every_task_round_trip(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    entities = _result(doc_id, "spacy/en_core_web_sm@3.8.0", job_id, task="entities", embedding=[],
                       mentions=MENTIONS, entities=ENTITIES, mentions_truncated=True)
    classify = _result(doc_id, "classify/minilm@1/labels=ab12", job_id, task="classify", embedding=[],
                       label_scores={"finance": 0.7, "sport": 0.2, "weather": 0.1}, top_label="finance",
                       top_chunks=(4, 0, 2))
    custom = _result(doc_id, "risk@2", job_id, task="risk", embedding=[], output='{"risk": [0.5, "high"]}')
    for row in (entities, classify, custom):
        store.upsert_document_result(row)
        store.upsert_document_result(row)
        assert store.get_document_result(doc_id, row.model_id) == row
    embed = _result(doc_id, "minilm@1", job_id)
    store.upsert_document_result(embed)
    assert (embed.task, embed.label_scores, embed.mentions, embed.output) == ("embed", {}, (), None)
    assert store.get_document_result(doc_id, embed.model_id) == embed
    cleared = replace(entities, mentions=(), entities=(), mentions_truncated=False)
    store.upsert_document_result(cleared)
    assert store.get_document_result(doc_id, entities.model_id) == cleared


def test_chunks_of_every_task_round_trip(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    classify = [_chunk(doc_id, "classify@1", job_id, i, task="classify", embedding=[],
                       label_scores={"finance": float32_values([0.1 * i])[0], "sport": 0.5}) for i in range(3)]
    cut = replace(MENTIONS[0], cut=True)
    entities = [_chunk(doc_id, "ner@1", job_id, 0, task="entities", embedding=[], mentions=(cut, MENTIONS[1])),
                _chunk(doc_id, "ner@1", job_id, 1, task="entities", embedding=[])]
    custom = [_chunk(doc_id, "risk@2", job_id, 0, task="risk", embedding=[], output="0.25")]
    store.upsert_chunks(classify + entities + custom)
    assert list(store.iter_chunks(doc_id, "classify@1")) == classify
    # a mention's cut is not stored
    assert list(store.iter_chunks(doc_id, "ner@1")) == [replace(entities[0], mentions=MENTIONS), entities[1]]
    assert store.list_chunks(doc_id, "risk@2") == custom
    assert store.count_chunks(doc_id, "ner@1") == 2


def test_list_document_results_one_row_per_model_by_model_id(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    models = ["m-c", "m-a", "m-b"]
    for task, model_id in zip(["embed", "classify", "entities"], models, strict=True):
        store.upsert_document_result(_result(doc_id, model_id, job_id, task=task))
    store.upsert_document_result(_result(_uid("doc"), "m-a", job_id))
    found = store.list_document_results(doc_id)
    assert [(r.model_id, r.task) for r in found] == [("m-a", "classify"), ("m-b", "entities"), ("m-c", "embed")]
    assert found[0] == store.get_document_result(doc_id, "m-a")
    assert store.list_document_results(_uid("doc")) == []


EMBED_DONE = TaskTally("completed", Usage(pages=2, chunks=5, tokens=900, model_us={"cpu": 4_000}))
ENTITIES_PARTIAL = TaskTally("partial", Usage(chunks=5, stage_us={"inference": 77}))


def test_job_document_tasks_are_set_one_entry_at_a_time(store: ResultStore) -> None:
    job_id = _uid("job")
    row = JobDocumentRow(job_id=job_id, doc_id=_uid("doc"), status="chunked", updated_at=T0, filename="a.pdf")
    store.upsert_job_document(row)
    later = T0 + timedelta(seconds=3)
    store.upsert_job_document_task(job_id, row.doc_id, "embed", EMBED_DONE, T0 + timedelta(seconds=2))
    store.upsert_job_document_task(job_id, row.doc_id, "entities", ENTITIES_PARTIAL, later)
    both = replace(row, updated_at=later, tasks={"embed": EMBED_DONE, "entities": ENTITIES_PARTIAL})
    assert list(store.iter_job_documents(job_id)) == [both]
    # the same entry again changes nothing; another value for one task replaces only that entry
    store.upsert_job_document_task(job_id, row.doc_id, "entities", ENTITIES_PARTIAL, later)
    assert list(store.iter_job_documents(job_id)) == [both]
    redone = TaskTally("completed")
    store.upsert_job_document_task(job_id, row.doc_id, "entities", redone, later)
    assert store.list_job_documents(job_id) == [replace(both, tasks={"embed": EMBED_DONE, "entities": redone})]
    with pytest.raises(InputError):
        store.upsert_job_document_task(job_id, row.doc_id, "Not a name'", redone, later)


def test_upsert_job_document_leaves_the_tasks_alone(store: ResultStore) -> None:
    job_id = _uid("job")
    row = JobDocumentRow(job_id=job_id, doc_id=_uid("doc"), status="chunked", updated_at=T0)
    store.upsert_job_document(row)
    store.upsert_job_document_task(job_id, row.doc_id, "embed", EMBED_DONE, T0)
    done = replace(row, status="completed", usage=EMBED_DONE.usage, updated_at=T0 + timedelta(seconds=9))
    store.upsert_job_document(done)
    assert list(store.iter_job_documents(job_id)) == [replace(done, tasks={"embed": EMBED_DONE})]


def test_update_job_document_status_sets_only_its_columns(store: ResultStore) -> None:
    job_id = _uid("job")
    row = JobDocumentRow(job_id=job_id, doc_id=_uid("doc"), status="chunked", updated_at=T0, filename="a.pdf",
                         error_code="old_code")
    store.upsert_job_document(row)
    store.upsert_job_document_task(job_id, row.doc_id, "embed", EMBED_DONE, T0)
    later = T0 + timedelta(minutes=1)
    store.update_job_document_status(job_id, row.doc_id, "partial", None, USAGE, later)
    expected = replace(row, status="partial", error_code=None, usage=USAGE, updated_at=later,
                       tasks={"embed": EMBED_DONE})
    assert list(store.iter_job_documents(job_id)) == [expected]
    store.update_job_document_status(job_id, row.doc_id, "failed", "model_error", None, later)
    assert store.list_job_documents(job_id) == [replace(expected, status="failed", error_code="model_error",
                                                        usage=None)]


def test_task_and_status_writes_create_a_missing_row(store: ResultStore) -> None:
    """The ingest writes the row first; a task entry or a status that comes first still lands (no status: submitted)."""
    job_id, doc_a, doc_b = _uid("job"), "doc-a", "doc-b"
    store.upsert_job_document_task(job_id, doc_a, "embed", EMBED_DONE, T0)
    store.update_job_document_status(job_id, doc_b, "completed", None, None, T0)
    assert list(store.iter_job_documents(job_id)) == [
        JobDocumentRow(job_id=job_id, doc_id=doc_a, status="submitted", updated_at=T0, tasks={"embed": EMBED_DONE}),
        JobDocumentRow(job_id=job_id, doc_id=doc_b, status="completed", updated_at=T0),
    ]
    store.upsert_job_document(JobDocumentRow(job_id=job_id, doc_id=doc_a, status="chunked", updated_at=T0,
                                             filename="a.pdf"))
    assert store.list_job_documents(job_id, limit=1)[0].tasks == {"embed": EMBED_DONE}


def test_concurrent_task_entries_never_overwrite_each_other(store: ResultStore) -> None:
    job_id, doc_ids = _uid("job"), [f"doc-{i}" for i in range(3)]
    tasks = [f"task-{i}" for i in range(6)]
    errors: list[BaseException] = []

    def _write(task: str) -> None:
        try:
            for doc_id in doc_ids:
                store.upsert_job_document_task(job_id, doc_id, task, TaskTally("completed"), T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=_write, args=(task,)) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert [sorted(row.tasks) for row in store.iter_job_documents(job_id)] == [tasks] * 3


# -- migration 007 over a store at 006 ----------------------------------------------------

_BEFORE_007 = {table.name: table.columns[:count] for table, count in ((DOCUMENT_RESULTS, 12), (CHUNKS, 18))}


def _at_006(dialect: str) -> list[store_schema.Migration]:
    return [m for m in store_schema.load_migrations(dialect) if m.version < "007"]  # type: ignore[arg-type]


def _write_as_006(store: TableStore, result: DocumentResultRow, chunk: ChunkRow, entry: JobDocumentRow) -> None:
    """Rows in the 006 shape, written through the backend's own upsert with the columns 006 had."""
    encoding = store._encoding
    old_results = Table("document_results", _BEFORE_007["document_results"], DOCUMENT_RESULTS.key)
    store._upsert(old_results, DOCUMENT_RESULT_ROWS.to_columns(result, encoding)[:12], "test")
    old_chunks = Table("chunks", _BEFORE_007["chunks"], CHUNKS.key)
    store._upsert(old_chunks, CHUNK_ROWS.to_columns(chunk, encoding, encoded={"embedding": b""})[:18], "test")
    # job_documents as 006 had it: without chat_tokens (010)
    kept = [i for i, name in enumerate(JOB_DOCUMENTS.columns) if name != "chat_tokens"]
    old_entries = Table("job_documents", tuple(JOB_DOCUMENTS.columns[i] for i in kept), JOB_DOCUMENTS.key)
    values = JOB_DOCUMENT_ROWS.to_columns(entry, encoding)
    store._upsert(old_entries, tuple(values[i] for i in kept), "test")


def _check_upgraded(store: ResultStore, result: DocumentResultRow, chunk: ChunkRow, entry: JobDocumentRow) -> None:
    assert store.get_document_result(result.doc_id, result.model_id) == result
    assert store.list_document_results(result.doc_id) == [result]
    assert list(store.iter_chunks(chunk.doc_id, chunk.model_id)) == [chunk]
    assert list(store.iter_job_documents(entry.job_id)) == [entry]
    store.upsert_job_document_task(entry.job_id, entry.doc_id, "classify", EMBED_DONE, T0)
    assert store.list_job_documents(entry.job_id)[0].tasks == {"classify": EMBED_DONE}


def _old_rows() -> tuple[DocumentResultRow, ChunkRow, JobDocumentRow]:
    doc_id, job_id = _uid("doc"), _uid("job")
    return (_result(doc_id, "minilm@1", job_id), _chunk(doc_id, "minilm@1", job_id, 0, embedding=[]),
            JobDocumentRow(job_id=job_id, doc_id=doc_id, status="completed", updated_at=T0, filename="a.pdf"))


def test_sqlite_migration_007_upgrades_a_store_at_006(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        monkeypatch.setattr(sqlite_module, "load_migrations", _at_006)
        store.migrate()
        assert "007_task_results" not in store.applied_migrations()
        old = _old_rows()
        _write_as_006(store, *old)
        monkeypatch.undo()
        assert store.pending_migrations() == [m.version for m in store_schema.load_migrations("sql")
                                              if m.version >= "007"]
        store.migrate()
        _check_upgraded(store, *old)
    finally:
        store.close()


def test_cassandra_migration_007_upgrades_a_keyspace_at_006(
    cassandra_settings: CassandraSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docstream.store import cassandra as cassandra_module
    from docstream.store.cassandra import CassandraStore

    settings = cassandra_settings.model_copy(update={"keyspace": f"{cassandra_settings.keyspace}_up"})
    store = CassandraStore(settings, dimensions=(8,), page_size=STORE_PAGE_SIZE)
    try:
        monkeypatch.setattr(cassandra_module, "load_migrations", _at_006)
        store.migrate()
        assert "007_task_results" not in store.applied_migrations()
        old = _old_rows()
        _write_as_006(store, *old)
        monkeypatch.undo()
        store.migrate()
        assert "007_task_results" in store.applied_migrations()
        _check_upgraded(store, *old)
    finally:
        store.close()
        drop_keyspace(settings)


# -- search ----------------------------------------------------------------------------


def _searchable(store: ResultStore) -> tuple[str, str, str, list[ChunkRow]]:
    model_id, job_a, job_b = _uid("model"), _uid("job"), _uid("job")
    rows = _chunks(_uid("doc"), model_id, job_a, 6) + _chunks(_uid("doc"), model_id, job_b, 6)
    rows = [replace(row, embedding=_vector(2000 + i)) for i, row in enumerate(rows)]
    rows[3] = replace(rows[3], status="failed", error_code="model_error", embedding=[])
    store.upsert_chunks(rows)
    return model_id, job_a, job_b, rows


def test_search_finds_the_known_vector_first(store: ResultStore) -> None:
    model_id, _, _, rows = _searchable(store)
    target = rows[8]
    hits = store.search(target.embedding, model_id, k=3)
    assert len(hits) == 3
    assert hits[0].chunk == target
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.chunk.model_id == model_id for h in hits)


def test_a_retired_versions_results_under_one_model_are_deleted_and_no_search_finds_them(store: ResultStore) -> None:
    model_id, _, _, rows = _searchable(store)
    retired, kept = rows[0].doc_id, rows[6].doc_id
    other_model = _uid("model")
    store.upsert_chunks([replace(rows[0], model_id=other_model)])
    for doc_id in (retired, kept):
        store.upsert_document_result(_result(doc_id, model_id, rows[0].job_id))
    store.delete_results(retired, model_id)
    assert list(store.iter_chunks(retired, model_id)) == [] and store.get_document_result(retired, model_id) is None
    hits = store.search(rows[1].embedding, model_id, k=50)
    assert {h.chunk.doc_id for h in hits} == {kept}  # only the other document's chunks are found
    assert store.count_chunks(kept, model_id) == 6 and store.get_document_result(kept, model_id) is not None
    assert [r.model_id for r in store.iter_chunks(retired, other_model)] == [other_model]  # another model's stay
    store.delete_results(retired, model_id)  # again, and of what never was: nothing changes
    store.delete_results(_uid("doc"), model_id)
    assert store.count_chunks(kept, model_id) == 6


def test_search_respects_k_and_skips_chunks_without_embedding(store: ResultStore) -> None:
    model_id, _, _, rows = _searchable(store)
    assert len(store.search(rows[0].embedding, model_id, k=1)) == 1
    everything = store.search(rows[0].embedding, model_id, k=50)
    assert sorted((h.chunk.doc_id, h.chunk.chunk_index) for h in everything) == sorted(
        (r.doc_id, r.chunk_index) for r in rows if r.embedding
    )


def test_search_filters_by_job(store: ResultStore) -> None:
    model_id, job_a, job_b, rows = _searchable(store)
    target = rows[9]  # a job_b row
    hits = store.search(target.embedding, model_id, k=4, job_id=job_a)
    assert len(hits) == 4
    assert {h.chunk.job_id for h in hits} == {job_a}
    assert target not in [h.chunk for h in hits]
    own = store.search(target.embedding, model_id, k=2, job_id=job_b)
    assert own[0].chunk == target
    assert store.search(target.embedding, model_id, k=2, job_id=_uid("job")) == []


def test_search_of_unknown_model_or_dimension_is_empty(store: ResultStore) -> None:
    model_id, _, _, rows = _searchable(store)
    assert store.search(rows[0].embedding, _uid("model"), k=3) == []
    assert store.search(_vector(5, dim=12), model_id, k=3) == []


def test_search_other_dimension_side_by_side(store: ResultStore) -> None:
    doc_id, job_id = _uid("doc"), _uid("job")
    small_model = _uid("model-16")
    small = [_chunk(doc_id, small_model, job_id, i, embedding=_vector(50 + i, dim=16)) for i in range(4)]
    big_model = _uid("model-384")
    big = _chunks(doc_id, big_model, job_id, 2)
    store.upsert_chunks(small + big)
    hits = store.search(small[2].embedding, small_model, k=2)
    assert hits[0].chunk == small[2]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert store.search(big[1].embedding, big_model, k=1)[0].chunk == big[1]


def test_search_refuses_bad_queries(store: ResultStore) -> None:
    with pytest.raises(ValueError, match="k must be"):
        store.search(_vector(1), _uid("model"), k=0)
    with pytest.raises(ValueError, match="zero vector"):
        store.search([0.0] * DIM, _uid("model"))
    with pytest.raises(ValueError, match="non-empty"):
        store.search([], _uid("model"))


# -- failures --------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(params=["sqlite", "cassandra"])
def unreachable_store(request: pytest.FixtureRequest, tmp_path: Path) -> ResultStore:
    if request.param == "sqlite":
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("a file where the store's folder should be")
        store: ResultStore = SqliteStore(blocker / "store.db")
    else:
        from docstream.store.cassandra import CassandraStore

        store = CassandraStore(
            CassandraSettings.model_validate(
                {"contact_points": ["127.0.0.1"], "port": _closed_port(), "request_timeout_s": 2.0}
            )
        )
    request.addfinalizer(store.close)
    return store


def test_unreachable_store_raises_store_error(unreachable_store: ResultStore) -> None:
    with pytest.raises(StoreError) as caught:
        unreachable_store.ping()
    assert caught.value.code in {"store_unavailable", "store_timeout"}
    with pytest.raises(StoreError):
        unreachable_store.upsert_chunks(_chunks(_uid("doc"), _uid("model"), _uid("job"), 1))


# -- the migrated tables against the row mappings ------------------------------------------------------


def test_the_cassandra_migrations_give_every_table_a_column_for_every_field_its_mapping_writes(
    cassandra_store: ResultStore, cassandra_settings: CassandraSettings
) -> None:
    """SQLite's: ``tests/unit/lib/records/test_schema_ties.py``. jobs_by_tenant holds a copy of every jobs row."""
    cluster = cluster_of(cassandra_settings)
    try:
        found = cluster.connect().execute(
            "SELECT table_name, column_name FROM system_schema.columns WHERE keyspace_name = %s",
            (cassandra_settings.keyspace,), timeout=60)
        columns: dict[str, set[str]] = {}
        for row in found:
            columns.setdefault(row.table_name, set()).add(row.column_name)
    finally:
        cluster.shutdown()
    missing = [f"{table}.{column}" for mapping in MAPPINGS
               for table in (mapping.table.name, *(("jobs_by_tenant",) if mapping.table.name == "jobs" else ()))
               for column in mapping.table.columns + mapping.table.element_columns
               if column not in columns.get(table, set())]
    assert missing == []
