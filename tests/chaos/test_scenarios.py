"""The seven chaos scenarios of docs/reliability.md, on real Kafka and Cassandra with services as processes.

Short versions run in `make test`; ``DOCSTREAM_CHAOS_FULL=1`` (`make chaos`) runs them at the issue's
scale. The scenarios share one pipeline (conftest.py ``pipeline``) and each runs a job of its own;
their order saves restarts: the backpressure scenario, which slows inference down, comes last.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from docstream.avro.serde import AvroSerde
from docstream.errors import StoreError
from docstream.kafka.dlq import DLQ_HEADERS
from docstream.records import ChunkCreated, DocumentCompleted, DocumentSubmitted
from docstream.settings import CassandraSettings
from docstream.store.base import ResultStore
from docstream.topics import Topics
from tests.chaos.harness import (
    CHUNKER_MAX_BYTES,
    CHUNKER_MAX_PAGES,
    FULL,
    MODEL_ID,
    READY_EVENTS,
    SCALE,
    SERVICES,
    UPSTREAM,
    ChaosReport,
    JobExpectations,
    KafkaProbe,
    LocalStack,
    Sampler,
    bad_documents,
    chunk_writetimes,
    completed_per_document,
    discard_vectors,
    good_documents,
    headers_of,
    metric_value,
    new_job_id,
    position,
    read_topic,
    rechunked_documents,
    store_answers,
    wait_ready,
)
from tests.fixtures.kafka import kafka_settings
from tests.fixtures.services import Pipeline, ServiceProcess, free_port

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(SCALE.test_timeout_s)]

_RETRY_EVENTS = ("transient_fault_retry", "handler_retry", "store_call_retried")
_MiB = 1024 * 1024


# -- shared steps ----------------------------------------------------------------------------------


def _finished(exp: JobExpectations, store: ResultStore) -> bool:
    try:
        return exp.finished(store)
    except StoreError:
        return False  # the store is reconnecting: poll again


def _wait_finished(pipeline: Pipeline, exp: JobExpectations, store: ResultStore) -> float:
    started = time.monotonic()
    pipeline.until(lambda: _finished(exp, store), f"job {exp.job_id} to complete", SCALE.job_timeout_s)
    return time.monotonic() - started


def _retries(pipeline: Pipeline) -> dict[str, int]:
    return {name: sum(pipeline.service(name).count_events(e) for e in _RETRY_EVENTS) for name in SERVICES}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def _groups(pipeline: Pipeline) -> dict[str, tuple[str, str]]:
    """Each service's consumer group and the topic it reads."""
    topics = pipeline.topics
    return {"chunker": (topics.group("chunker"), topics.submitted),
            "inference": (topics.group("inference"), topics.chunks),
            "reducer": (pipeline.env["DOCSTREAM_REDUCER__APP_ID"], topics.results)}


def _idle(pipeline: Pipeline, probe: KafkaProbe) -> bool:
    return all(probe.caught_up(group, topic) for group, topic in _groups(pipeline).values())


def _paused(port: int, name: str = "docstream_consumer_paused") -> float | None:
    """The inference's ``docstream_consumer_paused`` gauge (or another of its metrics), read from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return metric_value(response.read().decode(), name, service="inference")


def _at_progress(pipeline: Pipeline, probe: KafkaProbe, topic: str, base: int, target: int, what: str) -> None:
    pipeline.until(lambda: probe.total(topic) - base >= target, what, SCALE.job_timeout_s)


# -- 1. kill -9 --------------------------------------------------------------------------------------


@dataclass
class _Kill:
    service: str
    target: float
    pause_s: float
    killed_at: float = 0.0
    progress: float = 0.0
    committed_at_kill: int = 0
    restarted_at: float = 0.0
    recovery_s: float | None = None

    def figures(self) -> dict[str, Any]:
        return {"service": self.service, "at_progress": round(self.progress, 3), "pause_s": round(self.pause_s, 2),
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 2)}


@dataclass
class _KillDriver:
    """Kills each service at seeded progress points of its own stage and restarts it after a seeded pause."""

    pipeline: Pipeline
    probe: KafkaProbe
    progress: dict[str, Callable[[], float]]
    plan: dict[str, list[_Kill]]
    done: list[_Kill] = field(default_factory=list)
    active: dict[str, _Kill] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)

    def finished(self) -> bool:
        return not self.active and not any(self.plan.values())

    def step(self) -> None:
        now = time.monotonic()
        for name, kill in list(self.active.items()):
            service = self.pipeline.service(name)
            if not kill.restarted_at:
                if now >= kill.killed_at + kill.pause_s:
                    service.start()
                    kill.restarted_at = now
                    self.started_at[name] = self.progress[name]()
            elif self._recovered(name, kill):
                kill.recovery_s = now - kill.killed_at
                del self.active[name]
        for name, queue in self.plan.items():
            if name in self.active or not queue:
                continue
            service = self.pipeline.service(name)
            assert service.alive(), f"{name} died by itself:\n{service.tail()}"
            progress = self.progress[name]()
            moved = progress > self.started_at.get(name, -1.0) or progress >= 1.0
            if progress >= queue[0].target and moved and service.logged(READY_EVENTS[name]):
                self._kill(service, queue.pop(0), progress)

    def _committed(self, name: str) -> tuple[int, int]:
        group, topic = _groups(self.pipeline)[name]
        committed = self.probe.committed(group, topic)
        return sum(max(0, o) for o in committed.values()), self.probe.total(topic)

    def _kill(self, service: ServiceProcess, kill: _Kill, progress: float) -> None:
        kill.committed_at_kill = self._committed(service.name)[0]
        service.kill9()
        kill.killed_at = time.monotonic()
        kill.progress = progress
        self.active[service.name] = kill
        self.done.append(kill)

    def _recovered(self, name: str, kill: _Kill) -> bool:
        """Progress again: the group committed past its offsets at the kill (or had nothing left and is ready)."""
        committed, end = self._committed(name)
        ready = self.pipeline.service(name).logged(READY_EVENTS[name])
        return committed > kill.committed_at_kill or (ready and committed >= end)


def test_kill_9_each_service_at_random_moments_loses_and_doubles_nothing(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    rng = random.Random(SCALE.seed)
    exp = JobExpectations(new_job_id("kill"), good_documents(tmp_path / "docs", SCALE.kill_docs, seed=SCALE.seed + 1,
                                                             pages=SCALE.pages))
    topics = pipeline.topics
    probe = KafkaProbe(kafka_bootstrap)
    try:
        bases = {t: probe.total(t) for t in (topics.chunks, topics.results, topics.completed)}

        def fraction(topic: str, whole: int) -> Callable[[], float]:
            return lambda: (probe.total(topic) - bases[topic]) / whole

        plan = {name: [_Kill(name, target, rng.uniform(*SCALE.kill_pause_s))
                       for target in sorted(rng.uniform(0.05, 0.85) for _ in range(SCALE.kills_per_service))]
                for name in SERVICES}
        driver = _KillDriver(pipeline, probe, {
            "chunker": fraction(topics.chunks, exp.chunk_total),
            "inference": fraction(topics.results, exp.chunk_total),
            "reducer": fraction(topics.completed, len(exp.documents)),
        }, plan)
        retries_before = _retries(pipeline)
        started = time.monotonic()
        pipeline.submit([tmp_path / "docs"], exp.job_id)
        deadline = started + SCALE.job_timeout_s
        while not driver.finished():
            assert time.monotonic() < deadline, f"kills not done in time: {[k.figures() for k in driver.done]}"
            driver.step()
            threading.Event().wait(0.1)
        pipeline.until(lambda: _finished(exp, cassandra_store), f"job {exp.job_id} to complete after the kills",
                       SCALE.job_timeout_s)
        elapsed = time.monotonic() - started
        figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
        pipeline.until(lambda: _idle(pipeline, probe), "every group to catch up", 120)
    finally:
        probe.close()

    completed = completed_per_document(kafka_bootstrap, topics.completed, kafka_settings(kafka_bootstrap).kafka,
                                       exp.doc_ids())
    duplicates = sum(n - 1 for n in completed.values())
    chaos_report.record(
        "1 kill -9", **figures, kills=[k.figures() for k in driver.done], job_s=round(elapsed, 1),
        retries=_delta(_retries(pipeline), retries_before), completed_records=sum(completed.values()),
        completed_duplicates=duplicates, exactly_once=True,
        reducer_self_restarts=pipeline.service("reducer").count_events("reducer_restarting"),
    )
    assert len(driver.done) == SCALE.kills_per_service * len(SERVICES)
    assert all(k.recovery_s is not None for k in driver.done)
    assert sorted(completed) == sorted(exp.doc_ids()), "a document has no DocumentCompleted"
    assert duplicates == 0, f"duplicate DocumentCompleted under exactly-once: {completed.most_common(5)}"


# -- 2. Cassandra outage -----------------------------------------------------------------------------


def test_cassandra_outage_inference_retries_commits_nothing_unwritten_and_the_job_completes(
    pipeline: Pipeline, local_stack: LocalStack, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    kafka_bootstrap: str, chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = JobExpectations(new_job_id("cassandra"), good_documents(
        tmp_path / "docs", SCALE.outage_docs, seed=SCALE.seed + 2, pages=SCALE.pages))
    topics = pipeline.topics
    group = topics.group("inference")
    inference = pipeline.service("inference")
    # what the stop flushes is this job's vectors alone (harness.discard_vectors)
    assert discard_vectors(cassandra_settings), "no vector table to empty"
    probe = KafkaProbe(kafka_bootstrap)
    try:
        base = probe.total(topics.results)
        retries_before = _retries(pipeline)
        pipeline.submit([tmp_path / "docs"], exp.job_id)
        _at_progress(pipeline, probe, topics.results, base, max(1, exp.chunk_total // 10),
                     "inference to be under way")
        progress_at_stop = (probe.total(topics.results) - base) / exp.chunk_total
        try:
            down_s = local_stack.down("cassandra")
            stopped_us = int(time.time() * 1_000_000)  # an acknowledged write was sent before this
            committed_during: list[dict[int, int]] = []
            outage_end = time.monotonic() + SCALE.outage_s
            while time.monotonic() < outage_end:  # samples the committed offsets while Cassandra is down
                pipeline.check_alive()
                committed_during.append(probe.committed(group, topics.chunks))
                threading.Event().wait(0.5)
            pipeline.check_alive()
            retrying = inference.count_events("transient_fault_retry") - retries_before["inference"]
        finally:
            up_s = local_stack.up("cassandra")
        up_at = time.monotonic()
        store_answers(cassandra_store)
        _wait_finished(pipeline, exp, cassandra_store)
        recovered_s = time.monotonic() - up_at
        figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
        chunk_records = read_topic(kafka_bootstrap, topics.chunks)
    finally:
        probe.close()

    # nothing committed past a result that was not written: every record below an offset committed while
    # Cassandra was down has its row, written before Cassandra stopped
    committed = {p: max(c.get(p, -1) for c in committed_during) for p in committed_during[0]}
    serde = AvroSerde(kafka_settings(kafka_bootstrap).kafka)
    below: dict[tuple[str, int], tuple[int, int]] = {}
    for msg in chunk_records:
        partition, offset = position(msg)
        if offset < committed[partition]:
            record = serde.deserialize(msg.value() or b"", topics.chunks)
            assert isinstance(record, ChunkCreated)
            below[(record.doc_id, record.chunk_index)] = (partition, offset)
    written = chunk_writetimes(cassandra_settings, {doc for doc, _ in below}, MODEL_ID)
    unwritten = {k: v for k, v in below.items() if k not in written or written[k] > stopped_us}
    assert not unwritten, f"committed past results not written before the outage: {sorted(unwritten.values())[:10]}"
    # a batch's store work is its rows' write, then a fence read per document: the outage meets whichever of
    # them runs at the moment Cassandra stops, so either one's retries count
    attempts = [int(e["attempt"]) for e in inference.events("transient_fault_retry")
                if e.get("operation") in ("store_write", "store_fence")]
    retries = _delta(_retries(pipeline), retries_before)
    chaos_report.record(
        "2 Cassandra outage", **figures, outage_s=SCALE.outage_s, stop_s=round(down_s, 1), start_s=round(up_s, 1),
        progress_at_stop=round(progress_at_stop, 3), retries=retries, inference_retries_while_down=retrying,
        max_store_attempt=max(attempts, default=0), committed_records_checked=len(below),
        job_done_after_return_s=round(recovered_s, 1),
    )
    assert progress_at_stop < 1.0, "the job was over before Cassandra stopped"
    assert retrying > 0 and max(attempts, default=0) >= 2, "inference did not retry its store writes with backoff"
    pipeline.check_alive()


# -- 3. broker restart -------------------------------------------------------------------------------


def _restart_broker(pipeline: Pipeline, local_stack: LocalStack, down_for: Callable[[], bool]) -> tuple[float, float]:
    """`stack down kafka`, wait until ``down_for()`` says enough, `stack up kafka`; (stop s, start s)."""
    try:
        down_s = local_stack.down("kafka")
        pipeline.until(down_for, "the broker's down time to pass", SCALE.job_timeout_s)
    finally:
        up_s = local_stack.up("kafka")
    return down_s, up_s


def test_broker_restart_every_service_reconnects_and_the_job_completes(
    pipeline: Pipeline, local_stack: LocalStack, cassandra_store: ResultStore, kafka_bootstrap: str,
    chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = JobExpectations(new_job_id("broker"), good_documents(
        tmp_path / "docs", SCALE.broker_docs, seed=SCALE.seed + 3, pages=SCALE.pages))
    after = JobExpectations(new_job_id("broker-after"), good_documents(
        tmp_path / "after", 2, seed=SCALE.seed + 33, pages=(1, 2)))
    topics = pipeline.topics
    group, topic = _groups(pipeline)["inference"]
    probe = KafkaProbe(kafka_bootstrap)
    try:
        base = probe.total(topics.results)
        retries_before = _retries(pipeline)
        pipeline.submit([tmp_path / "docs"], exp.job_id)
        _at_progress(pipeline, probe, topics.results, base, max(1, exp.chunk_total // 10),
                     "inference to be under way")

        # stop the broker once inference keeps up (a backlog under half its first queue: not paused,
        # see test_broker_restart_while_inference_is_paused_...); the reducer still has the job's tail
        def keeping_up() -> bool:
            return probe.total(topic) - sum(max(0, o) for o in probe.committed(group, topic).values()) <= 16

        pipeline.until(keeping_up, "inference to keep up with the chunker", SCALE.job_timeout_s)
        progress_at_stop = (probe.total(topics.results) - base) / exp.chunk_total
        done_at_stop = _finished(exp, cassandra_store)
    finally:
        probe.close()
    down_until = time.monotonic() + SCALE.broker_down_s
    down_s, up_s = _restart_broker(pipeline, local_stack, lambda: time.monotonic() >= down_until)
    up_at = time.monotonic()
    pipeline.submit([tmp_path / "after"], after.job_id)  # the chunker and everything after it, after the restart
    _wait_finished(pipeline, exp, cassandra_store)
    _wait_finished(pipeline, after, cassandra_store)
    recovered_s = time.monotonic() - up_at
    figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
    after.check(cassandra_store, rechunked=rechunked_documents(pipeline))
    _wait_idle(pipeline, kafka_bootstrap, "every group to catch up")
    completed = completed_per_document(kafka_bootstrap, topics.completed, kafka_settings(kafka_bootstrap).kafka,
                                       exp.doc_ids() + after.doc_ids())
    chaos_report.record(
        "3 broker restart", **figures, broker_down_s=SCALE.broker_down_s, stop_s=round(down_s, 1),
        start_s=round(up_s, 1), progress_at_stop=round(progress_at_stop, 3), job_done_at_stop=done_at_stop,
        jobs_done_after_restart_s=round(recovered_s, 1), retries=_delta(_retries(pipeline), retries_before),
        completed_duplicates=sum(n - 1 for n in completed.values()),
    )
    pipeline.check_alive()
    assert sorted(completed) == sorted(exp.doc_ids() + after.doc_ids())


# A slow model behind a long first queue: with a backlog its partitions are paused, and it takes
# ~20 s (2 batches of 4 at 10 s each) to drain the first queue to half once the broker is gone,
# longer than the broker's shutdown plus the 6 s session timeout: the partitions are lost while
# paused. Stale batches then drain and the pipeline resumes; only after that does the broker return.
_PAUSED_INFERENCE = {
    "DOCSTREAM_FAULTS__INFERENCE_DELAY_MS": "10000",
    "DOCSTREAM_INFERENCE__MAX_BATCH_SIZE": "4",
    "DOCSTREAM_INFERENCE__QUEUE_BATCHES": "4",
}
# Longer than the slowed pipeline can stay busy with work taken before the outage (4 queued
# batches of 4 at 10 s each, plus the batch in the model stage): only then does "nothing
# committed" mean stalled. 30 s gave an inconclusive verdict in the full run of 2026-11-30.
_STALL_WINDOW_S = 120.0


class InferenceStalledError(AssertionError):
    """Inference holds its partitions again but consumes nothing."""


@pytest.mark.skipif(not FULL, reason="full run only (make chaos): about 4 minutes of deliberate slowness")
def test_broker_restart_while_inference_is_paused_leaves_inference_consuming(
    pipeline: Pipeline, local_stack: LocalStack, cassandra_store: ResultStore, kafka_bootstrap: str,
    chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = JobExpectations(new_job_id("broker-paused"), good_documents(
        tmp_path / "docs", 10, seed=SCALE.seed + 34, pages=(1, 3)))
    group, topic = _groups(pipeline)["inference"]
    inference = pipeline.service("inference")
    port = free_port()
    inference.stop()
    inference.start(**_PAUSED_INFERENCE, DOCSTREAM_METRICS__PORT=str(port), DOCSTREAM_METRICS__HOST="127.0.0.1")
    wait_ready(pipeline, "inference")
    pipeline.submit([tmp_path / "docs"], exp.job_id)
    pipeline.until(lambda: _paused(port) == 1.0, "inference to pause its partitions", 120)
    lost = inference.count_events("partitions_lost", all_runs=False)
    assigned = inference.count_events("partitions_assigned", all_runs=False)

    def lost_then_resumed() -> bool:  # the precondition of the bug, seen from outside
        return inference.count_events("partitions_lost", all_runs=False) > lost and _paused(port) == 0.0

    down_s, up_s = _restart_broker(pipeline, local_stack, lost_then_resumed)
    probe = KafkaProbe(kafka_bootstrap)
    try:
        pipeline.until(lambda: inference.count_events("partitions_assigned", all_runs=False) > assigned,
                       "inference to get its partitions back", SCALE.job_timeout_s)
        start = sum(max(0, o) for o in probe.committed(group, topic).values())
        deadline = time.monotonic() + _STALL_WINDOW_S
        progressed = False
        while not progressed and time.monotonic() < deadline:
            pipeline.check_alive()
            threading.Event().wait(0.5)
            progressed = sum(max(0, o) for o in probe.committed(group, topic).values()) > start
        lag = probe.total(topic) - sum(max(0, o) for o in probe.committed(group, topic).values())
        # normal speed for the rest (a stalled inference is killed, as a liveness probe would)
        inference.stop(timeout_s=10)
        inference.start()
        _wait_finished(pipeline, exp, cassandra_store)
        figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
    finally:
        probe.close()
    chaos_report.record("3b broker restart, inference paused", **figures, stop_s=round(down_s, 1),
                        start_s=round(up_s, 1), inference_stalled=not progressed, lag_when_stalled=lag)
    if not progressed:
        raise InferenceStalledError(
            f"inference got its partitions back after the broker restart but committed nothing in "
            f"{_STALL_WINDOW_S:.0f} s with {lag} records waiting")


# -- 4. poison records -------------------------------------------------------------------------------


class _Relay:
    """Copies a chunks topic record by record to another (same key, same partition), poisoning some.

    Stands between a chunker of its own prefix and the shared pipeline's inference: the chosen
    (doc_id, chunk_index) records are replaced by bytes that decode under no wire format.
    """

    def __init__(self, bootstrap: str, source: str, target: str, poison: set[tuple[str, int]], expected: int,
                 seed: int) -> None:
        self.source, self.target, self.poison, self.expected = source, target, poison, expected
        self.serde = AvroSerde(kafka_settings(bootstrap).kafka)
        self.rng = random.Random(seed)
        self.relayed = 0
        self.poisoned: dict[tuple[int, int], tuple[bytes, bytes, bytes]] = {}  # (p, o) → key, poison, original
        self.errors: list[str] = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"relay-{seed}",
                                   "enable.auto.commit": False, "isolation.level": "read_committed"})
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-relay", daemon=True)

    def start(self) -> None:
        partitions = self._consumer.list_topics(self.source, timeout=10).topics[self.source].partitions
        self._consumer.assign([TopicPartition(self.source, p, -2) for p in sorted(partitions)])
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.relayed < self.expected:
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            key, original = msg.key() or b"", msg.value() or b""
            record = self.serde.deserialize(original, self.source)
            assert isinstance(record, ChunkCreated)
            poisoned = (record.doc_id, record.chunk_index) in self.poison
            # not magic byte 0 (Confluent) nor C3 01 (single-object): undecodable
            value = b"\xffPOISON" + self.rng.randbytes(24) if poisoned else original
            self._send(key, value, position(msg)[0], original if poisoned else None)
            self.relayed += 1
        self._producer.flush(30)

    def _send(self, key: bytes, value: bytes, partition: int, original: bytes | None) -> None:
        def delivered(err: Any, out: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            elif original is not None:
                self.poisoned[(out.partition(), out.offset())] = (key, value, original)

        self._producer.produce(self.target, value, key, partition=partition, on_delivery=delivered)
        self._producer.poll(0)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._consumer.close()
        self._producer.flush(30)

    def send_originals(self) -> None:
        """Produce the good bytes of every poisoned record (the recovery after the DLQ check)."""
        for (partition, _), (key, _, original) in sorted(self.poisoned.items()):
            self._producer.produce(self.target, original, key, partition=partition)
        assert self._producer.flush(30) == 0


def test_poison_chunk_records_go_to_the_dlq_with_headers_and_everything_else_completes(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    rng = random.Random(SCALE.seed + 4)
    exp = JobExpectations(new_job_id("poison"), good_documents(
        tmp_path / "docs", SCALE.poison_docs, seed=SCALE.seed + 4, pages=SCALE.pages))
    every_chunk = [(d.doc_id(exp.job_id), i) for d in exp.documents for i in range(d.chunk_count)]
    poison = set(rng.sample(every_chunk, max(1, round(SCALE.poison_fraction * len(every_chunk)))))
    clean = [d for d in exp.documents if not any((d.doc_id(exp.job_id), i) in poison for i in range(d.chunk_count))]
    assert clean, "the seed poisoned every document"
    source = Topics(pipeline.service(UPSTREAM).env["DOCSTREAM_KAFKA__TOPIC_PREFIX"])
    topics = pipeline.topics
    probe = KafkaProbe(kafka_bootstrap)
    relay = _Relay(kafka_bootstrap, source.chunks, topics.chunks, poison, exp.chunk_total, SCALE.seed)
    try:
        dlq_base = {p: e for p, e in probe.ends(f"{topics.chunks}.dlq").items()}
        relay.start()
        # the submit goes to the upstream chunker's intake topic
        done = pipeline.cli("submit", str(tmp_path / "docs"), "--job-id", exp.job_id,
                            DOCSTREAM_KAFKA__TOPIC_PREFIX=source.prefix)
        assert done.returncode == 0, done.stdout + done.stderr
        pipeline.until(relay.done, "the relay to copy every chunk", SCALE.job_timeout_s)
        assert not relay.errors and len(relay.poisoned) == len(poison), (relay.errors, len(relay.poisoned))

        def clean_completed() -> bool:
            return all(cassandra_store.get_document_result(d.doc_id(exp.job_id), MODEL_ID) for d in clean)

        pipeline.until(clean_completed, "every document without poison to complete", SCALE.job_timeout_s)
        pipeline.until(lambda: probe.caught_up(topics.group("inference"), topics.chunks),
                       "inference to pass every chunk record", SCALE.job_timeout_s)
        dlq = [m for m in read_topic(kafka_bootstrap, f"{topics.chunks}.dlq")
               if position(m)[1] >= dlq_base.get(position(m)[0], 0)]
        for doc in exp.documents:  # poisoned documents wait for their missing chunks; every other row is there
            doc_id = doc.doc_id(exp.job_id)
            missing = sum((doc_id, i) in poison for i in range(doc.chunk_count))
            assert cassandra_store.count_chunks(doc_id, MODEL_ID) == doc.chunk_count - missing, doc.filename
            if missing:
                assert cassandra_store.get_document_result(doc_id, MODEL_ID) is None, doc.filename
        relay.send_originals()
        _wait_finished(pipeline, exp, cassandra_store)
        figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
    finally:
        relay.close()
        probe.close()

    seen = {}
    for msg in dlq:
        headers = headers_of(msg)
        assert set(DLQ_HEADERS) <= set(headers), headers
        assert headers["original_topic"] == topics.chunks and headers["service"] == "inference", headers
        assert headers["error_code"] and int(headers["attempts"]) >= 1, headers
        seen[(int(headers["original_partition"]), int(headers["original_offset"]))] = (msg.key(), msg.value())
    assert seen.keys() == relay.poisoned.keys(), "the DLQ holds other records than the poisoned ones"
    assert all(seen[k] == relay.poisoned[k][:2] for k in seen), "DLQ records differ from what was poisoned"
    assert len(dlq) == len(seen), "a poisoned record went to the DLQ twice"
    chaos_report.record("4 poison", **figures, chunk_records=len(every_chunk), poisoned=len(poison),
                        dlq_records=len(dlq), documents_hit=len(exp.documents) - len(clean),
                        error_codes=dict(Counter(headers_of(m)["error_code"] for m in dlq)))


# -- 6. duplicate intake -----------------------------------------------------------------------------


def _produce_raw(bootstrap: str, topic: str, key: bytes, value: bytes, partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def _submitted_records(bootstrap: str, topic: str, job_id: str) -> list[Any]:
    serde = AvroSerde(kafka_settings(bootstrap).kafka)
    mine = []
    for msg in read_topic(bootstrap, topic):
        record = serde.deserialize(msg.value(), topic)
        if isinstance(record, DocumentSubmitted) and record.job_id == job_id:
            mine.append(msg)
    return mine


def _wait_idle(pipeline: Pipeline, kafka_bootstrap: str, what: str) -> None:
    probe = KafkaProbe(kafka_bootstrap)
    try:
        pipeline.until(lambda: _idle(pipeline, probe), what, SCALE.job_timeout_s)
    finally:
        probe.close()


def test_duplicate_intake_processes_no_document_twice_in_the_store(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    exp = JobExpectations(new_job_id("dup"), good_documents(
        tmp_path / "docs", SCALE.duplicate_docs, seed=SCALE.seed + 6, pages=SCALE.pages))
    topics = pipeline.topics
    first = pipeline.submit([tmp_path / "docs"], exp.job_id)
    # a DocumentSubmitted produced twice, while its document is in flight (the last one of the topic)
    again = _submitted_records(kafka_bootstrap, topics.submitted, exp.job_id)[-1]
    in_flight = cassandra_store.get_document_result(again.key().decode(), MODEL_ID) is None
    _produce_raw(kafka_bootstrap, topics.submitted, again.key(), again.value(), again.partition())
    # the same files again: documents not started yet are submitted again, the others are duplicates
    # (exit status 1 when nothing at all was submitted)
    second = pipeline.cli("submit", str(tmp_path / "docs"), "--job-id", exp.job_id)
    assert second.returncode in (0, 1) and "documents in total" in second.stdout, second.stdout + second.stderr
    _wait_finished(pipeline, exp, cassandra_store)
    _wait_idle(pipeline, kafka_bootstrap, "every group to pass the duplicates")

    records = _submitted_records(kafka_bootstrap, topics.submitted, exp.job_id)
    rechunked = rechunked_documents(pipeline)
    figures = exp.check(cassandra_store, rechunked=rechunked)
    completed = completed_per_document(kafka_bootstrap, topics.completed, kafka_settings(kafka_bootstrap).kafka,
                                       exp.doc_ids())
    chaos_report.record(
        "6 duplicate intake", **figures, submitted_records=len(records), duplicate_in_flight=in_flight,
        second_submit_duplicates=second.stdout.count(" = "), second_submit_exit=second.returncode,
        documents_chunked_twice=len(rechunked & set(exp.doc_ids())),
        completed_duplicates=sum(n - 1 for n in completed.values()),
    )
    assert "documents submitted" in first.stdout
    assert len(records) >= len(exp.documents) + 1
    assert completed == Counter(dict.fromkeys(exp.doc_ids(), 1)), f"DocumentCompleted per document: {completed}"


def test_a_duplicate_document_submitted_after_completion_leaves_the_rows_completed(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    exp = JobExpectations(new_job_id("late-dup"), good_documents(
        tmp_path / "docs", 2, seed=SCALE.seed + 66, pages=(1, 1)))
    topics = pipeline.topics
    pipeline.submit([tmp_path / "docs"], exp.job_id)
    _wait_finished(pipeline, exp, cassandra_store)
    late = _submitted_records(kafka_bootstrap, topics.submitted, exp.job_id)[0]
    _produce_raw(kafka_bootstrap, topics.submitted, late.key(), late.value(), late.partition())
    _wait_idle(pipeline, kafka_bootstrap, "every group to pass the late duplicate")
    doc_id = late.key().decode()
    document, row = cassandra_store.get_document(doc_id), {
        r.doc_id: r for r in cassandra_store.iter_job_documents(exp.job_id)}[doc_id]
    chaos_report.record("6b late duplicate", documents_row=document and document.status, job_documents_row=row.status)
    assert document is not None and (document.status, row.status) == ("completed", "completed")
    exp.check(cassandra_store)


# -- 7. bad input at scale ---------------------------------------------------------------------------


def test_bad_input_mixed_into_the_job_each_gets_its_error_code_and_nothing_stalls(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    bad = bad_documents(folder, SCALE.bad_copies, seed=SCALE.seed + 7, max_pages=CHUNKER_MAX_PAGES,
                        max_bytes=CHUNKER_MAX_BYTES)
    good = good_documents(folder, SCALE.bad_input_docs - len(bad), seed=SCALE.seed + 7, pages=SCALE.pages)
    exp = JobExpectations(new_job_id("bad"), good + bad)
    done = pipeline.submit([folder], exp.job_id)
    assert "empty" in done.stdout, "the empty file was not refused at intake"
    took = _wait_finished(pipeline, exp, cassandra_store)
    figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
    serde = AvroSerde(kafka_settings(kafka_bootstrap).kafka)
    codes = {}
    for msg in read_topic(kafka_bootstrap, pipeline.topics.completed):
        record = serde.deserialize(msg.value(), pipeline.topics.completed)
        if isinstance(record, DocumentCompleted) and record.job_id == exp.job_id and record.status == "failed":
            codes[record.doc_id] = record.error_code
    expected = {d.doc_id(exp.job_id): d.error_code for d in exp.processed if d.error_code is not None}
    chaos_report.record("7 bad input", **figures, refused_at_intake=1, job_s=round(took, 1),
                        error_codes=dict(Counter(expected.values())))
    assert codes == expected


# -- 5. backpressure (last: it leaves inference slowed down) -------------------------------------------


def test_backpressure_slow_inference_the_chunker_keeps_going_memory_stays_bounded_nothing_lost(
    pipeline: Pipeline, cassandra_store: ResultStore, kafka_bootstrap: str, chaos_report: ChaosReport,
    tmp_path: Path,
) -> None:
    port = free_port()
    batch, queue_batches = (8, 2) if SCALE.mode == "full" else (4, 1)
    inference = pipeline.service("inference")
    inference.stop()
    inference.start(DOCSTREAM_FAULTS__INFERENCE_DELAY_MS=str(SCALE.inference_delay_ms),
                    DOCSTREAM_INFERENCE__MAX_BATCH_SIZE=str(batch),
                    DOCSTREAM_INFERENCE__QUEUE_BATCHES=str(queue_batches),
                    # the least read-ahead (queue_batches x max_batch_size, as before lanes): the job's chunks
                    # outnumber what inference holds, so it pauses
                    DOCSTREAM_FAIRNESS__READ_AHEAD="1",
                    DOCSTREAM_METRICS__PORT=str(port), DOCSTREAM_METRICS__HOST="127.0.0.1")
    wait_ready(pipeline, "inference")
    exp = JobExpectations(new_job_id("backpressure"), good_documents(
        tmp_path / "docs", SCALE.backpressure_docs, seed=SCALE.seed + 5, pages=SCALE.pages))
    topics = pipeline.topics
    probe = KafkaProbe(kafka_bootstrap)

    try:
        baseline = inference.rss_bytes()
        bases = {t: probe.total(t) for t in (topics.chunks, topics.results)}
        with Sampler(inference.rss_bytes, 0.2) as rss, Sampler(lambda: _paused(port), 0.2) as pauses:
            pipeline.submit([tmp_path / "docs"], exp.job_id)
            pipeline.until(lambda: probe.total(topics.chunks) - bases[topics.chunks] >= exp.chunk_total
                           and probe.caught_up(topics.group("chunker"), topics.submitted),
                           "the chunker to chunk every document", SCALE.job_timeout_s)
            embedded_when_chunked = (probe.total(topics.results) - bases[topics.results]) / exp.chunk_total
            took = _wait_finished(pipeline, exp, cassandra_store)
        figures = exp.check(cassandra_store, rechunked=rechunked_documents(pipeline))
        # a counter, not only the sampled gauge: a pause lasts until Q0 has drained to half, often
        # shorter than the sampling period
        pause_count = _paused(port, "docstream_consumer_pauses_total") or 0
    finally:
        probe.close()
    peak = max((v for _, v in rss.samples), default=0)
    paused_samples = sum(1 for _, v in pauses.samples if v == 1.0)
    chaos_report.record(
        "5 backpressure", **figures, inference_delay_ms=SCALE.inference_delay_ms, max_batch_size=batch,
        queue_batches=queue_batches, embedded_when_chunker_done=round(embedded_when_chunked, 3),
        paused_samples=paused_samples, samples=len(pauses.samples), pauses=pause_count,
        rss_baseline_mib=round(baseline / _MiB, 1),
        peak_rss_mib=round(peak / _MiB, 1), rss_growth_mib=round((peak - baseline) / _MiB, 1), job_s=round(took, 1),
    )
    assert embedded_when_chunked < 1.0, "inference was not behind when the chunker finished"
    assert pause_count > 0, "inference never paused its partitions"
    assert peak - baseline < 256 * _MiB, f"inference grew by {(peak - baseline) / _MiB:.0f} MiB"

