"""Every record type through a real broker in both wire formats; one doc_id → one partition, in order."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from docstream.avro import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.records import ChunkCreated
from docstream.settings import KafkaSettings
from tests.fixtures.kafka import kafka_settings, read_topic, records_of_every_type

pytestmark = pytest.mark.integration


def _serde(wire_format: str) -> AvroSerde:
    if wire_format == "confluent":
        return AvroSerde(KafkaSettings(), registry=SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4()}"}))
    return AvroSerde(KafkaSettings())


@pytest.mark.parametrize("wire_format", ["confluent", "single_object"])
def test_every_record_type_round_trips_through_the_broker(
    broker: str, wire_format: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = create_topics(broker, unique_name("roundtrip"), partitions=1)[0]
    serde = _serde(wire_format)
    records = records_of_every_type(doc_id=str(uuid.uuid4()))
    producer = ReliableProducer(kafka_settings(broker).kafka)
    for record in records:
        producer.produce(topic, record.key, serde.serialize(record, topic))
    producer.flush(30)
    producer.close()

    read = read_topic(broker, topic, expected=len(records), serde=serde)
    messages = read.messages

    assert read.records == records
    assert {(m.value() or b"x")[:1] for m in messages} == {b"\x00" if wire_format == "confluent" else b"\xc3"}
    assert [m.key() for m in messages] == [r.key.encode() for r in records]


def test_records_of_one_document_land_in_one_partition_in_order(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    topic = create_topics(broker, unique_name("keyed"), partitions=3)[0]
    serde = AvroSerde(KafkaSettings())
    docs = [f"document-{i}" for i in range(6)]  # fixed keys: a deterministic spread over partitions
    at = datetime(2024, 1, 1, tzinfo=UTC)
    producer = ReliableProducer(kafka_settings(broker).kafka)
    for index in range(10):
        for doc in docs:
            chunk = ChunkCreated(
                job_id="j", doc_id=doc, chunk_id=f"{doc}-{index}", chunk_index=index, chunk_count=10,
                content_sha256="0" * 64, text=f"chunk {index}", page_start=1, page_end=1, char_start=0, char_end=1,
                token_count=2, chunker_settings="s", created_at=at,
            )
            producer.produce(topic, chunk.key, serde.serialize(chunk, topic))
    producer.flush(30)
    producer.close()

    read = read_topic(broker, topic, expected=60, serde=serde)

    assert len(read.received) == 60
    partitions: dict[str, set[int]] = defaultdict(set)
    sequence: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for msg, record in ((r.message, r.record) for r in read.received):
        assert isinstance(record, ChunkCreated) and (msg.key() or b"").decode() == record.doc_id
        partitions[record.doc_id].add(int(msg.partition() or 0))
        sequence[record.doc_id].append((int(msg.offset() or 0), record.chunk_index))
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert len({next(iter(p)) for p in partitions.values()}) > 1, "six keys spread over more than one partition"
    for doc, seen in sequence.items():
        assert [index for _, index in sorted(seen)] == list(range(10)), doc
