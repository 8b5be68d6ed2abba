"""Intake records that name another tenant's job, earlier version or source are refused (docs/security.md
"Intake records"): the handler on both stores, then the chunker's loop on the real Kafka and Cassandra, where each
kind lands in the DLQ with its code and the victim's rows stay as they were.

The victim's rows are written as the intake writes them (a job, a completed document of a source, its result); the
attacker's records carry real PDFs, read by the real extractor when they get that far.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.errors import PoisonRecord
from docstream.kafka.admin import create_topics as create_service_topics
from docstream.kafka.admin import topic_specs
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop, Envelope
from docstream.metrics import Metrics
from docstream.objectstore import ObjectStore
from docstream.records import DocumentCompleted, DocumentSubmitted, utc_now
from docstream.settings import Settings
from docstream.store.base import DocumentResultRow, DocumentRow, JobDocumentRow, JobRow, ResultStore
from docstream.store.sources import advance_source
from docstream.tenants.tenancy import tenant_intake_topic
from docstream.topics import Topics, dlq_topic
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import InlineExtractor
from docstream_cli.ops.dlq import iter_dlq
from docstream_cli.ops.dlq_plan import DlqRecord
from tests.fixtures.contexts import extractor_settings
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import kafka_settings, read_topic, wait_until
from tests.fixtures.loop import running_loop

pytestmark = pytest.mark.integration

MODEL_ID = "all-MiniLM-L6-v2"


@dataclass
class Victim:
    """Another tenant's job, holding the current version of one of its sources, completed."""

    tenant: str
    job_id: str
    doc_id: str
    source_key: str

    def rows(self, store: ResultStore) -> tuple[object, ...]:
        """Every row of the victim's that a cross-tenant record could change."""
        return (store.get_job(self.job_id), store.get_document(self.doc_id),
                store.get_source(self.tenant, self.source_key), store.list_document_results(self.doc_id),
                [row.doc_id for row in store.iter_job_documents(self.job_id)])


def seed_victim(store: ResultStore) -> Victim:
    run = uuid.uuid4().hex
    victim = Victim(f"victim-{run}", f"victim-job-{run}", "", f"s3://victim/{run}/contract.pdf")
    sha = ids.content_sha256(run.encode())
    doc_id = ids.doc_id(victim.job_id, sha)
    now = utc_now()
    store.upsert_job(JobRow(victim.job_id, victim.tenant, now, "completed", 1, completed=1, updated_at=now))
    advance_source(store, victim.tenant, victim.source_key, doc_id, content_sha256=sha, job_id=victim.job_id, now=now,
                   write_document=lambda _: store.upsert_document(DocumentRow(
                       doc_id, victim.job_id, victim.source_key, sha, "completed", now, source_key=victim.source_key)))
    store.upsert_job_document(JobDocumentRow(victim.job_id, doc_id, "completed", now))
    store.upsert_document_result(DocumentResultRow(doc_id, MODEL_ID, victim.job_id, "completed", 1, 0, 5,
                                                   [0.5] * 4, "c1", now, content_sha256=sha))
    return Victim(victim.tenant, victim.job_id, doc_id, victim.source_key)


@dataclass
class Attacker:
    tenant: str
    objects: ObjectStore

    def submission(self, job_id: str, *, seed: int = 0, **fields: object) -> DocumentSubmitted:
        data = make_pdf(1, seed=seed).data
        sha = ids.content_sha256(data)
        values: dict[str, object] = {
            "job_id": job_id, "doc_id": ids.doc_id(job_id, sha), "source_uri": self.objects.put(data, sha),
            "content_sha256": sha, "size_bytes": len(data), "submitted_at": utc_now(), "tenant": self.tenant,
            "filename": "mine.pdf", "model_id": MODEL_ID, **fields,
        }
        return DocumentSubmitted(**values)  # type: ignore[arg-type]


def _settings(root: Path, prefix: str) -> Settings:
    return Settings().with_overrides(  # type: ignore[call-arg]
        object_store={"url": str(root / "objects")},
        chunker={"timeout_s": 30.0},
        kafka={"topic_prefix": prefix},
    )


@pytest.fixture
def attacker(tmp_path: Path) -> Attacker:
    return Attacker(f"attacker-{uuid.uuid4().hex}", ObjectStore(_settings(tmp_path, "unit").object_store))


@pytest.fixture
def handler_of(tmp_path: Path) -> Iterator[Callable[[ResultStore, Metrics], ChunkerHandler]]:
    extractors: list[InlineExtractor] = []

    def make(store: ResultStore, metrics: Metrics) -> ChunkerHandler:
        settings = _settings(tmp_path, "unit")
        extractors.append(InlineExtractor(extractor_settings(settings)))
        return ChunkerHandler(settings.chunker, Topics("unit"), store, extractors[-1], metrics=metrics)

    yield make
    for extractor in extractors:
        extractor.close()


def _refused(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("docstream_intake_refused_total",
                                              {"service": "chunker", "reason": reason})
    return value or 0.0


def _code_of(call: Callable[[], object]) -> str:
    with pytest.raises(PoisonRecord) as caught:
        call()
    return caught.value.code


def test_cross_tenant_records_are_refused_on_each_store(
    store: ResultStore, attacker: Attacker, handler_of: Callable[[ResultStore, Metrics], ChunkerHandler]
) -> None:
    victim = seed_victim(store)
    before = victim.rows(store)
    metrics = Metrics()
    handler = handler_of(store, metrics)
    own_job = f"attacker-job-{uuid.uuid4().hex}"
    shared = "unit.documents.submitted"
    mine = tenant_intake_topic("unit", attacker.tenant)

    def envelope(record: DocumentSubmitted, topic: str = shared) -> Envelope:
        return Envelope(topic, 0, 0, record.doc_id, record)

    into_their_job = attacker.submission(victim.job_id)
    assert _code_of(lambda: handler(envelope(into_their_job))) == "tenant_mismatch_job"
    their_previous = attacker.submission(own_job, previous_doc_id=victim.doc_id, source_key=victim.source_key)
    assert _code_of(lambda: handler(envelope(their_previous))) == "tenant_mismatch_previous"
    over_their_document = attacker.submission(own_job, doc_id=victim.doc_id)
    assert _code_of(lambda: handler(envelope(over_their_document))) == "doc_id_mismatch"
    assert _code_of(lambda: handler.on_tombstone(mine, victim.doc_id)) == "tenant_mismatch_source"
    as_them = attacker.submission(own_job, tenant=victim.tenant)
    assert _code_of(lambda: handler(envelope(as_them, mine))) == "tenant_mismatch_topic"
    bad_key = attacker.submission(own_job, source_key="line\nbreak")
    assert _code_of(lambda: handler(envelope(bad_key))) == "invalid_source_key"

    assert victim.rows(store) == before
    assert store.get_job(own_job) is None  # nothing refused claimed the attacker's job
    for reason in ("tenant_mismatch_job", "tenant_mismatch_previous", "doc_id_mismatch", "tenant_mismatch_source",
                   "tenant_mismatch_topic", "invalid_source_key"):
        assert _refused(metrics, reason) == 1.0, reason


def test_the_first_record_of_a_new_job_claims_it_for_its_tenant(
    store: ResultStore, attacker: Attacker, handler_of: Callable[[ResultStore, Metrics], ChunkerHandler]
) -> None:
    metrics = Metrics()
    handler = handler_of(store, metrics)
    job_id = f"external-{uuid.uuid4().hex}"
    first = attacker.submission(job_id, seed=1)
    assert any(isinstance(out.value, DocumentCompleted) or out.topic == "unit.chunks"
               for out in handler(Envelope("unit.documents.submitted", 0, 0, first.doc_id, first)))
    job = store.get_job(job_id)
    assert job is not None and (job.tenant, job.status, job.document_count, job.options) == (
        attacker.tenant, "running", 0, {"origin": "external"})

    other = Attacker(f"other-{uuid.uuid4().hex}", attacker.objects).submission(job_id, seed=2)
    fresh = handler_of(store, metrics)  # another chunker process: nothing cached
    assert _code_of(lambda: fresh(Envelope("unit.documents.submitted", 0, 0, other.doc_id, other))) == (
        "tenant_mismatch_job")
    # the owner's own next version of that document names it as its earlier version
    again = attacker.submission(job_id, seed=3, previous_doc_id=first.doc_id)
    assert fresh(Envelope("unit.documents.submitted", 0, 0, again.doc_id, again))


def test_a_tombstone_of_a_tenants_own_topic_deletes_its_own_source(
    store: ResultStore, handler_of: Callable[[ResultStore, Metrics], ChunkerHandler]
) -> None:
    victim = seed_victim(store)  # here the owner deletes its own source
    handler = handler_of(store, Metrics())
    assert handler.on_tombstone(tenant_intake_topic("unit", victim.tenant), victim.doc_id) == []
    assert not store.get_source(victim.tenant, victim.source_key).live  # type: ignore[union-attr]
    assert store.list_document_results(victim.doc_id) == []


def _chunker_loop(settings: Settings, store: ResultStore, extractor: InlineExtractor, topics: list[str],
                  metrics: Metrics) -> ConsumeLoop:
    """The chunker's ConsumeLoop, reading the shared intake topic and one tenant's own."""
    handler = ChunkerHandler(settings.chunker, Topics(settings.kafka.topic_prefix), store, extractor, metrics=metrics)
    return ConsumeLoop(settings.kafka, settings.retry, group_id=f"chunker-{uuid.uuid4().hex}", topics=topics,
                       handler=handler, on_tombstone=handler.on_tombstone, serde=AvroSerde(settings.kafka),
                       service="chunker", metrics=metrics)


def test_cross_tenant_intake_records_go_to_the_dlq_with_their_codes_on_the_real_stack(
    kafka_bootstrap: str, cassandra_store: ResultStore, tmp_path: Path, attacker: Attacker,
    unique_name: Callable[[str], str],
) -> None:
    prefix = unique_name("tenancy-it")
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix).with_overrides(
        object_store={"url": str(tmp_path / "objects")}, chunker={"timeout_s": 30.0})
    topics = Topics(prefix)
    theirs_topic = tenant_intake_topic(prefix, attacker.tenant)
    specs = topic_specs(settings.kafka, topics)
    specs += [replace(specs[0], name=name) for name in (theirs_topic, dlq_topic(theirs_topic))]
    create_service_topics(settings.kafka, specs, timeout_s=60)
    victim = seed_victim(cassandra_store)
    before = victim.rows(cassandra_store)
    own_job = f"attacker-job-{uuid.uuid4().hex}"
    serde = AvroSerde(settings.kafka)

    into_their_job = attacker.submission(victim.job_id)
    their_previous = attacker.submission(own_job, seed=1, previous_doc_id=victim.doc_id)
    as_them = attacker.submission(own_job, seed=2, tenant=victim.tenant)
    legit = attacker.submission(own_job, seed=3)
    producer = ReliableProducer(settings.kafka, client_id="tenancy-test")
    try:
        for record in (into_their_job, their_previous):
            producer.produce(topics.submitted, record.doc_id, serde.serialize(record, topics.submitted))
        producer.produce(theirs_topic, victim.doc_id, None)  # the tombstone of another tenant's document
        for record in (as_them, legit):
            producer.produce(theirs_topic, record.doc_id, serde.serialize(record, theirs_topic))
        producer.flush(30)
    finally:
        producer.close(5)

    metrics = Metrics()
    extractor = InlineExtractor(extractor_settings(settings))
    loop = _chunker_loop(settings, cassandra_store, extractor, [topics.submitted, theirs_topic], metrics)
    with running_loop(loop) as errors:
        def letters(topic: str, count: int) -> dict[str, DlqRecord] | None:
            found = {r.error_code: r for r in iter_dlq(settings.kafka, dlq_topic(topic), timeout_s=20)}
            return found if len(found) >= count else None

        shared = wait_until(lambda: letters(topics.submitted, 2), 120, "the shared intake topic's letters")
        own = wait_until(lambda: letters(theirs_topic, 2), 120, "the tenant topic's letters")
        read_topic(kafka_bootstrap, topics.chunks, topics.completed, serde=serde, timeout_s=120,
                   until=lambda reader: any(getattr(r.record, "doc_id", None) == legit.doc_id
                                            for r in reader.received), what="the legitimate document's output")
    extractor.close()
    assert errors == [], errors
    assert set(shared) == {"tenant_mismatch_job", "tenant_mismatch_previous"}
    assert set(own) == {"tenant_mismatch_source", "tenant_mismatch_topic"}
    for letter in [*shared.values(), *own.values()]:
        assert letter.header("service") == "chunker"
    assert own["tenant_mismatch_source"].key == victim.doc_id.encode()
    assert victim.rows(cassandra_store) == before
    job = cassandra_store.get_job(own_job)
    assert job is not None and job.tenant == attacker.tenant  # the legitimate record claimed its job
    for reason in ("tenant_mismatch_job", "tenant_mismatch_previous", "tenant_mismatch_source",
                   "tenant_mismatch_topic"):
        assert _refused(metrics, reason) == 1.0, reason
