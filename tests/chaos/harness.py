"""What the chaos scenarios share: scale, documents with their expected chunks, Kafka probes, store checks.

* ``ChaosScale``: the numbers of a run; ``DOCSTREAM_CHAOS_FULL=1`` gives the issue's (200-document
  jobs, three kills per service, a 30 s outage), otherwise the short versions of `make test`.
* ``good_documents`` / ``bad_documents``: files written into a folder, each with what the chunker must
  make of it (chunk ids computed here with the chunker's own code and default settings, or the error
  code it must fail with).
* ``KafkaProbe``: topic ends and group offsets (one consumer and one admin client, reused).
* ``read_topic``: a topic from the start up to its current end, read_committed by default (the messages
  of tests.fixtures.kafka.read_topic).
* ``JobExpectations.check(store)``: every document terminal with the right status and exactly its
  chunk rows; returns figures.
* ``Sampler``: a background thread sampling a callable at an interval (progress, memory).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import re
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.errors import StoreError
from docstream.kafka.clients import fetch_committed_offsets
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.records import DocumentCompleted
from docstream.settings import CassandraSettings, ChunkerSettings, InferenceSettings, KafkaSettings
from docstream.store.base import ResultStore
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes
from tests.fixtures.cassandra import cluster_of
from tests.fixtures.documents import (
    failure_documents,
    make_corrupt_pdf,
    make_encrypted_pdf,
    make_image_only_pdf,
    make_not_a_document,
    make_pdf,
    make_truncated_pdf,
)
from tests.fixtures.kafka import kafka_settings, wait_until
from tests.fixtures.kafka import read_topic as read_to_end
from tests.fixtures.services import ROOT, Pipeline

__all__ = [
    "CHAOS_ENV",
    "CHUNKER_MAX_BYTES",
    "CHUNKER_MAX_PAGES",
    "FULL",
    "MODEL_ID",
    "READY_EVENTS",
    "SCALE",
    "SERVICES",
    "TOLERATE_RECHUNKED_ROWS",
    "UPSTREAM",
    "ChaosReport",
    "ChaosScale",
    "ExpectedDocument",
    "JobExpectations",
    "KafkaProbe",
    "LocalStack",
    "Sampler",
    "StackNode",
    "bad_documents",
    "chunk_writetimes",
    "completed_per_document",
    "good_documents",
    "headers_of",
    "metric_value",
    "new_job_id",
    "position",
    "read_topic",
    "rechunked_documents",
    "store_answers",
    "wait_ready",
]

FULL = os.environ.get("DOCSTREAM_CHAOS_FULL", "") not in ("", "0", "false", "no")
MODEL_ID = InferenceSettings().model_id
TOLERATE_RECHUNKED_ROWS = False
"""True accepts 'chunked' rows of re-chunked documents (the chunker bug fixed in 0.1: docs/reliability.md)."""
_QUIET_KAFKA: dict[str, Any] = {"logger": logging.getLogger("docstream.librdkafka")}
_PROBE_RETRIES = 5
_LEADER_MOVED = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT}


@dataclass(frozen=True)
class ChaosScale:
    """The numbers of one chaos run (short: `make test`, full: `make chaos`)."""

    mode: str
    seed: int
    pages: tuple[int, int]
    kill_docs: int
    kills_per_service: int
    kill_pause_s: tuple[float, float]
    outage_docs: int
    outage_s: float
    broker_docs: int
    broker_down_s: float
    poison_docs: int
    poison_fraction: float
    backpressure_docs: int
    inference_delay_ms: int
    duplicate_docs: int
    bad_input_docs: int
    bad_copies: int
    job_timeout_s: float
    test_timeout_s: int
    cluster_docs: int
    cluster_down_s: float


def _scale() -> ChaosScale:
    seed = int(os.environ.get("DOCSTREAM_CHAOS_SEED", "20241130"))
    if FULL:
        return ChaosScale(
            mode="full", seed=seed, pages=(1, 5), kill_docs=200, kills_per_service=3, kill_pause_s=(1.0, 8.0),
            outage_docs=100, outage_s=30.0, broker_docs=100, broker_down_s=10.0, poison_docs=100,
            poison_fraction=0.05, backpressure_docs=200, inference_delay_ms=250, duplicate_docs=20,
            bad_input_docs=200, bad_copies=3, job_timeout_s=1500.0, test_timeout_s=2400,
            cluster_docs=150, cluster_down_s=20.0,
        )
    return ChaosScale(
        mode="short", seed=seed, pages=(1, 3), kill_docs=12, kills_per_service=1, kill_pause_s=(0.2, 1.0),
        outage_docs=10, outage_s=5.0, broker_docs=10, broker_down_s=1.0, poison_docs=10, poison_fraction=0.05,
        backpressure_docs=10, inference_delay_ms=150, duplicate_docs=5, bad_input_docs=12, bad_copies=1,
        job_timeout_s=240.0, test_timeout_s=420, cluster_docs=12, cluster_down_s=3.0,
    )


SCALE = _scale()


def new_job_id(scenario: str) -> str:
    """A job id of its own for a scenario."""
    return f"chaos-{scenario}-{uuid.uuid4().hex[:10]}"


# -- documents and what the chunker must make of them -------------------------------------------


@dataclass(frozen=True)
class ExpectedDocument:
    """A file of a job and its expected outcome: its chunk ids, or the error code it fails with."""

    filename: str
    path: Path
    sha256: str
    chunk_ids: tuple[str, ...] = ()
    error_code: str | None = None

    @property
    def chunk_count(self) -> int:
        """Chunks the document must have."""
        return len(self.chunk_ids)

    def doc_id(self, job_id: str) -> str:
        """Its doc_id in ``job_id``."""
        return str(ids.doc_id(job_id, self.sha256))


@functools.cache
def _counter() -> ModelTokenCounter:
    return load_token_counter(InferenceSettings().model_path, MODEL_ID)


def _expected_chunk_ids(data: bytes, filename: str) -> tuple[str, ...]:
    chunker = ChunkerSettings()
    result = chunk_bytes(
        data, config=ChunkingConfig(chunker.max_tokens, chunker.overlap_tokens), counter=_counter(),
        max_pages=chunker.max_pages, max_bytes=chunker.max_document_bytes, filename=filename,
    )
    sha = ids.content_sha256(data)
    return tuple(ids.chunk_id(sha, result.chunker_settings, chunk.index) for chunk in result.chunks)


def _write(folder: Path, filename: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_bytes(data)
    return path


def good_documents(folder: Path, count: int, *, seed: int, pages: tuple[int, int]) -> list[ExpectedDocument]:
    """``count`` distinct PDFs of ``pages`` (inclusive range, seeded) pages, written to ``folder``."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        data = make_pdf(rng.randint(*pages), seed=seed * 10_000 + i, section_every=2).data
        name = f"good-{i:04d}.pdf"
        out.append(ExpectedDocument(name, _write(folder, name, data), ids.content_sha256(data),
                                    chunk_ids=_expected_chunk_ids(data, name)))
    return out


def bad_documents(folder: Path, copies: int, *, seed: int, max_pages: int, max_bytes: int) -> list[ExpectedDocument]:
    """Every failure kind of the chunker's fixtures, ``copies`` distinct files of each where the kind allows.

    ``too_many_pages`` and ``too_large`` need the chunker's limits (``max_pages``, ``max_bytes``) set low.
    ``empty`` files never reach the chunker: the intake refuses them (code ``empty``).
    """
    makers: dict[str, Callable[[int], bytes]] = {
        "encrypted": lambda s: make_encrypted_pdf(2, seed=s),
        "corrupt": lambda s: make_truncated_pdf(3, seed=s) if s % 2 == 0 else make_corrupt_pdf(seed=s),
        "not_a_document": lambda s: make_not_a_document(seed=s),
        "no_text": lambda s: make_image_only_pdf(2, seed=s),
        "too_many_pages": lambda s: make_pdf(max_pages + 1, seed=s, section_every=0).data,
        "too_large": lambda s: b"%PDF-1.7\n%" + random.Random(s).randbytes(max_bytes + 1024),
    }
    single = failure_documents()  # kinds whose fixture takes no seed: one file each
    out = []
    for code, make in makers.items():
        for copy in range(copies):
            data = make(seed * 100 + copy)
            name = f"bad-{code}-{copy}{'.bin' if code == 'not_a_document' else '.pdf'}"
            out.append(ExpectedDocument(name, _write(folder, name, data), ids.content_sha256(data), error_code=code))
    for code in ("zero_pages", "empty"):
        name = f"bad-{code}.pdf"
        data = single[code]
        out.append(ExpectedDocument(name, _write(folder, name, data), ids.content_sha256(data), error_code=code))
    return out


# -- Kafka ---------------------------------------------------------------------------------------


class KafkaProbe:
    """Topic ends and consumer-group offsets (one thread only)."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0) -> None:
        self._timeout_s = timeout_s
        self._kafka = kafka_settings(bootstrap).kafka
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
                                   "enable.auto.commit": False, **_QUIET_KAFKA})
        self._partitions: dict[str, list[int]] = {}

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (cached)."""
        if topic not in self._partitions:
            meta = self._consumer.list_topics(topic, timeout=self._timeout_s).topics[topic]
            if meta.error is not None or not meta.partitions:
                raise KafkaException(meta.error)
            self._partitions[topic] = sorted(meta.partitions)
        return self._partitions[topic]

    def ends(self, topic: str) -> dict[int, int]:
        """High watermark of each partition.

        A partition whose leader just moved (a broker killed, or the cluster's preferred-leader election
        after a restarted broker caught up) answers NOT_LEADER_FOR_PARTITION until librdkafka has new
        metadata: such retriable errors are asked again, for up to ``_PROBE_RETRIES`` tries.

        Raises:
            KafkaException: the broker did not answer, or kept failing.
        """
        return {p: self._end(TopicPartition(topic, p)) for p in self.partitions(topic)}

    def _end(self, partition: TopicPartition) -> int:
        for attempt in range(1, _PROBE_RETRIES + 1):
            try:
                return int(self._consumer.get_watermark_offsets(partition, timeout=self._timeout_s)[1])
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                moved = isinstance(error, KafkaError) and (error.retriable() or error.code() in _LEADER_MOVED)
                if attempt == _PROBE_RETRIES or not moved:
                    raise
                time.sleep(0.25 * attempt)
        raise AssertionError("unreachable")

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset of each partition (-1001 where none).

        Through a consumer of the group (docstream.kafka.clients.fetch_committed_offsets), not the
        admin client: librdkafka's ``list_consumer_group_offsets`` crashed this test process with
        SIGSEGV when the group's coordinator had moved (a broker killed on the cluster).

        Raises:
            RetryableError | FatalError: no answer in time, or a refusal.
        """
        return fetch_committed_offsets(self._kafka, group, topic, self.partitions(topic), timeout_s=self._timeout_s)

    def caught_up(self, group: str, topic: str) -> bool:
        """Whether ``group`` committed every partition of ``topic`` up to its end."""
        ends = self.ends(topic)
        committed = self.committed(group, topic)
        return all(committed.get(p, -1) >= end for p, end in ends.items() if end > 0)

    def total(self, topic: str) -> int:
        """Sum of the partitions' high watermarks."""
        return sum(self.ends(topic).values())

    def close(self) -> None:
        """Release the clients."""
        self._consumer.close()


def position(msg: Message) -> tuple[int, int]:
    """(partition, offset) of a consumed record."""
    return int(msg.partition() or 0), int(msg.offset() or 0)


def headers_of(msg: Message) -> dict[str, str]:
    """A record's headers as text."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs}


def read_topic(
    bootstrap: str, topic: str, *, isolation: Literal["read_committed", "read_uncommitted"] = "read_committed",
    timeout_s: float = 60.0,
) -> list[Message]:
    """Every record of ``topic`` from the start up to the end it has now (tests.fixtures.kafka.read_topic)."""
    return read_to_end(bootstrap, topic, isolation=isolation, timeout_s=timeout_s).messages


def completed_per_document(bootstrap: str, topic: str, kafka: KafkaSettings, doc_ids: Iterable[str]) -> Counter[str]:
    """How many DocumentCompleted records (read_committed) each of ``doc_ids`` has on ``topic``."""
    wanted = set(doc_ids)
    counts: Counter[str] = Counter()
    for record in read_to_end(bootstrap, topic, serde=AvroSerde(kafka), timeout_s=60.0).records:
        if isinstance(record, DocumentCompleted) and record.doc_id in wanted:
            counts[record.doc_id] += 1
    return counts


# -- Cassandra -----------------------------------------------------------------------------------


def chunk_writetimes(settings: CassandraSettings, doc_ids: Iterable[str], model_id: str = MODEL_ID
                     ) -> dict[tuple[str, int], int]:
    """``(doc_id, chunk_index)`` → write time (epoch microseconds) of each stored chunk row."""
    cluster = cluster_of(settings)
    try:
        session = cluster.connect(settings.keyspace)
        query = session.prepare("SELECT chunk_index, WRITETIME(chunk_id) FROM chunks WHERE doc_id = ? AND model_id = ?")
        out = {}
        for doc_id in doc_ids:
            for row in session.execute(query, (doc_id, model_id), timeout=30):
                out[(doc_id, int(row[0]))] = int(row[1])
        return out
    finally:
        cluster.shutdown()


def discard_vectors(settings: CassandraSettings) -> list[str]:
    """Empty the keyspace's vector tables; the tables emptied.

    A Cassandra node's stop flushes its memtables, and a vector table's SAI index trains its quantization (k-means)
    on the vectors of that flush: with the thousands that the tests before a scenario leave, 25-30 s on a busy
    2-core machine, then a SIGKILL and a start twice as long. A scenario that stops Cassandra would measure that
    instead of the pipeline. TRUNCATE drops the memtables unflushed (the test stack takes no snapshots); only
    earlier tests' vectors go, and each test checks its own.
    """
    cluster = cluster_of(settings)
    try:
        session = cluster.connect(settings.keyspace)
        tables = [row[0] for row in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (settings.keyspace,))
            if row[0].startswith("chunk_vectors_d")]
        for table in tables:
            session.execute(f"TRUNCATE {table}", timeout=120)
        return tables
    finally:
        cluster.shutdown()


@dataclass
class JobExpectations:
    """A submitted job and what every one of its documents must end as."""

    job_id: str
    documents: list[ExpectedDocument]
    model_id: str = MODEL_ID

    @property
    def processed(self) -> list[ExpectedDocument]:
        """The documents the intake accepts (all but empty files)."""
        return [d for d in self.documents if d.error_code != "empty"]

    @property
    def good(self) -> list[ExpectedDocument]:
        """The documents that must complete."""
        return [d for d in self.documents if d.error_code is None]

    @property
    def chunk_total(self) -> int:
        """Chunks of the whole job."""
        return sum(d.chunk_count for d in self.documents)

    def doc_ids(self, documents: Sequence[ExpectedDocument] | None = None) -> list[str]:
        """doc_ids of ``documents`` (default: the processed ones)."""
        return [d.doc_id(self.job_id) for d in (self.processed if documents is None else documents)]

    def finished(self, store: ResultStore) -> bool:
        """Whether the jobs row says completed."""
        job = store.get_job(self.job_id)
        return job is not None and job.status == "completed"

    def check(self, store: ResultStore, *, rechunked: Collection[str] = ()) -> dict[str, Any]:
        """Assert every document terminal with the right status and exactly its chunk rows; figures.

        ``rechunked``: doc_ids the chunker chunked more than once (a redelivered DocumentSubmitted).
        While the bug pinned by ``test_a_duplicate_document_submitted_after_completion_leaves_the_rows_completed``
        stands (``TOLERATE_RECHUNKED_ROWS``), their documents and job_documents rows may say ``chunked``
        instead of ``completed``; everything else about them must be right. Counted in the figures.
        """
        job = store.get_job(self.job_id)
        good, failed = self.good, [d for d in self.processed if d.error_code is not None]
        assert job is not None and job.status == "completed", f"job {self.job_id}: {job}"
        assert (job.document_count, job.completed, job.partial, job.failed) == (
            len(self.processed), len(good), 0, len(failed)), job
        rows = {r.doc_id: r for r in store.iter_job_documents(self.job_id)}
        assert sorted(rows) == sorted(self.doc_ids()), "job_documents rows differ from the accepted documents"
        chunks = regressed = 0
        for doc in good:
            doc_id = doc.doc_id(self.job_id)
            statuses = {rows[doc_id].status, getattr(store.get_document(doc_id), "status", None)}
            if statuses != {"completed"}:
                assert TOLERATE_RECHUNKED_ROWS and doc_id in rechunked and statuses <= {"completed", "chunked"}, (
                    doc.filename, rows[doc_id], store.get_document(doc_id))
                regressed += 1
            result = store.get_document_result(doc_id, self.model_id)
            assert result is not None and (result.status, result.chunk_count, result.failed_chunks) == (
                "completed", doc.chunk_count, 0), (doc.filename, result)
            stored = list(store.iter_chunks(doc_id, self.model_id))
            assert [r.chunk_index for r in stored] == list(range(doc.chunk_count)), (doc.filename, "chunk indexes")
            assert tuple(r.chunk_id for r in stored) == doc.chunk_ids, (doc.filename, "chunk ids")
            assert store.count_chunks(doc_id, self.model_id) == doc.chunk_count, (doc.filename, "chunk count")
            chunks += len(stored)
        for doc in failed:
            doc_id = doc.doc_id(self.job_id)
            row = store.get_document(doc_id)
            assert row is not None and (row.status, row.error_code) == ("failed", doc.error_code), (doc.filename, row)
            assert (rows[doc_id].status, rows[doc_id].error_code) == ("failed", doc.error_code), rows[doc_id]
            assert store.count_chunks(doc_id, self.model_id) == 0, (doc.filename, "a failed document has chunks")
        assert chunks == self.chunk_total
        return {"documents": len(self.documents), "completed": len(good), "failed": len(failed),
                "chunk_rows": chunks, "expected_chunk_rows": self.chunk_total, "rows_left_chunked": regressed}


# -- sampling ------------------------------------------------------------------------------------


@dataclass
class Sampler:
    """Calls ``sample()`` every ``interval_s`` on a thread until stopped; keeps (monotonic time, value)."""

    sample: Callable[[], Any]
    interval_s: float = 0.25
    samples: list[tuple[float, Any]] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value = self.sample()
            except (KafkaException, OSError, ValueError):
                self.errors += 1  # a broker or endpoint that does not answer: the next sample tries again
            else:
                self.samples.append((time.monotonic(), value))
            self._stop.wait(self.interval_s)


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one Prometheus sample in ``text`` (exposition format), None when absent."""
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or "")) == labels:
            return float(match.group(2))
    return None


# -- the stack, the pipeline's settings, the report --------------------------------------------------


CHUNKER_MAX_PAGES = 12
CHUNKER_MAX_BYTES = 2 * 1024 * 1024
SERVICES = ("chunker", "inference", "reducer")

# What every service of the shared pipeline runs with (docs/reliability.md "Settings"):
CHAOS_ENV = {
    "DOCSTREAM_KAFKA__TRANSACTIONS": "true",  # the reducer runs exactly-once
    # a retry budget (150 attempts, backoff ceilings up to 4 s: about 5 minutes) longer than the
    # longest outage with Cassandra's restart and the driver's reconnection, so the services ride it out
    "DOCSTREAM_RETRY__MAX_ATTEMPTS": "150",
    "DOCSTREAM_RETRY__MAX_DELAY_MS": "4000",
    "DOCSTREAM_CHUNKER__MAX_PAGES": str(CHUNKER_MAX_PAGES),
    "DOCSTREAM_CHUNKER__MAX_DOCUMENT_BYTES": str(CHUNKER_MAX_BYTES),
    # a consumer that never rejoins its group after a broker restart (docs/reliability.md, guarded by the
    # membership watch; seen again in a clean-clone run) is replaced after 45 s instead of 120 s: a rejoin here
    # takes about 15 s from the session's timeout, and a replacement loses and doubles nothing
    "DOCSTREAM_KAFKA__REJOIN_TIMEOUT_S": "45",
}
READY_EVENTS = {"chunker": "partitions_assigned", "inference": "partitions_assigned",
                "reducer": "reducer_state_recovered", "upstream-chunker": "partitions_assigned"}
UPSTREAM = "upstream-chunker"
"""A second chunker, under the prefix ``<prefix>-src``: the poison scenario relays its chunks."""
_STACK = ROOT / "deploy" / "local" / "stack"
Component = Literal["kafka", "cassandra"]


@dataclass(frozen=True)
class StackNode:
    """One node of the stack as `stack nodes` reports it (Kafka: ``index`` is the broker id)."""

    component: Component
    index: int
    name: str
    state: str
    """running, running (not answering), dead (killed, pid file kept) or stopped."""
    pid: int | None
    address: str


class LocalStack:
    """deploy/local/stack for the components the tests use (same DOCSTREAM_STACK_* environment)."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.kafka_port = int(self.env.get("DOCSTREAM_STACK_KAFKA_PORT") or 19092)
        self.cassandra_port = int(self.env.get("DOCSTREAM_STACK_CASSANDRA_PORT") or 19042)
        self.home = self.env.get("DOCSTREAM_STACK_HOME") or "~/.cache/docstream/stack"

    def _run(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(_STACK), *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)

    def down(self, component: str) -> float:
        """Stop ``component`` (SIGTERM, then SIGKILL after 30 s); seconds it took."""
        started = time.monotonic()
        done = self._run("down", component)
        assert done.returncode == 0, f"stack down {component} failed:\n{done.stdout}{done.stderr}"
        return time.monotonic() - started

    def up(self, component: str) -> float:
        """Start ``component`` and wait until it answers; seconds it took."""
        started = time.monotonic()
        done = self._run("up", component)
        assert done.returncode == 0, f"stack up {component} failed:\n{done.stdout}{done.stderr}"
        return time.monotonic() - started

    def running(self, component: str) -> bool:
        """Whether ``component`` runs and answers."""
        return self._run("status", component, timeout_s=60).returncode == 0

    def ensure_up(self) -> None:
        """Start whatever component is down."""
        for component in ("kafka", "cassandra"):
            if not self.running(component):
                self.up(component)

    def _node_command(self, command: str, component: Component, node: int) -> float:
        started = time.monotonic()
        done = self._run(command, component, str(node))
        assert done.returncode == 0, f"stack {command} {component} {node} failed:\n{done.stdout}{done.stderr}"
        return time.monotonic() - started

    def kill(self, component: Component, node: int) -> float:
        """SIGKILL node ``node`` of ``component`` (a crash: its pid file stays); seconds it took."""
        return self._node_command("kill", component, node)

    def start(self, component: Component, node: int) -> float:
        """Start node ``node`` again on its data and wait until it answers; seconds it took."""
        return self._node_command("start", component, node)

    def stop(self, component: Component, node: int) -> float:
        """Stop node ``node`` cleanly (SIGTERM, SIGKILL after 30 s); seconds it took."""
        return self._node_command("stop", component, node)

    def nodes(self, component: Component) -> list[StackNode]:
        """Every node of ``component`` in the running topology (one, unless `up` was given a node count)."""
        done = self._run("nodes", component, timeout_s=60)
        assert done.returncode == 0, f"stack nodes {component} failed:\n{done.stdout}{done.stderr}"
        return [_stack_node(component, line) for line in done.stdout.splitlines() if line.strip()]


def _stack_node(component: Component, line: str) -> StackNode:
    index, name, state, pid, address = line.split("\t")
    return StackNode(component, int(index), name, state, None if pid == "-" else int(pid), address)


class ChaosReport:
    """Figures of each scenario; written as JSON when the session ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.scenarios: dict[str, dict[str, Any]] = {}

    def record(self, scenario: str, **figures: Any) -> None:
        """Add (or update) figures of ``scenario``; the file is rewritten at once (an interrupted run keeps them)."""
        self.scenarios.setdefault(scenario, {}).update(figures)
        self.write()

    def write(self) -> None:
        """Write the report (mode, seed, figures per scenario)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"mode": SCALE.mode, "seed": SCALE.seed, "scale": SCALE.__dict__, "scenarios": self.scenarios}
        self.path.write_text(json.dumps(body, indent=2, default=str) + "\n")


def wait_ready(pipeline: Pipeline, *names: str, timeout_s: float = 180.0) -> None:
    """Wait until each named service's current run logged its ready event."""
    for name in names:
        service, event = pipeline.service(name), READY_EVENTS[name]
        pipeline.until(partial(service.logged, event), f"{name} to be ready", timeout_s, alive=(name,))


def rechunked_documents(pipeline: Pipeline) -> set[str]:
    """doc_ids the pipeline's chunker chunked more than once (over all its runs)."""
    seen = Counter(e.get("doc_id") for e in pipeline.service("chunker").events("document_chunked"))
    return {doc for doc, n in seen.items() if isinstance(doc, str) and n > 1}


def store_answers(store: ResultStore, timeout_s: float = 180.0) -> None:
    """Wait until ``store`` answers again (after a Cassandra restart its driver reconnects in the background)."""

    def ping() -> bool:
        try:
            store.ping()
        except StoreError:
            return False
        return True

    wait_until(ping, timeout_s, "the test store to reconnect to Cassandra")
