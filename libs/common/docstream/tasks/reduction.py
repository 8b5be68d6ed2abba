"""The generate task's document-level step: a document's chunk answers reduced by the model, level by level. Pure.

The reducer folds a document's chunk answers (``GenerateFold``); where that leaves a model call to make, the
fold's output says ``"document_step": "pending"`` (``needs_document_step``) and the document stage
(``docstream document-stage``, docs/tasks.md "generate") makes it:

* ``summarize``: the chunk summaries, in chunk order, are packed into groups that fit one request (``pack``);
  each group of two or more becomes one summary, a group of one goes up as it is; the next level does the
  same with those, until one summary is left;
* ``extract``: where chunks disagree on a field (``conflicting_fields``), the chunk values are reconciled the
  same way, each answer validated against the schema. Chunks that agree merge without a model
  (``fold_generate.merge_values``).

``reduce_tree`` drives the levels with the model call injected, and records each one (``ReduceLevel``). Its
depth is bounded by ``max_levels`` (``generation_reduce_too_deep``); a level that cannot group two parts
within the budget makes no progress and fails ``generation_too_long``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docstream.errors import PoisonRecord
from docstream.tasks.base import Prompt
from docstream.tasks.chat_protocol import GenerationTooLong, skeleton

__all__ = [
    "DOCUMENT_STEP",
    "REDUCE_EXTRACT_INSTRUCTION",
    "REDUCE_SUMMARIZE_INSTRUCTION",
    "GenerationTooDeep",
    "ReduceLevel",
    "conflicting_fields",
    "needs_document_step",
    "pack",
    "part_text",
    "reduce_messages",
    "reduce_tree",
]

DOCUMENT_STEP = "document_step"
"""The key of a generate document output that says where its document-level step is: ``pending`` (the document
stage has it to do), ``done``, or ``failed`` (its error is the document's)."""

REDUCE_SUMMARIZE_INSTRUCTION = ("The texts above summarize consecutive parts of one document, in order. Summarize "
                                "the whole document in a few sentences, keeping its key facts.")
REDUCE_EXTRACT_INSTRUCTION = ("The JSON values above were extracted from consecutive parts of one document, in "
                              "order. Merge them into one value: where they disagree, keep the one the parts "
                              "support best.")


class GenerationTooDeep(PoisonRecord):
    """The document's reduction needs more levels than ``max_levels``."""

    code = "generation_reduce_too_deep"


@dataclass(frozen=True, slots=True)
class ReduceLevel:
    """One level of a document's reduction.

    Attributes:
        level: 1 for the level over the chunk answers, then 2, 3, ...
        groups: each group's positions among the level's inputs (a group of one made no call).
        outputs: the level's outputs, one per group: the next level's inputs.
        calls: the model calls the level made.
        prompt_tokens: the server's prompt tokens over the level's calls.
        completion_tokens: the server's completion tokens over the level's calls.
    """

    level: int
    groups: tuple[tuple[int, ...], ...]
    outputs: tuple[Any, ...]
    calls: int
    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> dict[str, Any]:
        """The level as the document output records it."""
        return {"level": self.level, "groups": [list(g) for g in self.groups], "outputs": list(self.outputs),
                "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


Answer = tuple[Any, int, int]
"""One reduce call's answer: its value (a summary's text, or an extract value), prompt and completion tokens."""


def needs_document_step(output: Mapping[str, Any] | None) -> bool:
    """Whether a document output still waits for its document-level step."""
    return isinstance(output, Mapping) and output.get(DOCUMENT_STEP) == "pending"


def conflicting_fields(values: Sequence[Any]) -> list[str]:
    """The fields on which the non-null chunk values disagree (two or more distinct non-null values), sorted; a
    list of values that are not all objects conflicts on ``""`` when two of them differ."""
    given = [v for v in values if v is not None]
    if not all(isinstance(v, Mapping) for v in given):
        return [""] if len({_canonical(v) for v in given}) > 1 else []
    seen: dict[str, set[str]] = {}
    for value in given:
        for key, field_value in value.items():
            if field_value is not None:
                seen.setdefault(str(key), set()).add(_canonical(field_value))
    return sorted(key for key, distinct in seen.items() if len(distinct) > 1)


def pack(counts: Sequence[int], budget: int) -> list[tuple[int, ...]]:
    """Consecutive groups of positions whose ``counts`` sum within ``budget``, greedily in order; a part larger
    than the budget alone is a group of its own."""
    groups: list[tuple[int, ...]] = []
    current: list[int] = []
    total = 0
    for i, count in enumerate(counts):
        if current and total + count > budget:
            groups.append(tuple(current))
            current, total = [], 0
        current.append(i)
        total += count
    if current:
        groups.append(tuple(current))
    return groups


def part_text(kind: str, part: Any) -> str:
    """How one part reads in a reduce request: a summary as it is, an extract value as compact JSON."""
    return part if kind == "summarize" and isinstance(part, str) else _canonical(part)


def reduce_messages(prompt: Prompt, parts: Sequence[Any], *, system_prompt: str) -> list[dict[str, str]]:
    """The messages that reduce ``parts`` (consecutive, in order) into one: numbered parts, then the instruction
    (extract: with the schema's skeleton to fill in, as a chunk's request has it)."""
    numbered = "\n\n".join(f"Part {n}:\n{part_text(prompt.kind, part)}" for n, part in enumerate(parts, 1))
    if prompt.kind == "summarize":
        instruction = REDUCE_SUMMARIZE_INSTRUCTION
    else:
        schema = prompt.schema or {}
        shape = skeleton(schema)
        instruction = REDUCE_EXTRACT_INSTRUCTION + (
            "\nAnswer with the JSON only, filled in: " + json.dumps(shape, ensure_ascii=False) if shape is not None
            else f"\nAnswer with one JSON value only, valid against this JSON Schema: {prompt.json_schema}")
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": f"{numbered}\n\n{instruction}"}]


def reduce_tree(parts: Sequence[Any], *, count: Callable[[Sequence[Any]], list[int]], budget: int,
                max_levels: int, call: Callable[[list[list[Any]]], list[Answer]]) -> tuple[Any, list[ReduceLevel]]:
    """Reduce ``parts`` to one, level by level: each level ``pack``s its inputs by their token ``count`` within
    ``budget`` and ``call``s the model once per group of two or more (all of a level's groups in one ``call``,
    which sends them concurrently); a group of one goes up unchanged.

    Returns:
        the one value left, and the levels made (none when ``parts`` holds one).

    Raises:
        GenerationTooLong: a level of two or more parts where no two fit one request.
        GenerationTooDeep: one value is not left after ``max_levels`` levels.
        ValueError: ``parts`` is empty.
        Whatever ``call`` raises (an answer that is no answer fails the document).
    """
    if not parts:
        raise ValueError("nothing to reduce")
    current = list(parts)
    levels: list[ReduceLevel] = []
    while len(current) > 1:
        if len(levels) == max_levels:
            raise GenerationTooDeep(f"{len(current)} parts are left after {max_levels} levels (tasks.generate."
                                    "reduce_max_levels)")
        groups = pack(count(current), budget)
        if len(groups) == len(current):
            raise GenerationTooLong(f"no two of {len(current)} parts fit one reduce request of {budget} tokens")
        asked = [[current[i] for i in group] for group in groups if len(group) > 1]
        given = call(asked)
        if len(given) != len(asked):
            raise ValueError(f"{len(asked)} groups asked, {len(given)} answers")
        answers = iter(given)
        outputs: list[Any] = []
        prompt_tokens = completion_tokens = 0
        for group in groups:
            if len(group) == 1:
                outputs.append(current[group[0]])
                continue
            value, used_prompt, used_completion = next(answers)
            outputs.append(value)
            prompt_tokens += used_prompt
            completion_tokens += used_completion
        levels.append(ReduceLevel(len(levels) + 1, tuple(groups), tuple(outputs), len(asked), prompt_tokens,
                                  completion_tokens))
        current = outputs
    return current[0], levels


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
