"""The classify task's fold: per-label scores as the token-weighted mean of the chunks', the top label and the
chunks that drove it. Pure.

A chunk weighs ``max(token_count, 1)``; its scores are first scaled to sum to 1. State (JSON, bounded by
``MAX_LABELS`` whatever the document's length)::

    {"w": total weight (int),
     "sum": {label: the weighted sum, as exact float partials},
     "top": {label: [[score, chunk index], ...] the best TOP_CHUNKS by (score desc, index asc)}}

The weighted sums are kept as Shewchuk partials (the ``math.fsum`` algorithm): their value is the exact
sum, so ``finish`` is correctly rounded and the same bit for bit in any order the chunks arrive in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from docstream.tasks.base import MAX_LABEL_CHARS, MAX_LABELS, DocumentOutput, FoldInput, TaskOutputError

__all__ = ["TOP_CHUNKS", "ClassifyFold", "check_label_scores"]

TOP_CHUNKS = 3
"""Most chunk indices kept per label (and reported as ``top_chunks``)."""


def check_label_scores(scores: Mapping[str, float], *, index: int) -> dict[str, float]:
    """``scores`` scaled to sum to 1, when they are a valid chunk result.

    Raises:
        TaskOutputError: no label, more than ``MAX_LABELS``, a label name that is empty or too long, a
            negative or non-finite score, or scores summing to 0.
    """
    if not scores:
        raise TaskOutputError(f"chunk {index}: no label scores")
    if len(scores) > MAX_LABELS:
        raise TaskOutputError(f"chunk {index}: {len(scores)} labels, at most {MAX_LABELS}")
    values: dict[str, float] = {}
    for label, score in scores.items():
        if not isinstance(label, str) or not label or len(label) > MAX_LABEL_CHARS:
            raise TaskOutputError(f"chunk {index}: invalid label name {str(label)[:120]!r}")
        value = float(score)
        if not math.isfinite(value) or value < 0:
            raise TaskOutputError(f"chunk {index}: label {label!r} has score {value!r} (finite, >= 0 expected)")
        values[label] = value
    total = math.fsum(values.values())
    if total <= 0:
        raise TaskOutputError(f"chunk {index}: label scores sum to 0")
    return {label: value / total for label, value in values.items()}


def _grow(partials: Sequence[float], x: float) -> list[float]:
    """Shewchuk's exact summation step: non-overlapping partials whose exact sum is ``sum(partials) + x``."""
    out: list[float] = []
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        high = x + y
        low = y - (high - x)
        if low:
            out.append(low)
        x = high
    out.append(x)
    return out


def _best(entries: Sequence[Sequence[float]], score: float, index: int) -> list[list[float]]:
    ranked = sorted([*([float(s), int(i)] for s, i in entries), [score, index]], key=lambda e: (-e[0], e[1]))
    return [[s, int(i)] for s, i in ranked[:TOP_CHUNKS]]


class ClassifyFold:
    """Token-weighted mean of the chunks' label scores, the top label and its best chunks."""

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"w": 0, "sum": {}, "top": {}}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """Fold one chunk's scores in, weighted by its tokens (``state`` is not changed).

        Raises:
            TaskOutputError: malformed scores (``check_label_scores``), or the document's labels would number
                more than ``MAX_LABELS``.
        """
        scores = check_label_scores(chunk.label_scores, index=chunk.index)
        weight = max(int(chunk.token_count), 1)
        sums: dict[str, list[float]] = {label: list(p) for label, p in state["sum"].items()}
        top: dict[str, list[list[float]]] = {label: [list(e) for e in es] for label, es in state["top"].items()}
        if len(sums.keys() | scores.keys()) > MAX_LABELS:
            raise TaskOutputError(f"chunk {chunk.index}: its document would have more than {MAX_LABELS} labels")
        for label, score in scores.items():
            sums[label] = _grow(sums.get(label, ()), weight * score)
            top[label] = _best(top.get(label, ()), score, chunk.index)
        return {"w": int(state["w"]) + weight, "sum": sums, "top": top}

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """Scores summing to 1 (a label absent from a chunk counts 0 there), the top label (a tie goes to the
        name that sorts first) and its best chunks; empty when no chunk was classified."""
        weight = int(state["w"])
        if weight <= 0 or not state["sum"]:
            return DocumentOutput()
        means = {label: math.fsum(partials) / weight for label, partials in sorted(state["sum"].items())}
        total = math.fsum(means.values())
        scores = {label: mean / total for label, mean in means.items()}
        top_label = min(scores, key=lambda label: (-scores[label], label))
        top_chunks = tuple(int(index) for _, index in state["top"].get(top_label, ()))
        return DocumentOutput(label_scores=scores, top_label=top_label, top_chunks=top_chunks)
