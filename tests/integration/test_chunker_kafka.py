"""The chunker service on a real broker: DocumentSubmitted in, ChunkCreated / failed DocumentCompleted out.

Each test has its own topic prefix (so its own topics) and consumer groups, a SQLite store and
an object store under tmp_path, and runs the real ConsumeLoop with the real child-process
extractor (in a thread, or as the `docstream chunker` command).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psutil
import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.kafka.admin import create_topics, topic_specs
from docstream.kafka.clients import ReliableProducer, consumer_config
from docstream.kafka.loop import ConsumeLoop
from docstream.metrics import Metrics
from docstream.models.tokenization import load_token_counter
from docstream.objectstore import ObjectStore
from docstream.records import ChunkCreated, DocumentCompleted, DocumentSubmitted, utc_now
from docstream.settings import Settings
from docstream.store.base import DocumentResultRow, DocumentRow, JobRow
from docstream.store.sources import advance_source
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics, dlq_topic
from docstream_chunker.handler import ChunkerHandler, chunk_request
from docstream_chunker.main import build_chunker
from docstream_chunker.worker import InlineExtractor, ProcessExtractor
from tests.fixtures.contexts import extractor_settings
from tests.fixtures.documents import (
    GeneratedPdf,
    failure_documents,
    make_epub,
    make_not_a_document,
    make_pdf,
    make_text_document,
    page_marker,
)
from tests.fixtures.kafka import Received, kafka_settings, read_topic
from tests.fixtures.services import ServiceProcess

pytestmark = pytest.mark.integration

MODEL_ID = "all-MiniLM-L6-v2"
# 22 PDFs, 1 to 300 pages; every third with an outline, every fourth with two-column pages,
# every other one with accented, Cyrillic, Greek and CJK words.
JOB_PAGES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 24, 28, 32, 40, 50, 64, 300]


@dataclass
class Service:
    """A test's own topics, stores and settings."""

    settings: Settings
    store: SqliteStore
    objects: ObjectStore
    serde: AvroSerde
    topics: Topics
    root: Path
    group: str = field(default_factory=lambda: f"chunker-{uuid.uuid4().hex}")
    intake_ends: dict[int, int] = field(default_factory=dict)

    def submission(self, data: bytes, filename: str, job_id: str, **fields: object) -> DocumentSubmitted:
        sha = ids.content_sha256(data)
        return DocumentSubmitted(
            job_id=job_id, doc_id=ids.doc_id(job_id, sha), source_uri=self.objects.put(data, sha),
            content_sha256=sha, size_bytes=len(data), submitted_at=utc_now(), filename=filename, model_id=MODEL_ID,
            **fields,  # type: ignore[arg-type]
        )

    def produce(self, records: Sequence[DocumentSubmitted], raw: Sequence[bytes] = ()) -> None:
        """Produce to the intake topic; remembers where each record landed."""
        producer = ReliableProducer(self.settings.kafka, client_id="chunker-test")

        def delivered(err: object, msg: Message) -> None:
            assert err is None, err
            partition, offset = int(msg.partition()), int(msg.offset())
            self.intake_ends[partition] = max(self.intake_ends.get(partition, 0), offset + 1)

        try:
            for record in records:
                value = self.serde.serialize(record, self.topics.submitted)
                producer.produce(self.topics.submitted, record.key, value, on_delivery=delivered)
            for value in raw:
                producer.produce(self.topics.submitted, "poison", value, on_delivery=delivered)
            producer.flush(30)
        finally:
            producer.close(5)

    def committed(self, group: str) -> dict[int, int]:
        """The group's committed offsets of the intake partitions this test produced to."""
        consumer = Consumer(consumer_config(self.settings.kafka, group_id=group))
        try:
            parts = [TopicPartition(self.topics.submitted, p) for p in sorted(self.intake_ends)]
            return {p.partition: p.offset for p in consumer.committed(parts, timeout=10)}
        finally:
            consumer.close()


@pytest.fixture
def service_factory(tmp_path: Path, unique_name: Callable[[str], str]) -> Callable[..., Service]:
    stores: list[SqliteStore] = []

    def make(bootstrap: str, **chunker: object) -> Service:
        prefix = unique_name("chunker-it")
        root = tmp_path / prefix
        settings = kafka_settings(bootstrap, topic_prefix=prefix, partitions=3).with_overrides(
            object_store={"url": str(root / "objects"), "allowed_roots": [str(root / "raw")]},
            store={"backend": "sqlite", "sqlite_path": str(root / "store.db")},
            chunker={"timeout_s": 20.0, **chunker},
            log={"level": "WARNING", "format": "json"},
        )
        topics = Topics(prefix)
        create_topics(settings.kafka, topic_specs(settings.kafka, topics), timeout_s=60)
        store = SqliteStore(root / "store.db")
        store.migrate()
        stores.append(store)
        return Service(settings, store, ObjectStore(settings.object_store), AvroSerde(settings.kafka), topics, root)

    yield make  # type: ignore[misc]
    for store in stores:
        store.close()


class Running:
    """The chunker's ConsumeLoop in a thread, with the child-process extractor."""

    def __init__(self, service: Service, group: str) -> None:
        self.extractor = ProcessExtractor(extractor_settings(service.settings))
        self.error: BaseException | None = None
        self.loop = ConsumeLoop(
            service.settings.kafka, service.settings.retry,
            group_id=group,
            topics=[service.topics.submitted],
            handler=ChunkerHandler(service.settings.chunker, Topics(service.settings.kafka.topic_prefix), service.store,
                                   self.extractor),
            serde=service.serde,
            service="chunker",
        )
        self.thread = threading.Thread(target=self._run, name="chunker-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException as exc:  # handed to the test thread
            self.error = exc

    def stop(self) -> None:
        self.loop.stop()
        self.thread.join(120)
        self.extractor.close()
        assert not self.thread.is_alive(), "the chunker loop did not stop"
        assert self.error is None, f"the chunker loop failed: {self.error!r}"


@dataclass
class Outputs:
    chunks: dict[str, list[ChunkCreated]] = field(default_factory=lambda: defaultdict(list))
    completed: dict[str, list[DocumentCompleted]] = field(default_factory=lambda: defaultdict(list))
    dlq: list[bytes] = field(default_factory=list)
    seen: int = 0

    def add(self, received: Sequence[Received]) -> Outputs:
        """Sorts in the records not seen yet (undecoded: the DLQ's); itself."""
        for item in received[self.seen:]:
            record = item.record
            if record is None:
                self.dlq.append(item.message.value() or b"")
                continue
            assert (item.message.key() or b"").decode() == record.doc_id  # type: ignore[union-attr]
            if isinstance(record, ChunkCreated):
                self.chunks[record.doc_id].append(record)
            else:
                assert isinstance(record, DocumentCompleted)
                self.completed[record.doc_id].append(record)
        self.seen = len(received)
        return self

    def finished(self, doc_ids: set[str], copies: int) -> bool:
        for doc_id in doc_ids:
            if len(self.completed[doc_id]) >= copies:
                continue
            got = self.chunks[doc_id]
            if not got or len(got) < got[0].chunk_count * copies:
                return False
        return True


def read_outputs(service: Service, until: Callable[[Outputs], bool], timeout_s: float = 180.0) -> Outputs:
    """Every record of the chunks, completed and intake-DLQ topics, read until ``until`` holds."""
    out = Outputs()
    topics = (service.topics.chunks, service.topics.completed, dlq_topic(service.topics.submitted))
    read_topic(service.settings.kafka.bootstrap_servers, *topics, serde=service.serde,
               until=lambda reader: until(out.add(reader.received)), timeout_s=timeout_s, what="the chunker's outputs")
    return out


def wait_committed(service: Service, group: str, timeout_s: float = 30.0) -> None:
    """The group's committed offsets reach one past every record produced (bounded poll)."""
    deadline = time.monotonic() + timeout_s
    while (committed := service.committed(group)) != service.intake_ends:
        assert time.monotonic() < deadline, f"committed {committed}, expected {service.intake_ends}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def job_pdfs() -> list[GeneratedPdf]:
    return [
        make_pdf(pages, seed=100 + i, toc=i % 3 == 0, two_column_every=3 if i % 4 == 1 else 0, non_ascii=i % 2 == 1)
        for i, pages in enumerate(JOB_PAGES)
    ]


@pytest.mark.slow
def test_a_job_of_22_pdfs_chunks_as_expected_and_replays_to_the_same_ids(
    kafka_bootstrap: str, service_factory: Callable[..., Service], job_pdfs: list[GeneratedPdf]
) -> None:
    service = service_factory(kafka_bootstrap)
    job_id = f"job-{uuid.uuid4().hex}"
    submissions = [service.submission(pdf.data, f"doc-{i:02d}.pdf", job_id) for i, pdf in enumerate(job_pdfs)]
    service.produce(submissions)
    doc_ids = {s.doc_id for s in submissions}

    first = Running(service, service.group)
    try:
        outputs = read_outputs(service, lambda o: o.finished(doc_ids, copies=1))
    finally:
        first.stop()
    wait_committed(service, service.group)

    expected_extractor = InlineExtractor(extractor_settings(service.settings))
    counter = load_token_counter(None, MODEL_ID)
    for submitted, pdf in zip(submissions, job_pdfs, strict=True):
        got = sorted(outputs.chunks[submitted.doc_id], key=lambda c: c.chunk_index)
        expected = expected_extractor.extract(chunk_request(submitted, service.settings.chunker)).chunks
        assert not outputs.completed[submitted.doc_id]
        assert len(got) == len(expected) == got[0].chunk_count
        assert [c.text for c in got] == [c.text for c in expected]
        assert [(c.page_start, c.page_end, c.char_start, c.char_end) for c in got] == [
            (c.page_start, c.page_end, c.char_start, c.char_end) for c in expected
        ]
        assert {page_marker(n) for n in range(1, pdf.page_count + 1)} == {
            m for c in got for m in re.findall(r"pagemark\d{4}", c.text)
        }
        for chunk in got:
            assert counter.encode_count(chunk.text) == chunk.token_count <= 254
            assert (chunk.job_id, chunk.model_id) == (job_id, MODEL_ID)
            for marker in re.findall(r"pagemark(\d{4})", chunk.text):
                assert chunk.page_start <= int(marker) <= chunk.page_end <= pdf.page_count
            if pdf.headings:
                assert chunk.heading == [t for p, t in pdf.headings if p <= chunk.page_start][-1]
    assert sum(len(outputs.chunks[d]) for d in doc_ids) > 4 * len(doc_ids)

    # a second run over the same intake topic (a new group: a replay) gives the same chunk ids
    second = Running(service, f"{service.group}-replay")
    try:
        replayed = read_outputs(service, lambda o: o.finished(doc_ids, copies=2))
    finally:
        second.stop()
    for doc_id in doc_ids:
        by_index: dict[int, set[str]] = defaultdict(set)
        for chunk in replayed.chunks[doc_id]:
            by_index[chunk.chunk_index].add(chunk.chunk_id)
        assert len(replayed.chunks[doc_id]) == 2 * len(by_index)
        assert all(len(chunk_ids) == 1 for chunk_ids in by_index.values())


def test_a_mixed_job_chunks_the_good_and_fails_each_bad_with_its_code(
    kafka_bootstrap: str, service_factory: Callable[..., Service]
) -> None:
    # 10 s: long enough for a good document on 2 cores loaded by three test workers (4 s timed a.pdf out in
    # one clean-clone run), short enough for the document that hangs on a FIFO to time out soon
    service = service_factory(kafka_bootstrap, timeout_s=10.0, max_pages=30, max_document_bytes=600_000)
    job_id = f"job-{uuid.uuid4().hex}"
    good = [
        service.submission(make_pdf(3, seed=1).data, "a.pdf", job_id),
        service.submission(make_pdf(5, seed=2, two_column_every=2, non_ascii=True).data, "b.pdf", job_id),
        service.submission(make_epub(seed=3), "c.epub", job_id),
        service.submission(make_text_document(seed=4), "d.txt", job_id, media_type="text/plain"),
    ]
    bad: dict[str, DocumentSubmitted] = {
        code: service.submission(data, f"{code}.pdf", job_id) for code, data in failure_documents().items()
    }
    bad["too_large"] = service.submission(b"%PDF-1.7\n" + make_not_a_document(size=700_000), "big.pdf", job_id)
    bad["too_many_pages"] = service.submission(make_pdf(31, section_every=0).data, "long.pdf", job_id)
    missing = service.submission(make_pdf(1, seed=99).data, "gone.pdf", job_id)
    Path(unquote(urlsplit(missing.source_uri).path)).unlink()
    bad["fetch_failed"] = missing
    fifo = service.root / "raw" / "never-written"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    hangs = service.submission(b"hangs", "hangs.pdf", job_id)
    bad["timeout"] = DocumentSubmitted(**{**hangs.to_record(), "source_uri": fifo.as_uri(), "content_sha256": ""})
    records = [good[0], bad.pop("timeout"), *good[1:], *bad.values()]
    bad["timeout"] = records[1]
    service.produce(records, raw=[b"\x00not avro at all"])
    all_ids = {r.doc_id for r in records}

    running = Running(service, service.group)
    try:
        outputs = read_outputs(service, lambda o: o.finished(all_ids, copies=1) and len(o.dlq) == 1)
    finally:
        running.stop()
    wait_committed(service, service.group)

    for record in good:
        chunks = outputs.chunks[record.doc_id]
        assert chunks and len(chunks) == chunks[0].chunk_count and not outputs.completed[record.doc_id]
    for code, record in bad.items():
        [completed] = outputs.completed[record.doc_id]
        assert (completed.status, completed.error_code) == ("failed", code), completed.error
        assert completed.error and completed.job_id == job_id and not outputs.chunks[record.doc_id]
        row = service.store.get_document(record.doc_id)
        assert row is not None and (row.status, row.error_code) == ("failed", code)
    assert {r.status for r in service.store.iter_job_documents(job_id)} == {"chunked", "failed"}


def test_a_small_job_of_a_pdf_a_locked_pdf_and_a_text_document(kafka_bootstrap: str,
                                                              service_factory: Callable[..., Service]) -> None:
    service = service_factory(kafka_bootstrap)
    job_id = f"job-{uuid.uuid4().hex}"
    records = [
        service.submission(make_pdf(4, seed=7, toc=True).data, "a.pdf", job_id),
        service.submission(failure_documents()["encrypted"], "locked.pdf", job_id),
        service.submission(make_text_document(seed=8), "notes.txt", job_id),
    ]
    service.produce(records)
    running = Running(service, service.group)
    try:
        outputs = read_outputs(service, lambda o: o.finished({r.doc_id for r in records}, copies=1))
    finally:
        running.stop()
    wait_committed(service, service.group)
    assert len(outputs.chunks[records[0].doc_id]) == outputs.chunks[records[0].doc_id][0].chunk_count
    assert [c.error_code for c in outputs.completed[records[1].doc_id]] == ["encrypted"]
    assert outputs.chunks[records[2].doc_id]


def test_a_tombstone_on_the_intake_topic_deletes_its_versions_source(service_factory: Callable[..., Service],
                                                                      kafka_bootstrap: str) -> None:
    service = service_factory(kafka_bootstrap)
    now = utc_now()
    store = service.store
    store.upsert_job(JobRow("j1", "acme", now, "completed", 2))
    for n in ("v1", "v2"):
        advance_source(store, "acme", "s3://b/a.pdf", n, content_sha256="ab" * 32, job_id="j1", now=now,
                       write_document=lambda previous, n=n: store.upsert_document(DocumentRow(
                           n, "j1", f"s3://b/{n}", "ab" * 32, "completed", now, source_key="s3://b/a.pdf",
                           previous_doc_id=previous)))
        store.upsert_document_result(DocumentResultRow(n, "m", "j1", "completed", 1, 0, 1, [1.0], "s", now))
    producer = ReliableProducer(service.settings.kafka)
    producer.produce(service.topics.submitted, "v1", None)  # any version's doc_id names the source
    producer.flush(30)
    producer.close()
    chunker = build_chunker(service.settings, store=store, metrics=Metrics(), poll_timeout_s=0.2)
    thread = threading.Thread(target=chunker.run, name="chunker", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while store.get_source("acme", "s3://b/a.pdf").live:  # type: ignore[union-attr]
            assert time.monotonic() < deadline and thread.is_alive(), "the tombstone was not applied"
            time.sleep(0.2)
    finally:
        chunker.stop()
        thread.join(60)
        chunker.close()
    assert store.get_document_result("v1", "m") is None and store.get_document_result("v2", "m") is None
    assert store.get_document("v2") is not None  # the documents rows stay: their jobs keep their counts


def test_the_chunker_command_runs_until_sigterm_and_commits(
    kafka_bootstrap: str, service_factory: Callable[..., Service]
) -> None:
    service = service_factory(kafka_bootstrap)
    job_id = f"job-{uuid.uuid4().hex}"
    records = [
        service.submission(make_pdf(6, seed=11).data, "a.pdf", job_id),
        service.submission(b"", "empty.pdf", job_id),
    ]
    service.produce(records)
    s = service.settings
    env = {
        **os.environ,
        "DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": s.kafka.bootstrap_servers,
        "DOCSTREAM_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
        "DOCSTREAM_OBJECT_STORE__URL": s.object_store.url,
        "DOCSTREAM_STORE__BACKEND": "sqlite",
        "DOCSTREAM_STORE__SQLITE_PATH": str(s.store.sqlite_path),
        "DOCSTREAM_LOG__FORMAT": "json",
    }
    process = ServiceProcess("chunker", env, service.root / "logs")
    process.start()
    try:
        outputs = read_outputs(service, lambda o: o.finished({r.doc_id for r in records}, copies=1))
    finally:
        process.stop(120)
    assert process.returncode() == 0, process.tail(60)
    assert outputs.chunks[records[0].doc_id]
    assert [c.error_code for c in outputs.completed[records[1].doc_id]] == ["empty"]
    wait_committed(service, service.topics.group("chunker"))


@pytest.fixture(autouse=True)
def _no_extractor_left_running() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 15
    while alive := [p for p in psutil.Process().children(recursive=True) if _is_extractor(p)]:
        assert time.monotonic() < deadline, f"extractor processes left running: {alive}"
        time.sleep(0.1)


def _is_extractor(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:
        return False
