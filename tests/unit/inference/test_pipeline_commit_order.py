"""Inference commit ordering, with fakes of the store and the producer (pure logic, no broker).

No offset may become committable before its record's store write AND its ChunkResult
delivery (and, for a failed chunk, its DLQ delivery) are acknowledged, whatever order the
acknowledgements arrive in; transient faults are retried without committing.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from docstream.errors import FatalError, StoreError
from docstream.kafka.dlq import DlqRouter
from docstream.metrics import Metrics
from docstream.records import ChunkCreated
from docstream.settings import RetrySettings
from docstream.store.base import ChunkRow
from docstream_inference.handler import MODEL_ERROR, failed_result, ok_result
from docstream_inference.ledger import DLQ, PRODUCE, WRITE, AckLedger
from docstream_inference.stages import Assignments, ConsumedChunk, ResultBatch, WriteStage

TOPIC = "t.chunks"
TP = (TOPIC, 0)
AT = datetime(2024, 1, 2, tzinfo=UTC)


class FakeError:
    def name(self) -> str:
        return "_MSG_TIMED_OUT"

    def str(self) -> str:
        return "timed out"


@dataclass
class FakeMessage:
    _topic: str
    headers: list[tuple[str, bytes]] | None = None

    def topic(self) -> str:
        return self._topic


@dataclass
class FakeProducer:
    """Queues produced messages; deliveries happen only when the test says so."""

    sent: list[tuple[str, bytes | None, Any, Callable[..., None]]] = field(default_factory=list)
    error: Any = None

    def produce(self, topic: str, key: Any, value: Any, headers: Any = None, on_delivery: Any = None,
                **_: Any) -> None:
        self.sent.append((topic, key, headers, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def clear_error(self) -> None:
        self.error = None

    def deliver(self, index: int, *, fail: bool = False) -> None:
        topic, _, headers, callback = self.sent[index]
        callback(FakeError() if fail else None, FakeMessage(topic, headers))


class FakeStore:
    """Records upserts; raises StoreError the first ``failures`` times; snapshots the ledger at each call."""

    def __init__(self, ledger: AckLedger, failures: int = 0) -> None:
        self.ledger = ledger
        self.failures = failures
        self.rows: list[ChunkRow] = []
        self.committable_during_write: list[dict[Any, int]] = []

    def upsert_chunks(self, rows: Sequence[ChunkRow]) -> None:
        self.committable_during_write.append(self.ledger.committable())
        if self.failures:
            self.failures -= 1
            raise StoreError("timed out", code="store_timeout")
        self.rows.extend(rows)

    def get_document(self, doc_id: str) -> None:
        """The check after the write (``store.sources.enforce``) finds no documents row: nothing to fence."""
        return None


def _chunk(i: int) -> ChunkCreated:
    return ChunkCreated(
        job_id="j", doc_id=f"d{i % 2}", chunk_id=f"c{i}", chunk_index=i, chunk_count=4, content_sha256="s",
        text=f"text {i}", page_start=1, page_end=1, char_start=0, char_end=6, token_count=3,
        chunker_settings="cs", created_at=AT,
    )


def _setup(failures: int = 0, max_attempts: int = 5) -> tuple[WriteStage, FakeStore, FakeProducer, AckLedger,
                                                               Assignments, list[ConsumedChunk]]:
    ledger = AckLedger()
    assignments = Assignments()
    assignments.assign([TP])
    generation = assignments.generation(TP)
    assert generation is not None
    store = FakeStore(ledger, failures)
    producer = FakeProducer()
    stage = WriteStage(
        inbox=queue.Queue(), store=store, producer=producer,  # type: ignore[arg-type]
        dlq=DlqRouter(producer, "inference", clock=lambda: 1.0), serialize=lambda rec, topic: repr(rec).encode(),
        results_topic="t.chunks.results", ledger=ledger, assignments=assignments,
        retry=RetrySettings(max_attempts=max_attempts, base_delay_ms=1, max_delay_ms=2),
        metrics=Metrics(), service="inference", halt=threading.Event(),
        on_error=lambda exc: None,
    )
    works = [ConsumedChunk(TP, i, generation, b"k", b"v%d" % i, _chunk(i), 0.0) for i in range(4)]
    for work in works:
        ledger.track(TP, work.offset)
    return stage, store, producer, ledger, assignments, works


def _ok_batch(works: list[ConsumedChunk]) -> ResultBatch:
    return ResultBatch(tuple(works), tuple(ok_result(w.chunk, "m", [0.1, 0.2]) for w in works))


def test_nothing_is_committable_before_write_and_delivery_and_then_only_the_done_prefix() -> None:
    stage, store, producer, ledger, _, works = _setup(failures=2)
    stage.write(_ok_batch(works))
    assert store.committable_during_write == [{}, {}, {}]  # two transient faults retried, none committed
    assert len(store.rows) == 4
    assert all(ledger.owes(TP, w.offset) == {PRODUCE} for w in works)
    assert ledger.committable() == {}  # written, not yet delivered
    producer.deliver(2)
    producer.deliver(3)
    assert ledger.committable() == {}  # offset 0 still owes its delivery
    producer.deliver(0)
    assert ledger.committable() == {TP: 1}
    producer.deliver(1)
    assert ledger.committable() == {TP: 4}


def test_a_failed_delivery_is_sent_again_and_not_committed_meanwhile() -> None:
    stage, _, producer, ledger, _, works = _setup()
    stage.write(_ok_batch(works[:1]))
    producer.deliver(0, fail=True)
    assert ledger.committable() == {}
    stage._resend_failed()
    assert len(producer.sent) == 2
    producer.deliver(1)
    assert ledger.committable() == {TP: 1}


def test_deliveries_that_keep_failing_end_in_a_fatal_error() -> None:
    stage, _, producer, ledger, _, works = _setup(max_attempts=2)
    stage.write(_ok_batch(works[:1]))
    producer.deliver(0, fail=True)
    stage._resend_failed()
    producer.deliver(1, fail=True)
    with pytest.raises(FatalError) as info:
        stage._resend_failed()
    assert info.value.code == "retries_exhausted"
    assert ledger.committable() == {}


def test_store_faults_past_the_budget_are_fatal_and_nothing_is_acked() -> None:
    stage, store, producer, ledger, _, works = _setup(failures=10, max_attempts=3)
    with pytest.raises(FatalError):
        stage.write(_ok_batch(works))
    assert store.rows == []
    assert producer.sent == []
    assert all(ledger.owes(TP, w.offset) == {WRITE, PRODUCE} for w in works)
    assert ledger.committable() == {}


def test_a_failed_chunk_is_done_only_when_its_record_and_its_dlq_copy_are_delivered() -> None:
    stage, store, producer, ledger, _, works = _setup()
    results = (failed_result(works[0].chunk, "m", MODEL_ERROR, "boom"), ok_result(works[1].chunk, "m", [1.0]))
    stage.write(ResultBatch(tuple(works[:2]), results))
    assert [r.status for r in store.rows] == ["failed", "ok"]
    topics = [s[0] for s in producer.sent]
    assert topics == ["t.chunks.dlq", "t.chunks.results", "t.chunks.results"]
    headers = dict(producer.sent[0][2])
    assert headers["error_code"] == MODEL_ERROR.encode()
    assert headers["original_offset"] == b"0"
    assert ledger.owes(TP, 0) == {PRODUCE, DLQ}
    producer.deliver(1)
    producer.deliver(2)
    assert ledger.committable() == {}
    producer.deliver(0)
    assert ledger.committable() == {TP: 2}


def test_records_of_a_revoked_partition_are_neither_written_nor_committed() -> None:
    stage, store, producer, ledger, assignments, works = _setup()
    assignments.revoke([TP])
    assert ledger.revoke([TP]) == 4
    stage.write(_ok_batch(works))
    assert store.rows == []
    assert producer.sent == []
    assert ledger.committable() == {}


def test_ledger_acks_in_any_order_and_ignores_unknown_records() -> None:
    ledger = AckLedger()
    ledger.track(TP, 10)
    ledger.track(TP, 11, (DLQ,))
    assert not ledger.ack(TP, 10, PRODUCE)
    assert ledger.ack(TP, 11, DLQ)
    assert ledger.committable() == {}
    assert ledger.ack(TP, 10, WRITE)
    assert ledger.committable() == {TP: 12}
    ledger.mark_committed({TP: 12})
    assert ledger.committable() == {}
    ledger.forget_committed([TP])
    assert ledger.committable() == {TP: 12}
    assert not ledger.ack(("other", 0), 1, WRITE)
    with pytest.raises(ValueError, match="at least one"):
        ledger.track(TP, 13, ())
