"""Ask the broker whether offset ranges hold committed records (read-only, no group join)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from docstream.errors import RetryableError
from docstream.kafka.clients import common_config, consumer_error
from docstream.settings import KafkaSettings

__all__ = ["Span", "spans_with_records"]

Span = tuple[str, int, int, int]
"""``(topic, partition, start, end)``: the offsets ``start <= offset < end`` of one partition."""


def spans_with_records(
    kafka: KafkaSettings, spans: Iterable[Span], *, timeout_s: float = 10.0
) -> dict[tuple[str, int], bool]:
    """Whether each span holds at least one committed record, by ``(topic, partition)``.

    Reads with ``assign`` and isolation read_committed, so that transaction markers and the
    records of aborted transactions (offsets that no consumer is ever given) do not count. A
    span not decided within ``timeout_s`` is left out of the answer.

    Raises:
        FatalError, InputError: the broker refused (authorization, unknown topic).
    """
    todo = {(topic, partition): (start, end) for topic, partition, start, end in spans if end > start}
    if not todo:
        return {}
    consumer = Consumer({
        **common_config(kafka, client_id="docstream-probe"),
        "group.id": "docstream-probe",  # never joined: assign() only, nothing committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "allow.auto.create.topics": False,
        "auto.offset.reset": "earliest",  # a start below the log start (retention): from the first record
    })
    found: dict[tuple[str, int], bool] = {}
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in todo.items()])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            key = (str(msg.topic()), int(msg.partition() or 0))
            err = msg.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                error = consumer_error(err, f"probe {key[0]}")
                if isinstance(error, RetryableError):
                    continue
                raise error
            span = todo.pop(key, None)
            if span is not None:
                found[key] = err is None and int(msg.offset() or 0) < span[1]  # a record, not the end
                consumer.incremental_unassign([TopicPartition(*key)])
    finally:
        consumer.close()
    return found
