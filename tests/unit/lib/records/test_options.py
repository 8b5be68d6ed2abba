"""docstream.records.JobOptions: a job's options typed, their stored map of strings unchanged."""

from __future__ import annotations

import pytest

from docstream.lanes import job_lane
from docstream.records import JobOptions


@pytest.mark.parametrize("stored", [
    {},
    {"model_id": "m@1", "chunk_max_tokens": "256", "chunk_overlap_tokens": "0", "priority": "interactive"},
    {"tasks": '[{"name":"classify"}]', "origin": "external"},
    {"priority": "batch"},
    {"priority": "high", "chunker.max_tokens": "256"},  # a foreign writer's options
    {"chunk_max_tokens": "0256", "chunk_overlap_tokens": "many", "model_id": ""},
])
def test_a_stored_map_reads_typed_and_writes_back_as_it_was(stored: dict[str, str]) -> None:
    options = JobOptions.from_mapping(stored)
    assert options.to_mapping() == stored
    assert options.lane == job_lane(stored)


def test_the_options_read_as_their_types() -> None:
    options = JobOptions.from_mapping({"chunk_max_tokens": "512", "chunk_overlap_tokens": "0256", "priority": "x"})
    assert options.chunk_max_tokens == 512 and options.chunk_overlap_tokens is None
    assert options.other == {"chunk_overlap_tokens": "0256"} and options.priority == "x" and options.lane == "batch"


def test_options_not_asked_for_are_not_written() -> None:
    assert JobOptions(model_id="m", chunk_max_tokens=64).to_mapping() == {"model_id": "m", "chunk_max_tokens": "64"}
    assert JobOptions(priority="interactive").lane == "interactive"
    assert JobOptions().lane == "batch"
