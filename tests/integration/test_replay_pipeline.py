"""Replay on the whole pipeline (real Kafka + real Cassandra): process a job, replay the chunks topic under a
second model_id → both sets of rows, equal counts, no duplicates; a replay with the same model leaves the rows
as they were; `docstream search` finds a known chunk first among the pipeline's own rows.

`docstream chunker|inference|reducer` run as subprocesses (tests/fixtures/services.py) under this test's own topic
prefix, Faust app id and object store; the session's Cassandra keyspace is shared, the job and its doc_ids are this
test's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from docstream.avro.serde import AvroSerde
from docstream.records import DocumentCompleted
from docstream.settings import CassandraSettings, Settings
from docstream.store.base import ChunkRow, DocumentResultRow, ResultStore
from docstream_cli.ops.replay import GroupAdmin
from docstream_cli.ops.replay_plan import ResetTarget
from tests.fixtures.kafka import kafka_settings, read_topic
from tests.fixtures.services import job_doc_ids, running_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "all-MiniLM-L6-v2"
REPLAY_MODEL = "all-MiniLM-L6-v2@replay"  # the same bundled weights under another model_id
WAIT_S = 300


def results(store: ResultStore, docs: list[str], model_id: str) -> dict[str, DocumentResultRow | None]:
    return {doc: store.get_document_result(doc, model_id) for doc in docs}


def chunk_rows(store: ResultStore, docs: list[str], model_id: str) -> dict[str, list[ChunkRow]]:
    return {doc: list(store.iter_chunks(doc, model_id)) for doc in docs}


def all_completed(store: ResultStore, docs: list[str], model_id: str) -> bool:
    found = results(store, docs, model_id)
    return all(r is not None and r.status == "completed" for r in found.values())


def group_caught_up(settings: Settings, group: str, topic: str) -> bool:
    observed = GroupAdmin(settings.kafka).observe(topic, group, ResetTarget("latest"))
    return all(o.committed == o.high for o in observed)


def _assert_same_rows(before: dict[str, list[ChunkRow]], after: dict[str, list[ChunkRow]]) -> None:
    assert before.keys() == after.keys()
    for doc, rows in before.items():
        again = after[doc]
        assert [(r.chunk_index, r.chunk_id, r.text, r.page_start, r.page_end, r.status) for r in again] == [
            (r.chunk_index, r.chunk_id, r.text, r.page_start, r.page_end, r.status) for r in rows
        ]
        np.testing.assert_allclose([r.embedding for r in again], [r.embedding for r in rows], atol=1e-4)


def test_replay_under_a_second_model_writes_beside_and_the_same_model_changes_nothing(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    # fp32: a second pass over the same chunks gives the same vectors to ~1e-6 (bf16 would not)
    with running_pipeline(
        kafka_bootstrap, cassandra_settings, tmp_path, "replay-e2e", DOCSTREAM_INFERENCE__RUNTIME="fp32"
    ) as stack:
        settings = kafka_settings(kafka_bootstrap, topic_prefix=stack.prefix)
        chunks_topic, group = f"{stack.prefix}.chunks", f"{stack.prefix}-inference"
        stack.start("chunker", "inference", "reducer")
        job_id = stack.submit_pdfs(tmp_path, (3, 2))
        docs = stack.until(
            lambda: (d := job_doc_ids(cassandra_store, job_id)) and len(d) == 2 and d, "job documents", WAIT_S
        )
        stack.until(lambda: all_completed(cassandra_store, docs, MODEL), "the job under the first model", WAIT_S)
        first = chunk_rows(cassandra_store, docs, MODEL)
        assert all(rows for rows in first.values())

        # replay the chunks topic under the second model_id: stop inference, reset its group, restart
        stack.stop("inference", timeout_s=90)
        replay = stack.cli(
            "replay", "--service", "inference", "--to-offset", "earliest", "--model", REPLAY_MODEL, "--yes"
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert f"DOCSTREAM_INFERENCE__MODEL_ID={REPLAY_MODEL}" in replay.stdout
        stack.start("inference", DOCSTREAM_INFERENCE__MODEL_ID=REPLAY_MODEL)
        stack.until(
            lambda: all_completed(cassandra_store, docs, REPLAY_MODEL), "the job under the second model", WAIT_S
        )
        stack.until(lambda: group_caught_up(settings, group, chunks_topic), "the replay to reach the end", WAIT_S)

        second = chunk_rows(cassandra_store, docs, REPLAY_MODEL)
        for doc in docs:
            assert cassandra_store.count_chunks(doc, REPLAY_MODEL) == cassandra_store.count_chunks(doc, MODEL)
            indexes = [r.chunk_index for r in second[doc]]
            assert indexes == list(range(len(first[doc])))  # every chunk once: no duplicates, none missing
            assert {r.model_id for r in second[doc]} == {REPLAY_MODEL}
            result = cassandra_store.get_document_result(doc, REPLAY_MODEL)
            assert result is not None and result.chunk_count == len(first[doc]) and result.failed_chunks == 0
        _assert_same_rows(first, second)  # same weights: the same vectors under the other id
        _assert_same_rows(first, chunk_rows(cassandra_store, docs, MODEL))  # the first rows untouched

        serde = AvroSerde(settings.kafka)
        completed_topic = f"{stack.prefix}.documents.completed"
        completed = read_topic(kafka_bootstrap, completed_topic, expected=4, serde=serde).records
        assert all(isinstance(c, DocumentCompleted) for c in completed)
        assert {(c.doc_id, c.model_id) for c in completed} == {(d, m) for d in docs for m in (MODEL, REPLAY_MODEL)}

        # the same model again: the rows stay as they are
        before_results = results(cassandra_store, docs, REPLAY_MODEL)
        stack.stop("inference", timeout_s=90)
        again = stack.cli("replay", "--service", "inference", "--to-offset", "earliest", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        assert not group_caught_up(settings, group, chunks_topic)
        stack.start("inference", DOCSTREAM_INFERENCE__MODEL_ID=REPLAY_MODEL)
        stack.until(
            lambda: group_caught_up(settings, group, chunks_topic), "the second replay to reach the end", WAIT_S
        )
        _assert_same_rows(second, chunk_rows(cassandra_store, docs, REPLAY_MODEL))
        after_results = results(cassandra_store, docs, REPLAY_MODEL)
        assert {d: (r.status, r.chunk_count, r.failed_chunks) for d, r in after_results.items() if r} == {
            d: (r.status, r.chunk_count, r.failed_chunks) for d, r in before_results.items() if r
        }

        # search among the pipeline's rows: a known chunk's text finds that chunk first, under either model
        known = first[docs[0]][1]
        for model in (MODEL, REPLAY_MODEL):
            found = stack.cli("search", known.text, "--job", job_id, "--model", model, "-k", "3", "--json")
            assert found.returncode == 0, found.stderr[-2000:]
            hits = json.loads(found.stdout)
            assert (hits[0]["doc_id"], hits[0]["chunk_index"], hits[0]["model_id"]) == (docs[0], 1, model)
            document = cassandra_store.get_document(docs[0])
            assert document is not None and hits[0]["filename"] == document.filename
            assert hits[0]["score"] > 0.99
