"""Sinks against their real engines (a Milvus Lite server, PostgreSQL), on the real Kafka and Cassandra.

Each test seeds a job in Cassandra as the pipeline leaves it and publishes its DocumentCompleted records on
the completed topic, then runs the sink as a user does (``docstream sink run NAME``, in-process or as its own
process) and reads the engine back through a plain connection of its own:

* a job lands with exactly its point ids, each with the store's vector (cosine 1.0);
* a new version of one source replaces exactly its changed chunks, and no id of the old text is left;
* kill -9 of the sink mid-job: every point lands once;
* ``docstream sink verify`` finds a difference planted behind docstream's back, and ``--repair`` fixes it;
* ``--repair`` beside a live sink keeps what the sink wrote between verify's store read and its scan;
* a source deleted by ``docstream delete``, and an upload by a producer's own tombstone, leave the sink.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from docstream.avro import AvroSerde
from docstream.kafka.clients import producer_config
from docstream.metrics import Metrics
from docstream.records import DocumentCompleted
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream.store.sources import delete_source
from docstream.tenants.tenancy import tenant_intake_topic
from docstream.topics import Topics
from docstream_cli.ops.sink_verify import verify_sink
from docstream_sink.connect import open_engine
from docstream_sink.engine import SinkEngine
from docstream_sink.main import build_sink, sink_writer
from docstream_sink.points import SinkPoint, point_ids, source_of
from tests.fixtures.kafka import wait_until
from tests.fixtures.services import DOCSTREAM, ServiceProcess, service_env
from tests.fixtures.sinks import SeededJob, seed_job, unit_vector

ENGINES = ["milvus", "postgres"]
SINK = "vectors"


@pytest.fixture(params=ENGINES)
def engine_uri(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param, str(request.getfixturevalue(f"{request.param}_uri"))


def _settings(bootstrap: str, prefix: str, cassandra: CassandraSettings, kind: str, uri: str,
              collection: str) -> Settings:
    return Settings().with_overrides(
        kafka={"bootstrap_servers": bootstrap, "topic_prefix": prefix, "partitions": 3},
        store={"backend": "cassandra"}, cassandra=cassandra.model_dump(mode="json"),
        retry={"base_delay_ms": 50, "max_delay_ms": 200},
        sinks={SINK: {"kind": kind, "uri": uri, "collection": collection, "batch_size": 64}})


def _publish(bootstrap: str, topic: str, records: list[DocumentCompleted], settings: Settings) -> None:
    serde = AvroSerde(settings.kafka)
    producer = Producer(producer_config(settings.kafka))
    for record in records:
        producer.produce(topic, key=record.doc_id.encode(), value=serde.serialize(record, topic))
    assert producer.flush(30) == 0


def _expected(job: SeededJob) -> dict[str, tuple[str, list[float]]]:
    """point id → (doc_id, the store's vector), from the seeded rows."""
    out: dict[str, tuple[str, list[float]]] = {}
    for doc in job.docs:
        ids = point_ids(job.tenant, source_of(doc.doc_id, doc.source_key), doc.texts)
        for point_id, chunk in zip(ids, doc.chunks, strict=True):
            out[point_id] = (doc.doc_id, chunk.embedding)
    return out


def _held(engine: SinkEngine, tenant: str) -> dict[str, tuple[str, list[float]]]:
    rows = list(engine.scan(tenant))
    held = {point_id: (doc_id, vector) for point_id, doc_id, vector in rows}
    assert len(held) == len(rows), "an id is held twice"
    return held


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))


def _assert_holds_exactly(engine: SinkEngine, tenant: str, expected: dict[str, tuple[str, list[float]]]) -> None:
    held = _held(engine, tenant)
    assert set(held) == set(expected), (f"missing {len(set(expected) - set(held))}, "
                                        f"extra {len(set(held) - set(expected))}")
    for point_id, (doc_id, vector) in expected.items():
        assert held[point_id][0] == doc_id
        assert _cosine(held[point_id][1], vector) == pytest.approx(1.0, abs=1e-5)


class _Running:
    """``docstream sink run``'s loop in a thread of the test (stopped at the end)."""

    def __init__(self, settings: Settings, store: ResultStore, engine: SinkEngine) -> None:
        self.metrics = Metrics()
        self.engine = engine
        self.loop = build_sink(settings, SINK, store=store, engine=engine, metrics=self.metrics, poll_timeout_s=0.2)
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="sink", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException as exc:  # handed to the test, which fails on it
            self.errors.append(exc)

    def stop(self) -> None:
        self.loop.stop()
        self.thread.join(60)
        self.engine.close()
        assert not self.errors, self.errors


def _paragraphs(rng: random.Random, n: int, tag: str) -> list[str]:
    words = ["ledger", "Κύπρος", "река", "مرحبا", "文書", "invoice", "clause", "शब्द", "שלום", "policy"]
    return [f"{tag} {i}: " + " ".join(rng.choice(words) for _ in range(12)) for i in range(n)]


@pytest.fixture
def sink_case(engine_uri: tuple[str, str], kafka_bootstrap: str, cassandra_settings: CassandraSettings,
              cassandra_store: ResultStore, unique_name: Callable[[str], str],
              create_topics: Callable[..., list[str]]) -> Iterator[tuple[Settings, SinkEngine, str]]:
    kind, uri = engine_uri
    prefix = unique_name("sink")
    settings = _settings(kafka_bootstrap, prefix, cassandra_settings, kind, uri,
                         collection=prefix.replace("-", "_")[:60])
    create_topics(kafka_bootstrap, Topics(prefix).completed, Topics(prefix).submitted, partitions=3)
    engine = open_engine(settings.sinks[SINK])  # the test's own connection to read the engine back
    try:
        yield settings, engine, prefix
    finally:
        engine.close()


def test_a_job_lands_exactly_and_a_new_version_replaces_only_its_changed_chunks(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
) -> None:
    settings, engine, prefix = sink_case
    rng, vectors, tenant = random.Random(7), {}, f"t{prefix[-8:]}"
    texts = {name: _paragraphs(rng, 12, name) for name in ("a", "b")}
    texts["a"][5] = texts["a"][9]  # the same paragraph twice: two points
    v1 = seed_job(cassandra_store, f"{prefix}-j1", tenant, [
        (f"{prefix}-a1", "file:///in/a.pdf", texts["a"]), (f"{prefix}-b1", "file:///in/b.pdf", texts["b"]),
        (f"{prefix}-u1", None, _paragraphs(rng, 5, "upload"))], rng=rng, vectors=vectors)
    topic = Topics(prefix).completed
    _publish(kafka_bootstrap, topic, v1.completed, settings)

    sink = _Running(settings, cassandra_store, open_engine(settings.sinks[SINK]))
    try:
        expected_v1 = _expected(v1)
        wait_until(lambda: len(_held(engine, tenant)) >= len(expected_v1), 60, "the job's points")
        _assert_holds_exactly(engine, tenant, expected_v1)

        # a new version of a.pdf: paragraph 2 rewritten, paragraph 7 dropped, one added at the end
        edited = list(texts["a"])
        edited[2] = "a 2: rewritten in the second version " + " ".join(rng.choice("xyz") for _ in range(8))
        del edited[7]
        edited.append("a 12: a paragraph the second version adds")
        v2 = seed_job(cassandra_store, f"{prefix}-j2", tenant, [(f"{prefix}-a2", "file:///in/a.pdf", edited)],
                      rng=rng, previous={"file:///in/a.pdf": f"{prefix}-a1"}, vectors=vectors)
        _publish(kafka_bootstrap, topic, v2.completed, settings)
        source_a = source_of(f"{prefix}-a2", "file:///in/a.pdf")
        old_ids = set(point_ids(tenant, source_a, texts["a"]))
        new_ids = set(point_ids(tenant, source_a, edited))
        wait_until(lambda: all(d == f"{prefix}-a2" for i, (d, _) in _held(engine, tenant).items() if i in new_ids)
                   and not (old_ids - new_ids) & set(_held(engine, tenant)), 60, "the new version in the sink")
    finally:
        sink.stop()
    expected_v2 = {i: v for i, v in expected_v1.items() if i not in old_ids} | _expected(v2)
    _assert_holds_exactly(engine, tenant, expected_v2)
    # exactly the changed chunks changed ids: 2 old texts gone (the rewritten and the dropped), 2 new
    assert len(old_ids - new_ids) == 2 and len(new_ids - old_ids) == 2
    assert len(old_ids & new_ids) == len(texts["a"]) - 2
    assert sink.metrics.sink_documents.labels(f"sink-{SINK}", "written")._value.get() == 4


def test_verify_finds_and_repair_fixes_a_sink_changed_behind_its_back(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
    tmp_path: Path,
) -> None:
    settings, engine, prefix = sink_case
    rng, tenant = random.Random(11), f"t{prefix[-8:]}"
    job = seed_job(cassandra_store, f"{prefix}-j1", tenant, [
        (f"{prefix}-{n}", f"s3://bucket/{n}.pdf", _paragraphs(rng, 6, n)) for n in ("p", "q", "r")], rng=rng)
    writer = sink_writer(settings, SINK, store=cassandra_store, engine=engine, metrics=Metrics())
    assert verify_sink(writer, tenant, repair=True).differences.counts()["missing"] == 18  # a backfill
    expected = _expected(job)
    _assert_holds_exactly(engine, tenant, expected)

    # behind docstream's back: one point deleted, one vector changed, one moved to another version, one added
    ids = sorted(expected)
    engine.delete_ids([ids[0]])
    changed = SinkPoint(ids[1], tenant, "s3://bucket/p.pdf", expected[ids[1]][0], unit_vector(rng))
    stale = SinkPoint(ids[2], tenant, "s3://bucket/p.pdf", "an-older-version", expected[ids[2]][1])
    extra = SinkPoint("00000000-0000-4000-8000-000000000001", tenant, "s3://bucket/gone.pdf", "gone",
                      unit_vector(rng))
    engine.upsert([changed, stale, extra])

    config = tmp_path / "sink.toml"
    config.write_text(f"[sinks.{SINK}]\nkind = {json.dumps(settings.sinks[SINK].kind)}\n"
                      f"uri = {json.dumps(settings.sinks[SINK].uri.get_secret_value())}\n"
                      f"collection = {json.dumps(settings.sinks[SINK].collection)}\n")
    env = service_env(kafka_bootstrap, prefix, settings.cassandra, tmp_path)
    args = [str(DOCSTREAM), "sink", "verify", SINK, "--tenant", tenant, "--config", str(config)]
    found = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "missing 1, extra 1, stale 1, vector_mismatch 1" in found.stdout, found.stdout
    repaired = subprocess.run([*args, "--repair"], env=env, capture_output=True, text=True, timeout=120)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: upserted 3, deleted 1" in repaired.stdout, repaired.stdout
    _assert_holds_exactly(engine, tenant, expected)
    assert verify_sink(writer, tenant).differences.total == 0


def test_repair_beside_a_live_sink_keeps_what_the_sink_wrote_between_verifys_two_reads(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
) -> None:
    settings, engine, prefix = sink_case
    rng, vectors, tenant = random.Random(17), {}, f"t{prefix[-8:]}"
    texts = _paragraphs(rng, 6, "a")
    seed_job(cassandra_store, f"{prefix}-j1", tenant, [(f"{prefix}-a1", "s3://bucket/a.pdf", texts)], rng=rng,
             vectors=vectors)
    writer = sink_writer(settings, SINK, store=cassandra_store, engine=engine, metrics=Metrics())
    assert verify_sink(writer, tenant, repair=True).repaired  # the sink holds a.pdf's first version
    later: list[SeededJob] = []

    def the_live_sink_writes() -> None:
        # after verify read the store, before it scans the sink: a new document and a new version of a.pdf (one
        # paragraph rewritten) complete, and `docstream sink run` writes them and retires the old paragraph
        edited = [*texts[:3], "a 3: rewritten while verify was reading", *texts[4:]]
        later.append(seed_job(cassandra_store, f"{prefix}-j2", tenant, [
            (f"{prefix}-b1", "s3://bucket/b.pdf", _paragraphs(rng, 4, "b")),
            (f"{prefix}-a2", "s3://bucket/a.pdf", edited)],
            rng=rng, previous={"s3://bucket/a.pdf": f"{prefix}-a1"}, vectors=vectors))
        _publish(kafka_bootstrap, Topics(prefix).completed, later[0].completed, settings)
        sink = _Running(settings, cassandra_store, open_engine(settings.sinks[SINK]))
        try:
            written = sink.metrics.sink_documents.labels(f"sink-{SINK}", "written")
            wait_until(lambda: written._value.get() == 2, 60, "the sink to write both documents")
        finally:
            sink.stop()

    found = verify_sink(writer, tenant, repair=True, between_reads=the_live_sink_writes)
    # against the first read the sink's new points look extra, a.pdf's kept paragraphs stale, its rewritten one
    # missing: the repair before the second read deleted and overwrote them
    assert found.differences.counts() == {"missing": 1, "extra": 5, "stale": 5, "vector_mismatch": 0}
    assert found.in_step and len(found.plan.settled) == 11
    _assert_holds_exactly(engine, tenant, _expected(later[0]))
    assert verify_sink(writer, tenant).differences.total == 0


def test_a_source_deleted_by_docstream_delete_or_by_a_tombstone_leaves_the_sink(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
    tmp_path: Path, create_topics: Callable[..., list[str]],
) -> None:
    settings, engine, prefix = sink_case
    rng, tenant = random.Random(13), f"t{prefix[-8:]}"
    job = seed_job(cassandra_store, f"{prefix}-j1", tenant, [
        (f"{prefix}-p", "s3://bucket/p.pdf", _paragraphs(rng, 5, "p")),
        (f"{prefix}-q", "s3://bucket/q.pdf", _paragraphs(rng, 5, "q")),
        (f"{prefix}-u", None, _paragraphs(rng, 5, "u"))], rng=rng)
    topics = Topics(prefix)
    # another tenant's own intake topic, there before the sink subscribes (a regex subscription finds a topic at
    # its next metadata refresh)
    foreign = tenant_intake_topic(prefix, "intruder")
    create_topics(kafka_bootstrap, foreign, partitions=1)
    _publish(kafka_bootstrap, topics.completed, job.completed, settings)
    expected = _expected(job)
    sink = _Running(settings, cassandra_store, open_engine(settings.sinks[SINK]))
    try:
        wait_until(lambda: len(_held(engine, tenant)) >= len(expected), 60, "the job's points")
        # a tombstone of the tenant's q on another tenant's own topic: refused, to the DLQ, q's points stay
        producer = Producer(producer_config(settings.kafka))
        producer.produce(foreign, key=f"{prefix}-q".encode(), value=None)
        assert producer.flush(30) == 0
        refused = sink.metrics.intake_refused.labels(f"sink-{SINK}", "tenant_mismatch_source")
        wait_until(lambda: refused._value.get() == 1, 60, "the foreign tombstone refused")
        assert len(_held(engine, tenant)) == len(expected)
        # docstream delete, as a user runs it against the deployment's Kafka and store
        env = service_env(kafka_bootstrap, prefix, settings.cassandra, tmp_path)
        deleted = subprocess.run([str(DOCSTREAM), "delete", "s3://bucket/p.pdf", "--tenant", tenant, "--yes"],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        assert not cassandra_store.get_source(tenant, "s3://bucket/p.pdf").live  # type: ignore[union-attr]
        # a producer's own tombstone for the upload (no source key): its points leave too
        producer.produce(topics.submitted, key=f"{prefix}-u".encode(), value=None)
        assert producer.flush(30) == 0
        kept = {i: v for i, v in expected.items() if v[0] == f"{prefix}-q"}
        wait_until(lambda: set(_held(engine, tenant)) == set(kept), 60, "p's and u's points deleted")
    finally:
        sink.stop()
    _assert_holds_exactly(engine, tenant, kept)
    assert sink.metrics.sink_documents.labels(f"sink-{SINK}", "removed")._value.get() == 2


def test_a_source_deleted_and_submitted_again_keeps_only_its_new_version_whatever_the_sink_reads_of_the_old(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
) -> None:
    settings, engine, prefix = sink_case
    rng, tenant, key = random.Random(11), f"t{prefix[-8:]}", "s3://bucket/r.pdf"
    topics = Topics(prefix)
    old = seed_job(cassandra_store, f"{prefix}-j1", tenant, [(f"{prefix}-r1", key, _paragraphs(rng, 6, "old"))],
                   rng=rng)
    _publish(kafka_bootstrap, topics.completed, old.completed, settings)
    sink = _Running(settings, cassandra_store, open_engine(settings.sinks[SINK]))
    try:
        wait_until(lambda: set(_held(engine, tenant)) == set(_expected(old)), 60, "the first version's points")
        # the source is deleted (the store's part; its tombstone held back), submitted again, and the new version
        # completes: the sink writes it, a first version of a later generation, before it reads the tombstone
        told: list[str] = []
        delete_source(cassandra_store, tenant, key, announce=told.append)
        new = seed_job(cassandra_store, f"{prefix}-j2", tenant, [(f"{prefix}-r2", key, _paragraphs(rng, 4, "new"))],
                       rng=rng)
        assert cassandra_store.get_document(f"{prefix}-r2").previous_doc_id is None  # type: ignore[union-attr]
        _publish(kafka_bootstrap, topics.completed, new.completed, settings)
        wait_until(lambda: set(_expected(new)) <= set(_held(engine, tenant)), 60, "the new version's points")
        # then the tombstone of the deleted version: it leaves the new version alone, and nothing of the old stays
        producer = Producer(producer_config(settings.kafka))
        producer.produce(topics.submitted, key=told[0].encode(), value=None)
        assert producer.flush(30) == 0
        removed = sink.metrics.sink_documents.labels(f"sink-{SINK}", "removed")
        wait_until(lambda: removed._value.get() >= 1, 60, "the tombstone read")
        _assert_holds_exactly(engine, tenant, _expected(new))
        # then a completion of the deleted version (a replay of the completed topic, or a version in flight at the
        # delete ending late): it removes that version's points, never the new version's
        _publish(kafka_bootstrap, topics.completed, old.completed, settings)
        wait_until(lambda: removed._value.get() >= 2, 60, "the deleted version's completion read")
    finally:
        sink.stop()
    _assert_holds_exactly(engine, tenant, _expected(new))


def test_kill_9_of_the_sink_mid_job_loses_and_doubles_nothing(
    sink_case: tuple[Settings, SinkEngine, str], kafka_bootstrap: str, cassandra_store: ResultStore,
    tmp_path: Path,
) -> None:
    settings, engine, prefix = sink_case
    rng, tenant = random.Random(5), f"t{prefix[-8:]}"
    job = seed_job(cassandra_store, f"{prefix}-j1", tenant, [
        (f"{prefix}-d{i}", f"file:///in/d{i}.pdf", _paragraphs(rng, 20, f"d{i}")) for i in range(40)], rng=rng)
    _publish(kafka_bootstrap, Topics(prefix).completed, job.completed, settings)
    expected = _expected(job)

    sinks_json = json.dumps({SINK: {**settings.sinks[SINK].model_dump(mode="json"),
                                    "uri": settings.sinks[SINK].uri.get_secret_value(), "batch_size": 8}})
    env = service_env(kafka_bootstrap, prefix, settings.cassandra, tmp_path, DOCSTREAM_SINKS=sinks_json)
    sink = ServiceProcess("sink", env, tmp_path, args=["run", SINK])
    sink.start()
    try:
        wait_until(lambda: len(_held(engine, tenant)) >= 60 or not sink.alive(), 120, "the first points")
        assert sink.alive(), sink.tail()
        sink.kill9()
        assert len(_held(engine, tenant)) < len(expected), "the sink finished before the kill: nothing tested"
        sink.start()
        wait_until(lambda: len(_held(engine, tenant)) >= len(expected) or not sink.alive(), 180, "every point")
    finally:
        sink.stop()
    _assert_holds_exactly(engine, tenant, expected)
