"""The embed task through a real Infinity server, in the inference pipeline on real brokers and stores.

Through the fault proxy: a job under 429 bursts, 500s and connection resets writes exactly its chunk
rows with the local model's vectors; a poisoned input ends in the DLQ alone while its neighbours
succeed. The endpoint outage is a chaos scenario (tests/chaos/test_endpoint_outage.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docstream.avro.serde import AvroSerde
from docstream.embedding import load_embedder
from docstream.endpoint import EndpointEmbedder
from docstream.metrics import Metrics
from docstream.records import ChunkCreated, ChunkEmbedded
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream.topics import Topics, dlq_topic
from docstream_inference.pipeline import group_id
from tests.fixtures.kafka import read_topic, wait_until
from tests.integration.test_inference import (
    _chunks,
    _committed,
    _end_offsets,
    _pipeline,
    _produce_chunks,
    _settings,
)

pytestmark = pytest.mark.integration

ENDPOINT_MODEL_ID = "endpoint/all-MiniLM-L6-v2"
POISON = "POISON-PILL-9c1e"


def _endpoint(settings: Settings, url: str, key: str, **options: Any) -> Settings:
    endpoint = {"url": url, "api_key": key, "max_inputs_per_request": 8, "max_in_flight": 3, "base_delay_ms": 50,
                "max_delay_ms": 500, **options}
    return settings.with_overrides(inference={"endpoint": endpoint})


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"service": "inference", **labels})
    return float(value or 0.0)


def _rows(store: ResultStore, chunks: list[ChunkCreated]) -> dict[tuple[str, int], list[Any]]:
    rows: dict[tuple[str, int], list[Any]] = {}
    for doc in sorted({c.doc_id for c in chunks}):
        for row in store.iter_chunks(doc, ENDPOINT_MODEL_ID):
            rows.setdefault((row.doc_id, row.chunk_index), []).append(row)
    return rows


def _assert_exactly_the_rows_of(rows: dict[tuple[str, int], list[Any]], chunks: list[ChunkCreated],
                                reference_model: Any) -> None:
    assert sorted(rows) == sorted((c.doc_id, c.chunk_index) for c in chunks)  # computed, not read back
    assert all(len(found) == 1 for found in rows.values())
    got = np.array([rows[(c.doc_id, c.chunk_index)][0].embedding for c in chunks], dtype=np.float32)
    expected = reference_model.encode([c.text for c in chunks], normalize_embeddings=True, convert_to_numpy=True)
    assert float((got * expected).sum(axis=1).min()) >= 0.999
    assert {r[0].status for r in rows.values()} == {"ok"}


@pytest.fixture(scope="module")
def reference_model() -> Any:
    from sentence_transformers import SentenceTransformer

    from docstream.models import resolve_model_path

    return SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)


def test_a_job_through_the_endpoint_under_429s_500s_and_resets_writes_exactly_its_rows(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    unique_name: Callable[[str], str], tmp_path: Path, infinity: Any, fault_proxy: Any, reference_model: Any,
) -> None:
    prefix = unique_name("endfault")
    settings = _endpoint(_settings(kafka_bootstrap, prefix, tmp_path, inference={"max_batch_size": 24}),
                         fault_proxy.url, infinity.api_key)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = _chunks(prefix[-8:], 3, 20)
    embedder = load_embedder(settings.inference)
    assert isinstance(embedder, EndpointEmbedder)
    metrics = Metrics()
    fault_proxy.throttle(4, retry_after_s=1)
    fault_proxy.fail(3, status=500)
    fault_proxy.reset(3)
    try:
        with _pipeline(settings, embedder, cassandra_store, metrics=metrics):
            produced = _produce_chunks(kafka_bootstrap, topics.chunks, chunks, serde)
            embedded = read_topic(kafka_bootstrap, topics.embedded, expected=len(chunks), serde=serde,
                                  timeout_s=120).records
            ends = _end_offsets(produced)
            wait_until(lambda: _committed(kafka_bootstrap, group_id(settings), topics.chunks, sorted(ends)) == ends,
                       60, "every offset committed")
    finally:
        embedder.close()
    _assert_exactly_the_rows_of(_rows(cassandra_store, chunks), chunks, reference_model)
    assert sorted((r.doc_id, r.chunk_index) for r in embedded if isinstance(r, ChunkEmbedded)) == sorted(
        (c.doc_id, c.chunk_index) for c in chunks)
    assert {(r.model_id, r.runtime) for r in embedded if isinstance(r, ChunkEmbedded)} == {
        (ENDPOINT_MODEL_ID, "openai/remote")}
    assert _metric(metrics, "docstream_endpoint_throttled_total") == 4
    assert _metric(metrics, "docstream_endpoint_retries_total", reason="429") == 4
    assert _metric(metrics, "docstream_endpoint_retries_total", reason="500") == 3
    assert _metric(metrics, "docstream_endpoint_retries_total", reason="connection") == 3
    assert _metric(metrics, "docstream_endpoint_tokens_total") > 0
    assert read_topic(kafka_bootstrap, dlq_topic(topics.chunks), expected=0, timeout_s=3).messages == []


def test_a_poisoned_chunk_ends_in_the_dlq_alone_while_its_neighbours_succeed(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, infinity: Any, fault_proxy: Any,
) -> None:
    prefix = unique_name("endpoison")
    settings = _endpoint(_settings(broker, prefix, tmp_path, inference={"max_batch_size": 24}), fault_proxy.url,
                         infinity.api_key)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = _chunks(prefix[-8:], 2, 20)
    bad = chunks[13] = ChunkCreated(**{**chunks[13].to_record(), "text": f"this chunk holds {POISON} inside"})
    fault_proxy.poison(POISON)
    embedder = load_embedder(settings.inference)
    try:
        with _pipeline(settings, embedder) as (pipeline, store):
            _produce_chunks(broker, topics.chunks, chunks, serde)
            embedded = read_topic(broker, topics.embedded, expected=len(chunks), serde=serde, timeout_s=120).records
            [dead] = read_topic(broker, dlq_topic(topics.chunks), expected=1, timeout_s=60).messages
            wait_until(lambda: pipeline.ledger.pending_count() == 0, 30, "all records done")
            rows = {(r.doc_id, r.chunk_index): r for doc in {c.doc_id for c in chunks}
                    for r in store.iter_chunks(doc, ENDPOINT_MODEL_ID)}
    finally:
        embedder.close()
    records = {(r.doc_id, r.chunk_index): r for r in embedded if isinstance(r, ChunkEmbedded)}
    failed = {k: r.error_code for k, r in records.items() if r.status == "failed"}
    assert failed == {(bad.doc_id, bad.chunk_index): "endpoint_rejected"}
    assert sorted(rows) == sorted((c.doc_id, c.chunk_index) for c in chunks)
    assert rows[(bad.doc_id, bad.chunk_index)].status == "failed"
    assert all(r.status == "ok" and len(r.embedding) == 384 for k, r in rows.items() if k != (bad.doc_id,
                                                                                               bad.chunk_index))
    assert dict(dead.headers())["error_code"] == b"endpoint_rejected"
    assert serde.deserialize(dead.value(), topics.chunks).chunk_id == bad.chunk_id
