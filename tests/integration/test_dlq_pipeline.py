"""A dead letter goes back through the pipeline (real Kafka + real Cassandra): a chunk that made the model fail
(fault injection: faults.fail_chunk_text) is dead-lettered and its document ends partial; once the fault is
lifted, `docstream dlq replay` sends it back to the chunks topic and its document completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from docstream.models.files import DEFAULT_MODEL_ID as MODEL
from docstream.settings import CassandraSettings
from docstream.store.base import ResultStore
from docstream_cli.ops.dlq import iter_dlq
from tests.fixtures.documents import page_marker
from tests.fixtures.kafka import committed_offset, kafka_settings
from tests.fixtures.services import job_doc_ids, running_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WAIT_S = 300

FAULT = page_marker(2)  # opens page 2's first paragraph: the model fails on the chunk(s) holding it


def test_a_dead_letter_replayed_after_the_fault_is_lifted_completes_its_document(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    with running_pipeline(
        kafka_bootstrap, cassandra_settings, tmp_path, "dlq-e2e", DOCSTREAM_INFERENCE__RUNTIME="fp32"
    ) as stack:
        settings = kafka_settings(kafka_bootstrap, topic_prefix=stack.prefix)
        chunks_topic = f"{stack.prefix}.chunks"
        stack.start("chunker", "reducer")
        stack.start("inference", DOCSTREAM_FAULTS__FAIL_CHUNK_TEXT=FAULT, DOCSTREAM_RETRY__HANDLER_ATTEMPTS="1")
        job_id = stack.submit_pdfs(tmp_path, (3,))
        (doc,) = stack.until(lambda: job_doc_ids(cassandra_store, job_id), "the job's document", WAIT_S)

        def partial() -> bool:
            result = cassandra_store.get_document_result(doc, MODEL)
            return result is not None and result.status == "partial"

        stack.until(partial, "the document to end partial", WAIT_S)
        failed = [r for r in cassandra_store.iter_chunks(doc, MODEL) if r.status == "failed"]
        assert failed and all(FAULT in r.text and r.error_code == "model_error" for r in failed)
        letters = list(iter_dlq(settings.kafka, f"{chunks_topic}.dlq"))
        assert len(letters) == len(failed)
        assert {(r.original_topic, r.error_code, r.header("service")) for r in letters} == {
            (chunks_topic, "model_error", "inference")
        }

        stack.stop("inference", timeout_s=90)
        stack.start("inference")  # the fault lifted
        listed = stack.cli("dlq", "list", chunks_topic)
        assert listed.returncode == 0 and "model_error" in listed.stdout, listed.stdout + listed.stderr
        replayed = stack.cli("dlq", "replay", chunks_topic, "--error-code", "model_error", "--yes")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert f"sent {len(letters)} record(s) back to {chunks_topic}" in replayed.stdout

        stack.until(
            lambda: all(r.status == "ok" for r in cassandra_store.iter_chunks(doc, MODEL)),
            "the failed chunks to be embedded",
            WAIT_S,
        )

        def completed() -> bool:
            result = cassandra_store.get_document_result(doc, MODEL)
            return result is not None and result.status == "completed" and result.failed_chunks == 0

        stack.until(
            completed,
            "the document to complete after the replay (the reducer must accept a failed chunk that succeeds later)",
            120,
        )
        group = f"{stack.prefix}-dlq-replay"
        assert committed_offset(kafka_bootstrap, group, f"{chunks_topic}.dlq", letters[-1].partition) == (
            letters[-1].offset + 1
        )
        again = stack.cli("dlq", "replay", chunks_topic, "--all", "--yes")
        assert again.returncode == 0 and "nothing to send" in again.stdout
