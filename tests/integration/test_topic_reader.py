"""tests.fixtures.kafka.read_topic / TopicReader, the one topic reader of the tests, on the real Kafka."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from docstream.avro import AvroSerde
from docstream.records import AnyRecord
from docstream.topics import dlq_topic
from tests.fixtures.kafka import TopicReader, kafka_settings, read_topic, records_of_every_type

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` in order, keyed ``k0``, ``k1``, ...; returns once the broker has them all."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, value, f"k{i}")
    assert producer.flush(10) == 0


def test_expected_returns_as_soon_as_it_has_that_many_in_order(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = create_topics(broker, unique_name("reader"))[0]
    _produce(broker, topic, [b"a", b"b", b"c", b"d"])

    started = time.monotonic()
    messages = read_topic(broker, topic, expected=3, timeout_s=60).messages

    assert [m.value() for m in messages] == [b"a", b"b", b"c"]
    assert time.monotonic() - started < 30


def test_fewer_than_expected_fails_naming_the_topic_the_count_and_what_came(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = create_topics(broker, unique_name("short"))[0]
    _produce(broker, topic, [b"a", b"b"])

    with pytest.raises(pytest.fail.Exception) as failed:
        read_topic(broker, topic, expected=3, timeout_s=3, describe=lambda: "the service's log tail")

    text = str(failed.value)
    assert topic in text and "expected 3 records" in text and "got 2" in text
    assert text.endswith("the service's log tail")


def test_without_a_count_it_reads_every_topic_to_its_end_and_decodes_all_but_the_dlq(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    name = unique_name("ends")
    topic, dead = create_topics(broker, name, dlq_topic(name), partitions=2)
    serde = AvroSerde(kafka_settings(broker).kafka)
    records: list[AnyRecord] = records_of_every_type()
    _produce(broker, topic, [serde.serialize(r, topic) for r in records])
    _produce(broker, dead, [b"\x00not avro"])

    reader = read_topic(broker, topic, dead, serde=serde, timeout_s=60)

    assert sorted(map(repr, reader.records)) == sorted(map(repr, records))
    assert [r.message.value() for r in reader.received if r.record is None] == [b"\x00not avro"]
    assert len(reader.messages) == len(records) + 1


def test_until_waits_for_a_condition_and_linger_reads_on(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = create_topics(broker, unique_name("until"))[0]
    _produce(broker, topic, [b"a", b"b", b"stop", b"after"])

    reader = read_topic(broker, topic, until=lambda r: b"stop" in [m.value() for m in r.messages], timeout_s=60,
                        linger_s=2.0)

    assert [m.value() for m in reader.messages] == [b"a", b"b", b"stop", b"after"]
    with pytest.raises(pytest.fail.Exception, match="waiting for a record that never comes"):
        read_topic(broker, topic, until=lambda _: False, timeout_s=1, what="a record that never comes")


def test_a_reader_goes_on_where_it_stopped_and_finds_a_topic_created_after_it(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = unique_name("later")
    with TopicReader(broker, topic) as reader:
        assert reader.read(timeout_s=5).messages == []  # to the end of nothing: no topic yet
        create_topics(broker, topic)
        _produce(broker, topic, [b"a", b"b"])
        assert [m.value() for m in reader.read(expected=1, timeout_s=60).messages] == [b"a"]
        assert [m.value() for m in reader.read(expected=2, timeout_s=60).messages] == [b"a", b"b"]
