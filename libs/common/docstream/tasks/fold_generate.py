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

The fold's state is the document's kind and its two token totals, the same few bytes for a document of one chunk
or of 10,000: the answers stay in the chunk rows the inference service wrote, and the reducer reads them back
once the document's last chunk is in (``StoredAnswersFold``). ``answers_output`` builds the document's output
from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from docstream.tasks.base import DocumentOutput, FoldInput, TaskOutputError
from docstream.tasks.reduction import DOCUMENT_STEP, conflicting_fields

__all__ = ["ANSWER_KEYS", "GenerateFold", "answers_output", "merge_values"]

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


def answers_output(kind: str | None, answers: Iterable[tuple[int, Any]], *, prompt_tokens: int,
                   completion_tokens: int) -> dict[str, Any]:
    """The document output of its chunk answers, ``(chunk index, answer)`` in any order (an index given twice
    counts once, its first answer): see the module. A document of no answer (every chunk failed) has none."""
    by_index: dict[int, Any] = {}
    for index, answer in answers:
        by_index.setdefault(int(index), answer)
    parts = sorted(by_index.items())
    output: dict[str, Any] = {"kind": kind, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
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
    return output


class GenerateFold:
    """Folds the chunk answers of one document (state: ``{"kind", "prompt_tokens", "completion_tokens"}``; the
    answers themselves are the store's: ``finish_with``)."""

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"kind": None, "prompt_tokens": 0, "completion_tokens": 0}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """``state`` with one more chunk's kind and tokens (its answer is checked, and left to the store).

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
        if not chunk.failed:  # a failed chunk brings what its attempts cost, no answer
            _answer(kind, output, chunk.index)
        return {"kind": kind, **tokens}

    def answer_of(self, state: dict[str, Any], output: Any) -> Any:
        """The answer of a stored ok chunk output in a document of ``state``'s kind.

        Raises:
            TaskOutputError: no generate answer of that kind.
        """
        if not isinstance(output, Mapping) or output.get("kind") != state["kind"] or state["kind"] not in _KINDS:
            raise TaskOutputError(f"a stored chunk output that is no {state['kind']} answer")
        return _answer(str(state["kind"]), output, None)

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """The document without its chunk answers (the reducer gives them: ``finish_with``)."""
        return self.finish_with(state, (), chunk_count=chunk_count)

    def finish_with(self, state: dict[str, Any], answers: Sequence[tuple[int, Any]], *,
                    chunk_count: int) -> DocumentOutput:
        """The document's answers, by chunk index (a document whose every chunk failed has none)."""
        return DocumentOutput(output=answers_output(state["kind"], answers, prompt_tokens=state["prompt_tokens"],
                                                    completion_tokens=state["completion_tokens"]))


def _answer(kind: str, output: Mapping[str, Any], index: int | None) -> Any:
    answer = output.get(ANSWER_KEYS[kind])
    if kind == "summarize" and not isinstance(answer, str):
        where = "a stored chunk" if index is None else f"chunk {index}"
        raise TaskOutputError(f"{where}: a summary that is not text")
    return answer


def _tokens(output: Mapping[str, Any], key: str) -> int:
    value = output.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TaskOutputError(f"{key} is not a count: {str(value)[:40]!r}")
    return value
