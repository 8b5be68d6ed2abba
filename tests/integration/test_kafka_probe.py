"""``spans_with_records`` on the real broker: committed records count; markers and aborted records do not."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from docstream.kafka.clients import producer_config
from docstream_reducer.probe import spans_with_records
from tests.fixtures.kafka import kafka_settings

pytestmark = pytest.mark.integration


def test_a_span_holds_records_only_when_a_read_committed_consumer_would_get_one(
    kafka_bootstrap: str, create_topics: Callable[..., list[str]], unique_name: Callable[[str], str],
) -> None:
    (topic,) = create_topics(kafka_bootstrap, unique_name("probe"), partitions=2)
    kafka = kafka_settings(kafka_bootstrap).kafka
    plain = Producer(producer_config(kafka))
    for i in range(3):
        plain.produce(topic, key=b"k", value=b"v%d" % i, partition=0)  # offsets 0, 1, 2
    assert plain.flush(30) == 0
    txn = Producer(producer_config(kafka, transactional_id=unique_name("probe-txn")))
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, key=b"k", value=b"aborted%d" % i, partition=1)  # offsets 0, 1; marker at 2
    txn.flush(30)
    txn.abort_transaction(30)

    found = spans_with_records(kafka, [(topic, 0, 1, 3), (topic, 1, 0, 3)], timeout_s=30)

    assert found == {(topic, 0): True, (topic, 1): False}
    assert spans_with_records(kafka, [(topic, 0, 3, 3)]) == {}  # nothing asked
    assert spans_with_records(kafka, [(topic, 0, 3, 4)], timeout_s=30) == {(topic, 0): False}  # at the end
