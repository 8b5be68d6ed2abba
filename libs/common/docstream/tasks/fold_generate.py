"""The generate task's fold: one document's chunk answers, in chunk order, with their tokens. Pure.

A chunk's output (``GenerateTask.run``) is ``{"kind": "summarize", "text": ...}`` or ``{"kind": "extract",
"value": ...}``, with the server's ``prompt_tokens`` and ``completion_tokens``. The document's output:

* ``summarize``: ``chunk_summaries`` (``{"index", "text"}`` by index) and ``summary``: the one summary of a
  document with one; with two or more, null and ``"document_step": "pending"``: the document stage writes the
  summary of the summaries (``docstream.tasks.reduction``);
* ``extract``: ``chunk_values`` (``{"index", "value"}`` by index) and ``value``: where the chunks agree, each
  field's first non-null value in chunk order (objects), else the first non-null value; where two chunks give
  a field different values, null and ``"document_step": "pending"``: the document stage reconciles them;
* both: ``prompt_tokens`` and ``completion_tokens``, summed over the chunks, the failed ones' too (a chunk that
  failed after the server answered, invalid or truncated, fails with what it cost: ``FoldInput.failed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docstream.tasks.base import DocumentOutput, FoldInput, TaskOutputError
from docstream.tasks.reduction import DOCUMENT_STEP, conflicting_fields

__all__ = ["ANSWER_KEYS", "GenerateFold", "merge_values"]

_KINDS = ("summarize", "extract")
ANSWER_KEYS = {"summarize": "text", "extract": "value"}
"""Where a chunk output of each kind holds its answer (``GenerateTask.run`` writes it there)."""


def merge_values(values: list[Any]) -> Any:
    """The document's value of its chunks' extract values, in chunk order: objects field by field (each field's
    first non-null value; a field no chunk gives is null), else the first non-null value (None: none)."""
    given = [v for v in values if v is not None]
    if not given:
        return None
    if all(isinstance(v, dict) for v in given):
        merged: dict[str, Any] = {}
        for value in given:
            for key, field_value in value.items():
                if merged.get(key) is None:
                    merged[key] = field_value
        return merged
    return given[0]


class GenerateFold:
    """Folds the chunk answers of one document (state: ``{"kind", "parts": {index: answer}, tokens}``)."""

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"kind": None, "parts": {}, "prompt_tokens": 0, "completion_tokens": 0}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """``state`` with one more chunk's answer and tokens (a failed chunk: its tokens alone).

        Raises:
            TaskOutputError: the output is not a generate answer, or of another kind than the document's others.
        """
        output = chunk.output
        if not isinstance(output, Mapping) or output.get("kind") not in _KINDS:
            raise TaskOutputError(f"chunk {chunk.index}: not a generate answer")
        kind = str(output["kind"])
        if state["kind"] not in (None, kind):
            raise TaskOutputError(f"chunk {chunk.index}: a {kind} answer in a {state['kind']} document")
        tokens = {"prompt_tokens": state["prompt_tokens"] + _tokens(output, "prompt_tokens"),
                  "completion_tokens": state["completion_tokens"] + _tokens(output, "completion_tokens")}
        if chunk.failed:  # what its attempts cost, no answer
            return {**state, "kind": kind, **tokens}
        answer = output.get(ANSWER_KEYS[kind])
        if kind == "summarize" and not isinstance(answer, str):
            raise TaskOutputError(f"chunk {chunk.index}: a summary that is not text")
        return {"kind": kind, "parts": {**state["parts"], str(chunk.index): answer}, **tokens}

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """The document's answers, by chunk index (a document whose every chunk failed has none)."""
        parts = sorted((int(index), answer) for index, answer in state["parts"].items())
        kind = state["kind"]
        output: dict[str, Any] = {"kind": kind, "prompt_tokens": state["prompt_tokens"],
                                  "completion_tokens": state["completion_tokens"]}
        if kind == "extract":
            values = [v for _, v in parts]
            output["chunk_values"] = [{"index": i, "value": v} for i, v in parts]
            pending = bool(conflicting_fields(values))
            output["value"] = None if pending else merge_values(values)
        else:
            output["chunk_summaries"] = [{"index": i, "text": t} for i, t in parts]
            pending = len(parts) > 1
            output["summary"] = parts[0][1] if len(parts) == 1 else None
        if pending:
            output[DOCUMENT_STEP] = "pending"
        return DocumentOutput(output=output)


def _tokens(output: Mapping[str, Any], key: str) -> int:
    value = output.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TaskOutputError(f"{key} is not a count: {str(value)[:40]!r}")
    return value
