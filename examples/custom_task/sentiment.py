"""A user task for docstream: lexicon sentiment per chunk, a token-weighted document score (docs/tasks.md).

Copy this file to write your own task. It has the two halves every task has:

* ``SentimentTask``, the *task class*: ``name``, ``fold`` and ``load(context)``; ``load`` returns the
  runner (here the class itself), which the inference service calls per micro-batch;
* ``SentimentFold``, the *fold* the reducer runs without the model: pure, its ``add`` commutes, its state
  is JSON and stays small whatever the document's length.

The "model" is a JSON lexicon (word -> valence in -3..3) read from a local folder:
``context.tasks.options["sentiment"]["model_path"]``, else ``model/`` next to this file.

Run it (from the repository root, so ``examples`` is importable)::

    PYTHONPATH=. docstream run --task embed --task examples.custom_task.sentiment:SentimentTask PATH
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from docstream.errors import ConfigError
from docstream.tasks.base import (
    ChunkOutput,
    DocumentOutput,
    FoldInput,
    PreparedTexts,
    TaskContext,
    TaskOutputError,
    TaskRequest,
)

__all__ = ["DEFAULT_MODEL_PATH", "Lexicon", "SentimentFold", "SentimentTask", "score_words"]

NAME = "sentiment"
DEFAULT_MODEL_PATH = Path(__file__).resolve().parent / "model"
MAX_WORDS = 4096
"""Words of a chunk that are scored (the rest are ignored, like a model truncating its input)."""
EXTREMES = 3
"""How many of the most positive and most negative chunks a document result names."""
_SCALE = 1_000_000  # the fold sums integers (micro-units): integer addition commutes exactly, floats do not
_NEGATION_REACH = 3
_ALPHA = 15.0  # score = total / sqrt(total^2 + alpha): in (-1, 1), VADER's normalisation
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


@dataclass(frozen=True, slots=True)
class Lexicon:
    """The model: word valences and the words that negate the next scored word."""

    name: str
    version: str
    valences: Mapping[str, int]
    negators: frozenset[str]

    @classmethod
    def load(cls, folder: Path) -> Lexicon:
        """Read ``folder/lexicon.json``.

        Raises:
            ConfigError: ``model_unavailable``: no such file, or not a lexicon.
        """
        file = folder / "lexicon.json"
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            valences = {str(word): int(value) for word, value in data["valences"].items()}
            lexicon = cls(str(data["name"]), str(data["version"]), valences,
                          frozenset(str(word) for word in data.get("negators", ())))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"cannot load the sentiment lexicon {file}: {exc}", code="model_unavailable") from exc
        if not valences or any(abs(v) > 3 for v in valences.values()):
            raise ConfigError(f"{file}: valences must be a non-empty map of integers in -3..3",
                              code="model_unavailable")
        return lexicon


def score_words(words: Sequence[str], lexicon: Lexicon) -> dict[str, Any]:
    """One chunk's output: ``{"score": in (-1, 1), "matched": words found in the lexicon}``."""
    total, matched, negate_until = 0, 0, -1
    for position, word in enumerate(words):
        if word in lexicon.negators:
            negate_until = position + _NEGATION_REACH
            continue
        valence = lexicon.valences.get(word)
        if valence is None:
            continue
        total += -valence if position <= negate_until else valence
        negate_until = -1
        matched += 1
    return {"score": total / math.sqrt(total * total + _ALPHA), "matched": matched}


def _chunk_score(chunk: FoldInput) -> float:
    out = chunk.output
    if not isinstance(out, Mapping) or not isinstance(out.get("score"), int | float) or \
            not isinstance(out.get("matched"), int):
        raise TaskOutputError(f"chunk {chunk.index}: sentiment output must be {{score, matched}}, got {out!r:.200}")
    score = float(out["score"])
    if not math.isfinite(score) or not -1.0 <= score <= 1.0:
        raise TaskOutputError(f"chunk {chunk.index}: sentiment score {score!r} is not in [-1, 1]")
    return score


def _keep(entries: Sequence[Sequence[float]], entry: list[float], *, sign: int) -> list[list[float]]:
    ranked = sorted([*(list(e) for e in entries), entry], key=lambda e: (-sign * e[0], e[1]))
    return [[float(score), int(index)] for score, index in ranked[:EXTREMES]]


class SentimentFold:
    """Token-weighted mean score of the chunks, and the most positive and most negative chunks.

    State: ``{"w": total weight, "sum": weighted sum in micro-units (int), "pos": [[score, index], ...],
    "neg": [...]}`` (JSON; at most ``EXTREMES`` entries each, ties broken by the lower index).
    """

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"w": 0, "sum": 0, "pos": [], "neg": []}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """Fold one chunk in, weighted by ``max(token_count, 1)``.

        Raises:
            TaskOutputError: the chunk's output is not a sentiment output.
        """
        score = _chunk_score(chunk)
        weight = max(int(chunk.token_count), 1)
        entry = [score, chunk.index]
        return {"w": int(state["w"]) + weight, "sum": int(state["sum"]) + weight * round(score * _SCALE),
                "pos": _keep(state["pos"], entry, sign=1), "neg": _keep(state["neg"], entry, sign=-1)}

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """``output = {"score", "label", "most_positive", "most_negative"}``; empty when no chunk was scored."""
        weight = int(state["w"])
        if weight <= 0:
            return DocumentOutput()
        score = int(state["sum"]) / weight / _SCALE
        label = "positive" if score >= 0.05 else "negative" if score <= -0.05 else "neutral"
        return DocumentOutput(output={
            "score": round(score, 6),
            "label": label,
            "most_positive": [int(i) for s, i in state["pos"] if s > 0],
            "most_negative": [int(i) for s, i in state["neg"] if s < 0],
        })


class SentimentTask:
    """The task class and its runner: a lexicon score per chunk (``ChunkOutput.output``)."""

    name: ClassVar[str] = NAME
    fold: ClassVar[SentimentFold] = SentimentFold()

    def __init__(self, lexicon: Lexicon) -> None:
        self._lexicon = lexicon

    @classmethod
    def load(cls, context: TaskContext) -> SentimentTask:
        """Load the lexicon from ``context.tasks.options["sentiment"]["model_path"]`` (else ``model/`` here).

        Raises:
            ConfigError: ``model_unavailable``.
        """
        options = context.tasks.options.get(NAME, {})
        return cls(Lexicon.load(Path(options.get("model_path") or DEFAULT_MODEL_PATH).expanduser()))

    @property
    def model_id(self) -> str:
        """``<lexicon name>@<version>``: a new lexicon version writes beside the old results."""
        return f"{self._lexicon.name}@{self._lexicon.version}"

    @property
    def max_tokens(self) -> int:
        """Words scored per chunk."""
        return MAX_WORDS

    @property
    def runtime(self) -> str:
        """No accelerator: plain Python."""
        return "python/cpu"

    @property
    def device(self) -> str:
        """The CPU."""
        return "cpu"

    def model_id_for(self, request: TaskRequest) -> str:
        """This task takes no per-job options: one ``model_id``."""
        return self.model_id

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Split into lowercase words (the "tokenizer")."""
        words = tuple(tuple(_WORD.findall(text.lower()))[:MAX_WORDS] for text in texts)
        return PreparedTexts(tuple(texts), tuple(requests), words)

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """Score each chunk's words."""
        return [ChunkOutput(output=score_words(words, self._lexicon)) for words in batch.features]

    def warm_up(self) -> None:
        """Nothing to warm: the lexicon is a dict."""
