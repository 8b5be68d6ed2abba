"""ConsumeLoop on the real Kafka: DLQ of poison bytes, commit only after delivery, retries, fatal exhaustion."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from docstream.avro import AvroSerde
from docstream.errors import FatalError, PoisonRecord, RetryableError
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop, Envelope, Output
from docstream.metrics import Metrics
from docstream.settings import Settings
from docstream.topics import dlq_topic
from tests.fixtures.kafka import (
    FirstConsumerOutsideGroup,
    committed_offset,
    kafka_settings,
    read_topic,
    wait_until,
)
from tests.fixtures.loop import Echo, loop_chunk, loop_settings, running_loop

pytestmark = pytest.mark.integration

def _produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    producer = ReliableProducer(kafka_settings(bootstrap).kafka)
    for value in values:
        producer.produce(topic, "key", value)
    producer.flush(30)
    producer.close()


def _chunks_in(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]], count: int, *,
    partitions: int,
) -> tuple[str, str, Settings, AvroSerde]:
    """New input, DLQ and output topics, ``count`` chunks of doc "d" on the input: (src, out, settings, serde)."""
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=partitions)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    _produce(broker, src, [serde.serialize(replace(loop_chunk("d"), chunk_index=i), src) for i in range(count)])
    return src, out, settings, serde


def test_poison_bytes_go_to_the_dlq_and_the_loop_commits_past_them(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    serde = AvroSerde(loop_settings(broker).kafka)
    garbage = b"\xde\xad\xbe\xef not avro"
    _produce(broker, src, [serde.serialize(loop_chunk("d1"), src), garbage, serde.serialize(loop_chunk("d2"), src)])
    group = unique_name("group")
    metrics = Metrics()
    handler = Echo(out)
    settings = loop_settings(broker)
    loop = ConsumeLoop(settings.kafka, settings.retry, group_id=group, topics=[src], handler=handler, serde=serde,
                       service="test-svc", metrics=metrics, commit_interval_s=0.1)

    with running_loop(loop) as errors:
        outputs = read_topic(broker, out, expected=2).messages
        dead = read_topic(broker, dlq_topic(src), expected=1).messages
        wait_until(lambda: committed_offset(broker, group, src) == 3, 30, "a commit past all three records")

    assert errors == []
    assert [serde.deserialize(m.value() or b"", out).doc_id for m in outputs] == ["d1", "d2"]  # type: ignore[union-attr]
    assert [e.offset for e in handler.calls] == [0, 2]
    assert len(dead) == 1 and dead[0].value() == garbage and dead[0].key() == b"key"
    headers = dict(dead[0].headers() or [])
    assert headers["original_topic"] == src.encode()
    assert (headers["original_partition"], headers["original_offset"]) == (b"0", b"1")
    assert headers["error_code"] == b"schema_unknown_format" and headers["error"]
    assert (headers["attempts"], headers["service"]) == (b"1", b"test-svc")
    assert int(headers["timestamp"]) > 0
    assert metrics.dlq.labels("test-svc", src)._value.get() == 1
    assert metrics.records_in.labels("test-svc", src)._value.get() == 3
    assert metrics.records_out.labels("test-svc", out)._value.get() == 2


def test_offsets_are_committed_only_after_the_outputs_are_delivered(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    _produce(broker, src, [serde.serialize(loop_chunk("d1"), src)])
    group = unique_name("group")
    # outputs wait in the producer (long linger) until the test flushes them
    producer = ReliableProducer(settings.kafka, overrides={"linger.ms": 60_000})
    handler = Echo(out)
    loop = ConsumeLoop(settings.kafka, settings.retry,
                       group_id=group, topics=[src], handler=handler, serde=serde, service="test",
                       producer=producer, commit_interval_s=0.05)

    with running_loop(loop) as errors:
        wait_until(lambda: handler.calls, 30, "the handler to run")
        seen_before = [committed_offset(broker, group, src) for _ in range(10)]  # ~10 commit intervals or more
        assert len(producer) == 1, "the output is still in flight"
        producer.flush(30)
        wait_until(lambda: committed_offset(broker, group, src) == 1, 30, "the commit after delivery")

    producer.close()
    assert errors == []
    assert set(seen_before) == {-1001}, "nothing was committed while the output was undelivered"
    assert len(read_topic(broker, out, expected=1).messages) == 1


def test_failing_handlers_are_retried_then_dead_lettered(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    _produce(broker, src, [serde.serialize(loop_chunk(d), src) for d in ("flaky", "broken", "fine")])

    def fail(envelope: Envelope, attempt: int) -> None:
        doc = envelope.value.doc_id  # type: ignore[union-attr]
        if doc == "flaky" and attempt < 3:
            raise RetryableError("dependency blipped")
        if doc == "broken":
            raise ValueError("handler bug")

    group = unique_name("group")
    handler = Echo(out, fail)
    loop = ConsumeLoop(settings.kafka, settings.retry,
                       group_id=group, topics=[src], handler=handler, serde=serde, service="test",
                       commit_interval_s=0.1)
    with running_loop(loop) as errors:
        outputs = read_topic(broker, out, expected=2).messages
        dead = read_topic(broker, dlq_topic(src), expected=1).messages
        wait_until(lambda: committed_offset(broker, group, src) == 3, 30, "a commit past all three records")

    assert errors == []
    assert sorted(serde.deserialize(m.value() or b"", out).doc_id for m in outputs) == ["fine", "flaky"]  # type: ignore[union-attr]
    assert [e.value.doc_id for e in handler.calls].count("flaky") == 3  # type: ignore[union-attr]
    headers = dict(dead[0].headers() or [])
    assert (headers["original_offset"], headers["attempts"]) == (b"1", b"3")
    assert (headers["error_code"], headers["error_type"]) == (b"unhandled_error", b"ValueError")


class _BatchEcho(Echo):
    """Echo that also takes batches; a batch holding ``refuse`` fails as a whole (a store refusing one record of a
    bulk write), and ``refuse`` alone is poison."""

    def __init__(self, out: str, refuse: str) -> None:
        super().__init__(out)
        self.refuse = refuse
        self.batches: list[list[str]] = []

    def __call__(self, envelope: Envelope) -> list[Output]:
        if envelope.value.doc_id == self.refuse:  # type: ignore[union-attr]
            raise PoisonRecord("refused", code="sink_refused")
        return super().__call__(envelope)

    def handle_batch(self, envelopes: Sequence[Envelope]) -> list[list[Output]]:
        docs = [e.value.doc_id for e in envelopes]  # type: ignore[union-attr]
        self.batches.append(docs)
        if self.refuse in docs:
            raise PoisonRecord("refused", code="sink_refused")
        return [super(_BatchEcho, self).__call__(e) for e in envelopes]


def test_a_batch_handler_gets_many_records_at_once_and_a_failed_batch_runs_one_at_a_time(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    docs = [f"d{i}" for i in range(30)]
    _produce(broker, src, [serde.serialize(loop_chunk(d), src) for d in docs])
    group = unique_name("group")
    handler = _BatchEcho(out, refuse="d17")
    loop = ConsumeLoop(settings.kafka, settings.retry, group_id=group, topics=[src], handler=handler, serde=serde,
                       service="test", commit_interval_s=0.1, max_batch=8)
    with running_loop(loop) as errors:
        outputs = read_topic(broker, out, expected=29).messages
        dead = read_topic(broker, dlq_topic(src), expected=1).messages
        wait_until(lambda: committed_offset(broker, group, src) == 30, 30, "a commit past every record")

    assert errors == []
    assert sorted(serde.deserialize(m.value() or b"", out).doc_id for m in outputs) == sorted(  # type: ignore[union-attr]
        d for d in docs if d != "d17")
    assert max(len(b) for b in handler.batches) > 1 and all(len(b) <= 8 for b in handler.batches)
    assert [b for b in handler.batches if "d17" in b], "the refused record came in a batch"
    assert dict(dead[0].headers() or [])["original_offset"] == b"17"  # only the refused record, alone


def test_a_tombstone_reaches_on_tombstone_by_its_key_and_is_poison_without_it(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    producer = ReliableProducer(settings.kafka)
    producer.produce(src, "doc-7", None)
    producer.produce(src, "d1", serde.serialize(loop_chunk("d1"), src))
    producer.flush(30)
    producer.close()
    seen: list[tuple[str, str]] = []

    def tombstone(topic: str, key: str) -> list[Output]:
        seen.append((topic, key))
        return []

    loop = ConsumeLoop(settings.kafka, settings.retry, group_id=unique_name("group"), topics=[src],
                       handler=Echo(out), serde=serde, service="test", commit_interval_s=0.1,
                       on_tombstone=tombstone)
    with running_loop(loop) as errors:
        read_topic(broker, out, expected=1)
        wait_until(lambda: seen, 30, "the tombstone")
    assert errors == [] and seen == [(src, "doc-7")]
    # without on_tombstone a record without a value is poison, as before
    plain = ConsumeLoop(settings.kafka, settings.retry, group_id=unique_name("group"), topics=[src],
                        handler=Echo(unique_name("out2")), serde=serde, service="test", commit_interval_s=0.1)
    with running_loop(plain) as errors:
        dead = read_topic(broker, dlq_topic(src), expected=1).messages
    assert errors == [] and dict(dead[0].headers() or [])["error_code"] == b"schema_empty"


def test_a_transient_fault_past_the_retry_budget_is_fatal_and_commits_nothing_past_it(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out = unique_name("in"), unique_name("out")
    create_topics(broker, src, dlq_topic(src), out, partitions=1)
    settings = loop_settings(broker)
    serde = AvroSerde(settings.kafka)
    _produce(broker, src, [serde.serialize(loop_chunk(d), src) for d in ("ok", "down", "never")])

    def fail(envelope: Envelope, attempt: int) -> None:
        if envelope.value.doc_id == "down":  # type: ignore[union-attr]
            raise RetryableError("store unavailable")

    group = unique_name("group")
    loop = ConsumeLoop(settings.kafka, settings.retry,
                       group_id=group, topics=[src], handler=Echo(out, fail), serde=serde,
                       service="test", commit_interval_s=0.1)

    with pytest.raises(FatalError) as info:
        loop.run(max_idle_s=60)

    assert info.value.code == "retries_exhausted"
    assert committed_offset(broker, group, src) == 1, "committed up to the failing record, not past it"
    assert [m.offset() for m in read_topic(broker, out, expected=1).messages] == [0]


def test_static_assignment_consumes_without_a_group_join(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out, settings, serde = _chunks_in(broker, unique_name, create_topics, 4, partitions=2)
    group = unique_name("group")
    handler = Echo(out)
    loop = ConsumeLoop(settings.kafka, settings.retry,
                       group_id=group, topics=[src], handler=handler, serde=serde, service="test",
                       static_assignment=True)

    loop.run(max_idle_s=3)

    assert sorted(e.value.chunk_index for e in handler.calls) == [0, 1, 2, 3]  # type: ignore[union-attr]
    assert sum(max(0, committed_offset(broker, group, src, p)) for p in (0, 1)) == 4


class _FirstConsumerOutsideGroup(FirstConsumerOutsideGroup, ConsumeLoop):
    pass


def test_a_consumer_outside_its_group_too_long_is_replaced_and_nothing_is_lost_or_doubled(
    broker: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    src, out, settings, serde = _chunks_in(broker, unique_name, create_topics, 4, partitions=1)
    group = unique_name("group")
    handler = Echo(out)
    metrics = Metrics()
    loop = _FirstConsumerOutsideGroup(settings.kafka, settings.retry, group_id=group, topics=[src], handler=handler,
                                      serde=serde, service="test", metrics=metrics, commit_interval_s=0.1,
                                      rejoin_timeout_s=3.0)

    with running_loop(loop) as errors:
        wait_until(lambda: committed_offset(broker, group, src) == 4, 60, "the first records committed")
        wait_until(lambda: loop.consumers_replaced == 1, 30, "the consumer outside its group to be replaced")
        _produce(broker, src, [serde.serialize(replace(loop_chunk("d"), chunk_index=i), src) for i in range(4, 8)])
        wait_until(lambda: committed_offset(broker, group, src) == 8, 60, "the new consumer to commit the rest")

    assert errors == []
    assert loop.consumers_replaced == 1, "a consumer in its group is kept"
    assert metrics.retries.labels("test", "consumer_rejoin")._value.get() == 1
    assert sorted(e.offset for e in handler.calls) == list(range(8))  # each record once
    assert len(read_topic(broker, out, expected=8).messages) == 8
