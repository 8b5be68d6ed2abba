"""The reducer's agents (docstream_reducer.agents) over dict tables, a fake store and a fake sink."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
import pytest

from docstream.avro import AvroSchema, AvroSerde, find_schemas_dir, frame_single_object
from docstream.errors import FatalError, PoisonRecord, StoreError
from docstream.metrics import Metrics
from docstream.records import ChunkResult, DocumentChunked, DocumentCompleted, JobStatus
from docstream.settings import RetrySettings, Settings
from docstream.store import DocumentResultRow, DocumentRow, JobDocumentRow, JobRow
from docstream.store.base import ChunkRow, QueuedJobRow, TaskTally
from docstream.tenants.usage import Usage
from docstream_reducer.agents import CompletedRelay, DocumentReducer, Incoming, JobReducer, StoreCalls
from docstream_reducer.aggregation import DocumentState, decode_entry
from tests.fixtures.clock import FakeClock

RESULTS, COMPLETED, JOBS, BY_JOB = "t.chunks.results", "t.documents.completed", "t.jobs", "t-by-job"
LEGACY_RESULTS = "t.chunks.embedded"
MAPPED = "t.documents.mapped"
T0 = datetime(2024, 5, 17, tzinfo=UTC)
SERDE = AvroSerde(Settings().kafka)


@dataclass
class _Sent:
    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None
    headers: list[tuple[str, bytes]] | None
    transactional: bool


@dataclass
class FakeSink:
    sent: list[_Sent] = field(default_factory=list)

    async def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None, transactional: bool = False) -> None:
        self.sent.append(_Sent(topic, key, value, partition, headers, transactional))

    def records(self, topic: str) -> list[Any]:
        return [SERDE.deserialize(s.value, topic) for s in self.sent if s.topic == topic and s.value]


@dataclass
class FakeStore:
    """The few ResultStore methods the agents call, in dicts; ``fail`` makes the next calls raise."""

    jobs: dict[str, JobRow] = field(default_factory=dict)
    documents: dict[str, DocumentRow] = field(default_factory=dict)
    results: dict[tuple[str, str], DocumentResultRow] = field(default_factory=dict)
    job_documents: dict[tuple[str, str], JobDocumentRow] = field(default_factory=dict)
    queue: dict[tuple[str, str], QueuedJobRow] = field(default_factory=dict)
    chunks: dict[tuple[str, str, int], ChunkRow] = field(default_factory=dict)
    fail: int = 0
    calls: int = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise StoreError("cassandra timeout")

    def get_job(self, job_id: str) -> JobRow | None:
        self._maybe_fail()
        return self.jobs.get(job_id)

    def upsert_job(self, row: JobRow) -> None:
        self._maybe_fail()
        self.jobs[row.job_id] = row

    def get_document(self, doc_id: str) -> DocumentRow | None:
        self._maybe_fail()
        return self.documents.get(doc_id)

    def upsert_document(self, row: DocumentRow) -> None:
        self.documents[row.doc_id] = row

    def upsert_document_result(self, row: DocumentResultRow) -> None:
        self._maybe_fail()
        self.results[(row.doc_id, row.model_id)] = row

    def upsert_job_document(self, row: JobDocumentRow) -> None:
        old = self.job_documents.get((row.job_id, row.doc_id))
        self.job_documents[(row.job_id, row.doc_id)] = replace(row, tasks=old.tasks if old else {})

    def upsert_job_document_task(self, job_id: str, doc_id: str, task: str, tally: TaskTally,
                                 updated_at: datetime) -> None:
        self._maybe_fail()
        old = self.job_documents.get((job_id, doc_id)) or JobDocumentRow(job_id, doc_id, "submitted", updated_at)
        self.job_documents[(job_id, doc_id)] = replace(old, tasks={**old.tasks, task: tally})

    def update_job_document_status(self, job_id: str, doc_id: str, status: Any, error_code: str | None,
                                   usage: Usage | None, updated_at: datetime) -> None:
        old = self.job_documents.get((job_id, doc_id)) or JobDocumentRow(job_id, doc_id, "submitted", updated_at)
        self.job_documents[(job_id, doc_id)] = replace(old, status=status, error_code=error_code, usage=usage,
                                                       updated_at=updated_at)

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        self._maybe_fail()
        yield from (row for (d, m, _), row in sorted(self.chunks.items()) if (d, m) == (doc_id, model_id))

    def write_chunk(self, record: ChunkResult) -> ChunkResult:
        """The row the inference service writes before it produces ``record``."""
        self.chunks[(record.doc_id, record.model_id, record.chunk_index)] = ChunkRow(
            record.doc_id, record.model_id, record.chunk_index, record.chunk_id, record.job_id, "text",
            record.page_start, record.page_end, 0, 4, record.token_count, list(record.embedding),
            status=record.status, task=record.task or "embed", output=record.output)
        return record

    def iter_job_documents(self, job_id: str, *, page_size: int = 500) -> Iterator[JobDocumentRow]:
        self._maybe_fail()
        yield from (row for (job, _), row in sorted(self.job_documents.items()) if job == job_id)

    def upsert_queued_job(self, row: QueuedJobRow) -> None:
        self._maybe_fail()
        self.queue[(row.lane, row.job_id)] = row

    def delete_queued_job(self, lane: str, job_id: str) -> None:
        self._maybe_fail()
        self.queue.pop((lane, job_id), None)


async def _no_sleep(_: float) -> None:
    return None


def _calls(store: FakeStore, attempts: int = 3) -> StoreCalls:
    retry = RetrySettings(max_attempts=attempts, base_delay_ms=1, max_delay_ms=2)
    return StoreCalls(store, retry, sleep=_no_sleep, rng=random.Random(0))  # type: ignore[arg-type]


def _chunk(doc_id: str, index: int, count: int, *, ok: bool = True, job_id: str = "j1") -> ChunkResult:
    return ChunkResult(
        job_id=job_id, doc_id=doc_id, chunk_id=f"{doc_id}-{index}", chunk_index=index, chunk_count=count,
        model_id="m", status="ok" if ok else "failed", token_count=2, page_start=1, page_end=1,
        embedded_at=T0 + timedelta(seconds=index), embedding=[1.0, float(index)] if ok else [],
        error_code=None if ok else "model_error",
    )


def _msg(value: bytes, *, partition: int = 0, offset: int = 0, ts_ms: int = 1_000, topic: str = RESULTS,
         key: bytes = b"k") -> Incoming:
    return Incoming(topic=topic, partition=partition, offset=offset, timestamp_ms=ts_ms, key=key, value=value)


def _encode(record: Any, topic: str = RESULTS) -> bytes:
    return SERDE.serialize(record, topic)


def _documents(store: FakeStore, sink: FakeSink, table: dict[str, Any], ttl_ms: int = 10_000,
               max_message_bytes: int = 8 * 1024 * 1024) -> DocumentReducer:
    return DocumentReducer(table, SERDE, _calls(store), sink, COMPLETED, document_step_topic=MAPPED,
                           marker_ttl_ms=ttl_ms, max_message_bytes=max_message_bytes)


def test_documents_complete_once_with_rows_written_and_output_on_the_source_partition() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    store.documents["a"] = DocumentRow("a", "j1", "file:///a.pdf", "ab" * 32, "chunked", T0, filename="a.pdf",
                                       page_count=3)
    reducer = _documents(store, sink, table)
    records = [_chunk("a", i, 3) for i in range(3)] + [_chunk("b", 0, 2), _chunk("b", 1, 2, ok=False)]
    records = records + records[:2]
    random.Random(3).shuffle(records)

    async def run() -> None:
        for offset, record in enumerate(records):
            await reducer.handle(_msg(_encode(record), partition=2, offset=offset))

    asyncio.run(run())
    outputs: list[DocumentCompleted] = sink.records(COMPLETED)
    assert sorted((o.doc_id, o.status) for o in outputs) == [("a", "completed"), ("b", "partial")]
    assert all(s.partition == 2 and s.transactional and s.key in (b"a", b"b") for s in sink.sent)
    a = next(o for o in outputs if o.doc_id == "a")
    assert (a.filename, a.source_uri, a.page_count, a.content_sha256) == ("a.pdf", "file:///a.pdf", 3, "ab" * 32)
    assert store.results[("a", "m")].embedding == pytest.approx([1.0, 1.0])
    assert store.documents["a"].status == "completed"
    assert store.job_documents[("j1", "b")].status == "partial"
    assert table["a|m"]["kind"] == "done"
    assert table["b|m"]["kind"] == "state" and table["b|m"]["completed_ms"] == 1_000  # partial: sums kept


def _as_chunk_embedded(record: ChunkResult) -> bytes:
    """``record`` as an inference service of the release before the rename wrote it: the last ChunkEmbedded schema
    (schemas/history/ChunkEmbedded.v5.avsc), single-object encoding with its fingerprint."""
    path = find_schemas_dir() / "history" / "ChunkEmbedded.v5.avsc"
    old = AvroSchema.from_json(json.loads(path.read_text(encoding="utf-8")), path)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old.parsed, record.to_record())
    return frame_single_object(old.fingerprint, body.getvalue())


def test_a_document_whose_results_arrive_on_both_result_topics_completes_once() -> None:
    """A rolling upgrade: some of a document's chunks come from an inference instance of the release before
    (ChunkEmbedded on the legacy topic), the others from this one (ChunkResult on chunks.results), one of them on
    both (redelivered). The documents agent reads both topics; the document completes once, with every chunk."""
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table)
    chunks = [_chunk("a", i, 3) for i in range(3)]
    incoming = [
        _msg(_as_chunk_embedded(chunks[0]), topic=LEGACY_RESULTS, partition=1, offset=7),
        _msg(_encode(chunks[1]), topic=RESULTS, partition=1, offset=0),
        _msg(_encode(chunks[0]), topic=RESULTS, partition=1, offset=1),
        _msg(_as_chunk_embedded(chunks[2]), topic=LEGACY_RESULTS, partition=1, offset=8),
    ]

    async def run() -> None:
        for msg in incoming:
            await reducer.handle(msg)

    asyncio.run(run())
    [completed] = sink.records(COMPLETED)
    assert (completed.doc_id, completed.status, completed.chunk_count, completed.failed_chunks) == ("a", "completed",
                                                                                                    3, 0)
    assert store.results[("a", "m")].embedding == pytest.approx([1.0, 1.0])
    assert [s.partition for s in sink.sent] == [1] and not any(s.topic.endswith(".dlq") for s in sink.sent)


def test_a_generate_document_left_a_document_step_goes_to_the_document_stage_with_no_row_written() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table)

    def generated(doc_id: str, index: int, count: int) -> ChunkResult:
        output = {"kind": "summarize", "text": f"{doc_id} part {index}", "prompt_tokens": 9, "completion_tokens": 2}
        return store.write_chunk(replace(_chunk(doc_id, index, count), embedding=[], task="generate",
                                         tasks=["generate"], output=json.dumps(output)))

    async def run() -> None:
        for offset, record in enumerate([generated("long", 0, 2), generated("long", 1, 2), generated("one", 0, 1)]):
            await reducer.handle(_msg(_encode(record), offset=offset))

    asyncio.run(run())
    [pending] = sink.records(MAPPED)
    assert pending.doc_id == "long" and json.loads(pending.output or "{}")["document_step"] == "pending"
    assert ("long", "m") not in store.results and ("j1", "long") not in store.job_documents  # the stage's to write
    [done] = sink.records(COMPLETED)
    assert done.doc_id == "one" and json.loads(done.output or "{}")["summary"] == "one part 0"
    assert store.results[("one", "m")].task == "generate"
    assert table["long|m"]["kind"] == "done"  # the reducer's part is done: a redelivered chunk changes nothing
    assert [s["text"] for s in json.loads(pending.output or "{}")["chunk_summaries"]] == ["long part 0", "long part 1"]
    assert "long part" not in json.dumps(table)  # the answers were read back from the chunk rows, never kept


def test_a_document_output_over_the_record_limit_fails_with_output_too_large_and_the_reducer_goes_on() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table, max_message_bytes=64 * 1024)  # records of 48 KiB at most

    def generated(doc_id: str, index: int, count: int, text: str) -> ChunkResult:
        output = {"kind": "summarize", "text": text, "prompt_tokens": 9, "completion_tokens": 2}
        return store.write_chunk(replace(_chunk(doc_id, index, count), embedding=[], task="generate",
                                         tasks=["generate"], output=json.dumps(output)))

    records = [generated("big", i, 20, "w" * 4096) for i in range(20)]  # 80 KiB of answers
    records += [generated("small", i, 2, "fine") for i in range(2)]
    records += [replace(_chunk("wide", 0, 1), embedding=[0.5] * 16_000)]  # an embedding of 64 KB as float32

    async def run() -> None:
        for offset, record in enumerate(records):
            await reducer.handle(_msg(_encode(record), offset=offset))

    asyncio.run(run())  # raises nothing: the agent goes on to the next documents
    done = {c.doc_id: c for c in sink.records(COMPLETED)}
    assert sorted(done) == ["big", "wide"]
    for doc_id in ("big", "wide"):
        assert (done[doc_id].status, done[doc_id].error_code) == ("failed", "output_too_large")
        assert store.results[(doc_id, "m")].status == "failed"  # the rows say so too
    assert json.loads(done["big"].output or "{}") == {"kind": "summarize", "prompt_tokens": 180,
                                                     "completion_tokens": 40}  # the bill stays
    assert done["wide"].embedding == [] and done["wide"].output is None
    assert [r.doc_id for r in sink.records(MAPPED)] == ["small"]
    assert all(len(s.value or b"") <= 48 * 1024 for s in sink.sent)
    assert not [s for s in sink.sent if s.topic.endswith(".dlq")]


@pytest.mark.parametrize("exactly_once", [True, False])
def test_the_completion_marker_is_written_before_the_record_only_under_exactly_once(exactly_once: bool) -> None:
    """Exactly-once: a Faust commit while the send is awaited must take the marker with the record
    (else a crash repeats the document); at-least-once: the record first (else a crash loses it)."""
    table: dict[str, Any] = {}
    seen_at_send: list[bool] = []

    class _Watching(FakeSink):
        async def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None,
                       headers: list[tuple[str, bytes]] | None = None, transactional: bool = False) -> None:
            if topic == COMPLETED:
                seen_at_send.append(any(v.get("kind") == "done" for v in table.values()))
            await super().send(topic, key, value, partition=partition, headers=headers, transactional=transactional)

    reducer = DocumentReducer(table, SERDE, _calls(FakeStore()), _Watching(), COMPLETED, document_step_topic=MAPPED,
                               exactly_once=exactly_once)

    async def run() -> None:
        for offset in range(2):
            await reducer.handle(_msg(_encode(_chunk("a", offset, 2)), offset=offset))

    asyncio.run(run())
    assert seen_at_send == [exactly_once]
    assert [v["kind"] for v in table.values()] == ["done"]


def test_a_replayed_failed_chunk_completes_a_partial_document_again() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table, ttl_ms=60_000)

    async def run() -> None:
        for index, ok in ((0, True), (1, False), (2, True)):
            await reducer.handle(_msg(_encode(_chunk("a", index, 3, ok=ok)), ts_ms=1_000 + index))
        await reducer.handle(_msg(_encode(_chunk("a", 1, 3)), ts_ms=9_000))  # the dead letter, replayed
        await reducer.handle(_msg(_encode(_chunk("a", 1, 3)), ts_ms=9_500))  # and once more: a duplicate

    asyncio.run(run())
    outputs: list[DocumentCompleted] = sink.records(COMPLETED)
    assert [(o.status, o.failed_chunks) for o in outputs] == [("partial", 1), ("completed", 0)]
    assert store.results[("a", "m")].status == "completed"
    assert store.job_documents[("j1", "a")].status == "completed"
    assert table["a|m"]["kind"] == "done"


def test_poison_records_go_to_the_dlq_with_headers() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table)

    async def run() -> None:
        await reducer.handle(_msg(b"not avro", offset=7))
        await reducer.handle(_msg(_encode(_chunk("a", 0, 3)), offset=8))
        await reducer.handle(_msg(_encode(_chunk("a", 1, 4)), offset=9))
        await reducer.handle(_msg(_encode(replace(_chunk("a", 0, 3), chunk_index=5)), offset=10))
        await reducer.handle(_msg(_encode(JobStatus("j", "running", 1, T0)), offset=11))

    asyncio.run(run())
    dlq = [s for s in sink.sent if s.topic == RESULTS + ".dlq"]
    codes = [dict(s.headers or [])["error_code"].decode() for s in dlq]
    assert codes == ["schema_unknown_format", "chunk_count_mismatch", "chunk_index_out_of_range",
                     "schema_unexpected_record"]
    headers = dict(dlq[0].headers or [])
    assert (headers["original_offset"], headers["original_topic"], headers["service"]) == (b"7", RESULTS.encode(),
                                                                                          b"reducer")
    assert dlq[0].value == b"not avro" and not dlq[0].transactional
    assert not [s for s in sink.sent if s.topic == COMPLETED]


def test_markers_catch_redeliveries_then_expire_on_event_time_per_partition() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table, ttl_ms=1_000)

    async def run() -> None:
        await reducer.handle(_msg(_encode(_chunk("a", 0, 1)), partition=0, ts_ms=10_000))
        await reducer.handle(_msg(_encode(_chunk("a", 0, 1)), partition=0, ts_ms=10_500))  # redelivery: ignored
        assert len(sink.sent) == 1
        await reducer.handle(_msg(_encode(_chunk("z", 0, 2)), partition=1, ts_ms=99_000))  # another partition
        assert "a|m" in table
        await reducer.handle(_msg(_encode(_chunk("y", 0, 2)), partition=0, ts_ms=11_001))

    asyncio.run(run())
    assert "a|m" not in table
    assert set(table) == {"z|m", "y|m"}


def test_rebuild_markers_indexes_restored_markers() -> None:
    table: dict[str, Any] = {
        "a|m": {"v": 1, "kind": "done", "status": "completed", "chunk_count": 1, "completed_ms": 5, "partition": 0},
        "b|m": {"v": 1, "kind": "done", "status": "partial", "chunk_count": 2, "completed_ms": 6, "partition": 1},
    }
    reducer = _documents(FakeStore(), FakeSink(), table, ttl_ms=100)
    assert reducer.rebuild_markers() == 2

    async def run() -> None:
        await reducer.handle(_msg(_encode(_chunk("c", 0, 2)), partition=0, ts_ms=1_000))

    asyncio.run(run())
    assert "a|m" not in table and "b|m" in table


def _completed(doc_id: str, status: str = "completed", job_id: str = "j1") -> DocumentCompleted:
    return DocumentCompleted(job_id=job_id, doc_id=doc_id, status=status, completed_at=T0)  # type: ignore[arg-type]


def test_relay_rekeys_by_job_and_dead_letters_garbage() -> None:
    sink = FakeSink()
    relay = CompletedRelay(SERDE, sink, BY_JOB)

    async def run() -> None:
        await relay.handle(_msg(_encode(_completed("d1", "failed"), COMPLETED), topic=COMPLETED))
        await relay.handle(_msg(b"\x00\x00", topic=COMPLETED))

    asyncio.run(run())
    forwarded, dead = sink.sent
    assert (forwarded.topic, forwarded.key) == (BY_JOB, b"j1")
    assert json.loads(forwarded.value or b"") == {"job_id": "j1", "doc_id": "d1", "status": "failed",
                                                  "error_code": None, "usage": Usage().to_json(),
                                                  "task": None, "tasks": []}
    assert dead.topic == COMPLETED + ".dlq"


def _by_job(doc_id: str, status: str = "completed", job_id: str = "j1") -> Incoming:
    body = {"job_id": job_id, "doc_id": doc_id, "status": status, "error_code": None}
    return _msg(json.dumps(body).encode(), topic=BY_JOB, key=job_id.encode())


def _jobs(store: FakeStore, sink: FakeSink, clock: FakeClock, jobs: dict[str, Any], docs: dict[str, Any]) -> JobReducer:
    return JobReducer(jobs, docs, SERDE, _calls(store), sink, JOBS, by_job_topic=BY_JOB, throttle_s=1.0,
                      clock=clock, reconcile_after_s=30.0)


def _job_row(count: int, job_id: str = "j1") -> JobRow:
    return JobRow(job_id, "acme", T0, "running", count)


def test_job_counts_each_document_once_and_publishes_one_final_status() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(4)
    reducer = _jobs(store, sink, clock, jobs, docs)
    inputs: Sequence[tuple[str, str]] = [("a", "completed"), ("a", "completed"), ("b", "failed"), ("c", "partial"),
                                         ("b", "failed"), ("d", "completed"), ("d", "completed"), ("a", "completed")]

    async def run() -> None:
        for doc_id, status in inputs:
            await reducer.handle(_by_job(doc_id, status))
            clock.now += 0.1

    asyncio.run(run())
    statuses: list[JobStatus] = sink.records(JOBS)
    finals = [s for s in statuses if s.final]
    assert len(finals) == 1 and statuses[-1] is finals[0]
    assert (finals[0].completed, finals[0].partial, finals[0].failed, finals[0].state) == (2, 1, 1, "completed")
    assert (finals[0].tenant, finals[0].document_count) == ("acme", 4)
    assert len(statuses) == 2  # the first change, then (throttled) only the final one
    row = store.jobs["j1"]
    assert (row.status, row.completed, row.partial, row.failed) == ("completed", 2, 1, 1)
    assert docs == {}  # per-document entries go once the job is final
    assert jobs["j1"]["final"] is True


def test_throttled_changes_are_flushed_by_the_timer() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(10)
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a"))
        await reducer.handle(_by_job("b"))
        await reducer.flush()
        assert len(sink.sent) == 1
        clock.now += 1.0
        await reducer.flush()
        await reducer.flush()

    asyncio.run(run())
    statuses: list[JobStatus] = sink.records(JOBS)
    assert [s.completed for s in statuses] == [1, 2]
    assert not any(s.final for s in statuses)
    assert store.jobs["j1"].completed == 2


def test_job_of_unknown_size_waits_for_its_row() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a"))
        reads = store.calls
        await reducer.handle(_by_job("b"))
        assert store.calls == reads  # no lookup on every record
        store.jobs["j1"] = _job_row(3)
        clock.now += 10
        await reducer.handle(_by_job("c"))

    asyncio.run(run())
    statuses: list[JobStatus] = sink.records(JOBS)
    assert statuses[-1].final and statuses[-1].completed == 3 and statuses[-1].document_count == 3


def test_records_after_the_final_status_are_ignored() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(1)
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a"))
        await reducer.handle(_by_job("a"))
        await reducer.handle(_by_job("late", "failed"))

    asyncio.run(run())
    assert len(sink.sent) == 1 and docs == {}


def test_growing_job_is_not_final_before_its_row_says_so() -> None:
    class _GrowingStore(FakeStore):
        def get_job(self, job_id: str) -> JobRow | None:
            self.calls += 1
            return _job_row(1 if self.calls == 1 else 2)  # a document was added after the first read

    store, sink, clock, jobs, docs = _GrowingStore(), FakeSink(), FakeClock(100.0), {}, {}
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a"))  # 1 of 1 by the first read; the confirming read says 2
        assert not any(s.final for s in sink.records(JOBS))
        await reducer.handle(_by_job("b"))

    asyncio.run(run())
    statuses: list[JobStatus] = sink.records(JOBS)
    assert [s.final for s in statuses] == [False, True]
    assert (statuses[-1].completed, statuses[-1].document_count) == (2, 2)


def test_a_stalled_job_is_reconciled_from_its_job_documents_rows() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(3)
    for doc_id, status in (("a", "completed"), ("b", "failed"), ("c", "partial")):
        store.job_documents[("j1", doc_id)] = JobDocumentRow("j1", doc_id, status, T0)  # type: ignore[arg-type]
    store.job_documents[("j2", "z")] = JobDocumentRow("j2", "z", "completed", T0)
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a"))
        await reducer.handle(_by_job("b", "failed"))  # "c" was lost on the way
        clock.now += 29
        await reducer.flush()
        assert not [s for s in sink.sent if s.topic == BY_JOB]
        clock.now += 1
        await reducer.flush()
        requests = [s for s in sink.sent if s.topic == BY_JOB]
        assert len(requests) == 1 and requests[0].key == b"j1"
        await reducer.flush()  # backs off: no second request at once
        assert len([s for s in sink.sent if s.topic == BY_JOB]) == 1
        await reducer.handle(_msg(requests[0].value or b"", topic=BY_JOB, key=b"j1"))

    asyncio.run(run())
    final = sink.records(JOBS)[-1]
    assert final.final and (final.completed, final.partial, final.failed) == (1, 1, 1)
    assert docs == {}


def _usage(tokens: int, model_us: int = 1_000) -> Usage:
    return Usage(pages=1, chunks=2, tokens=tokens, model_us={"cpu": model_us}, stage_us={"inference": model_us})


def _by_job_usage(doc_id: str, usage: Usage, status: str = "completed") -> Incoming:
    body = {"job_id": "j1", "doc_id": doc_id, "status": status, "error_code": None, "usage": usage.to_json()}
    return _msg(json.dumps(body).encode(), topic=BY_JOB, key=b"j1")


def test_a_job_adds_up_its_documents_usage_once_in_its_status_row_and_metrics() -> None:
    from docstream.metrics import Metrics

    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(3)
    metrics = Metrics()
    reducer = JobReducer(jobs, docs, SERDE, _calls(store), sink, JOBS, by_job_topic=BY_JOB, throttle_s=1.0,
                         clock=clock, metrics=metrics)

    async def run() -> None:
        await reducer.handle(_by_job_usage("a", _usage(100)))
        await reducer.handle(_by_job_usage("a", _usage(100)))  # redelivered: counted once
        await reducer.handle(_by_job_usage("b", _usage(10), "partial"))
        await reducer.handle(_by_job_usage("b", _usage(30, 3_000)))  # a dead letter replayed: its latest figures
        await reducer.handle(_by_job("c", "failed"))  # a relay of before accounting: no usage

    asyncio.run(run())
    final = sink.records(JOBS)[-1]
    assert final.final and (final.pages, final.chunks, final.tokens) == (2, 4, 130)
    assert final.model_us == {"cpu": 4_000} and final.stage_us == {"inference": 4_000}
    assert store.jobs["j1"].usage == Usage(2, 4, 130, {"cpu": 4_000}, {"inference": 4_000})
    sample = metrics.registry.get_sample_value
    labels = {"service": "reducer", "tenant": "acme"}
    assert sample("docstream_tokens_total", labels) == 130
    assert sample("docstream_model_seconds_total", labels | {"device": "cpu"}) == pytest.approx(0.004)
    assert sample("docstream_document_stage_seconds_count", {"service": "reducer", "stage": "inference"}) == 2


def test_the_recount_takes_the_usage_of_the_job_documents_rows() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(2)
    store.job_documents[("j1", "a")] = JobDocumentRow("j1", "a", "completed", T0, usage=_usage(100))
    store.job_documents[("j1", "b")] = JobDocumentRow("j1", "b", "completed", T0, usage=_usage(5))
    reducer = _jobs(store, sink, clock, jobs, docs)
    body = json.dumps({"kind": "reconcile", "job_id": "j1"}).encode()

    async def run() -> None:
        await reducer.handle(_by_job_usage("a", _usage(100)))  # "b" was lost on the way
        await reducer.handle(_msg(body, topic=BY_JOB, key=b"j1"))

    asyncio.run(run())
    final = sink.records(JOBS)[-1]
    assert final.final and final.tokens == 105 and store.jobs["j1"].usage == _usage(100).plus(_usage(5))


def test_the_document_reducer_puts_the_usage_on_the_record_and_the_job_documents_row() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    store.documents["d1"] = DocumentRow("d1", "j1", "file:///a.pdf", "ab" * 32, "chunked", T0, page_count=3)
    reducer = _documents(store, sink, table)

    def chunk(index: int) -> ChunkResult:
        return replace(_chunk("d1", index, 2), model_us=50 + index, device="cpu",
                       stage_us={"chunker": 7, "inference": 60})

    async def run() -> None:
        for i, index in enumerate([1, 0, 1]):
            await reducer.handle(_msg(_encode(chunk(index)), offset=i))

    asyncio.run(run())
    (completed,) = sink.records(COMPLETED)
    assert completed.model_us == {"cpu": 101} and completed.stage_us == {"chunker": 14, "inference": 120}
    row = store.job_documents[("j1", "d1")]
    assert row.usage == Usage(pages=3, chunks=2, tokens=4, model_us={"cpu": 101},
                              stage_us={"chunker": 14, "inference": 120})


def test_store_calls_retry_transient_faults_then_give_up() -> None:
    store = FakeStore(fail=2)
    calls = _calls(store, attempts=3)
    assert asyncio.run(calls(store.get_job, "x")) is None
    store.fail = 5
    with pytest.raises(FatalError) as info:
        asyncio.run(calls(store.get_job, "x"))
    assert info.value.code == "store_unavailable"


def test_store_calls_do_not_retry_other_errors() -> None:
    def poison() -> None:
        raise PoisonRecord("bad")

    with pytest.raises(PoisonRecord):
        asyncio.run(_calls(FakeStore())(poison))


def test_partition_watch_flags_partitions_with_waiting_records_and_no_progress() -> None:
    from docstream_reducer.watch import PartitionWatch, Stall

    clock = FakeClock(100.0)
    watch = PartitionWatch(20.0, clock)
    ends = {("t", 0): 9, ("t", 1): 3, ("t", 2): 5}
    committed = {("t", 0): 5, ("t", 2): 4}  # t[1]: nothing committed yet; t[2]: one marker after it
    assert watch.stalled(ends, committed) == []  # first sight
    clock.now += 19
    assert watch.stalled(ends, committed) == []
    clock.now += 1
    assert watch.stalled(ends, committed) == [Stall("t", 0, 5, 9, 1), Stall("t", 1, 0, 3, 1)]
    assert watch.stalled(ends, committed) == []  # once per stall period
    clock.now += 20
    assert watch.stalled(ends, committed) == [Stall("t", 0, 5, 9, 2), Stall("t", 1, 0, 3, 2)]


def test_partition_watch_counts_handled_or_committed_offsets_as_progress() -> None:
    from docstream_reducer.watch import PartitionWatch, Stall

    clock = FakeClock(100.0)
    watch = PartitionWatch(20.0, clock)
    ends = {("t", 0): 30}
    watch.stalled(ends, {("t", 0): 3})
    for offset in (3, 4):
        clock.now += 15
        watch.handled("t", 0, offset)  # handled, not yet committed: moving
        assert watch.stalled(ends, {("t", 0): 3}) == []
    clock.now += 15
    assert watch.stalled(ends, {("t", 0): 5}) == []  # committed moved
    clock.now += 20
    # handled records whose offsets are never committed stall too (faust, exactly-once)
    assert watch.stalled(ends, {("t", 0): 5}) == [Stall("t", 0, 5, 30, 1)]


def test_partition_watch_rests_while_a_handler_runs_long_and_on_partitions_at_their_end() -> None:
    from docstream_reducer.watch import PartitionWatch, Stall

    clock = FakeClock(100.0)
    watch = PartitionWatch(20.0, clock)
    ends = {("t", 0): 9}
    watch.stalled(ends, {})
    watch.started(1)
    clock.now += 60
    assert watch.stalled(ends, {}) == []  # a store outage: the handler retries, nothing is stalled
    watch.finished(1)
    clock.now += 19
    assert watch.stalled(ends, {}) == []  # the period starts when the handler ended
    clock.now += 1
    assert watch.stalled(ends, {}) == [Stall("t", 0, 0, 9, 1)]
    watch.started(2)
    assert watch.stalled(ends, {}) == []  # a short handler is not "busy"
    watch.finished(2)
    clock.now += 100
    assert watch.stalled({("t", 0): 9}, {("t", 0): 9}) == []  # caught up
    assert watch.stalled({("t", 0): 10}, {("t", 0): 9}) == []  # one transaction marker after it


def test_partition_watch_forgets_spans_without_records() -> None:
    from docstream_reducer.watch import PartitionWatch, Stall

    clock = FakeClock(100.0)
    watch = PartitionWatch(20.0, clock)
    watch.stalled({("t", 0): 12}, {("t", 0): 4})
    clock.now += 20
    assert watch.stalled({("t", 0): 12}, {("t", 0): 4}) == [Stall("t", 0, 4, 12, 1)]
    watch.quiet("t", 0, 12)  # the broker: only aborted records and markers in 4..11
    clock.now += 40
    assert watch.stalled({("t", 0): 12}, {("t", 0): 4}) == []
    assert watch.stalled({("t", 0): 14}, {("t", 0): 4}) == []  # a new record: the clock starts again
    clock.now += 20
    assert watch.stalled({("t", 0): 14}, {("t", 0): 4}) == [Stall("t", 0, 4, 14, 1)]


def _chunked_notice(doc_id: str, tokens: int, job_id: str = "j1") -> Incoming:
    body = {"kind": "chunked", "job_id": job_id, "doc_id": doc_id, "tokens": tokens}
    return _msg(json.dumps(body).encode(), topic=BY_JOB, key=job_id.encode())


def test_relay_forwards_a_documents_chunked_tokens_keyed_by_job() -> None:
    sink = FakeSink()
    relay = CompletedRelay(SERDE, sink, BY_JOB)
    record = DocumentChunked(job_id="j1", doc_id="d1", chunk_count=3, token_count=120, chunked_at=T0)
    asyncio.run(relay.handle(_msg(_encode(record, "t.documents.chunked"), topic="t.documents.chunked")))
    (forwarded,) = sink.sent
    assert (forwarded.topic, forwarded.key) == (BY_JOB, b"j1")
    assert json.loads(forwarded.value or b"") == {"kind": "chunked", "job_id": "j1", "doc_id": "d1", "tokens": 120}


def test_a_jobs_chunked_tokens_wait_in_its_lane_row_until_its_documents_end_once_each() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = replace(_job_row(3), options={"priority": "interactive"})
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_chunked_notice("a", 100))
        await reducer.handle(_chunked_notice("b", 50))
        await reducer.handle(_chunked_notice("a", 100))  # redelivered: counted once
        await reducer.flush()
        row = store.queue[("docstream.chunks.interactive", "j1")]  # the lane's topic names its queue
        assert (row.waiting_tokens, row.ended_documents, row.tenant, row.created_at) == (150, 0, "acme", T0)
        await reducer.handle(_by_job("a"))
        await reducer.handle(_chunked_notice("a", 100))  # late, after its end: nothing waits
        await reducer.handle(_by_job("c"))  # ended before its notice came
        await reducer.handle(_chunked_notice("c", 70))
        await reducer.flush()
        row = store.queue[("docstream.chunks.interactive", "j1")]
        assert (row.waiting_tokens, row.ended_documents) == (50, 2)
        await reducer.handle(_by_job("b"))

    asyncio.run(run())
    assert store.queue == {}  # the job ended: its row is gone
    assert sink.records(JOBS)[-1].final


def test_a_failed_lane_queue_write_waits_for_the_next_flush_and_statuses_still_go_out() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(10)
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_chunked_notice("a", 400))
        await reducer.handle(_by_job("b"))
        store.fail = 1
        await reducer.flush()  # the queue row's write fails: kept for the next flush
        assert store.queue == {}
        await reducer.flush()
        assert store.queue[("docstream.chunks", "j1")].waiting_tokens == 400

    asyncio.run(run())
    assert [s.completed for s in sink.records(JOBS)] == [1]


def test_the_tokens_waiting_per_lane_and_tenant_are_a_gauge_that_a_tenant_leaves_when_its_jobs_end() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job_row(1)
    store.jobs["j2"] = replace(_job_row(2, "j2"), tenant="globex", options={"priority": "interactive"})
    metrics = Metrics()
    reducer = JobReducer(jobs, docs, SERDE, _calls(store), sink, JOBS, by_job_topic=BY_JOB, throttle_s=1.0,
                         clock=clock, metrics=metrics)

    def gauge(lane: str, tenant: str) -> float | None:
        return metrics.registry.get_sample_value("docstream_queued_tokens",
                                                 {"service": "reducer", "lane": lane, "tenant": tenant})

    async def run() -> None:
        await reducer.handle(_chunked_notice("a", 300))
        await reducer.handle(_chunked_notice("b", 20, job_id="j2"))
        await reducer.handle(_chunked_notice("c", 5, job_id="j2"))
        await reducer.flush()
        assert (gauge("batch", "acme"), gauge("interactive", "globex")) == (300, 25)
        await reducer.handle(_by_job("a"))  # j1 ends
        await reducer.flush()
        assert (gauge("batch", "acme"), gauge("interactive", "globex")) == (None, 25)

    asyncio.run(run())


class _Writes(dict[str, Any]):
    """A table that records each write: (key, the record made current before it)."""

    def __init__(self, current: list[int]) -> None:
        super().__init__()
        self.current = current
        self.writes: list[tuple[str, int]] = []

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes.append((key, self.current[-1] if self.current else -1))
        super().__setitem__(key, value)


def test_a_batch_writes_each_open_document_once_after_its_last_record_made_current() -> None:
    current: list[int] = []
    store, sink, table = FakeStore(), FakeSink(), _Writes(current)
    reducer = _documents(store, sink, table)
    records = [("a", 0, 0), ("b", 0, 1), ("a", 1, 0), ("b", 1, 1), ("a", 2, 0)]  # (doc, index, partition)
    msgs = [_msg(_encode(_chunk(doc, index, 5)), partition=partition, offset=n)
            for n, (doc, index, partition) in enumerate(records)]
    asyncio.run(reducer.handle_batch(msgs, current.append))
    assert sorted(table.writes) == [("a|m", 4), ("b|m", 3)]  # once each, as its last record (its partition)
    a = decode_entry(table["a|m"])
    assert isinstance(a, DocumentState) and [a.has(i) for i in range(5)] == [True, True, True, False, False]
    assert not sink.sent


def test_a_document_completed_in_a_batch_is_marked_then_its_later_records_are_duplicates() -> None:
    current: list[int] = []
    store, sink, table = FakeStore(), FakeSink(), _Writes(current)
    reducer = _documents(store, sink, table)
    records = [_chunk("a", 0, 2), _chunk("b", 0, 3), _chunk("a", 1, 2), _chunk("a", 0, 2), _chunk("b", 1, 3)]
    msgs = [_msg(_encode(r), offset=n) for n, r in enumerate(records)]
    asyncio.run(reducer.handle_batch(msgs, current.append))
    assert [(c.doc_id, c.status) for c in sink.records(COMPLETED)] == [("a", "completed")]
    assert table.writes == [("a|m", 2), ("b|m", 4)]  # a's marker when it completed; b's state at the end
    assert table["a|m"]["kind"] == "done" and table["b|m"]["kind"] == "state"


def test_a_failed_batch_writes_no_open_state_and_its_redelivery_completes_once() -> None:
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table)
    batch = [_msg(_encode(_chunk("a", 0, 2)), offset=0), _msg(_encode(_chunk("b", 0, 2)), offset=1),
             _msg(_encode(_chunk("b", 1, 2)), offset=2), _msg(_encode(_chunk("a", 1, 2)), offset=3)]
    store.fail = 10  # b's completion cannot be recorded: the batch fails after b's first record was folded
    with pytest.raises(FatalError, match="store kept failing"):
        asyncio.run(reducer.handle_batch(batch))
    assert table == {}  # nothing of the batch was written; the agent acknowledged none of it
    store.fail = 0
    asyncio.run(reducer.handle_batch(batch))  # read again from the last committed offset
    asyncio.run(reducer.handle_batch(batch))  # and once more: a redelivery after the writes
    assert sorted(c.doc_id for c in sink.records(COMPLETED)) == ["a", "b"]
    assert table["a|m"]["kind"] == table["b|m"]["kind"] == "done"


def test_the_documents_that_complete_in_a_batch_have_their_rows_written_at_once() -> None:
    # each document's first read waits at a barrier that only all three reaching it together passes: written
    # one after the other, the first would wait out the barrier's timeout and the batch fail
    arrived = threading.Barrier(3, timeout=30)

    class _AtOnce(FakeStore):
        def get_document(self, doc_id: str) -> DocumentRow | None:
            arrived.wait()
            return super().get_document(doc_id)

    store, sink, table = _AtOnce(), FakeSink(), {}
    reducer = _documents(store, sink, table)
    records = [_chunk(doc, i, 2) for i in range(2) for doc in ("a", "b", "c")]
    asyncio.run(reducer.handle_batch([_msg(_encode(r), offset=n) for n, r in enumerate(records)]))
    assert [c.doc_id for c in sink.records(COMPLETED)] == ["a", "b", "c"]  # produced in the order they completed
    assert sorted(d for d, _ in store.results) == ["a", "b", "c"]
    assert all(table[f"{doc}|m"]["kind"] == "done" for doc in "abc")


def test_a_document_whose_rows_cannot_be_written_holds_back_every_completion_of_its_batch() -> None:
    class _FailsFor(FakeStore):
        failing: str | None = "b"

        def upsert_document_result(self, row: DocumentResultRow) -> None:
            if row.doc_id == self.failing:
                raise StoreError("cassandra timeout")
            super().upsert_document_result(row)

    store, sink, table = _FailsFor(), FakeSink(), {}
    reducer = _documents(store, sink, table)
    batch = [_msg(_encode(_chunk(doc, i, 2)), offset=n)
             for n, (doc, i) in enumerate([("a", 0), ("b", 0), ("a", 1), ("b", 1), ("c", 0)])]
    with pytest.raises(FatalError, match="store kept failing"):
        asyncio.run(reducer.handle_batch(batch))
    # a's rows were written beside b's attempts, but nothing of the batch is produced or kept: it is read again
    assert not sink.sent and table == {}
    store.failing = None
    asyncio.run(reducer.handle_batch(batch))
    asyncio.run(reducer.handle_batch(batch))  # and once more: a redelivery after the writes
    assert sorted(c.doc_id for c in sink.records(COMPLETED)) == ["a", "b"]
    assert table["a|m"]["kind"] == table["b|m"]["kind"] == "done" and table["c|m"]["kind"] == "state"


def test_a_document_completed_twice_in_one_batch_writes_and_produces_both_in_order() -> None:
    # partial with a failed chunk, then the failed chunk's dead letter replayed ok, all in one batch
    store, sink, table = FakeStore(), FakeSink(), {}
    reducer = _documents(store, sink, table, ttl_ms=60_000)
    records = [_chunk("a", 0, 2), _chunk("a", 1, 2, ok=False), _chunk("a", 1, 2), _chunk("a", 1, 2)]
    asyncio.run(reducer.handle_batch([_msg(_encode(r), offset=n, ts_ms=1_000 + n) for n, r in enumerate(records)]))
    assert [(c.status, c.failed_chunks) for c in sink.records(COMPLETED)] == [("partial", 1), ("completed", 0)]
    assert store.results[("a", "m")].status == "completed" and store.documents == {}
    assert store.job_documents[("j1", "a")].status == "completed"
    assert table["a|m"]["kind"] == "done"


@pytest.mark.parametrize("seed", range(8))
def test_batches_of_any_size_give_what_one_record_at_a_time_gives(seed: int) -> None:
    """Random interleavings of documents, with redeliveries and failed chunks, cut into random batches: the same
    DocumentCompleted records and the same table as record by record."""
    rng = random.Random(seed)
    counts = {f"d{n}": rng.randint(1, 6) for n in range(6)}
    records = [_chunk(doc, i, count, ok=rng.random() > 0.1) for doc, count in counts.items() for i in range(count)]
    rng.shuffle(records)
    records += rng.sample(records, k=len(records) // 3)  # redeliveries, after the originals
    msgs = [_msg(_encode(r), offset=n, ts_ms=1_000 + n) for n, r in enumerate(records)]

    def outcome(cuts: list[int]) -> tuple[list[tuple[str, str, int]], dict[str, Any]]:
        store, sink, table = FakeStore(), FakeSink(), {}
        reducer = _documents(store, sink, table)
        bounds = [0, *cuts, len(msgs)]
        for start, end in itertools.pairwise(bounds):
            asyncio.run(reducer.handle_batch(msgs[start:end]))
        done = [(c.doc_id, c.status, c.failed_chunks) for c in sink.records(COMPLETED)]
        return sorted(done), table

    one_by_one = outcome(list(range(1, len(msgs))))
    batched = outcome(sorted(rng.sample(range(1, len(msgs)), k=rng.randint(0, 4))))
    assert batched == one_by_one
    assert {doc for doc, _, _ in one_by_one[0]} == set(counts)  # every document completed, once
    assert len(one_by_one[0]) == len(counts)
