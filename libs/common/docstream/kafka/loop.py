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

A delivery failure is kept by the ReliableProducer and ends ``run`` with its error after a
final commit of what is done: a restart resumes from there (at-least-once).

A consumer that stays outside its group (no member id) for ``rejoin_timeout_s`` is replaced by a
new one (MembershipWatch): after a broker restart one chunker's librdkafka consumer never joined
again (docs/reliability.md). Nothing of it is committed; the new consumer resumes from the
group's committed offsets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, PoisonRecord, RetryableError, SchemaError
from docstream.kafka.attempts import run_with_retries
from docstream.kafka.clients import (
    ReliableProducer,
    close_abandoned_consumer,
    create_consumer,
    raise_for_message,
    topic_partitions,
)
from docstream.kafka.dlq import DlqRouter, error_code_of
from docstream.kafka.membership import MembershipWatch
from docstream.kafka.offsets import OffsetTracker, TopicPartitionKey
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import AnyRecord
from docstream.settings import Settings

__all__ = ["ConsumeLoop", "Envelope", "Handler", "Output"]

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


def _headers(msg: Message) -> dict[str, bytes]:
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return {k: v.encode("utf-8") if isinstance(v, str) else (v or b"") for k, v in items}


class ConsumeLoop:
    """Consume ``topics`` as ``group_id``, run ``handler`` per record, produce its outputs, commit what is done.

    Args:
        settings: all settings (kafka, retry).
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
        rejoin_timeout_s: a consumer outside its group (no member id) this long is replaced.
    """

    def __init__(
        self,
        settings: Settings,
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
        rejoin_timeout_s: float = 120.0,
    ) -> None:
        if not topics:
            raise ValueError("ConsumeLoop needs at least one topic")
        self._settings = settings
        self._group_id = group_id
        self._topics = list(topics)
        self._handler = handler
        self._serde = serde
        self._service = service
        self._metrics = metrics if metrics is not None else Metrics()
        self._stop = stop if stop is not None else threading.Event()
        self._own_producer = producer is None
        self._producer = producer
        self._commit_interval_s = commit_interval_s
        self._poll_timeout_s = min(poll_timeout_s, 1.0)
        self._static = static_assignment
        self._flush_timeout_s = flush_timeout_s
        self._tracker = OffsetTracker()
        self._consumer: Consumer | None = None
        self._membership = MembershipWatch(rejoin_timeout_s)
        self.consumers_replaced = 0

    @property
    def stop_event(self) -> threading.Event:
        """The event that stops the loop."""
        return self._stop

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
            self._producer = ReliableProducer(self._settings.kafka, client_id=self._service)
        producer = self._producer
        dlq = DlqRouter(producer, self._service)
        self._consumer = self._new_consumer()
        failed = True
        try:
            self._start(self._consumer)
            self._consume(producer, dlq, max_idle_s)
            failed = False
        finally:
            self._close(self._consumer, producer, raise_errors=not failed)

    def _new_consumer(self) -> Consumer:
        return create_consumer(
            self._settings.kafka, group_id=self._group_id, client_id=self._service, on_commit=self._on_commit
        )

    def _start(self, consumer: Consumer) -> None:
        if self._static:
            parts = [TopicPartition(t, p) for t in self._topics for p in topic_partitions(consumer, t)]
            consumer.assign(parts)
            _log.info("partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in parts], static=True)
        else:
            consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                               on_lost=self._on_lost)
        _log.info("loop_started", group_id=self._group_id, topics=self._topics, service=self._service)

    def _consume(self, producer: ReliableProducer, dlq: DlqRouter, max_idle_s: float | None) -> None:
        last_commit = last_record = last_membership = time.monotonic()
        while not self._stop.is_set():
            consumer = self._consumer
            assert consumer is not None
            producer.raise_if_failed()
            msg = consumer.poll(self._poll_timeout_s)
            producer.poll(0)
            now = time.monotonic()
            if msg is not None:
                last_record = now
                self._on_message(consumer, producer, dlq, msg)
            elif max_idle_s is not None and now - last_record >= max_idle_s and not self._tracker.pending_count():
                _log.info("loop_idle", idle_s=round(now - last_record, 3))
                break
            if now - last_commit >= self._commit_interval_s:
                self._commit(consumer, asynchronous=True)
                last_commit = now
            if not self._static and now - last_membership >= 1.0:
                last_membership = now
                if self._membership.observe(self._member_id(consumer), now):
                    self._replace_consumer(consumer, now)

    def _member_id(self, consumer: Consumer) -> str | None:
        """The consumer's group member id; empty or None while it is outside the group."""
        return consumer.memberid()

    def _replace_consumer(self, stuck: Consumer, now: float) -> None:
        """Give up on a consumer that never joined its group again; subscribe a new one.

        Whatever it tracked is dropped uncommitted (outside the group, its commits are refused
        anyway); the new consumer starts from the group's committed offsets, so records handled
        and not committed are handled again (at-least-once, as after a restart). The old consumer
        is closed on a side thread, for at most 10 s: a stuck one may never finish closing.
        """
        _log.error("consumer_rejoin_stuck", group_id=self._group_id, outside_group_s=round(
            self._membership.outside_for(now), 1), dropped_pending=self._tracker.pending_count())
        self._tracker.revoke(self._tracker.partitions())
        close_abandoned_consumer(stuck)
        self._consumer = self._new_consumer()
        self._start(self._consumer)
        self._membership.restart(time.monotonic())
        self.consumers_replaced += 1
        self._metrics.retries.labels(self._service, "consumer_rejoin").inc()
        _log.warning("consumer_replaced", group_id=self._group_id, replaced=self.consumers_replaced)

    def _on_message(self, consumer: Consumer, producer: ReliableProducer, dlq: DlqRouter, msg: Message) -> None:
        try:
            raise_for_message(msg)
        except RetryableError as exc:
            _log.warning("consumer_error", error_code=exc.code, error=exc.message)
            return
        if msg.error() is not None:
            return  # end of partition
        topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
        tp = (topic, partition)
        try:
            self._tracker.track(tp, offset)
        except ValueError:  # the consumer went back (offset reset, truncated log): start the partition afresh
            _log.warning("offset_rewound", topic=topic, partition=partition, offset=offset)
            self._tracker.revoke([tp])
            self._tracker.track(tp, offset)
        self._metrics.records_in.labels(self._service, topic).inc()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(service=self._service, topic=topic, partition=partition, offset=offset)
        outcome = run_with_retries(
            lambda: self._attempt(msg), retry=self._settings.retry, wait=self._wait, on_retry=self._on_retry
        )
        if outcome.interrupted:
            return  # stopping: the record stays pending, so nothing is committed past it
        if outcome.error is not None:
            self._dead_letter(dlq, msg, tp, outcome.error, outcome.attempts)
        else:
            self._produce(producer, dlq, msg, tp, outcome.value or [])
        self._observe_lag(consumer, tp, offset)

    def _attempt(self, msg: Message) -> _Encoded:
        topic = str(msg.topic())
        value = msg.value()
        if value is None:
            raise SchemaError("record has no value", code="schema_empty", raw=None)
        record = self._serde.deserialize(value, topic)
        structlog.contextvars.bind_contextvars(
            job_id=getattr(record, "job_id", None), doc_id=getattr(record, "doc_id", None)
        )
        key = msg.key()
        envelope = Envelope(
            topic=topic,
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=key.decode("utf-8", errors="replace") if isinstance(key, bytes) else key,
            value=record,
            headers=_headers(msg),
            timestamp_ms=int(msg.timestamp()[1]),
        )
        return [(o.topic, o.key, self._serde.serialize(o.value, o.topic)) for o in self._handler(envelope)]

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

    def _observe_lag(self, consumer: Consumer, tp: TopicPartitionKey, offset: int) -> None:
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), cached=True)
        except KafkaException:
            return
        if high is not None and high >= 0:
            self._metrics.consumer_lag.labels(self._service, tp[0], str(tp[1])).set(max(0, high - offset - 1))

    def _commit(self, consumer: Consumer, *, asynchronous: bool, tps: list[TopicPartitionKey] | None = None) -> None:
        offsets = self._tracker.committable(tps)
        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            if asynchronous:
                consumer.commit(offsets=parts, asynchronous=True)
            else:
                consumer.commit(offsets=parts, asynchronous=False)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() != KafkaError._NO_OFFSET:
                _log.warning("offsets_commit_failed", error_code=err.name(), error=err.str())
            return
        self._tracker.mark_committed(offsets)
        _log.debug("offsets_committed", offsets={f"{t}[{p}]": o for (t, p), o in offsets.items()},
                   asynchronous=asynchronous)

    def _on_commit(self, err: KafkaError | None, partitions: list[Any]) -> None:
        failed = [(p.topic, p.partition) for p in partitions if err is not None or p.error is not None]
        if failed:
            self._tracker.forget_committed(failed)
            _log.warning("offsets_commit_failed", partitions=[f"{t}[{p}]" for t, p in failed],
                         error=err.str() if err is not None else None)

    def _on_assign(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        _log.info("partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return  # a replaced consumer closing late: the partitions' tracking belongs to the new one
        tps = [(str(p.topic), int(p.partition)) for p in partitions]
        if self._producer is not None:
            try:
                self._producer.flush(self._flush_timeout_s)
            except DocstreamError as exc:
                _log.error("producer_flush_failed", error_code=exc.code, error=exc.message)
        self._commit(consumer, asynchronous=False, tps=tps)
        self._tracker.revoke(tps)
        _log.info("partitions_revoked", partitions=[f"{t}[{p}]" for t, p in tps])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:
            return
        tps = [(str(p.topic), int(p.partition)) for p in partitions]
        self._tracker.revoke(tps)
        _log.warning("partitions_lost", partitions=[f"{t}[{p}]" for t, p in tps])

    def _close(self, consumer: Consumer, producer: ReliableProducer, *, raise_errors: bool) -> None:
        error: DocstreamError | None = None
        try:
            producer.flush(self._flush_timeout_s)
        except DocstreamError as exc:
            error = exc
            _log.error("producer_flush_failed", error_code=exc.code, error=exc.message)
        self._commit(consumer, asynchronous=False)
        consumer.close()
        if self._own_producer:
            producer.close(0)
            self._producer = None
        self._consumer = None
        structlog.contextvars.unbind_contextvars("topic", "partition", "offset", "job_id", "doc_id")
        _log.info("loop_stopped", group_id=self._group_id, pending=self._tracker.pending_count())
        if raise_errors and error is not None:
            raise error
