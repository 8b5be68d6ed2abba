"""docstream.records.JobOptions: a job's options typed, their stored map of strings unchanged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from docstream.records import JobOptions
from docstream.store.base import JobRow

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(("stored", "lane"), [
    ({}, "batch"),
    ({"model_id": "m@1", "chunk_max_tokens": "256", "chunk_overlap_tokens": "0", "priority": "interactive"},
     "interactive"),
    ({"tasks": '[{"name":"classify"}]', "origin": "external"}, "batch"),
    ({"priority": "batch"}, "batch"),
    ({"priority": "high", "chunker.max_tokens": "256"}, "batch"),  # a foreign writer's options
    ({"chunk_max_tokens": "0256", "chunk_overlap_tokens": "many", "model_id": ""}, "batch"),
])
def test_a_stored_map_reads_typed_and_writes_back_as_it_was(stored: dict[str, str], lane: str) -> None:
    options = JobOptions.from_mapping(stored)
    assert options.to_mapping() == stored
    assert options.lane == lane


def test_the_options_read_as_their_types() -> None:
    options = JobOptions.from_mapping({"chunk_max_tokens": "512", "chunk_overlap_tokens": "0256", "priority": "x"})
    assert options.chunk_max_tokens == 512 and options.chunk_overlap_tokens is None
    assert options.other == {"chunk_overlap_tokens": "0256"} and options.priority == "x" and options.lane == "batch"


def test_options_not_asked_for_are_not_written() -> None:
    assert JobOptions(model_id="m", chunk_max_tokens=64).to_mapping() == {"model_id": "m", "chunk_max_tokens": "64"}
    assert JobOptions(priority="interactive").lane == "interactive"
    assert JobOptions().lane == "batch"


# Each option the job's readers read, as the stored map gives it: present, missing, and a value it does not read
# (an int option's is kept in ``other``; a text option reads any text, so its unreadable value is the empty one its
# readers take as missing).
@pytest.mark.parametrize(("stored", "read"), [
    ({"model_id": "m@1"}, {"model_id": "m@1"}),
    ({}, {"model_id": None}),
    ({"model_id": ""}, {"model_id": ""}),
    ({"chunk_max_tokens": "256"}, {"chunk_max_tokens": 256}),
    ({}, {"chunk_max_tokens": None}),
    ({"chunk_max_tokens": "many"}, {"chunk_max_tokens": None, "other": {"chunk_max_tokens": "many"}}),
    ({"chunk_max_tokens": " 256"}, {"chunk_max_tokens": None, "other": {"chunk_max_tokens": " 256"}}),
    ({"chunk_max_tokens": "-1"}, {"chunk_max_tokens": -1}),  # read as written; the intake checks ranges
    ({"chunk_overlap_tokens": "0"}, {"chunk_overlap_tokens": 0}),
    ({}, {"chunk_overlap_tokens": None}),
    ({"chunk_overlap_tokens": ""}, {"chunk_overlap_tokens": None, "other": {"chunk_overlap_tokens": ""}}),
    ({"tasks": '[{"name":"generate"}]'}, {"tasks": '[{"name":"generate"}]'}),
    ({}, {"tasks": None}),
    ({"tasks": "not json"}, {"tasks": "not json"}),  # kept as text: docstream.tasks.selection.job_tasks refuses it
    ({"priority": "interactive"}, {"priority": "interactive", "lane": "interactive"}),
    ({}, {"priority": None, "lane": "batch"}),
    ({"priority": ""}, {"priority": "", "lane": "batch"}),
    ({"priority": "INTERACTIVE"}, {"priority": "INTERACTIVE", "lane": "batch"}),
    ({"origin": "external"}, {"origin": "external"}),
    ({}, {"origin": None}),
])
def test_each_option_reads_present_missing_and_unreadable(stored: dict[str, str], read: dict[str, Any]) -> None:
    options = JobOptions.from_mapping(stored)
    assert {name: getattr(options, name) for name in read} == read
    assert options.to_mapping() == stored


def test_a_jobs_row_keeps_the_map_its_readers_read_typed() -> None:
    stored = {"priority": "interactive", "model_id": "m@1", "tasks": '[{"name":"classify"}]', "x.y": "z"}
    row = JobRow("job-1", "acme", AT, "running", 1, options=stored)
    read = JobOptions.from_mapping(row.options)
    assert row.options == stored and (read.lane, read.model_id, read.other) == ("interactive", "m@1", {"x.y": "z"})
    assert JobOptions.from_mapping(JobRow("job-2", "acme", AT, "running", 1).options) == JobOptions()
