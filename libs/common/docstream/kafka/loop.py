"""ConsumeLoop: the consume → decode → handle → produce → commit loop every service reuses.

One record at a time, on one thread:

1. poll (at most ``poll_timeout_s``); a consumer error becomes an exception (fatal ends the loop);
2. decode with AvroSerde; bind ``topic/partition/offset/job_id/doc_id`` into the log context;
3. run the handler under the retry policy (docstream.kafka.attempts): PoisonRecord → DLQ at
   once; transient faults → backoff with full jitter, then FatalError; other errors →
   ``retry.handler_attempts`` tries, then DLQ;
4. serialize and produce the handler's outputs with a delivery callback;
5. the record is done in the OffsetTracker only when every output (or its DLQ copy) is
   acknowledged by the broker; commits (asynchronous, every ``commit_interval_s``, and
   synchronous on revoke and exit) never pass a record that is not done.

A handler that also takes a batch (``BatchHandler``: ``handle_batch``) gets up to ``max_batch`` records at once,
as one poll returns them (no wait beyond the poll's): steps 2-5 run for the batch, and when the batch fails (poison,
or a failure past its attempts) its records run again one at a time, so that only the record at fault goes to the
DLQ and its neighbours succeed (the sinks write one engine call for many documents this way).

A record with no value (a tombstone: a delete, by Kafka's convention) goes to ``on_tombstone`` with its key, where
the service takes them (the chunker and the sinks, on the intake topic: docs/intake.md "Deleting a source");
elsewhere it is poison (``schema_empty``).

A delivery failure is kept by the ReliableProducer and ends ``run`` with its error after a
final commit of what is done: a restart resumes from there (at-least-once).

Membership, rebalances, commits, the consumer replacement and the lag gauge are the Committer's
(docstream.kafka.committer), as for every other driver of a consumer; this loop tells it what is
done through its OffsetTracker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog
from confluent_kafka import Consumer, KafkaError, Message

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, PoisonRecord, RetryableError, SchemaError
from docstream.kafka.attempts import run_with_retries
from docstream.kafka.clients import ReliableProducer, create_consumer, raise_for_message
from docstream.kafka.committer import Committer, RebalanceHooks
from docstream.kafka.dlq import DlqRouter, error_code_of
from docstream.kafka.offsets import OffsetTracker, TopicPartitionKey
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import AnyRecord
from docstream.settings import KafkaSettings, RetrySettings

__all__ = ["BatchHandler", "ConsumeLoop", "Envelope", "Handler", "Output", "TombstoneHandler"]

_log = get_logger(__name__)
_Encoded = list[tuple[str, str, bytes]]


@dataclass(frozen=True)
class Envelope:
    """A decoded record and where it came from.

    Attributes:
        topic: source topic.
        partition: source partition.
        offset: source offset.
        key: the record key, UTF-8 decoded (None when absent).
        value: the decoded docstream record.
        headers: the record headers.
        timestamp_ms: the record timestamp (epoch ms).
    """

    topic: str
    partition: int
    offset: int
    key: str | None
    value: AnyRecord
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp_ms: int = 0


@dataclass(frozen=True)
class Output:
    """A record for the loop to produce: ``value`` serialized with AvroSerde, keyed by ``key``."""

    topic: str
    key: str
    value: AnyRecord


Handler = Callable[[Envelope], Sequence[Output]]
TombstoneHandler = Callable[[str, str], Sequence[Output]]
"""Takes a tombstone's topic and key (UTF-8); may raise as a Handler does."""


@runtime_checkable
class BatchHandler(Protocol):
    """A handler that also takes several records at once; its outputs, record by record, in their order."""

    def __call__(self, envelope: Envelope) -> Sequence[Output]: ...

    def handle_batch(self, envelopes: Sequence[Envelope]) -> Sequence[Sequence[Output]]: ...


def _headers(msg: Message) -> dict[str, bytes]:
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return {k: v.encode("utf-8") if isinstance(v, str) else (v or b"") for k, v in items}


class ConsumeLoop:
    """Consume ``topics`` as ``group_id``, run ``handler`` per record, produce its outputs, commit what is done.

    Args:
        kafka: the cluster and the consumer's and producer's settings.
        retry: the attempts and backoff of a handler's transient failures.
        group_id: consumer group.
        topics: topics to consume.
        handler: the service's transform; may raise PoisonRecord (DLQ), RetryableError (backoff) or FatalError.
        serde: Avro serde for inputs and outputs.
        service: service name for logs, metrics, DLQ headers and client.id.
        metrics: where to count records in/out/failed, DLQ and retries; default: a private registry.
        stop: set it to stop the loop (main's SIGTERM handler); default: a new Event.
        producer: a producer to use (not closed by the loop); default: one of its own.
        commit_interval_s: least time between two periodic commits.
        poll_timeout_s: longest wait of one poll.
        static_assignment: ``assign()`` every partition of ``topics`` instead of joining the group
            (embedded single-process mode: no group join delay; no rebalancing).
        flush_timeout_s: how long revoke and exit wait for in-flight outputs.
        rejoin_timeout_s: a consumer outside its group (no member id) this long is replaced (default:
            ``kafka.rejoin_timeout_s``).
        max_batch: most records one poll hands a ``BatchHandler`` (1: one at a time, whatever the handler).
        on_tombstone: takes the records without a value (by topic and key), under the same retries and DLQ; None:
            such a record is poison.
        consumer_options: librdkafka options over the consumer's (``consumer_config``), e.g. a smaller prefetch.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        retry: RetrySettings,
        *,
        group_id: str,
        topics: Sequence[str],
        handler: Handler,
        serde: AvroSerde,
        service: str,
        metrics: Metrics | None = None,
        stop: threading.Event | None = None,
        producer: ReliableProducer | None = None,
        commit_interval_s: float = 1.0,
        poll_timeout_s: float = 1.0,
        static_assignment: bool = False,
        flush_timeout_s: float = 30.0,
        rejoin_timeout_s: float | None = None,
        max_batch: int = 1,
        on_tombstone: TombstoneHandler | None = None,
        consumer_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("ConsumeLoop needs at least one topic")
        self._kafka = kafka
        self._retry = retry
        self._group_id = group_id
        self._topics = list(topics)
        self._handler = handler
        self._max_batch = max_batch if isinstance(handler, BatchHandler) else 1
        self._on_tombstone = on_tombstone
        self._serde = serde
        self._service = service
        self._metrics = metrics if metrics is not None else Metrics()
        self._stop = stop if stop is not None else threading.Event()
        self._own_producer = producer is None
        self._producer = producer
        self._commit_interval_s = commit_interval_s
        self._poll_timeout_s = min(poll_timeout_s, 1.0)
        self._flush_timeout_s = flush_timeout_s
        self._tracker = OffsetTracker()
        self._committer = Committer(
            kafka, group_id=group_id, topics=self._topics, service=service, book=self._tracker,
            metrics=self._metrics, hooks=RebalanceHooks(revoking=self._flush_before_revoke),
            static_assignment=static_assignment, rejoin_timeout_s=rejoin_timeout_s, member_id=self._member_id,
            new_consumer=lambda on_commit: create_consumer(kafka, group_id=group_id, client_id=service,
                                                           on_commit=on_commit, options=consumer_options),
        )

    @property
    def consumers_replaced(self) -> int:
        """How many consumers were replaced for staying outside their group."""
        return self._committer.consumers_replaced

    @property
    def stop_event(self) -> threading.Event:
        """The event that stops the loop."""
        return self._stop

    @property
    def ready(self) -> bool:
        """Consuming (for /readyz): ``run()`` holds its subscribed (or assigned) consumer and no stop is asked."""
        return self._committer.started and not self._stop.is_set()

    def stop(self) -> None:
        """Ask the loop to finish (thread- and signal-safe)."""
        self._stop.set()

    def run(self, *, max_idle_s: float | None = None) -> None:
        """Run until ``stop()``, or until no record arrived for ``max_idle_s`` and nothing is pending.

        Raises:
            FatalError: a fatal client error, or a transient fault outlived the retry budget.
            RetryableError: an output could not be delivered (after librdkafka's own retries).
        """
        if self._producer is None:
            self._producer = ReliableProducer(self._kafka, client_id=self._service)
        producer = self._producer
        dlq = DlqRouter(producer, self._service)
        failed = True
        try:
            self._committer.start()
            _log.info("loop_started", group_id=self._group_id, topics=self._topics, service=self._service)
            self._consume(producer, dlq, max_idle_s)
            failed = False
        finally:
            self._close(producer, raise_errors=not failed)

    def _consume(self, producer: ReliableProducer, dlq: DlqRouter, max_idle_s: float | None) -> None:
        last_commit = last_record = time.monotonic()
        committer = self._committer
        while not self._stop.is_set():
            producer.raise_if_failed()
            if self._max_batch > 1:
                msgs = committer.consumer.consume(self._max_batch, self._poll_timeout_s)
            else:
                msg = committer.consumer.poll(self._poll_timeout_s)
                msgs = [msg] if msg is not None else []
            producer.poll(0)
            now = time.monotonic()
            if msgs:
                last_record = now
                if len(msgs) == 1:
                    self._on_message(producer, dlq, msgs[0])
                else:
                    self._on_batch(producer, dlq, msgs)
            elif max_idle_s is not None and now - last_record >= max_idle_s and not self._tracker.pending_count():
                _log.info("loop_idle", idle_s=round(now - last_record, 3))
                break
            if now - last_commit >= self._commit_interval_s:
                committer.commit(asynchronous=True)
                last_commit = now
            committer.watch_membership()

    def _member_id(self, consumer: Consumer) -> str | None:
        """The consumer's group member id; empty or None while it is outside the group."""
        return consumer.memberid()

    def _flush_before_revoke(self, _: list[TopicPartitionKey]) -> None:
        """Revoke: the outputs in flight are delivered first, so their records commit with the rest."""
        if self._producer is not None:
            try:
                self._producer.flush(self._flush_timeout_s)
            except DocstreamError as exc:
                _log.error("producer_flush_failed", error_code=exc.code, error=exc.message)

    def _accept(self, msg: Message) -> TopicPartitionKey | None:
        """Track a polled record; None for a consumer event that is not a record (logged, or end of partition)."""
        try:
            raise_for_message(msg)
        except RetryableError as exc:
            _log.warning("consumer_error", error_code=exc.code, error=exc.message)
            return None
        if msg.error() is not None:
            return None  # end of partition
        topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
        tp = (topic, partition)
        try:
            self._tracker.track(tp, offset)
        except ValueError:  # the consumer went back (offset reset, truncated log): start the partition afresh
            _log.warning("offset_rewound", topic=topic, partition=partition, offset=offset)
            self._tracker.revoke([tp])
            self._tracker.track(tp, offset)
        self._metrics.records_in.labels(self._service, topic).inc()
        return tp

    def _on_message(self, producer: ReliableProducer, dlq: DlqRouter, msg: Message) -> None:
        tp = self._accept(msg)
        if tp is not None:
            self._handle_one(producer, dlq, msg, tp)

    def _handle_one(self, producer: ReliableProducer, dlq: DlqRouter, msg: Message, tp: TopicPartitionKey) -> None:
        offset = int(msg.offset() or 0)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(service=self._service, topic=tp[0], partition=tp[1], offset=offset)
        outcome = run_with_retries(
            lambda: self._attempt(msg), retry=self._retry, wait=self._wait, on_retry=self._on_retry
        )
        if outcome.interrupted:
            return  # stopping: the record stays pending, so nothing is committed past it
        if outcome.error is not None:
            self._dead_letter(dlq, msg, tp, outcome.error, outcome.attempts)
        else:
            self._produce(producer, dlq, msg, tp, outcome.value or [])
        self._committer.observe_lag({tp: offset})

    def _on_batch(self, producer: ReliableProducer, dlq: DlqRouter, msgs: Sequence[Message]) -> None:
        """Several records through ``handle_batch``; records that do not decode go to the DLQ first, and a batch
        that fails runs again one record at a time."""
        batch: list[tuple[Message, TopicPartitionKey, Envelope]] = []
        for msg in msgs:
            tp = self._accept(msg)
            if tp is None:
                continue
            if msg.value() is None and self._on_tombstone is not None:
                self._handle_one(producer, dlq, msg, tp)
                continue
            try:
                batch.append((msg, tp, self._envelope(msg)))
            except PoisonRecord as exc:
                self._dead_letter(dlq, msg, tp, exc, 1)
            except Exception:  # noqa: BLE001 - not poison: the record's own attempts decide (retries, then DLQ)
                self._handle_one(producer, dlq, msg, tp)
        if not batch:
            return
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(service=self._service, batch=len(batch))
        handler = self._handler
        assert isinstance(handler, BatchHandler)

        def attempt() -> list[_Encoded]:
            outputs = handler.handle_batch([envelope for _, _, envelope in batch])
            return [self._encode(out) for out in outputs]

        outcome = run_with_retries(attempt, retry=self._retry, wait=self._wait, on_retry=self._on_retry)
        if outcome.interrupted:
            return
        if outcome.error is not None or outcome.value is None or len(outcome.value) != len(batch):
            _log.warning("batch_split", records=len(batch), error_code=error_code_of(outcome.error or "mismatch"))
            for msg, tp, _ in batch:
                self._handle_one(producer, dlq, msg, tp)
            return
        for (msg, tp, _), encoded in zip(batch, outcome.value, strict=True):
            self._produce(producer, dlq, msg, tp, encoded)
        self._committer.observe_lag({tp: int(msg.offset() or 0) for msg, tp, _ in batch})

    def _envelope(self, msg: Message) -> Envelope:
        topic = str(msg.topic())
        value = msg.value()
        if value is None:
            raise SchemaError("record has no value", code="schema_empty", raw=None)
        record = self._serde.deserialize(value, topic)
        key = msg.key()
        return Envelope(
            topic=topic,
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=key.decode("utf-8", errors="replace") if isinstance(key, bytes) else key,
            value=record,
            headers=_headers(msg),
            timestamp_ms=int(msg.timestamp()[1]),
        )

    def _attempt(self, msg: Message) -> _Encoded:
        if msg.value() is None and self._on_tombstone is not None:
            key = msg.key()
            if not key:
                raise SchemaError("a tombstone without a key", code="tombstone_without_key", raw=None)
            text = key.decode("utf-8", errors="replace") if isinstance(key, bytes) else str(key)
            structlog.contextvars.bind_contextvars(tombstone=text[:200])
            outputs = self._on_tombstone(str(msg.topic()), text)
            return self._encode(outputs)
        envelope = self._envelope(msg)
        structlog.contextvars.bind_contextvars(
            job_id=getattr(envelope.value, "job_id", None), doc_id=getattr(envelope.value, "doc_id", None)
        )
        return self._encode(self._handler(envelope))

    def _encode(self, outputs: Sequence[Output]) -> _Encoded:
        """A handler's outputs as (topic, key, bytes) for the producer."""
        return [(o.topic, o.key, self._serde.serialize(o.value, o.topic)) for o in outputs]

    def _produce(
        self, producer: ReliableProducer, dlq: DlqRouter, msg: Message, tp: TopicPartitionKey, encoded: _Encoded
    ) -> None:
        offset = int(msg.offset() or 0)
        if not encoded:
            self._tracker.done(tp, offset)
            return
        remaining = [len(encoded)]

        def on_delivery(err: KafkaError | None, out: Message) -> None:
            if err is not None:
                return  # the producer keeps the error; the record stays pending
            self._metrics.records_out.labels(self._service, str(out.topic())).inc()
            remaining[0] -= 1
            if remaining[0] == 0:
                self._tracker.done(tp, offset)

        for topic, key, value in encoded:
            try:
                producer.produce(topic, key, value, on_delivery=on_delivery)
            except PoisonRecord as exc:  # an output larger than the broker takes: the input goes to the DLQ
                self._dead_letter(dlq, msg, tp, exc, 1)
                return

    def _dead_letter(
        self, dlq: DlqRouter, msg: Message, tp: TopicPartitionKey, error: BaseException, attempts: int
    ) -> None:
        offset = int(msg.offset() or 0)
        if not isinstance(error, DocstreamError):
            _log.error("handler_failed", error_code=error_code_of(error), attempts=attempts, exc_info=error)

        def on_delivery(err: KafkaError | None, _: Message) -> None:
            if err is None:
                self._tracker.done(tp, offset)

        dlq.publish(tp[0], tp[1], offset, msg.key(), msg.value(), error, attempts, on_delivery=on_delivery)
        self._metrics.dlq.labels(self._service, tp[0]).inc()
        self._metrics.records_failed.labels(self._service, error_code_of(error)).inc()

    def _wait(self, delay_s: float) -> bool:
        deadline = time.monotonic() + delay_s
        while True:
            if self._producer is not None:
                self._producer.poll(0)
            left = deadline - time.monotonic()
            if left <= 0:
                return self._stop.is_set()
            if self._stop.wait(min(left, 0.1)):
                return True

    def _on_retry(self, attempt: int, error: BaseException, delay_s: float) -> None:
        self._metrics.retries.labels(self._service, "handler").inc()
        _log.warning("handler_retry", attempt=attempt, error_code=error_code_of(error), error=str(error)[:500],
                     delay_s=round(delay_s, 3))

    def _close(self, producer: ReliableProducer, *, raise_errors: bool) -> None:
        error: DocstreamError | None = None
        try:
            producer.flush(self._flush_timeout_s)
        except DocstreamError as exc:
            error = exc
            _log.error("producer_flush_failed", error_code=exc.code, error=exc.message)
        self._committer.close()
        if self._own_producer:
            producer.close(0)
            self._producer = None
        structlog.contextvars.unbind_contextvars("topic", "partition", "offset", "job_id", "doc_id")
        _log.info("loop_stopped", group_id=self._group_id, pending=self._tracker.pending_count())
        if raise_errors and error is not None:
            raise error
