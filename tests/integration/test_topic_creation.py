"""create_topics on the real broker: it returns once every partition it created is served by its leader, and an
idempotent producer's pipelined records then all land (KAFKA-15591: before that, the first request to a new
partition could be refused, the next appended, and the first one's records lost with no error)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from docstream.kafka.admin import TopicSpec, create_topics
from docstream.kafka.clients import admin_config, producer_config
from tests.fixtures.kafka import kafka_settings

pytestmark = pytest.mark.integration

_PARTITIONS = 6


def test_every_partition_of_a_topic_just_created_answers_on_its_leader_and_takes_every_record(
    kafka_bootstrap: str, unique_name: Callable[[str], str],
) -> None:
    kafka = kafka_settings(kafka_bootstrap).kafka
    names = [unique_name(f"created-{i}") for i in range(20)]  # as many as a service makes: the window grows with them

    assert sorted(create_topics(kafka, [TopicSpec(n, _PARTITIONS) for n in names], timeout_s=60)) == sorted(names)

    # at once, no retry: the metadata alone showed the topics while their partitions still answered
    # NOT_LEADER_OR_FOLLOWER (for 0.8 s on the local stack)
    admin = AdminClient(admin_config(kafka))
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    asked = {TopicPartition(n, p): latest for n in names for p in range(_PARTITIONS)}
    refused = []
    for tp, future in admin.list_offsets(asked, request_timeout=10).items():
        try:
            future.result(timeout=15)
        except KafkaException as exc:
            refused.append((tp.topic, tp.partition, str(exc)))
    assert refused == []

    producer = Producer({**producer_config(kafka), "linger.ms": 0, "batch.num.messages": 2})
    failed: list[str] = []
    started = time.monotonic()
    for i in range(40 * len(names)):
        producer.produce(names[i % len(names)], key=b"k%d" % i, value=b"v", partition=i % _PARTITIONS,
                         on_delivery=lambda err, _msg: err is not None and failed.append(str(err)))
        producer.poll(0)
    assert producer.flush(60) == 0 and failed == [], failed
    counts = {n: 0 for n in names}
    for tp, future in admin.list_offsets(asked, request_timeout=10).items():
        counts[tp.topic] += future.result(timeout=15).offset
    assert counts == {n: 40 for n in names}, f"after {time.monotonic() - started:.1f} s"
