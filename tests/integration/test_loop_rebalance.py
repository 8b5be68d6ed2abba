"""Two ConsumeLoops in one group: a rebalance loses nothing and commits everything that was done."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from docstream.avro import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop
from docstream.topics import dlq_topic
from tests.fixtures.kafka import committed_offset, kafka_settings, read_topic, wait_until
from tests.fixtures.loop import Echo, loop_chunk, loop_settings, running_loop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_PARTITIONS = 4


def _produce_wave(bootstrap: str, topic: str, serde: AvroSerde, wave: int) -> None:
    producer = ReliableProducer(kafka_settings(bootstrap).kafka)
    for i in range(20):
        chunk = loop_chunk(f"doc-{i}", wave)
        producer.produce(topic, chunk.key, serde.serialize(chunk, topic))
    producer.flush(30)
    producer.close()


def _poll_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _seen(*handlers: Echo) -> set[tuple[str, int]]:
    return {(e.value.doc_id, e.value.chunk_index) for h in handlers for e in h.calls}  # type: ignore[union-attr]


def test_a_second_member_takes_over_partitions_without_losing_records(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=_PARTITIONS)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    group = unique_name("group")
    first, second = Echo(out), Echo(out)

    def loop(handler: Echo, name: str) -> ConsumeLoop:
        return ConsumeLoop(settings.kafka, settings.retry,
                           group_id=group, topics=[src], handler=handler, serde=serde, service=name,
                           commit_interval_s=0.1)

    _produce_wave(broker, src, serde, 0)
    with running_loop(loop(first, "first")) as errors_first:
        wait_until(lambda: len(first.calls) == 20, 60, "the first member to take the first wave")
        with running_loop(loop(second, "second")) as errors_second:
            waves = 1
            deadline = time.monotonic() + 90
            while not second.calls:  # the second member only sees records produced after it got partitions
                assert time.monotonic() < deadline, "the second member never got partitions"
                _produce_wave(broker, src, serde, waves)
                waves += 1
                _poll_for(lambda: bool(second.calls), 3.0)
            expected = {(f"doc-{i}", w) for i in range(20) for w in range(waves)}
            wait_until(lambda: _seen(first, second) >= expected, 60, "every wave processed")
        wait_until(
            lambda: sum(max(0, committed_offset(broker, group, src, p)) for p in range(_PARTITIONS)) == 20 * waves,
            60, "commits covering every wave",
        )

    assert errors_first == [] and errors_second == []
    assert len(read_topic(broker, out, expected=20 * waves).messages) >= 20 * waves
