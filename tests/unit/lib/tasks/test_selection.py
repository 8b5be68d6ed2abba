"""docstream.tasks.selection: --labels parsing, --task with --labels, the job's checks, records and the job row."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from docstream.avro.serde import AvroSerde
from docstream.errors import InputError
from docstream.records import ChunkCreated
from docstream.settings import KafkaSettings
from docstream.store.base import JobRow
from docstream.tasks.base import MAX_LABELS, MAX_TASKS, Label, Prompt, TaskRequest
from docstream.tasks.selection import (
    DEFAULT_TASKS,
    check_job_tasks,
    command_line_prompt,
    command_line_tasks,
    job_tasks,
    parse_labels,
    task_records,
    tasks_option,
)

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
CLASSIFY_SPORT = TaskRequest("classify", (Label("sport"), Label("biology", "Text about plants")))


def _codes(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value.code


# -- parse_labels ----------------------------------------------------------------------------


def test_labels_are_names_or_name_equals_description_separated_by_commas() -> None:
    assert parse_labels("sport, biology=Text about plants ,finance,") == (
        Label("sport"), Label("biology", "Text about plants"), Label("finance"))


def test_labels_as_a_json_list_may_hold_commas_in_descriptions() -> None:
    text = json.dumps(["sport", {"name": "biology", "description": "Plants, animals, cells"}, {"name": "x"},
                       "finance=Money"])
    assert parse_labels(text) == (Label("sport"), Label("biology", "Plants, animals, cells"), Label("x"),
                                  Label("finance", "Money"))


@pytest.mark.parametrize("text", [
    "", " , ,", "[]", "[1]", '["a", 2]', "[{\"name\": \"x\", \"colour\": \"red\"}]", "[not json",
    '[{"name": "x", "description": 3}]', "=description only", "x" * 101,
    ",".join(f"l{i}" for i in range(MAX_LABELS + 1)),
])
def test_bad_labels_are_refused(text: str) -> None:
    assert _codes(parse_labels, text) == "labels_invalid"


# -- command_line_tasks ----------------------------------------------------------------------


def test_no_task_given_is_embed_alone() -> None:
    assert command_line_tasks([]) == DEFAULT_TASKS == (TaskRequest("embed"),)


def test_labels_go_to_classify_only() -> None:
    labels = (Label("sport"), Label("biology", "Text about plants"))
    assert command_line_tasks(["embed", "classify", "entities"], labels) == (
        TaskRequest("embed"), CLASSIFY_SPORT, TaskRequest("entities"))


def test_labels_without_classify_are_refused() -> None:
    assert _codes(command_line_tasks, ["embed", "entities"], (Label("sport"),)) == "labels_without_classify"
    assert _codes(command_line_tasks, [], (Label("sport"),)) == "labels_without_classify"


def test_a_label_named_twice_is_refused() -> None:
    assert _codes(command_line_tasks, ["classify"], parse_labels("sport,sport=Games")) == "labels_invalid"


def test_an_invalid_task_name_is_refused() -> None:
    assert _codes(command_line_tasks, ["Embed"]) == "task_invalid"


# -- check_job_tasks -------------------------------------------------------------------------


def test_valid_tasks_are_returned_as_they_are() -> None:
    tasks = (TaskRequest("embed"), CLASSIFY_SPORT, TaskRequest("my-task_2"))
    assert check_job_tasks(tasks) == tasks


@pytest.mark.parametrize(("tasks", "code"), [
    ((), "task_invalid"),
    ((TaskRequest("embed"), TaskRequest("embed")), "task_invalid"),
    (tuple(TaskRequest(f"task{i}") for i in range(MAX_TASKS + 1)), "task_invalid"),
    ((TaskRequest("entities", (Label("person"),)),), "labels_without_classify"),
    ((TaskRequest("classify"),), "labels_missing"),
], ids=["none", "twice", "too-many", "labels-on-entities", "classify-without-labels"])
def test_impossible_tasks_are_refused(tasks: tuple[TaskRequest, ...], code: str) -> None:
    assert _codes(check_job_tasks, tasks) == code


def test_classify_without_labels_gets_the_default_labels_written_in() -> None:
    checked = check_job_tasks((TaskRequest("embed"), TaskRequest("classify")),
                              default_labels=["sport", "biology=Text about plants"])
    assert checked == (TaskRequest("embed"), CLASSIFY_SPORT)


def test_labels_given_with_the_job_win_over_the_defaults() -> None:
    assert check_job_tasks((CLASSIFY_SPORT,), default_labels=["finance"]) == (CLASSIFY_SPORT,)


def test_an_invalid_default_label_is_refused() -> None:
    assert _codes(check_job_tasks, (TaskRequest("classify"),), default_labels=[""]) == "labels_invalid"


# -- records and the job row -----------------------------------------------------------------


def _job(**options: str) -> JobRow:
    return JobRow("job-1", "acme", AT, "running", 2, options=dict(options))


def test_the_default_tasks_leave_records_and_job_options_as_before_tasks() -> None:
    assert task_records(DEFAULT_TASKS) == []
    assert tasks_option(DEFAULT_TASKS) is None
    assert job_tasks(_job()) == DEFAULT_TASKS
    assert job_tasks(_job(origin="external")) == DEFAULT_TASKS


def test_tasks_round_trip_through_the_job_option_as_canonical_json() -> None:
    tasks = (TaskRequest("embed"), CLASSIFY_SPORT)
    option = tasks_option(tasks)
    assert option == json.dumps(task_records(tasks), sort_keys=True, separators=(",", ":"))
    assert task_records(tasks) == [
        {"name": "embed", "labels": []},
        {"name": "classify", "labels": [{"name": "sport", "description": None},
                                        {"name": "biology", "description": "Text about plants"}]},
    ]
    assert job_tasks(_job(tasks=option or "")) == tasks
    assert tasks_option((TaskRequest("entities"),)) == '[{"labels":[],"name":"entities"}]'


@pytest.mark.parametrize("option", ["not json", '{"name": "embed"}', "[1]", '[{"name": "Bad"}]'])
def test_a_malformed_tasks_option_is_an_input_error(option: str) -> None:
    assert _codes(job_tasks, _job(tasks=option)) == "task_invalid"


# -- the generate prompt ---------------------------------------------------------------------

FIELDS = '{"type": "object", "properties": {"vendor": {"type": "string"}}}'


def test_prompt_flags_give_summarize_or_extract() -> None:
    assert command_line_prompt(None, None) is None
    assert command_line_prompt("summarize", None) == Prompt("summarize")
    assert command_line_prompt("Who signed it?", None) == Prompt("summarize", "Who signed it?")
    extract = command_line_prompt("Pull the vendor.", FIELDS)
    assert extract is not None and extract.kind == "extract" and extract.instruction == "Pull the vendor."
    assert extract.schema == json.loads(FIELDS)
    assert command_line_prompt(None, FIELDS) == Prompt.of("extract", "", json.loads(FIELDS))
    assert _codes(command_line_prompt, None, "[1, 2]") == "prompt_invalid"
    assert _codes(command_line_prompt, None, "{nope") == "prompt_invalid"


def test_a_prompt_goes_to_generate_only() -> None:
    prompt = Prompt("summarize", "Who signed it?")
    assert command_line_tasks(["embed", "generate"], prompt=prompt) == (
        TaskRequest("embed"), TaskRequest("generate", prompt=prompt))
    assert _codes(command_line_tasks, ["embed"], prompt=prompt) == "prompt_without_generate"
    assert _codes(check_job_tasks, [TaskRequest("entities", prompt=prompt)]) == "prompt_without_generate"


def test_generate_without_a_prompt_summarizes_and_says_so_in_its_request() -> None:
    assert check_job_tasks([TaskRequest("generate")]) == (TaskRequest("generate", prompt=Prompt("summarize")),)


def test_an_extract_schema_that_is_no_json_schema_is_refused_at_submission() -> None:
    bad = Prompt.of("extract", "", {"type": "objekt"})
    assert _codes(check_job_tasks, [TaskRequest("generate", prompt=bad)]) == "prompt_invalid"


def test_a_prompt_travels_in_the_records_and_the_job_row_and_other_tasks_stay_as_they_were() -> None:
    tasks = (CLASSIFY_SPORT, TaskRequest("generate", prompt=Prompt.of("extract", "Vendor?", json.loads(FIELDS))))
    records = task_records(tasks)
    assert "prompt" not in records[0]  # classify's record, byte for byte as before generate
    row = JobRow(job_id="j", tenant="t", created_at=AT, status="running", document_count=1,
                 options={"tasks": tasks_option(tasks) or ""})
    assert job_tasks(row) == tasks
    serde = AvroSerde(KafkaSettings())
    chunk = ChunkCreated(job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="0" * 64,
                         text="t", page_start=1, page_end=1, char_start=0, char_end=1, token_count=1,
                         heading=None, chunker_settings="s", model_id="m", created_at=AT, tasks=records)
    decoded = serde.deserialize(serde.serialize(chunk, "docstream.chunks"), "docstream.chunks")
    assert isinstance(decoded, ChunkCreated)
    assert [TaskRequest.from_record(r) for r in decoded.tasks] == list(tasks)
