"""An endpoint outage mid-job: the model stage waits, consumption pauses, nothing fails; then the job completes.

A real Infinity server behind the fault proxy, which stops listening for the outage and resets the
connections it holds. Short in `make test` (an 8 s outage); ``DOCSTREAM_CHAOS_FULL=1`` (`make chaos`):
the issue's 30 s. Asserted: the partitions paused and the backend marked down while it lasts, the
pipeline never failed, then every chunk row exactly once (computed, not read back) with the local
model's vectors, every offset committed, nothing in the DLQ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from docstream.avro.serde import AvroSerde
from docstream.metrics import Metrics
from docstream.models.embedding import load_embedder
from docstream.models.endpoint import EndpointEmbedder
from docstream.records import ChunkResult
from docstream.settings import FairnessSettings
from docstream.store import ResultStore
from docstream.topics import Topics, dlq_topic
from docstream_inference.pipeline import group_id
from tests.chaos.harness import FULL, ChaosReport
from tests.fixtures.inference import (
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

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

OUTAGE_S = 30 if FULL else 8


def test_an_endpoint_outage_pauses_consumption_then_completes_with_nothing_lost(
    kafka_bootstrap: str, cassandra_store: ResultStore, unique_name: Callable[[str], str], tmp_path: Path,
    infinity: Any, fault_proxy: Any, reference_model: Any, chaos_report: ChaosReport,
) -> None:
    prefix = unique_name("endout")
    # small queues, so that a stalled model fills them and the consumer pauses its partitions: the
    # chunks produced during the outage outnumber what the stages hold before Q0 stays full (Q0 at
    # its least read-ahead and Q1 one batch each, the batch in the model, the length pool's 8 batches:
    # 88 records)
    settings = endpoint_settings(pipeline_settings(kafka_bootstrap, prefix, tmp_path,
                                                   inference={"max_batch_size": 8, "queue_batches": 1}),
                                 fault_proxy.url, infinity.api_key, max_attempts=2)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 4, 40)
    embedder = load_embedder(settings.inference)
    assert isinstance(embedder, EndpointEmbedder)
    metrics = Metrics()
    try:
        with running_pipeline(settings, embedder, cassandra_store, metrics=metrics,
                              fairness=FairnessSettings.model_validate({"read_ahead": 1})) as (pipeline, _):
            produced = produce_chunks(kafka_bootstrap, topics.chunks, chunks[:8], serde)
            read_topic(kafka_bootstrap, topics.results, expected=8, timeout_s=60)
            fault_proxy.outage(OUTAGE_S)
            outage_started = time.monotonic()
            produced += produce_chunks(kafka_bootstrap, topics.chunks, chunks[8:], serde)
            wait_until(lambda: metric_value(metrics, "docstream_model_backend_up") == 0 and
                       metric_value(metrics, "docstream_consumer_paused") == 1, OUTAGE_S - 2, "the model waiting, "
                       "consumption paused")
            assert pipeline.ready  # waiting, not failed
            ends = end_offsets(produced)
            group = group_id(settings.kafka, settings.inference)
            wait_until(lambda: committed_offsets(kafka_bootstrap, group, topics.chunks, sorted(ends)) == ends,
                       OUTAGE_S + 120, "every offset committed after the outage")
            completed_s = time.monotonic() - outage_started
            assert metric_value(metrics, "docstream_model_backend_up") == 1
            embedded = read_topic(kafka_bootstrap, topics.results, expected=len(chunks), serde=serde,
                                  timeout_s=30).records
    finally:
        embedder.close()
    assert_exactly_the_rows_of(rows_by_chunk(cassandra_store, chunks), chunks, reference_model)
    assert len({(r.doc_id, r.chunk_index) for r in embedded if isinstance(r, ChunkResult)}) == len(chunks)
    assert read_topic(kafka_bootstrap, dlq_topic(topics.chunks), expected=0, timeout_s=3).messages == []
    assert metric_value(metrics, "docstream_endpoint_requests_total", outcome="connection") > 0
    chaos_report.record(
        "endpoint outage", documents=4, chunk_rows=len(chunks), expected_chunk_rows=len(chunks), outage_s=OUTAGE_S,
        completed_after_outage_start_s=round(completed_s, 1), recovery_s=round(completed_s - OUTAGE_S, 1),
        connection_errors=metric_value(metrics, "docstream_endpoint_requests_total", outcome="connection"),
        consumer_pauses=metric_value(metrics, "docstream_consumer_pauses_total"), dlq=0,
    )
