"""Dead-letter routing: a record that can't be processed goes to ``<topic>.dlq`` with why and where from."""

from __future__ import annotations

import time
from collections.abc import Callable

from docstream.errors import DocstreamError, PoisonRecord
from docstream.kafka.clients import DeliveryCallback, ReliableProducer
from docstream.logging import get_logger
from docstream.topics import dlq_topic

__all__ = ["DLQ_HEADERS", "DlqRouter", "dlq_headers", "error_code_of"]

_log = get_logger(__name__)
_MAX_ERROR_CHARS = 2000

DLQ_HEADERS = (
    "error",
    "error_code",
    "error_type",
    "original_topic",
    "original_partition",
    "original_offset",
    "attempts",
    "service",
    "timestamp",
)
"""Header names of every DLQ record (values are UTF-8 text; numbers in decimal; timestamp in epoch ms)."""


def error_code_of(error: BaseException | str) -> str:
    """The machine-readable code of an error: a DocstreamError's ``code``, else ``unhandled_error``."""
    if isinstance(error, DocstreamError):
        return error.code
    return "unhandled_error"


def dlq_headers(
    *,
    topic: str,
    partition: int,
    offset: int,
    error: BaseException | str,
    attempts: int,
    service: str,
    timestamp_ms: int,
) -> list[tuple[str, bytes]]:
    """The headers of a DLQ record, in ``DLQ_HEADERS`` order. Pure."""
    message = error if isinstance(error, str) else (str(error) or type(error).__name__)
    if len(message) > _MAX_ERROR_CHARS:
        message = message[: _MAX_ERROR_CHARS - 3] + "..."
    values = (
        message,
        error_code_of(error) if not isinstance(error, str) else "error",
        "str" if isinstance(error, str) else type(error).__name__,
        topic,
        str(partition),
        str(offset),
        str(attempts),
        service,
        str(timestamp_ms),
    )
    return [(name, value.encode("utf-8")) for name, value in zip(DLQ_HEADERS, values, strict=True)]


class DlqRouter:
    """Publishes failed records to ``<topic>.dlq`` through a ReliableProducer.

    The record keeps its original key and value bytes; why and where from travel in headers
    (``DLQ_HEADERS``). Nothing is committed past it until its delivery is acknowledged: pass
    ``on_delivery`` and mark the record done there.

    Args:
        producer: the producer to publish with.
        service: the service name written in the ``service`` header.
        clock: epoch seconds (injected for tests).
    """

    def __init__(self, producer: ReliableProducer, service: str, *, clock: Callable[[], float] = time.time) -> None:
        self._producer = producer
        self._service = service
        self._clock = clock

    def publish(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        error: BaseException | str,
        attempts: int,
        *,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Produce the failed record to ``<topic>.dlq``.

        Raises:
            RetryableError | FatalError: a kept delivery error of the producer.
        """
        headers = dlq_headers(
            topic=topic,
            partition=partition,
            offset=offset,
            error=error,
            attempts=attempts,
            service=self._service,
            timestamp_ms=int(self._clock() * 1000),
        )
        try:
            self._producer.produce(dlq_topic(topic), key, value, headers=headers, on_delivery=on_delivery)
        except PoisonRecord:
            # the value itself is too large to publish: keep the evidence, drop the bytes
            headers.append(("value_dropped", b"too_large"))
            self._producer.produce(dlq_topic(topic), key, None, headers=headers, on_delivery=on_delivery)
        _log.warning(
            "record_dead_lettered",
            topic=topic,
            partition=partition,
            offset=offset,
            error_code=error_code_of(error) if not isinstance(error, str) else "error",
            attempts=attempts,
        )
