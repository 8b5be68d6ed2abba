"""The reducer process (`docstream reducer`) on real Kafka + Cassandra.

ChunkResult records are produced straight to a test's own topic set; the reducer runs as a
subprocess. Checked: one DocumentCompleted per document, partial documents, chunker failures
counted, poison records in the DLQ, the final JobStatus and jobs row, the webhook, a
kill -9 halfway through (changelog recovery; duplicates on the completed topic counted), and a
rolling upgrade's results on both result topics (ChunkEmbedded on the legacy one).
"""

from __future__ import annotations

import io
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, Producer

from docstream.avro import AvroSchema, AvroSerde, find_schemas_dir, frame_single_object
from docstream.kafka.clients import producer_config
from docstream.records import ChunkResult, DocumentCompleted, JobStatus
from docstream.settings import CassandraSettings, Settings
from docstream.store import DocumentRow, JobDocumentRow, JobRow, ResultStore
from docstream.topics import Topics, dlq_topic
from docstream_reducer.aggregation import CompletionMarker, DocumentState, decode_entry, document_key
from tests.fixtures.kafka import TopicReader, read_topic, wait_until
from tests.fixtures.services import ServiceProcess
from tests.fixtures.webhooks import ALLOW_PRIVATE_ENV, WebhookReceiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_AT = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
_MODEL = "test-model"
_DIM = 4
_STOP_S = 90.0  # SIGTERM to exit: a reducer drains and commits first


@dataclass
class _Doc:
    doc_id: str
    chunks: int
    failed: set[int] = field(default_factory=set)

    def records(self, job_id: str) -> list[ChunkResult]:
        return [
            ChunkResult(
                job_id=job_id, doc_id=self.doc_id, chunk_id=f"{self.doc_id}-{i}", chunk_index=i,
                chunk_count=self.chunks, model_id=_MODEL, status="failed" if i in self.failed else "ok",
                token_count=i + 1, page_start=1, page_end=1, embedded_at=_AT + timedelta(seconds=i),
                embedding=[] if i in self.failed else [float(i), 1.0, -1.0, 0.5],
                error_code="model_error" if i in self.failed else None,
            )
            for i in range(self.chunks)
        ]

    def expected_embedding(self) -> list[float]:
        ok = [i for i in range(self.chunks) if i not in self.failed]
        weight = sum(i + 1 for i in ok)
        return [sum((i + 1) * float(i) for i in ok) / weight, 1.0, -1.0, 0.5]


def _env(bootstrap: str, prefix: str, cassandra: CassandraSettings, tmp_path: Path, *,
         transactions: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    env.update({
        "DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "DOCSTREAM_KAFKA__TOPIC_PREFIX": prefix,
        "DOCSTREAM_KAFKA__PARTITIONS": "3",
        "DOCSTREAM_KAFKA__TRANSACTIONS": "true" if transactions else "false",
        "DOCSTREAM_REDUCER__APP_ID": f"{prefix}-reducer",
        "DOCSTREAM_REDUCER__DATA_DIR": str(tmp_path / "reducer-data"),
        "DOCSTREAM_REDUCER__JOB_STATUS_INTERVAL_S": "0.5",
        "DOCSTREAM_STORE__BACKEND": "cassandra",
        "DOCSTREAM_CASSANDRA__CONTACT_POINTS": json.dumps(list(cassandra.contact_points)),
        "DOCSTREAM_CASSANDRA__PORT": str(cassandra.port),
        "DOCSTREAM_CASSANDRA__KEYSPACE": cassandra.keyspace,
        "DOCSTREAM_CASSANDRA__REQUEST_TIMEOUT_S": "30",
        "DOCSTREAM_RETRY__BASE_DELAY_MS": "50",
        "DOCSTREAM_RETRY__MAX_DELAY_MS": "200",
        "DOCSTREAM_LOG__FORMAT": "json",
    })
    return env


def _seed_job(store: ResultStore, job_id: str, docs: list[str], *, webhook_url: str | None = None) -> None:
    now = datetime.now(UTC)
    store.upsert_job(JobRow(job_id=job_id, tenant="acme", created_at=now, status="running",
                            document_count=len(docs), webhook_url=webhook_url))
    for doc_id in docs:
        store.upsert_document(DocumentRow(doc_id=doc_id, job_id=job_id, source_uri=f"file:///in/{doc_id}.pdf",
                                          content_sha256="ab" * 32, status="chunked", updated_at=now,
                                          filename=f"{doc_id}.pdf", page_count=2))
        store.upsert_job_document(JobDocumentRow(job_id=job_id, doc_id=doc_id, status="chunked", updated_at=now,
                                                 filename=f"{doc_id}.pdf"))


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], *, pause_s: float = 0.0) -> None:
    # the services' producer options (idempotent, lz4): the reducer's aiokafka must read what they write
    producer = Producer(producer_config(Settings().with_overrides(kafka={"bootstrap_servers": bootstrap}).kafka))
    for key, value in records:
        producer.produce(topic, key=key, value=value)
        if pause_s:
            producer.poll(0)
            time.sleep(pause_s)
    assert producer.flush(30) == 0


def _encoded(serde: AvroSerde, topic: str, records: list[ChunkResult]) -> list[tuple[bytes, bytes]]:
    return [(r.doc_id.encode(), serde.serialize(r, topic)) for r in records]


@pytest.fixture
def reducers(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for reducer in started:
        reducer.stop(_STOP_S)


def _final(job_id: str) -> Callable[[TopicReader], bool]:
    return lambda reader: any(isinstance(r, JobStatus) and r.job_id == job_id and r.final for r in reader.records)


def _every_document(docs: list[_Doc]) -> Callable[[TopicReader], bool]:
    wanted = {d.doc_id for d in docs}
    return lambda reader: {getattr(r, "doc_id", None) for r in reader.records} >= wanted


def _table_holds(records: list[ChunkResult]) -> Callable[[TopicReader], bool]:
    """Whether the documents table's changelog, read so far, holds every index of ``records`` in the latest value of
    its document (the agent writes an open document's state once a batch, not once a record)."""
    wanted: dict[str, set[int]] = {}
    for record in records:
        wanted.setdefault(document_key(record.doc_id, record.model_id), set()).add(record.chunk_index)

    def holds(reader: TopicReader) -> bool:
        latest = {json.loads(m.key()): m.value() for m in reader.messages}
        for key, indexes in wanted.items():
            state = decode_entry(json.loads(latest[key])) if latest.get(key) else None
            if not isinstance(state, DocumentState) or not all(state.has(i) for i in indexes):
                return False
        return True

    return holds


def test_reducer_completes_documents_partials_failures_and_the_job(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    prefix = unique_name("rdc")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    rng = random.Random(11)
    docs = [_Doc(f"{job_id}-d{i:02d}", rng.randint(2, 5)) for i in range(16)]
    docs.append(_Doc(f"{job_id}-single", 1))
    docs.append(_Doc(f"{job_id}-partial1", 4, failed={1}))
    docs.append(_Doc(f"{job_id}-partial2", 3, failed={0, 2}))
    failed_doc = f"{job_id}-encrypted"
    webhook = WebhookReceiver([503, 200], path="/hooks/job?token=secret")
    try:
        _seed_job(cassandra_store, job_id, [d.doc_id for d in docs] + [failed_doc], webhook_url=webhook.url)
        records = [r for d in docs for r in d.records(job_id)]
        records += rng.sample(records, 12)  # redeliveries
        rng.shuffle(records)
        env = {**_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True), **ALLOW_PRIVATE_ENV}
        reducer = ServiceProcess("reducer", env, tmp_path)  # the webhook receiver is on 127.0.0.1
        reducers.append(reducer)
        reducer.start()
        mismatch = ChunkResult(**{**docs[0].records(job_id)[0].to_record(), "chunk_count": docs[0].chunks + 7})
        # the mismatch comes after its document's real chunks (same key, same partition): the first count wins
        payload = [*_encoded(serde, topics.results, [*records, mismatch]), (b"garbage", b"not avro at all")]
        wait_for_topic(kafka_bootstrap, topics.results, reducer)
        _produce(kafka_bootstrap, topics.results, payload)
        chunker_failure = DocumentCompleted(job_id=job_id, doc_id=failed_doc, status="failed", completed_at=_AT,
                                            error_code="encrypted", error="password protected")
        _produce(kafka_bootstrap, topics.completed, [(failed_doc.encode(),
                                                      serde.serialize(chunker_failure, topics.completed))])

        jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=90,
                          what="the final JobStatus", describe=reducer.tail)
        completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, linger_s=3.0, describe=reducer.tail)
        with TopicReader(kafka_bootstrap, dlq_topic(topics.results)) as dlq:
            dlq.read(expected=2, timeout_s=20, what="two DLQ records", describe=reducer.tail)
            dlq.read()  # and any more the DLQ holds now: the codes below must be exactly these two
    finally:
        webhook.close()

    by_doc = Counter(r.doc_id for r in completed.records if isinstance(r, DocumentCompleted))
    assert set(by_doc) == {d.doc_id for d in docs} | {failed_doc}
    assert all(n == 1 for n in by_doc.values()), by_doc
    results = {r.doc_id: r for r in completed.records if isinstance(r, DocumentCompleted)}
    for doc in docs:
        out = results[doc.doc_id]
        assert out.status == ("partial" if doc.failed else "completed")
        assert (out.chunk_count, out.failed_chunks, out.model_id) == (doc.chunks, len(doc.failed), _MODEL)
        assert out.embedding == pytest.approx(doc.expected_embedding(), rel=1e-6)
        assert (out.filename, out.source_uri, out.page_count) == (
            f"{doc.doc_id}.pdf", f"file:///in/{doc.doc_id}.pdf", 2)

    statuses = [r for r in jobs.records if isinstance(r, JobStatus) and r.job_id == job_id]
    finals = [s for s in statuses if s.final]
    assert len(finals) == 1
    final = finals[0]
    assert (final.state, final.document_count, final.completed, final.partial, final.failed) == (
        "completed", 20, 17, 2, 1)
    assert all(not s.final for s in statuses[:-1]) and statuses[-1].final
    assert [s.completed + s.partial + s.failed for s in statuses] == sorted(
        s.completed + s.partial + s.failed for s in statuses)

    row = cassandra_store.get_job(job_id)
    assert row is not None
    assert (row.status, row.completed, row.partial, row.failed) == ("completed", 17, 2, 1)
    result = cassandra_store.get_document_result(docs[-1].doc_id, _MODEL)
    assert result is not None and (result.status, result.failed_chunks, result.chunk_count) == ("partial", 2, 3)
    document = cassandra_store.get_document(docs[0].doc_id)
    assert document is not None and document.status == "completed"
    job_docs = {r.doc_id: r.status for r in cassandra_store.iter_job_documents(job_id)}
    assert job_docs[docs[-2].doc_id] == "partial" and job_docs[docs[0].doc_id] == "completed"

    codes = sorted(dict(m.headers())["error_code"].decode() for m in dlq.messages)
    assert codes == ["chunk_count_mismatch", "schema_unknown_format"]
    assert {dict(m.headers())["original_topic"].decode() for m in dlq.messages} == {topics.results}

    # 503 first, then delivered: two calls, both with the final status, none after
    assert len(webhook.bodies) == 2
    assert all(c["final"] is True and c["completed"] == 17 and c["job_id"] == job_id for c in webhook.bodies)
    assert reducer.alive()
    reducer.stop_cleanly(_STOP_S)


def _as_chunk_embedded(records: list[ChunkResult]) -> list[tuple[bytes, bytes]]:
    """``records`` as an inference service of the release before the rename wrote them: the last ChunkEmbedded
    schema (schemas/history/ChunkEmbedded.v5.avsc), single-object encoding with its fingerprint."""
    path = find_schemas_dir() / "history" / "ChunkEmbedded.v5.avsc"
    old = AvroSchema.from_json(json.loads(path.read_text(encoding="utf-8")), path)
    encoded = []
    for record in records:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, old.parsed, record.to_record())
        encoded.append((record.doc_id.encode(), frame_single_object(old.fingerprint, body.getvalue())))
    return encoded


def test_a_rolling_upgrade_reduces_the_results_of_both_result_topics_once(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    """Inference of the release before writes ChunkEmbedded to the legacy chunks.embedded while upgraded inference
    writes ChunkResult to chunks.results, a document's chunks split between the two: the exactly-once reducer reads
    both, completes every document once, and dead-letters poison of the legacy topic to its own DLQ."""
    prefix = unique_name("rdu")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    rng = random.Random(17)
    docs = [_Doc(f"{job_id}-d{i:02d}", rng.randint(2, 6)) for i in range(24)]
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    legacy: list[ChunkResult] = []
    new: list[ChunkResult] = []
    for i, doc in enumerate(docs):  # a third on each topic alone, a third split between the two
        records = doc.records(job_id)
        cut = {0: len(records), 1: 0}.get(i % 3, len(records) // 2)
        legacy += records[:cut]
        new += records[cut:]
    env = _env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True)
    reducer = ServiceProcess("reducer", env, tmp_path)
    reducers.append(reducer)
    reducer.start()
    wait_for_topic(kafka_bootstrap, topics.results, reducer)
    wait_for_topic(kafka_bootstrap, topics.legacy_results, reducer)
    _produce(kafka_bootstrap, topics.legacy_results, [*_as_chunk_embedded(legacy), (b"garbage", b"not avro at all")])
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, new))

    jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=90,
                      what="the final JobStatus", describe=reducer.tail)
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs),
                           timeout_s=30, linger_s=2.0, what="every document", describe=reducer.tail)
    with TopicReader(kafka_bootstrap, dlq_topic(topics.legacy_results)) as dlq:
        dlq.read(expected=1, timeout_s=20, what="the legacy topic's DLQ record", describe=reducer.tail)

    by_doc = Counter(r.doc_id for r in completed.records if isinstance(r, DocumentCompleted))
    assert by_doc == dict.fromkeys((d.doc_id for d in docs), 1)
    results = {r.doc_id: r for r in completed.records if isinstance(r, DocumentCompleted)}
    for doc in docs:
        assert (results[doc.doc_id].status, results[doc.doc_id].chunk_count) == ("completed", doc.chunks)
        assert results[doc.doc_id].embedding == pytest.approx(doc.expected_embedding(), rel=1e-6)
    finals = [r for r in jobs.records if isinstance(r, JobStatus) and r.job_id == job_id and r.final]
    assert [(f.completed, f.document_count) for f in finals] == [(24, 24)]
    assert [dict(m.headers())["original_topic"].decode() for m in dlq.messages] == [topics.legacy_results]


def wait_for_topic(bootstrap: str, topic: str, reducer: ServiceProcess, timeout_s: float = 60) -> None:
    """The reducer creates its topics at start; wait for them (bounded)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            meta = consumer.list_topics(timeout=5)
            if topic in meta.topics and meta.topics[topic].error is None:
                return
            if not reducer.alive():
                pytest.fail(f"reducer exited early:\n{reducer.tail()}")
            if time.monotonic() >= deadline:
                pytest.fail(f"topic {topic} not created in {timeout_s} s:\n{reducer.tail()}")
            time.sleep(0.2)
    finally:
        consumer.close()


@pytest.mark.parametrize("transactions", [True, False], ids=["exactly_once", "at_least_once"])
def test_reducer_killed_halfway_completes_every_document_after_restart(
    transactions: bool, kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    prefix = unique_name("rdk")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    rng = random.Random(5)
    docs = [_Doc(f"{job_id}-d{i:02d}", rng.randint(4, 8)) for i in range(50)]
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    # first phase: all of docs 0-24 and the first half of the chunks of docs 25-49
    first = [r for d in docs[:25] for r in d.records(job_id)]
    rest: list[ChunkResult] = []
    for doc in docs[25:]:
        records = doc.records(job_id)
        first += records[: doc.chunks // 2]
        rest += records[doc.chunks // 2:]
    rng.shuffle(first)
    rng.shuffle(rest)

    env = _env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=transactions)
    reducer = ServiceProcess("reducer", env, tmp_path)
    reducers.append(reducer)
    reducer.start()
    wait_for_topic(kafka_bootstrap, topics.results, reducer)
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, first))
    # committed (visible to read_committed readers): offsets and table state of those are committed too
    read_topic(kafka_bootstrap, topics.completed, serde=serde, expected=20, timeout_s=90,
               what="20 committed completed documents before the kill", describe=reducer.tail)
    # keep records flowing while the reducer dies: some are mid-transaction / uncommitted
    feeder = threading.Thread(target=_produce, args=(kafka_bootstrap, topics.results,
                                                     _encoded(serde, topics.results, rest)),
                              kwargs={"pause_s": 0.01})
    feeder.start()
    time.sleep(0.5)  # not a wait for a condition: the kill must land while records are flowing
    reducer.kill9()
    feeder.join(60)
    assert not feeder.is_alive()

    restarted = reducer
    restarted.restart()  # the same settings and data folder; its log is reducer-2.log
    jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=120,
                      what="the final JobStatus after the restart", describe=restarted.tail)
    committed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs), timeout_s=30,
                           linger_s=2.0, what="every document", describe=restarted.tail)

    by_doc = Counter(r.doc_id for r in committed.records if isinstance(r, DocumentCompleted))
    duplicates = sum(n - 1 for n in by_doc.values())
    mode = "exactly_once" if transactions else "at_least_once"
    print(f"\nreducer kill -9 ({mode}): {len(by_doc)} documents, {duplicates} duplicate DocumentCompleted "
          f"(read_committed)")
    assert set(by_doc) == {d.doc_id for d in docs}
    if transactions:
        assert duplicates == 0, by_doc
    finals = [r for r in jobs.records if isinstance(r, JobStatus) and r.final]
    assert finals and all((f.completed, f.partial, f.failed, f.document_count) == (50, 0, 0, 50) for f in finals)
    row = cassandra_store.get_job(job_id)
    assert row is not None and (row.status, row.completed) == ("completed", 50)
    for doc in docs[::7]:
        result = cassandra_store.get_document_result(doc.doc_id, _MODEL)
        assert result is not None and result.embedding == pytest.approx(doc.expected_embedding(), rel=1e-5)
    # on the real Kafka every send of the reducer is idempotent, transactional or not (reducer.idempotent_producer)
    decisions = restarted.events("reducer_producer_idempotence")  # one per run: before the kill and after
    assert len(decisions) == 2
    assert all(d["idempotent"] is True and d["transactions"] is transactions for d in decisions)
    restarted.stop_cleanly(_STOP_S)


def _await_recovered(reducer: ServiceProcess, timeout_s: float = 90) -> None:
    """Wait until ``reducer``'s current run has recovered its tables (it holds partitions and reads its inputs)."""
    deadline = time.monotonic() + timeout_s
    while not reducer.events("reducer_state_recovered", all_runs=False):
        if time.monotonic() >= deadline or not reducer.alive():
            pytest.fail(f"{reducer.name} never recovered its tables:\n{reducer.tail()}")
        time.sleep(0.2)


def _reduce_into_the_table(reducer: ServiceProcess, bootstrap: str, prefix: str, records: list[ChunkResult]) -> None:
    """Start ``reducer``, produce ``records`` and wait until its documents table's changelog holds every one."""
    topics = Topics(prefix)
    reducer.start()
    wait_for_topic(bootstrap, topics.results, reducer)
    _produce(bootstrap, topics.results, _encoded(AvroSerde(Settings().kafka), topics.results, records))
    wait_for_topic(bootstrap, f"{prefix}-reducer-documents-changelog", reducer)
    read_topic(bootstrap, f"{prefix}-reducer-documents-changelog", until=_table_holds(records), timeout_s=90,
               what=f"{reducer.name}'s table state", describe=reducer.tail)


def test_reducer_state_moves_with_partitions_when_a_second_instance_joins(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    prefix = unique_name("rdr")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    rng = random.Random(9)
    docs = [_Doc(f"{job_id}-d{i:02d}", rng.randint(2, 6)) for i in range(30)]
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    first: list[ChunkResult] = []
    rest: list[ChunkResult] = []
    for doc in docs:  # every document half in, so each partition holds open state when it moves
        records = doc.records(job_id)
        cut = max(1, doc.chunks // 2) if doc.chunks > 1 else 0
        first += records[:cut]
        rest += records[cut:]
    env = _env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True)
    one = ServiceProcess("one", env, tmp_path, command="reducer")
    reducers.append(one)
    # the open document states are committed to the table's changelog before two joins
    _reduce_into_the_table(one, kafka_bootstrap, prefix, first)

    two = ServiceProcess("two", {**env, "DOCSTREAM_REDUCER__DATA_DIR": str(tmp_path / "two-data")}, tmp_path,
                         command="reducer")
    reducers.append(two)
    two.start()
    _await_recovered(two, timeout_s=60)  # it got partitions
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, rest))
    jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=120,
                      what="the final JobStatus after the rebalance", describe=two.tail)
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs), timeout_s=30,
                           linger_s=2.0, what="every document", describe=two.tail)

    by_doc = Counter(r.doc_id for r in completed.records if isinstance(r, DocumentCompleted))
    assert set(by_doc) == {d.doc_id for d in docs} and all(n == 1 for n in by_doc.values()), by_doc
    for doc in docs:
        out = next(r for r in completed.records if isinstance(r, DocumentCompleted) and r.doc_id == doc.doc_id)
        assert out.embedding == pytest.approx(doc.expected_embedding(), rel=1e-6)
    final = next(r for r in jobs.records if isinstance(r, JobStatus) and r.final)
    assert (final.completed, final.document_count) == (30, 30)
    # both instances completed documents: the open state of the moved partitions was recovered by two
    assert '"document_completed"' in one.tail(2000) and '"document_completed"' in two.tail(2000)
    one.stop_cleanly(_STOP_S)
    two.stop_cleanly(_STOP_S)


def test_an_at_least_once_reducer_recovers_the_tables_an_exactly_once_reducer_wrote(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    """``kafka.transactions`` turned off on topics an exactly-once reducer wrote: each changelog partition it wrote
    ends at a transaction's commit marker, which no consumer is given. The next reducer's table recovery ends all
    the same, with the open documents' state, and it completes them."""
    prefix = unique_name("rdx")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    docs = [_Doc(f"{job_id}-d{i:02d}", 4) for i in range(12)]
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    first = [r for d in docs for r in d.records(job_id)[:2]]  # every document half in: open state in each table
    rest = [r for d in docs for r in d.records(job_id)[2:]]
    env = _env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True)
    once = ServiceProcess("exactly-once", env, tmp_path, command="reducer")
    reducers.append(once)
    _reduce_into_the_table(once, kafka_bootstrap, prefix, first)
    once.stop_cleanly(_STOP_S)

    least = ServiceProcess("at-least-once", {**env, "DOCSTREAM_KAFKA__TRANSACTIONS": "false"}, tmp_path,
                           command="reducer")
    reducers.append(least)
    least.start()
    _await_recovered(least)
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, rest))
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs),
                           timeout_s=90, what="every document", describe=least.tail)
    for doc in docs:
        out = next(r for r in completed.records if isinstance(r, DocumentCompleted) and r.doc_id == doc.doc_id)
        assert (out.status, out.chunk_count) == ("completed", 4)
        assert out.embedding == pytest.approx(doc.expected_embedding(), rel=1e-6)  # both halves folded
    # the partitions it waited on ended at markers: the broker said so, not a timeout
    assert least.events("changelog_ends_at_markers"), least.tail()
    least.stop_cleanly(_STOP_S)


def test_an_at_least_once_reducer_reads_no_table_change_of_an_aborted_transaction(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    """An exactly-once reducer killed mid-transaction leaves the table changes of that transaction in the changelog,
    aborted: here a completion marker whose DocumentCompleted never committed. An at-least-once reducer on those
    topics recovers without it, and the document's chunks, read again, complete it."""
    prefix = unique_name("rdq")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    doc = _Doc(f"{job_id}-d00", 4)
    _seed_job(cassandra_store, job_id, [doc.doc_id])
    env = _env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=False)
    reducer = ServiceProcess("reducer", env, tmp_path)
    reducers.append(reducer)
    reducer.start()
    changelog = f"{prefix}-reducer-documents-changelog"
    _await_recovered(reducer)  # its changelog made, and a stop now is a clean one
    reducer.stop_cleanly(_STOP_S)
    # the aborted transaction: the document's completion marker, in every partition of the changelog
    kafka = Settings().with_overrides(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    aborter = Producer({**producer_config(kafka), "transactional.id": f"{prefix}-aborted"})
    aborter.init_transactions(30)
    aborter.begin_transaction()
    key = json.dumps(document_key(doc.doc_id, _MODEL)).encode()
    for partition in range(3):
        marker = CompletionMarker("completed", doc.chunks, int(time.time() * 1000), partition)
        aborter.produce(changelog, key=key, value=json.dumps(marker.to_json()).encode(), partition=partition)
    assert aborter.flush(30) == 0
    aborter.abort_transaction(30)

    reducer.restart()
    _await_recovered(reducer)
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, doc.records(job_id)))
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document([doc]),
                           timeout_s=60, what="the document whose aborted marker came first", describe=reducer.tail)
    out = next(r for r in completed.records if isinstance(r, DocumentCompleted))
    assert (out.doc_id, out.status, out.chunk_count) == (doc.doc_id, "completed", 4)
    reducer.stop_cleanly(_STOP_S)


def test_a_rebalance_under_exactly_once_commits_the_documents_completed_in_open_transactions_first(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    """Instance one completes every document in transactions it has not committed yet (a 60 s commit interval),
    then a second instance joins. One commits what it handled before it gives its partitions up: before,
    the transaction was aborted by the producer that replaced its own, while one's table in memory kept the
    completion markers, so the documents of the partitions it kept were never completed."""
    prefix = unique_name("rdt")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    docs = [_Doc(f"{job_id}-d{i:02d}", 2) for i in range(12)]  # every partition gets some: p = 3 (2/3)^12
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    env = {**_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True),
           "DOCSTREAM_REDUCER__COMMIT_INTERVAL_S": "60"}
    one = ServiceProcess("one", env, tmp_path, command="reducer")
    reducers.append(one)
    one.start()
    wait_until(lambda: '"reducer_state_recovered"' in one.tail(200) or not one.alive(), 120,
               "instance one to recover its tables")
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, [r for d in docs
                                                                              for r in d.records(job_id)]))
    wait_until(lambda: one.log_text().count('"document_completed"') >= len(docs) or not one.alive(), 60,
               "instance one to complete every document")
    two = ServiceProcess("two", {**env, "DOCSTREAM_REDUCER__DATA_DIR": str(tmp_path / "two-data")}, tmp_path,
                         command="reducer")
    reducers.append(two)
    two.start()
    wait_until(lambda: '"reducer_state_recovered"' in two.tail(400) or not two.alive(), 120,
               "instance two to get partitions")
    jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=150,
                      what="the final JobStatus after the rebalance", describe=one.tail)
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs), timeout_s=30,
                           linger_s=2.0, what="every document", describe=one.tail)

    by_doc = Counter(r.doc_id for r in completed.records if isinstance(r, DocumentCompleted))
    assert by_doc == {d.doc_id: 1 for d in docs}
    final = next(r for r in jobs.records if isinstance(r, JobStatus) and r.final)
    assert (final.completed, final.document_count) == (12, 12)
    assert one.log_text().count('"document_completed"') == len(docs), one.tail()  # none completed again
    assert '"document_completed"' not in two.log_text(), two.tail()
    one.stop_cleanly(_STOP_S)
    two.stop_cleanly(_STOP_S)


def _events(process: ServiceProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]


@pytest.mark.alone  # its 3 s stall timeout: beside the other integration tests on 2 loaded cores it never restarted
def test_reducer_restarts_itself_when_a_partition_stays_stuck(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], tmp_path: Path, reducers: list[ServiceProcess],
) -> None:
    """faust stopped delivering a partition (simulated: the fault keeps it paused in the first process):
    the partition watch re-fetches, then the process replaces itself and the job completes, once."""
    prefix = unique_name("rds")
    topics = Topics(prefix)
    serde = AvroSerde(Settings().kafka)
    job_id = unique_name("job")
    docs = [_Doc(f"{job_id}-d{i:02d}", 3) for i in range(20)]  # partition 0 gets none: p = (2/3)^20
    _seed_job(cassandra_store, job_id, [d.doc_id for d in docs])
    # the 3 s stall timeout is the first process's only: it comes from a config file emptied once that process
    # has read it, so the process that replaces it (same environment) has the default
    config = tmp_path / "first-process.toml"
    config.write_text("[reducer]\nstall_timeout_s = 3\n")
    env = {**_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path, transactions=True),
           "DOCSTREAM_CONFIG_FILE": str(config), "DOCSTREAM_FAULTS__REDUCER_STALL_PARTITION": "0"}
    reducer = ServiceProcess("reducer", env, tmp_path)
    reducers.append(reducer)
    reducer.start()
    wait_until(lambda: '"reducer_state_recovered"' in reducer.tail(200) or not reducer.alive(), 120,
               "the reducer to recover its tables")
    # the records go out once the fault holds the partition: before, a loaded reducer could read them all first
    wait_until(lambda: '"fault_partition_paused"' in reducer.log_text() or not reducer.alive(), 120,
               "the fault to hold partition 0")
    config.write_text("")
    records = [r for d in docs for r in d.records(job_id)]
    pid = reducer.proc.pid if reducer.proc is not None else None
    _produce(kafka_bootstrap, topics.results, _encoded(serde, topics.results, records), pause_s=0.05)

    def _starts() -> list[int]:
        return [e["restarts"] for e in _events(reducer) if e["event"] == "reducer_starting"]

    wait_until(lambda: len(_starts()) > 1 or not reducer.alive(), 120, "the self-restart")
    assert _starts() == [0, 1], reducer.tail()  # one restart; the fault is off in the new process
    assert reducer.proc is not None and reducer.proc.pid == pid  # the same process, replaced in place
    jobs = read_topic(kafka_bootstrap, topics.jobs, serde=serde, until=_final(job_id), timeout_s=180,
                      what="the final JobStatus after the self-restart", describe=reducer.tail)
    completed = read_topic(kafka_bootstrap, topics.completed, serde=serde, until=_every_document(docs), timeout_s=30,
                           linger_s=2.0, what="every document", describe=reducer.tail)

    events = _events(reducer)
    names = [e["event"] for e in events]
    stuck = [e for e in events if e["event"] == "partition_stuck"]
    assert "partition_stalled_refetching" in names  # the re-fetch came first
    assert stuck and {(e["topic"], e["partition"]) for e in stuck} == {(topics.results, 0)}
    starts = [(e["restarts"], e["stall_timeout_s"]) for e in events if e["event"] == "reducer_starting"]
    assert starts == [(0, 3.0), (1, 20.0)]  # no second restart; the new process has the default stall timeout
    by_doc = Counter(r.doc_id for r in completed.records if isinstance(r, DocumentCompleted))
    assert by_doc == {d.doc_id: 1 for d in docs}
    final = next(r for r in jobs.records if isinstance(r, JobStatus) and r.final)
    assert (final.completed, final.document_count) == (20, 20)
    reducer.stop_cleanly(_STOP_S)
