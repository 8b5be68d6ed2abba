"""The generate task's map-reduce on the whole pipeline (real Kafka + real Cassandra, the test chat server).

`docstream chunker|inference --task generate|reducer|document-stage` run as subprocesses (tests/fixtures/
services.py). Three generated PDFs, chunked small: a summary per chunk, and one summary per document, written by
the document stage after the reducer folded the chunk summaries. The generate inference service is killed with
SIGKILL mid-job and started again: every document completes once, and no chunk whose result was written before
the kill is asked of the model again (the model's runs are logged by chunk_id: ``faults.embed_log``).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

from docstream.avro.serde import AvroSerde
from docstream.records import DocumentCompleted, JobStatus
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream.tasks.base import Prompt
from docstream.tasks.chat_protocol import generate_model_id
from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.kafka import read_topic
from tests.fixtures.llm import LlmServer
from tests.fixtures.services import job_doc_ids, running_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STOP = ["\n\n", "\nUser:"]
PAGES = {
    "short": [["Kafka keeps records in partitions, each an ordered log that consumers read in order."]],
    "council": [[
        "The city council met on Tuesday and voted to repair the old bridge over the river. The work starts in "
        "May, costs four million euros and closes the bridge to cars for six months; buses and bicycles may still "
        "cross.",
        "The council also agreed to plant two hundred trees along the river bank next spring. Volunteers from the "
        "schools will help, and the city pays for the trees and the water for their first summer.",
    ]],
    "plants": [[
        "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in the "
        "chloroplasts of plant cells, where chlorophyll absorbs red and blue light and reflects green light, which "
        "is why leaves look green.",
        "Plants also breathe: at night they take in oxygen and give off carbon dioxide, as animals do. Their roots "
        "take up water and minerals from the soil, and the stem carries them up to the leaves.",
    ]],
}
WAIT_S = 400
MODEL_ID = generate_model_id(LlmServer.MODEL, Prompt("summarize"), system_prompt="", temperature=0.0, seed=0,
                             max_tokens=128, stop=STOP)


def _chunk_ids(store: ResultStore, docs: list[str], model_id: str) -> set[str]:
    return {row.chunk_id for doc in docs for row in store.iter_chunks(doc, model_id) if row.status == "ok"}


def test_a_generate_job_summarizes_every_chunk_then_every_document_through_a_kill_9(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, llm: LlmServer,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, pages in PAGES.items():
        (folder / f"{name}.pdf").write_bytes(make_pdf_of_paragraphs(pages).data)
    ran = tmp_path / "ran.log"
    job_id = f"generate-{uuid.uuid4().hex[:12]}"
    serde = AvroSerde(Settings().kafka)
    with running_pipeline(
        kafka_bootstrap, cassandra_settings, tmp_path, "generate",
        DOCSTREAM_CHUNKER__MAX_TOKENS="48", DOCSTREAM_CHUNKER__OVERLAP_TOKENS="8",
        DOCSTREAM_TASKS__GENERATE__ENDPOINT__URL=llm.url, DOCSTREAM_TASKS__GENERATE__ENDPOINT__MODEL=llm.model,
        DOCSTREAM_TASKS__GENERATE__MAX_TOKENS="128", DOCSTREAM_TASKS__GENERATE__STOP=json.dumps(STOP),
        DOCSTREAM_INFERENCE__MAX_BATCH_SIZE="1",
    ) as stack:
        stack.add("inference-generate", "inference", DOCSTREAM_TASKS__TASK="generate",
                  DOCSTREAM_FAULTS__EMBED_LOG=str(ran))
        stack.start("chunker", "inference-generate", "reducer", "document-stage")
        stack.submit([folder], job_id, "--task", "generate", "--prompt", "summarize")
        docs = stack.until(lambda: (d := job_doc_ids(cassandra_store, job_id)) and len(d) == 3 and d,
                           "the job's documents", WAIT_S)

        # SIGKILL once a few chunk results are written; the model's runs are known by chunk_id
        stack.until(lambda: ran.exists() and len(ran.read_text().split()) >= 3, "3 chunks run", WAIT_S)
        stack.service("inference-generate").kill9()
        written_before = _chunk_ids(cassandra_store, docs, MODEL_ID)
        ran_before = ran.read_text().split()
        assert written_before and written_before <= set(ran_before)
        stack.service("inference-generate").start()

        def completed() -> list[DocumentCompleted] | None:
            records = read_topic(kafka_bootstrap, stack.topics.completed, serde=serde, timeout_s=30).records
            found = [r for r in records if isinstance(r, DocumentCompleted) and r.job_id == job_id]
            return found if len({r.doc_id for r in found}) == 3 else None

        def final_status() -> list[JobStatus] | None:
            records = read_topic(kafka_bootstrap, stack.topics.jobs, serde=serde, timeout_s=30).records
            return [r for r in records if isinstance(r, JobStatus) and r.job_id == job_id and r.final] or None

        stack.until(completed, "a DocumentCompleted per document", WAIT_S)
        final = stack.until(final_status, "the final JobStatus", 120, poll_s=0.5)
        stack.check_alive()
        done = completed() or []

    per_doc = Counter(r.doc_id for r in done)
    assert set(per_doc.values()) == {1}, per_doc  # once each: the stage's output, never the reducer's own
    assert {(r.task, r.status) for r in done} == {("generate", "completed")}, [(r.doc_id, r.error) for r in done]
    assert (final[-1].completed, final[-1].document_count) == (3, 3)
    assert {r.model_id for r in done} == {MODEL_ID}
    ran_after = ran.read_text().split()[len(ran_before):]
    assert not set(ran_after) & written_before, "a chunk written before the kill was asked again"
    for record in done:
        output = json.loads(record.output or "{}")
        summaries = output["chunk_summaries"]
        assert [s["index"] for s in summaries] == list(range(record.chunk_count))
        assert all(s["text"].strip() for s in summaries)
        assert isinstance(output["summary"], str) and output["summary"].strip()
        row = cassandra_store.get_document_result(record.doc_id, MODEL_ID)
        assert row is not None and row.output == record.output  # the result row is the published one
        if record.chunk_count == 1:
            assert output["summary"] == summaries[0]["text"] and "levels" not in output
        else:
            assert output["document_step"] == "done" and output["levels"][-1]["outputs"] == [output["summary"]]
            assert output["levels"][0]["calls"] >= 1 and record.stage_us.get("document", 0) > 0
    assert sum(r.chunk_count > 1 for r in done) >= 2

    # the chat tokens: each document's are the server's usage of its chunks' requests and its reduce calls, and
    # the job's their sum, in the jobs row that docstream status and the API read
    totals = {"prompt": 0, "completion": 0}
    for record in done:
        output = json.loads(record.output or "{}")
        chunk_outputs = [json.loads(row.output or "{}") for row in cassandra_store.iter_chunks(record.doc_id, MODEL_ID)]
        for kind in totals:
            spent = sum(o[f"{kind}_tokens"] for o in chunk_outputs) + \
                sum(level[f"{kind}_tokens"] for level in output.get("levels", []))
            assert output[f"{kind}_tokens"] == spent > 0
            totals[kind] += spent
    job = cassandra_store.get_job(job_id)
    assert job is not None and job.usage is not None and job.usage.chat_tokens == totals
    assert final[-1].chat_tokens == totals  # and the final JobStatus (the webhook posts it)
