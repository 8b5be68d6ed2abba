"""The generate task's document stage as a ConsumeLoop handler: a real SQLite store, a scripted chat client (no
sockets), records as the reducer writes them on the mapped topic."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from docstream.avro import AvroSerde
from docstream.errors import PoisonRecord
from docstream.kafka.loop import Envelope
from docstream.records import DocumentCompleted, JobOptions
from docstream.settings import KafkaSettings
from docstream.store.base import DocumentRow, JobRow
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import FoldInput, Prompt, TaskRequest
from docstream.tasks.fold_generate import GenerateFold
from docstream.tasks.selection import tasks_option
from docstream.topics import Topics
from docstream_inference.document_stage import DocumentStage
from tests.fixtures.chat import ScriptedClient, asked, chat_answer, scripted_task

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
TOPICS = Topics("t")
SUMMARIZE = TaskRequest("generate", prompt=Prompt("summarize", "Résume en une phrase."))


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    options = JobOptions(tasks=tasks_option([SUMMARIZE])).to_mapping()
    store.upsert_job(JobRow("job-1", "acme", AT, "running", 1, options=options))
    store.upsert_document(DocumentRow("doc-1", "job-1", "file:///a.pdf", "ab" * 32, "chunked", AT,
                                      filename="a.pdf", page_count=4))
    return store


def _pending(model_id: str, texts: list[str]) -> Envelope:
    fold = GenerateFold()
    state = fold.empty()
    for i, text in enumerate(texts):
        state = fold.add(state, FoldInput(i, 10, 1, 1, output={"kind": "summarize", "text": text,
                                                                 "prompt_tokens": 30, "completion_tokens": 4}))
    output = fold.finish_with(state, list(enumerate(texts)), chunk_count=len(texts)).output
    record = DocumentCompleted(job_id="job-1", doc_id="doc-1", status="completed", completed_at=AT, model_id=model_id,
                               chunk_count=len(texts), task="generate", tasks=["generate"], token_count=40,
                               model_us={"remote": 1000}, output=json.dumps(output))
    return Envelope(topic=TOPICS.mapped, partition=0, offset=0, key="doc-1", value=record)


def _stage(tmp_path: Path, answer: Any) -> tuple[DocumentStage, str, ScriptedClient, SqliteStore]:
    """The stage, the model_id of SUMMARIZE under it, its client and its store."""
    task, client = scripted_task(answer, context_tokens=512, max_tokens=64)
    store = _store(tmp_path)
    return DocumentStage(task, store, TOPICS), task.model_id_for(SUMMARIZE), client, store


def test_a_document_of_two_chunk_summaries_gets_its_summary_written_and_published(tmp_path: Path) -> None:
    stage, model_id, client, store = _stage(tmp_path, lambda body: chat_answer("Das Ganze.", prompt=50, completion=3))
    [out] = stage(_pending(model_id, ["Первая часть.", "الجزء الثاني."]))
    assert out.topic == TOPICS.completed and out.key == "doc-1"
    finished = out.value
    assert isinstance(finished, DocumentCompleted) and finished.status == "completed"
    output = json.loads(finished.output or "{}")
    assert output["summary"] == "Das Ganze." and output["document_step"] == "done"
    assert [lv["groups"] for lv in output["levels"]] == [[[0, 1]]]
    assert (output["prompt_tokens"], output["completion_tokens"]) == (60 + 50, 8 + 3)
    assert "Part 1:\nПервая часть." in asked(client.bodies[0]) and len(client.bodies) == 1
    assert finished.filename == "a.pdf" and finished.stage_us.get("document", -1) >= 0
    row = store.get_document_result("doc-1", model_id)
    assert row is not None and row.output == finished.output and row.task == "generate"
    [job_document] = list(store.iter_job_documents("job-1"))
    assert job_document.status == "completed"  # the job counts wait for this row
    document = store.get_document("doc-1")
    assert document is not None and document.status == "completed"


def test_a_finished_document_over_the_record_limit_fails_with_output_too_large_and_keeps_its_tokens(
        tmp_path: Path) -> None:
    task, _ = scripted_task(lambda body: chat_answer("Das Ganze." * 200, prompt=50, completion=3),
                                 context_tokens=512, max_tokens=64)
    store = _store(tmp_path)
    serde = AvroSerde(KafkaSettings())

    def measure(completed: DocumentCompleted) -> int:
        return len(serde.serialize(completed, TOPICS.completed))

    stage = DocumentStage(task, store, TOPICS, measure=measure, max_message_bytes=4096)  # a limit of 3,072 bytes
    [out] = stage(_pending(task.model_id_for(SUMMARIZE), ["Первая часть.", "الجزء الثاني."]))
    finished = out.value
    assert isinstance(finished, DocumentCompleted)
    assert (finished.status, finished.error_code) == ("failed", "output_too_large")
    assert measure(finished) <= 3072
    assert json.loads(finished.output or "{}") == {"kind": "summarize", "prompt_tokens": 60 + 50,
                                                   "completion_tokens": 8 + 3}
    row = store.get_document_result("doc-1", task.model_id_for(SUMMARIZE))
    assert row is not None and row.status == "failed"


def test_a_record_handled_again_after_its_write_asks_the_model_nothing(tmp_path: Path) -> None:
    stage, model_id, client, _ = _stage(tmp_path, lambda body: chat_answer("Einmal."))
    envelope = _pending(model_id, ["a.", "b."])
    [first] = stage(envelope)
    [again] = stage(envelope)  # a crash after the write, before the commit
    assert len(client.bodies) == 1
    assert again.value == first.value


def test_a_step_whose_answer_is_cut_fails_the_document_alone_with_its_chunk_summaries_kept(tmp_path: Path) -> None:
    stage, model_id, _, store = _stage(tmp_path, lambda body: chat_answer("cut", completion=64, finish="length"))
    [out] = stage(_pending(model_id, ["a.", "b."]))
    finished = out.value
    assert isinstance(finished, DocumentCompleted)
    assert (finished.status, finished.error_code) == ("failed", "generation_truncated")
    output = json.loads(finished.output or "{}")
    assert output["document_step"] == "failed" and [p["text"] for p in output["chunk_summaries"]] == ["a.", "b."]
    # what the step's one call cost is counted with the chunks' (2 x 30 + 20 prompt, 2 x 4 + 64 completion)
    assert (output["prompt_tokens"], output["completion_tokens"]) == (80, 72)
    [job_document] = list(store.iter_job_documents("job-1"))
    assert (job_document.status, job_document.error_code) == ("failed", "generation_truncated")
    [again] = stage(_pending(model_id, ["a.", "b."]))  # published again from the row, its error with it
    assert again.value == finished


def test_a_record_of_another_prompt_or_task_goes_to_the_dlq(tmp_path: Path) -> None:
    stage, _, client, _ = _stage(tmp_path, lambda body: chat_answer("x"))
    with pytest.raises(PoisonRecord) as mismatch:
        stage(_pending("generate/m/summarize/000000000000", ["a.", "b."]))
    assert mismatch.value.code == "document_step_prompt_mismatch"
    embed = DocumentCompleted(job_id="job-1", doc_id="doc-1", status="completed", completed_at=AT, model_id="e",
                              task="embed")
    with pytest.raises(PoisonRecord) as other:
        stage(Envelope(topic=TOPICS.mapped, partition=0, offset=1, key="doc-1", value=embed))
    assert other.value.code == "document_step_unexpected"
    assert client.bodies == []
