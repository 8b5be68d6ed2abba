"""The inference handler's task logic, pure: which chunks a task runs on, and outputs as rows and records."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from docstream.avro.segments import Float32Vector
from docstream.records import ChunkCreated
from docstream.tasks.base import ChunkOutput, Label, Span, TaskRequest
from docstream_inference.handler import (
    MAX_OUTPUT_BYTES,
    TASK_OUTPUT_INVALID,
    chunk_row,
    output_of_row,
    request_for,
    result_of,
    result_record,
)

AT = datetime(2026, 12, 1, tzinfo=UTC)
TEXT = "Angela Merkel met Siemens.\n\nIn Munich they spoke."  # page 2 starts at offset 28 of the chunk


def _chunk(*, tasks: list[dict[str, object]] | None = None, index: int = 1, count: int = 3) -> ChunkCreated:
    return ChunkCreated(
        job_id="j", doc_id="d", chunk_id="c", chunk_index=index, chunk_count=count, content_sha256="s", text=TEXT,
        page_start=4, page_end=5, char_start=1000, char_end=1000 + len(TEXT), token_count=12, chunker_settings="cs",
        created_at=AT, tasks=tasks or [], page_breaks=[1028],
    )


def test_a_chunk_of_a_job_before_tasks_is_embed_only() -> None:
    assert request_for(_chunk(), "embed") == TaskRequest("embed")
    assert request_for(_chunk(), "entities") is None


def test_a_task_runs_on_the_chunks_whose_job_asks_for_it_with_its_labels() -> None:
    chunk = _chunk(tasks=[{"name": "embed", "labels": []},
                          {"name": "classify", "labels": [{"name": "sport", "description": None}]}])
    assert request_for(chunk, "classify") == TaskRequest("classify", (Label("sport"),))
    assert request_for(chunk, "embed") == TaskRequest("embed")
    assert request_for(chunk, "entities") is None


def test_a_replay_of_a_new_task_runs_on_every_chunk() -> None:
    assert request_for(_chunk(), "entities", run_unrequested=True) == TaskRequest("entities")


def test_a_chunk_with_a_garbled_tasks_field_is_embed_only() -> None:
    chunk = _chunk(tasks=[{"name": "NOT A NAME"}])
    assert request_for(chunk, "embed") == TaskRequest("embed")
    assert request_for(chunk, "entities") is None


def test_spans_become_mentions_in_document_offsets_with_their_page() -> None:
    spans = (Span(0, 13, "PERSON", 0.9), Span(18, 25, "ORG"), Span(31, 37, "GPE"))
    result = result_of(_chunk(), "entities/m", "entities", ChunkOutput(spans=spans), "spacy/cpu")
    assert [(m.text, m.label, m.start, m.end, m.page) for m in result.mentions] == [
        ("Angela Merkel", "PERSON", 1000, 1013, 4), ("Siemens", "ORG", 1018, 1025, 4),
        ("Munich", "GPE", 1031, 1037, 5)]
    assert result.mentions[0].cut  # it starts where the chunk was cut from chunk 0
    assert not result.mentions[1].cut
    record = result_record(result, AT)
    assert record.task == "entities" and record.mentions[2]["page"] == 5 and record.embedding == []
    row = chunk_row(result)
    assert row.task == "entities" and row.mentions == result.mentions


def test_a_models_vector_goes_into_the_row_and_the_record_as_its_bytes_never_a_list() -> None:
    vector = Float32Vector(np.linspace(-1, 1, 384, dtype=np.float32))
    result = result_of(_chunk(), "m", "embed", ChunkOutput(embedding=vector), "rt")
    row, record = chunk_row(result), result_record(result, AT)
    assert result.embedding is vector and row.embedding is vector and record.embedding is vector
    # a task of the user's that gives a tuple or an array still gets a list of its floats
    plain = result_of(_chunk(), "m", "mine", ChunkOutput(embedding=(0.5, 0.25)), "rt")
    assert type(plain.embedding) is list and plain.embedding == [0.5, 0.25]


def test_scores_and_user_outputs_go_into_the_row_and_the_record() -> None:
    result = result_of(_chunk(), "classify/x", "classify", ChunkOutput(label_scores={"a": 0.25, "b": 0.75}), "rt")
    assert result.ok and chunk_row(result).label_scores == {"a": 0.25, "b": 0.75}
    user = result_of(_chunk(), "mine/1", "mine", ChunkOutput(output={"score": 0.5, "words": ["é"]}), "rt")
    assert user.output == '{"score":0.5,"words":["é"]}' and result_record(user, AT).output == user.output


def test_a_broken_output_fails_its_chunk_with_a_code() -> None:
    for output in (ChunkOutput(label_scores={"a": float("nan")}), ChunkOutput(label_scores={"a": -1.0}),
                   ChunkOutput(output={1, 2}), ChunkOutput(output="x" * MAX_OUTPUT_BYTES),
                   ChunkOutput(output=float("inf"))):
        result = result_of(_chunk(), "m", "mine", output, "rt")
        assert not result.ok and result.error_code == TASK_OUTPUT_INVALID, output


def test_a_stored_row_gives_back_the_output_it_was_made_from() -> None:
    spans = (Span(0, 13, "PERSON", 0.5), Span(31, 37, "GPE"))
    for task, output in (("entities", ChunkOutput(spans=spans)), ("classify", ChunkOutput(label_scores={"a": 1.0})),
                         ("mine", ChunkOutput(output={"k": [1, 2]})), ("embed", ChunkOutput(embedding=[0.5, 0.25]))):
        first = result_of(_chunk(), "m", task, output, "rt")
        again = result_of(_chunk(), "m", task, output_of_row(chunk_row(first)), None)
        assert replace(again, runtime="rt") == first, task


def test_stored_results_are_reused_when_asked_and_always_for_generate() -> None:
    from docstream.settings import InferenceSettings
    from docstream.tasks.embed import EmbedTask
    from docstream.tasks.generate import GenerateTask
    from docstream_inference.pipeline import reuse_stored

    assert not reuse_stored(InferenceSettings(), EmbedTask)
    assert reuse_stored(InferenceSettings(reuse_stored=True), EmbedTask)
    assert reuse_stored(InferenceSettings(), GenerateTask)  # an answer costs a model call: never asked twice
