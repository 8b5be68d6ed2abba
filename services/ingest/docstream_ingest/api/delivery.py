"""One request's deliveries over the API's shared producer.

The API keeps one librdkafka producer for all requests. ``ReliableProducer`` keeps the first
failed delivery of the whole client until it is cleared, which would fail every later request
for one bad moment; ``RequestDeliveries`` instead tracks the deliveries of one request only,
so each request learns about its own records, and about nothing else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from docstream.errors import DocstreamError, FatalError, PoisonRecord, RetryableError
from docstream.kafka.clients import kafka_error

__all__ = ["RequestDeliveries"]

_POLL_S = 0.1


class RequestDeliveries:
    """An ``IntakeProducer`` for one request.

    Args:
        producer: gives the shared confluent_kafka Producer (``ReliableProducer.producer``) when
            the first record is produced; a request that produces nothing never asks for it.
        queue_full_timeout_s: how long ``produce`` waits for room in a full local queue.
    """

    def __init__(self, producer: Callable[[], Producer], *, queue_full_timeout_s: float = 30.0) -> None:
        self._get_producer = producer
        self._producer: Producer | None = None
        self._queue_full_timeout_s = queue_full_timeout_s
        self._lock = threading.Lock()
        self._pending = 0
        self._delivered = 0
        self._error: DocstreamError | None = None

    @property
    def delivered(self) -> int:
        """Records of this request the broker acknowledged."""
        return self._delivered

    def produce(self, topic: str, key: str | bytes | None, value: bytes | None) -> None:
        """Queue one record.

        Raises:
            RetryableError | FatalError: an earlier record of this request failed, or the queue stayed full.
        """
        self._raise_if_failed()
        if self._producer is None:
            self._producer = self._get_producer()
        producer = self._producer
        deadline = time.monotonic() + self._queue_full_timeout_s
        with self._lock:
            self._pending += 1
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=self._on_delivery)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    self._forget_one()
                    raise RetryableError("producer queue stayed full", code="kafka_queue_full") from None
                producer.poll(_POLL_S)
            except KafkaException as exc:
                self._forget_one()
                raise kafka_error(exc.args[0], f"produce to {topic}") from exc

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every record of this request is acknowledged.

        Raises:
            RetryableError | FatalError: a record failed, or some are unacknowledged after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while self._producer is not None and self._pending > 0 and self._error is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RetryableError(
                    f"{self._pending} records not delivered within {timeout} s", code="kafka_flush_timeout"
                )
            self._producer.poll(min(_POLL_S, remaining))
        self._raise_if_failed()

    def _forget_one(self) -> None:
        with self._lock:
            self._pending -= 1

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        with self._lock:
            self._pending -= 1
            if err is None:
                self._delivered += 1
            elif self._error is None:
                error = kafka_error(err, "deliver")
                self._error = FatalError(error.message, code=error.code) if isinstance(error, PoisonRecord) else error
