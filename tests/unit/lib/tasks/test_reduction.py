"""The generate task's document-level reduction, pure: packing, conflicts, the messages and the tree with the model
call injected."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docstream.tasks.base import Prompt
from docstream.tasks.chat_protocol import GenerationTooLong, skeleton
from docstream.tasks.reduction import (
    GenerationTooDeep,
    conflicting_fields,
    needs_document_step,
    pack,
    reduce_messages,
    reduce_tree,
)


def _words(parts: Sequence[Any]) -> list[int]:
    return [len(str(p).split()) for p in parts]


def _ones(parts: Sequence[Any]) -> list[int]:
    return [1] * len(parts)


def _joiner(calls: list[list[Any]]) -> Any:
    """A model that answers a group with its parts joined (so the tree's result shows what went where)."""

    def call(groups: list[list[Any]]) -> list[tuple[Any, int, int]]:
        calls.append(groups)
        return [("(" + " ".join(str(p) for p in group) + ")", 10 * len(group), 1) for group in groups]

    return call


def test_pack_groups_consecutive_parts_within_the_budget_and_a_large_one_alone() -> None:
    assert pack([3, 3, 3, 3], 6) == [(0, 1), (2, 3)]
    assert pack([3, 9, 2, 2, 2], 6) == [(0,), (1,), (2, 3, 4)]
    assert pack([], 6) == []


@given(st.lists(st.integers(1, 20), max_size=40), st.integers(1, 40))
def test_pack_covers_every_position_once_in_order(counts: list[int], budget: int) -> None:
    groups = pack(counts, budget)
    assert [i for g in groups for i in g] == list(range(len(counts)))
    for group in groups:
        assert len(group) == 1 or sum(counts[i] for i in group) <= budget


def test_a_tree_of_seven_summaries_reduces_level_by_level_in_order() -> None:
    calls: list[list[list[Any]]] = []
    parts = [f"s{i}" for i in range(7)]
    final, levels = reduce_tree(parts, count=_ones, budget=3, max_levels=4, call=_joiner(calls))
    assert final == "((s0 s1 s2) (s3 s4 s5) s6)"
    assert [lv.level for lv in levels] == [1, 2]
    assert levels[0].groups == ((0, 1, 2), (3, 4, 5), (6,))
    assert levels[0].outputs == ("(s0 s1 s2)", "(s3 s4 s5)", "s6")  # a group of one goes up unchanged
    assert (levels[0].calls, levels[0].prompt_tokens, levels[0].completion_tokens) == (2, 60, 2)
    assert levels[1].to_json() == {"level": 2, "groups": [[0, 1, 2]], "outputs": [final], "calls": 1,
                                   "prompt_tokens": 30, "completion_tokens": 1}
    assert len(calls) == 2 and len(calls[0]) == 2  # a level's groups go out together


def test_one_part_needs_no_call() -> None:
    final, levels = reduce_tree(["only"], count=_words, budget=3, max_levels=1, call=_joiner([]))
    assert (final, levels) == ("only", [])
    with pytest.raises(ValueError):
        reduce_tree([], count=_words, budget=3, max_levels=1, call=_joiner([]))


def test_the_depth_is_bounded() -> None:
    with pytest.raises(GenerationTooDeep, match="after 1 levels"):
        reduce_tree([f"s{i}" for i in range(9)], count=_ones, budget=3, max_levels=1, call=_joiner([]))


def test_parts_that_never_fit_two_to_a_request_fail_too_long() -> None:
    with pytest.raises(GenerationTooLong):
        reduce_tree(["a b c", "d e f"], count=_words, budget=4, max_levels=4, call=_joiner([]))


def test_a_model_that_answers_fewer_groups_than_asked_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 groups asked, 1 answers"):
        reduce_tree(list("abcd"), count=_ones, budget=2, max_levels=4,
                    call=lambda groups: [("x", 1, 1)])


@settings(max_examples=50)
@given(st.integers(2, 60), st.integers(2, 8))
def test_any_tree_ends_in_one_value_holding_every_part_once_in_order(n: int, budget: int) -> None:
    parts = [f"p{i}" for i in range(n)]
    final, levels = reduce_tree(parts, count=_ones, budget=budget, max_levels=10,
                                call=_joiner([]))
    assert final.replace("(", "").replace(")", "").split() == parts
    assert len(levels[-1].outputs) == 1 and all(len(lv.groups) >= 1 for lv in levels)


def test_conflicting_fields_are_those_with_two_distinct_values() -> None:
    assert conflicting_fields([{"a": 1, "b": None}, {"a": 1, "b": "x"}, None]) == []
    assert conflicting_fields([{"a": 1, "b": {"k": [1]}}, {"a": 2, "b": {"k": [1]}}, {"b": {"k": [2]}}]) == ["a", "b"]
    assert conflicting_fields(["x", "x", None]) == []
    assert conflicting_fields(["x", {"a": 1}]) == [""]


def test_needs_document_step_reads_the_output() -> None:
    assert needs_document_step({"document_step": "pending"})
    assert not needs_document_step({"document_step": "done"})
    assert not needs_document_step(None)


def test_reduce_messages_number_the_parts_and_carry_the_schema_skeleton() -> None:
    summary = reduce_messages(Prompt("summarize"), ["Erste.", "Вторая."], system_prompt="")
    assert summary == [{"role": "user", "content": "Part 1:\nErste.\n\nPart 2:\nВторая.\n\n"
                                                   + summary[0]["content"].split("\n\n")[-1]}]
    assert "consecutive parts of one document" in summary[0]["content"]
    schema = {"type": "object", "properties": {"vendor": {"type": "string"}, "lines": {"type": "array"}}}
    extract = reduce_messages(Prompt.of("extract", "Vendor?", schema), [{"vendor": "ACME"}, {"vendor": "株式会社"}],
                              system_prompt="Be brief.")
    assert extract[0] == {"role": "system", "content": "Be brief."}
    text = extract[1]["content"]
    assert 'Part 1:\n{"vendor":"ACME"}' in text and 'Part 2:\n{"vendor":"株式会社"}' in text
    assert text.endswith(json.dumps(skeleton(Prompt.of("extract", "", schema).schema or {}), ensure_ascii=False))
