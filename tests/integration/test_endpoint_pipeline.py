"""The embed task through a real Infinity server, in the inference pipeline on real brokers and stores.

Through the fault proxy: a job under 429 bursts, 500s and connection resets writes exactly its chunk
rows with the local model's vectors; a poisoned input ends in the DLQ alone while its neighbours
succeed. The endpoint outage is a chaos scenario (tests/chaos/test_endpoint_outage.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from docstream.avro.serde import AvroSerde
from docstream.metrics import Metrics
from docstream.models.embedding import load_embedder
from docstream.models.endpoint import EndpointEmbedder
from docstream.records import ChunkCreated, ChunkResult
from docstream.settings import CassandraSettings
from docstream.store import ResultStore
from docstream.topics import Topics, dlq_topic
from docstream_inference.pipeline import group_id
from tests.fixtures.inference import (
    ENDPOINT_MODEL_ID,
    assert_exactly_the_rows_of,
    committed_offsets,
    end_offsets,
    endpoint_settings,
    make_chunks,
    metric_value,
    pipeline_settings,
    produce_chunks,
    rows_by_chunk,
    running_pipeline,
)
from tests.fixtures.kafka import read_topic, wait_until

pytestmark = pytest.mark.integration

POISON = "POISON-PILL-9c1e"


def test_a_job_through_the_endpoint_under_429s_500s_and_resets_writes_exactly_its_rows(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    unique_name: Callable[[str], str], tmp_path: Path, infinity: Any, fault_proxy: Any, reference_model: Any,
) -> None:
    prefix = unique_name("endfault")
    settings = endpoint_settings(pipeline_settings(kafka_bootstrap, prefix, tmp_path, inference={"max_batch_size": 24}),
                                 fault_proxy.url, infinity.api_key)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 3, 20)
    embedder = load_embedder(settings.inference)
    assert isinstance(embedder, EndpointEmbedder)
    metrics = Metrics()
    fault_proxy.throttle(4, retry_after_s=1)
    fault_proxy.fail(3, status=500)
    fault_proxy.reset(3)
    try:
        with running_pipeline(settings, embedder, cassandra_store, metrics=metrics):
            produced = produce_chunks(kafka_bootstrap, topics.chunks, chunks, serde)
            embedded = read_topic(kafka_bootstrap, topics.results, expected=len(chunks), serde=serde,
                                  timeout_s=120).records
            ends = end_offsets(produced)
            group = group_id(settings.kafka, settings.inference)
            wait_until(lambda: committed_offsets(kafka_bootstrap, group, topics.chunks, sorted(ends)) == ends,
                       60, "every offset committed")
    finally:
        embedder.close()
    assert_exactly_the_rows_of(rows_by_chunk(cassandra_store, chunks), chunks, reference_model)
    assert sorted((r.doc_id, r.chunk_index) for r in embedded if isinstance(r, ChunkResult)) == sorted(
        (c.doc_id, c.chunk_index) for c in chunks)
    assert {(r.model_id, r.runtime) for r in embedded if isinstance(r, ChunkResult)} == {
        (ENDPOINT_MODEL_ID, "openai/remote")}
    assert metric_value(metrics, "docstream_endpoint_throttled_total") == 4
    assert metric_value(metrics, "docstream_endpoint_retries_total", reason="429") == 4
    assert metric_value(metrics, "docstream_endpoint_retries_total", reason="500") == 3
    assert metric_value(metrics, "docstream_endpoint_retries_total", reason="connection") == 3
    assert metric_value(metrics, "docstream_endpoint_tokens_total") > 0
    assert read_topic(kafka_bootstrap, dlq_topic(topics.chunks), expected=0, timeout_s=3).messages == []


def test_a_poisoned_chunk_ends_in_the_dlq_alone_while_its_neighbours_succeed(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, infinity: Any, fault_proxy: Any,
) -> None:
    prefix = unique_name("endpoison")
    base = pipeline_settings(broker, prefix, tmp_path, inference={"max_batch_size": 24})
    settings = endpoint_settings(base, fault_proxy.url, infinity.api_key)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 2, 20)
    bad = chunks[13] = ChunkCreated(**{**chunks[13].to_record(), "text": f"this chunk holds {POISON} inside"})
    fault_proxy.poison(POISON)
    embedder = load_embedder(settings.inference)
    try:
        with running_pipeline(settings, embedder) as (pipeline, store):
            produce_chunks(broker, topics.chunks, chunks, serde)
            embedded = read_topic(broker, topics.results, expected=len(chunks), serde=serde, timeout_s=120).records
            [dead] = read_topic(broker, dlq_topic(topics.chunks), expected=1, timeout_s=60).messages
            wait_until(lambda: pipeline.ledger.pending_count() == 0, 30, "all records done")
            rows = {(r.doc_id, r.chunk_index): r for doc in {c.doc_id for c in chunks}
                    for r in store.iter_chunks(doc, ENDPOINT_MODEL_ID)}
    finally:
        embedder.close()
    records = {(r.doc_id, r.chunk_index): r for r in embedded if isinstance(r, ChunkResult)}
    failed = {k: r.error_code for k, r in records.items() if r.status == "failed"}
    assert failed == {(bad.doc_id, bad.chunk_index): "endpoint_rejected"}
    assert sorted(rows) == sorted((c.doc_id, c.chunk_index) for c in chunks)
    assert rows[(bad.doc_id, bad.chunk_index)].status == "failed"
    assert all(r.status == "ok" and len(r.embedding) == 384 for k, r in rows.items() if k != (bad.doc_id,
                                                                                               bad.chunk_index))
    assert dict(dead.headers())["error_code"] == b"endpoint_rejected"
    assert serde.deserialize(dead.value(), topics.chunks).chunk_id == bad.chunk_id
