"""The inference service on real brokers and stores (no mocks of Kafka, Cassandra or the model).

* two `docstream inference` processes share the partitions: one row per chunk, embeddings = model.encode;
* kill -9, and a crash between a store write and its commit (fault injection): nothing lost, rows
  identical, and no committed offset was ever ahead of its write;
* the latency cap, read from the batcher's own record of each batch;
* a chunk that breaks the model is isolated; undecodable and unavailable-model chunks go to the DLQ;
* stop (SIGTERM) drains what is in flight and commits it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docstream.avro.serde import AvroSerde
from docstream.kafka.admin import ensure_topics
from docstream.metrics import Metrics
from docstream.models.embedding import Embedder, load_embedder
from docstream.models.files import resolve_model_path
from docstream.records import ChunkCreated, ChunkResult
from docstream.settings import CassandraSettings, InferenceSettings
from docstream.store import ResultStore
from docstream.store.base import ChunkRow
from docstream.topics import Topics, dlq_topic
from docstream_inference.faults import CRASH_EXIT_CODE
from docstream_inference.pipeline import InferencePipeline, group_id
from tests.fixtures.inference import (
    Produced,
    committed_offsets,
    end_offsets,
    make_chunks,
    metric_value,
    partitions_of,
    pipeline_settings,
    produce_chunks,
    produce_values,
    running_pipeline,
)
from tests.fixtures.kafka import FirstConsumerOutsideGroup, kafka_settings, read_topic, wait_until
from tests.fixtures.services import Pipeline, service_env

pytestmark = pytest.mark.integration

MODEL_ID = "all-MiniLM-L6-v2"
DIMENSION = 384

# --- data -------------------------------------------------------------------------------------


def _rows(store: ResultStore, produced: list[Produced]) -> dict[tuple[str, int], list[ChunkRow]]:
    rows: dict[tuple[str, int], list[ChunkRow]] = {}
    for doc in sorted({p.chunk.doc_id for p in produced}):
        for row in store.iter_chunks(doc, MODEL_ID):
            rows.setdefault((row.doc_id, row.chunk_index), []).append(row)
    return rows


def _assert_nothing_committed_ahead(committed: dict[int, int], produced: list[Produced], written: set[Any]) -> None:
    """Every record below its partition's committed offset has its row (read AFTER the offsets)."""
    ahead = [(p.partition, p.offset) for p in produced if p.offset < committed[p.partition] and p.key not in written]
    assert ahead == [], f"committed past records without a row: {ahead[:10]}"


@pytest.fixture(scope="module")
def reference_model() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)


def _assert_rows_match_the_model(rows: dict[tuple[str, int], list[ChunkRow]], produced: list[Produced],
                                 reference_model: Any) -> None:
    assert sorted(rows) == sorted(p.key for p in produced)
    assert all(len(found) == 1 for found in rows.values()), "one row per (doc_id, model_id, chunk_index)"
    texts = [p.chunk.text for p in produced]
    expected = reference_model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    got = np.array([rows[p.key][0].embedding for p in produced], dtype=np.float32)
    assert got.shape == (len(produced), DIMENSION)
    assert float(np.abs(got - expected).max()) <= 1e-4
    for p in produced:
        row = rows[p.key][0]
        c = p.chunk
        assert (row.text, row.chunk_id, row.job_id, row.status, row.error_code) == (c.text, c.chunk_id, c.job_id,
                                                                                    "ok", None)
        assert (row.page_start, row.page_end, row.char_start, row.char_end, row.token_count, row.heading) == (
            c.page_start, c.page_end, c.char_start, c.char_end, c.token_count, c.heading)


# --- subprocesses -----------------------------------------------------------------------------


@contextmanager
def _inference(env: dict[str, str], folder: Path, *names: str) -> Iterator[Pipeline]:
    """`docstream inference` processes under ``names``, started; at the end every one still running is stopped
    (SIGTERM, then SIGKILL to its process group)."""
    pipeline = Pipeline(env, folder)
    try:
        for name in names:
            pipeline.add(name, "inference").start()
        yield pipeline
    finally:
        pipeline.stop()


def _service_env(bootstrap: str, prefix: str, cassandra: CassandraSettings, root: Path) -> dict[str, str]:
    return service_env(
        bootstrap, prefix, cassandra, root, partitions=4,
        # fp32 so that results compare with model.encode to 1e-4 on every CPU (bf16 is checked in unit tests)
        DOCSTREAM_INFERENCE__RUNTIME="fp32",
        # the inference producer on its default codec (lz4); service_env's gzip is for the other services
        DOCSTREAM_KAFKA__CLIENT_OPTIONS="{}",
    )


def _all_committed(bootstrap: str, group: str, topic: str, produced: list[Produced]) -> Callable[[], bool]:
    ends = end_offsets(produced)
    return lambda: committed_offsets(bootstrap, group, topic, sorted(ends)) == ends


# --- tests: processes on real Kafka + Cassandra -----------------------------------------------


def test_two_processes_share_partitions_and_write_each_chunk_once(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], create_topics: Callable[..., list[str]], tmp_path: Path,
    reference_model: Any,
) -> None:
    prefix = unique_name("inf2p")
    topics = Topics(prefix)
    create_topics(kafka_bootstrap, topics.chunks, partitions=4)
    serde = AvroSerde(kafka_settings(kafka_bootstrap).kafka)
    produced = produce_chunks(kafka_bootstrap, topics.chunks, make_chunks(prefix[-8:], 20, 100), serde)
    assert len(produced) == 2000
    assert len(partitions_of(produced)) == 4
    group = f"{prefix}-inference"

    env = _service_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path)
    with _inference(env, tmp_path, "a", "b") as pipeline:
        pipeline.until(_all_committed(kafka_bootstrap, group, topics.chunks, produced), "every chunk committed", 240,
                       poll_s=1.0)
        services = list(pipeline.services.values())
        assert [s.stop() for s in services] == [0, 0]  # SIGTERM: drain, commit, exit 0
        for service in services:
            assert any(e["partitions"] for e in service.events("partitions_assigned")), "both processes got partitions"
            [stopped] = service.events("inference_stopped")
            assert stopped["batches"] > 0, f"{service.log.name} processed nothing"
            assert stopped["in_flight"] == 0

    _assert_rows_match_the_model(_rows(cassandra_store, produced), produced, reference_model)
    # the services have stopped: the topic's end is all they produced
    embedded = read_topic(kafka_bootstrap, topics.results, serde=serde, timeout_s=90).received
    records = [e.record for e in embedded if isinstance(e.record, ChunkResult)]
    assert len(records) == len(embedded)
    # every chunk's ChunkResult, keyed by doc_id (at least once: a rebalance may repeat a few)
    assert {(r.doc_id, r.chunk_index) for r in records} == {p.key for p in produced}
    assert all(r.status == "ok" and len(r.embedding) == DIMENSION and r.model_id == MODEL_ID for r in records)
    assert all((e.message.key() or b"").decode() == r.doc_id for e, r in zip(embedded, records, strict=True))


def test_kill_9_and_crash_between_write_and_commit_lose_nothing(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    unique_name: Callable[[str], str], create_topics: Callable[..., list[str]], tmp_path: Path,
    reference_model: Any, embedder: Embedder,
) -> None:
    prefix = unique_name("infcrash")
    topics = Topics(prefix)
    create_topics(kafka_bootstrap, topics.chunks, partitions=2)
    serde = AvroSerde(kafka_settings(kafka_bootstrap).kafka)
    produced = produce_chunks(kafka_bootstrap, topics.chunks, make_chunks(prefix[-8:], 6, 100), serde)
    partitions = partitions_of(produced)
    group = f"{prefix}-inference"
    env = _service_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path)

    def check_invariant() -> tuple[dict[int, int], dict[tuple[str, int], list[ChunkRow]]]:
        committed = committed_offsets(kafka_bootstrap, group, topics.chunks, partitions)  # offsets first, rows second
        rows = _rows(cassandra_store, produced)
        _assert_nothing_committed_ahead(committed, produced, set(rows))
        return committed, rows

    # 1. crash right after a store write, before its produce and commit (fault injection)
    crash_env = {**env, "DOCSTREAM_FAULTS__CRASH_AFTER_WRITE": "true", "DOCSTREAM_FAULTS__CRASH_AFTER_BATCHES": "4"}
    with _inference(crash_env, tmp_path, "crash") as pipeline:
        crashing = pipeline.service("crash")
        wait_until(lambda: not crashing.alive(), 120, "the crash", poll_s=0.25)
        assert crashing.returncode() == CRASH_EXIT_CODE, crashing.tail()
    committed, rows_before = check_invariant()
    written_not_committed = [p for p in produced if p.key in rows_before and p.offset >= committed[p.partition]]
    assert written_not_committed, "the crash came after a write that was never committed"
    assert len(rows_before) < len(produced)

    # 2. kill -9 mid-run (slowed so that "mid-run" is certain), checking the invariant while it runs
    slow_env = {**env, "DOCSTREAM_FAULTS__INFERENCE_DELAY_MS": "150"}
    with _inference(slow_env, tmp_path, "killed") as pipeline:
        def progressed() -> bool:
            done, _ = check_invariant()
            return sum(done.values()) >= sum(committed.values()) + 100

        pipeline.until(progressed, "progress before kill -9", 120, poll_s=0.3)
        killed = pipeline.service("killed")
        killed.kill9()
        assert killed.returncode() == -signal.SIGKILL
    committed_after_kill, _ = check_invariant()
    assert sum(committed_after_kill.values()) < len(produced), "killed mid-run"

    # 3. start again (here, in this process: a third interpreter would cost ~15 s of imports), to the end
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix).with_overrides(
        cassandra=cassandra_settings.model_dump(mode="json"), inference={"runtime": "fp32"})
    with running_pipeline(settings, embedder, store=cassandra_store):
        wait_until(_all_committed(kafka_bootstrap, group, topics.chunks, produced), 180,
                   "every chunk committed after restart", poll_s=0.5)
    committed, rows = check_invariant()
    _assert_rows_match_the_model(rows, produced, reference_model)
    for key, [before] in rows_before.items():
        [after] = rows[key]
        assert (after.text, after.chunk_id, after.status, after.page_start, after.char_end) == (
            before.text, before.chunk_id, before.status, before.page_start, before.char_end)
        assert np.abs(np.array(after.embedding) - np.array(before.embedding)).max() <= 1e-5


# --- tests: the pipeline in this process (real broker, SQLite store) ---------------------------


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder(InferenceSettings(runtime="fp32"))


def test_chunks_that_carry_their_token_ids_reach_the_model_untokenized_with_the_same_vectors(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder, reference_model: Any,
) -> None:
    # what the chunker sends (chunker.token_ids): the model's inputs are built from the ids, and a record of a
    # producer without them (or of another tokenizer) is tokenized as before; both give the model's own vectors
    prefix = unique_name("inids")
    settings = pipeline_settings(broker, prefix, tmp_path, inference={"max_batch_size": 16})
    topics, serde, metrics = Topics(prefix), AvroSerde(settings.kafka), Metrics()
    carried = make_chunks(prefix[-8:], 3, 10)
    plain = [replace(c, doc_id=f"{c.doc_id}-plain", chunk_id=f"{c.chunk_id}-plain", token_ids=b"", tokenizer=None)
             for c in carried[:10]]
    other = [replace(c, doc_id=f"{c.doc_id}-other", chunk_id=f"{c.chunk_id}-other", tokenizer="another")
             for c in carried[:10]]
    with running_pipeline(settings, embedder, metrics=metrics) as (_, store):
        produced = produce_chunks(broker, topics.chunks, carried + plain + other, serde)
        read_topic(broker, topics.results, expected=len(produced), serde=serde, timeout_s=120)
        rows = _rows(store, produced)
    _assert_rows_match_the_model(rows, produced, reference_model)
    assert metric_value(metrics, "docstream_prepared_chunks_total", by="token_ids") == len(carried)
    assert metric_value(metrics, "docstream_prepared_chunks_total", by="text") == len(plain) + len(other)


def test_a_lone_chunk_leaves_at_once_when_the_model_is_idle(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("inidle")
    settings = pipeline_settings(broker, prefix, tmp_path, inference={"max_latency_ms": 5000, "max_batch_size": 16})
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    with running_pipeline(settings, embedder) as (pipeline, _):
        assert pipeline.batch_history == []  # idle topic
        [produced] = produce_chunks(broker, topics.chunks, make_chunks(prefix[-8:], 1, 1), serde)
        [record] = read_topic(broker, topics.results, expected=1, serde=serde, timeout_s=60).records
        [stats] = pipeline.batch_history
    assert isinstance(record, ChunkResult)
    assert (record.doc_id, record.status, len(record.embedding)) == (produced.chunk.doc_id, "ok", DIMENSION)
    assert (stats.size, stats.reason) == (1, "idle")
    assert stats.oldest_wait_s < 5.0  # closed long before its latency cap


def test_while_the_model_is_busy_a_chunk_leaves_the_batcher_after_max_latency(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("inflat")
    settings = pipeline_settings(broker, prefix, tmp_path, inference={"max_latency_ms": 300, "max_batch_size": 16},
                                 faults={"inference_delay_ms": 2500})
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 1, 2)
    with running_pipeline(settings, embedder) as (pipeline, _):
        produce_chunks(broker, topics.chunks, chunks[:1], serde)
        wait_until(lambda: len(pipeline.batch_history) == 1, 60, "the first chunk to reach the model")
        produce_chunks(broker, topics.chunks, chunks[1:], serde)  # the model is busy with the first for 2.5 s
        read_topic(broker, topics.results, expected=2, timeout_s=60)
        first, second = pipeline.batch_history
    assert (first.size, first.reason) == (1, "idle")
    assert (second.size, second.reason) == (1, "latency")
    assert 0.300 <= second.oldest_wait_s < 0.300 + 0.5  # the batcher's own recorded wait


def test_bad_chunks_are_isolated_and_dead_lettered_while_neighbours_succeed(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("inffault")
    settings = pipeline_settings(broker, prefix, tmp_path, faults={"fail_chunk_text": "BREAKS-THE-MODEL"})
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 2, 20)
    bad = chunks[7] = ChunkCreated(**{**chunks[7].to_record(), "text": "this BREAKS-THE-MODEL chunk"})
    other = chunks[25] = ChunkCreated(**{**chunks[25].to_record(), "model_id": "some-other-model"})
    with running_pipeline(settings, embedder) as (pipeline, store):
        produce_chunks(broker, topics.chunks, chunks, serde)
        produce_values(broker, topics.chunks, [(chunks[0].doc_id, b"\x00not avro at all")])
        embedded = read_topic(broker, topics.results, expected=len(chunks), serde=serde, timeout_s=90).records
        dead = read_topic(broker, dlq_topic(topics.chunks), expected=3, timeout_s=60).messages
        wait_until(lambda: pipeline.ledger.pending_count() == 0, 30, "all records done")
        rows = {(r.doc_id, r.chunk_index, r.model_id): r for c in chunks
                for r in store.iter_chunks(c.doc_id, c.model_id or MODEL_ID)}
    records = {(r.doc_id, r.chunk_index): r for r in embedded if isinstance(r, ChunkResult)}
    assert len(records) == len(chunks)
    failed = {k: r.error_code for k, r in records.items() if r.status == "failed"}
    assert failed == {
        (bad.doc_id, bad.chunk_index): "model_error",
        (other.doc_id, other.chunk_index): "model_unavailable",
    }
    assert records[(other.doc_id, other.chunk_index)].model_id == "some-other-model"
    assert all(len(r.embedding) == DIMENSION for r in records.values() if r.status == "ok")
    assert rows[(bad.doc_id, bad.chunk_index, MODEL_ID)].status == "failed"
    assert rows[(other.doc_id, other.chunk_index, "some-other-model")].error_code == "model_unavailable"
    codes = sorted(dict(m.headers())["error_code"].decode() for m in dead)
    assert codes[:2] == ["model_error", "model_unavailable"]
    assert codes[2].startswith("schema")
    assert {m.value() for m in dead} >= {b"\x00not avro at all"}
    committed = committed_offsets(broker, group_id(settings.kafka, settings.inference), topics.chunks, [0, 1])
    assert sum(committed.values()) == len(chunks) + 1  # everything, poison included, is done and committed


def test_chunks_of_jobs_that_did_not_ask_for_the_task_are_committed_past_without_work(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    """A task's service skips the chunks of jobs that asked only for other tasks: nothing written or produced for
    them, and its group commits past them (it is not left behind, lagging)."""
    prefix = unique_name("infskip")
    settings = pipeline_settings(broker, prefix, tmp_path)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 2, 6)
    for i in range(0, len(chunks), 2):  # every other chunk's job asks for entities only
        chunks[i] = ChunkCreated(**{**chunks[i].to_record(), "tasks": [{"name": "entities", "labels": []}]})
    wanted = [c for c in chunks if not c.tasks]
    with running_pipeline(settings, embedder) as (pipeline, store):
        produce_chunks(broker, topics.chunks, chunks, serde)
        embedded = read_topic(broker, topics.results, expected=len(wanted), serde=serde, timeout_s=90).records
        group = group_id(settings.kafka, settings.inference)
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == len(chunks),
                   60, "a commit past every chunk")
        rows = [r for doc_id in sorted({c.doc_id for c in chunks}) for r in store.iter_chunks(doc_id, MODEL_ID)]
    assert sorted((r.doc_id, r.chunk_index) for r in embedded) == sorted((c.doc_id, c.chunk_index) for c in wanted)
    assert sorted((r.doc_id, r.chunk_index) for r in rows) == sorted((c.doc_id, c.chunk_index) for c in wanted)
    assert sum(stats.size for stats in pipeline.batch_history) == len(wanted)


def test_stop_drains_in_flight_batches_and_commits_them(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("infdrain")
    settings = pipeline_settings(kafka_bootstrap, prefix, tmp_path, faults={"inference_delay_ms": 200},
                                 inference={"max_batch_size": 8, "queue_batches": 2})
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    with running_pipeline(settings, embedder) as (pipeline, store):
        produced = produce_chunks(kafka_bootstrap, topics.chunks, make_chunks(prefix[-8:], 4, 100), serde)
        wait_until(lambda: len(pipeline.batch_history) >= 3, 60, "a few batches")
        in_flight_at_stop = pipeline.ledger.pending_count()
        pipeline.stop()
        wait_until(lambda: not pipeline.ready, 90, "the drain to finish")
        written = set(_rows(store, produced))
    group = group_id(settings.kafka, settings.inference)
    committed = committed_offsets(kafka_bootstrap, group, topics.chunks, partitions_of(produced))
    assert in_flight_at_stop > 0
    assert 0 < sum(committed.values()) < len(produced), "stopped mid-run"
    # drained: everything consumed was finished and committed, nothing beyond was written
    assert written == {p.key for p in produced if p.offset < committed[p.partition]}


class _FirstConsumerOutsideGroup(FirstConsumerOutsideGroup, InferencePipeline):
    pass


def test_a_consumer_outside_its_group_too_long_is_replaced_and_every_chunk_is_embedded_once(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("infrejoin")
    settings = pipeline_settings(broker, prefix, tmp_path)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 4, 5)
    with running_pipeline(settings, embedder, cls=_FirstConsumerOutsideGroup,
                          rejoin_timeout_s=3.0) as (pipeline, store):
        group = group_id(settings.kafka, settings.inference)
        first = produce_chunks(broker, topics.chunks, chunks[:10], serde)
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == 10, 60,
                   "the first chunks committed", poll_s=0.25)
        wait_until(lambda: pipeline.consumers_replaced == 1, 30, "the consumer outside its group to be replaced")
        second = produce_chunks(broker, topics.chunks, chunks[10:], serde)
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == 20, 90,
                   "the new consumer to commit the rest", poll_s=0.25)
        rows = _rows(store, first + second)
    assert pipeline.consumers_replaced == 1, "a consumer in its group is kept"
    assert len(rows) == 20 and all(len(found) == 1 for found in rows.values())
    embedded = read_topic(broker, topics.results, expected=20, linger_s=10).messages  # and 10 s more: a 21st?
    assert len(embedded) == 20, "each chunk embedded once: nothing committed was taken again"


def test_static_assignment_takes_every_partition_without_a_group_and_commits_only_what_is_written(
    broker: str, unique_name: Callable[[str], str], tmp_path: Path, embedder: Embedder
) -> None:
    prefix = unique_name("infstatic")
    settings = pipeline_settings(broker, prefix, tmp_path)
    topics = Topics(prefix)
    serde = AvroSerde(settings.kafka)
    chunks = make_chunks(prefix[-8:], 24, 1)  # one chunk per document: the keys spread over both partitions
    group = group_id(settings.kafka, settings.inference)
    fast = lambda: time.monotonic() * 100  # noqa: E731 - the membership watch's 1 s rejoin timeout passes in 10 ms
    ensure_topics(settings.kafka, topics)  # 2 partitions, before anything is produced
    first = produce_chunks(broker, topics.chunks, chunks[:12], serde)
    assert partitions_of(first) == [0, 1]
    with running_pipeline(settings, embedder, static_assignment=True, rejoin_timeout_s=1.0,
                          clock=fast) as (pipeline, store):
        # both lanes' topics (docs/operations.md "Sharing the service")
        assert sorted(pipeline.assignment) == sorted((topic, p) for topic in topics.lanes() for p in (0, 1))
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == 12, 60,
                   "the first chunks committed", poll_s=0.25)
        committed = committed_offsets(broker, group, topics.chunks, [0, 1])
        _assert_nothing_committed_ahead(committed, first, set(_rows(store, first)))
        second = produce_chunks(broker, topics.chunks, chunks[12:18], serde)
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == 18, 60,
                   "the next chunks committed", poll_s=0.25)
        assert pipeline.consumers_replaced == 0, "an assigned consumer has no member id and is not replaced for it"
    # a new process resumes from the group's committed offsets: nothing done is taken again
    third = produce_chunks(broker, topics.chunks, chunks[18:], serde)
    with running_pipeline(settings, embedder, static_assignment=True) as (pipeline, store):
        wait_until(lambda: sum(committed_offsets(broker, group, topics.chunks, [0, 1]).values()) == 24, 60,
                   "the rest committed after the restart", poll_s=0.25)
        rows = _rows(store, first + second + third)
    assert len(rows) == 24 and all(len(found) == 1 for found in rows.values())
    embedded = read_topic(broker, topics.results, expected=24, linger_s=10).messages  # and 10 s more: a 25th?
    assert len(embedded) == 24, "each chunk embedded once"
