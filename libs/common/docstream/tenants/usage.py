"""Job accounting, pure: what a document, a job and a tenant cost (docs/operations.md "What a job cost").

A ``Usage`` holds pages, chunks, tokens, model time per device, busy time per stage, and the prompt and
completion tokens a chat model's server counted (generate). Times
are integer microseconds, so that sums are exact and the same in every order: the reducer
folds chunk figures into documents and documents into jobs in whatever order the records come,
and a redelivered record, which changes nothing, leaves the same totals.

* The chunker times each document (fetch + extraction + chunking: stage ``chunker``) and the
  inference service each micro-batch (stage ``inference``: tokenizing, the forward pass and the
  store write; the forward pass alone is the model time, per device). ``apportion`` splits a
  batch's or a document's time over its chunks by token share, so that the shares add up to the
  whole and each ChunkResult carries its own part.
* ``document_usage`` is what a DocumentCompleted says its document cost; ``total_usage`` adds
  documents (a job) or jobs (a tenant).

Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docstream.records import DocumentCompleted

__all__ = [
    "CHAT_COMPLETION",
    "CHAT_PROMPT",
    "MAX_KEYS",
    "STAGE_CHUNKER",
    "STAGE_INFERENCE",
    "UNKNOWN_DEVICE",
    "Usage",
    "across_tasks",
    "add_counts",
    "apportion",
    "chat_tokens_of",
    "document_usage",
    "read_counts",
    "seconds",
    "total_usage",
]

STAGE_CHUNKER = "chunker"
"""Stage key of the chunker's time on a document: fetch, extraction (OCR included) and chunking."""
STAGE_INFERENCE = "inference"
"""Stage key of the inference service's time on a chunk's batch: tokenizing, forward pass, store write."""
CHAT_PROMPT = "prompt"
"""``Usage.chat_tokens`` key of a chat server's prompt tokens."""
CHAT_COMPLETION = "completion"
"""``Usage.chat_tokens`` key of a chat server's completion tokens."""
UNKNOWN_DEVICE = "unknown"
"""Device key of model time whose record named no device."""
MAX_KEYS = 32
"""Most devices or stages one usage holds; more is a foreign writer, refused by ``Usage.from_json``."""
_MAX_KEY_LENGTH = 64


def seconds(micros: int) -> float:
    """Microseconds as seconds."""
    return micros / 1_000_000


def add_counts(a: Mapping[str, int], b: Mapping[str, int], *, sign: int = 1) -> dict[str, int]:
    """``a`` plus (or, with ``sign=-1``, minus) ``b``, key by key; keys that reach 0 are dropped."""
    out = dict(a)
    for key, value in b.items():
        total = out.get(key, 0) + sign * value
        if total:
            out[key] = total
        else:
            out.pop(key, None)
    return out


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` into parts proportional to ``weights`` that add up to exactly ``total``.

    A weight below 1 counts as 1 (a chunk of 0 tokens still had its place in the batch). The
    remainder goes to the largest fractional parts, ties to the earlier index: the same input
    always gives the same parts.

    Raises:
        ValueError: ``total`` is negative.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    if not weights:
        return []
    clean = [max(int(w), 1) for w in weights]
    whole = sum(clean)
    parts = [total * w // whole for w in clean]
    left = total - sum(parts)
    order = sorted(range(len(clean)), key=lambda i: (-(total * clean[i] % whole), i))
    for i in order[:left]:
        parts[i] += 1
    return parts


def read_counts(data: Any, what: str = "counts", *, limit: int | None = MAX_KEYS) -> dict[str, int]:
    """A map of counts (None: empty), checked; zeros are dropped.

    Args:
        data: the map, as a record or JSON holds it.
        what: its name in the error.
        limit: most entries allowed (None: any number).

    Raises:
        ValueError: not a map of at most ``limit`` names (1 to 64 characters) to non-negative integers.
    """
    if data is None:
        return {}
    if not isinstance(data, Mapping) or (limit is not None and len(data) > limit):
        raise ValueError(f"{what} is not a map of at most {limit} entries")
    out: dict[str, int] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY_LENGTH:
            raise ValueError(f"{what}: bad key {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{what}[{key}]: {value!r} is not a count")
        if value:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class Usage:
    """What some work cost.

    Attributes:
        pages: pages of the documents (as the chunker counted them).
        chunks: chunks of the documents.
        tokens: tokens of the embedded chunks by the model's tokenizer, without special tokens;
            the overlap between neighbouring chunks is in both (it is what the model processed).
        model_us: forward-pass microseconds per device (``cpu``, ``cuda:0``, ``mps``, ...).
        stage_us: busy microseconds per stage (``chunker``, ``inference``).
        chat_tokens: the tokens a chat model's server counted in its ``usage`` (the generate task), by kind:
            ``prompt`` and ``completion`` (``CHAT_PROMPT``, ``CHAT_COMPLETION``).
    """

    pages: int = 0
    chunks: int = 0
    tokens: int = 0
    model_us: Mapping[str, int] = field(default_factory=dict)
    stage_us: Mapping[str, int] = field(default_factory=dict)
    chat_tokens: Mapping[str, int] = field(default_factory=dict)

    @property
    def prompt_tokens(self) -> int:
        """The chat server's prompt tokens."""
        return self.chat_tokens.get(CHAT_PROMPT, 0)

    @property
    def completion_tokens(self) -> int:
        """The chat server's completion tokens."""
        return self.chat_tokens.get(CHAT_COMPLETION, 0)

    @property
    def model_seconds(self) -> float:
        """Forward-pass seconds over every device."""
        return seconds(sum(self.model_us.values()))

    @property
    def device(self) -> str | None:
        """The device the model ran on; several joined by ``+`` (sorted); None when it never ran."""
        return "+".join(sorted(self.model_us)) or None

    @property
    def stage_seconds(self) -> dict[str, float]:
        """Busy seconds per stage."""
        return {stage: seconds(us) for stage, us in sorted(self.stage_us.items())}

    @property
    def is_empty(self) -> bool:
        """Nothing counted."""
        return not (self.pages or self.chunks or self.tokens or self.model_us or self.stage_us or self.chat_tokens)

    def plus(self, other: Usage) -> Usage:
        """This usage and ``other`` together."""
        return Usage(self.pages + other.pages, self.chunks + other.chunks, self.tokens + other.tokens,
                     add_counts(self.model_us, other.model_us), add_counts(self.stage_us, other.stage_us),
                     add_counts(self.chat_tokens, other.chat_tokens))

    def minus(self, other: Usage) -> Usage:
        """This usage without ``other`` (a part counted before: a document whose result was replaced)."""
        return Usage(self.pages - other.pages, self.chunks - other.chunks, self.tokens - other.tokens,
                     add_counts(self.model_us, other.model_us, sign=-1),
                     add_counts(self.stage_us, other.stage_us, sign=-1),
                     add_counts(self.chat_tokens, other.chat_tokens, sign=-1))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (tables, the reducer's by-job records); ``chat_tokens`` only when some."""
        out: dict[str, Any] = {"pages": self.pages, "chunks": self.chunks, "tokens": self.tokens,
                               "model_us": dict(sorted(self.model_us.items())),
                               "stage_us": dict(sorted(self.stage_us.items()))}
        if self.chat_tokens:
            out["chat_tokens"] = dict(sorted(self.chat_tokens.items()))
        return out

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        """Rebuild from ``to_json()``; None (written before accounting existed) is an empty usage.

        Raises:
            ValueError: not a usage: negative or non-integer counts, more than ``MAX_KEYS`` devices or stages.
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError("usage is not a map")
        numbers = read_counts({k: data.get(k, 0) for k in ("pages", "chunks", "tokens")}, "usage")
        return cls(numbers.get("pages", 0), numbers.get("chunks", 0), numbers.get("tokens", 0),
                   read_counts(data.get("model_us"), "model_us"), read_counts(data.get("stage_us"), "stage_us"),
                   read_counts(data.get("chat_tokens"), "chat_tokens"))


def document_usage(completed: DocumentCompleted) -> Usage:
    """What one document cost, from its DocumentCompleted (pages 0 when unknown); ``chat_tokens`` from its
    output's ``prompt_tokens`` and ``completion_tokens`` where it has them (the generate task's, the server's own
    counts summed over the document's chunks and its document step)."""
    return Usage(
        pages=completed.page_count or 0,
        chunks=completed.chunk_count,
        tokens=completed.token_count,
        model_us=dict(completed.model_us),
        stage_us=dict(completed.stage_us),
        chat_tokens=chat_tokens_of(completed.output),
    )


def chat_tokens_of(output: str | None) -> dict[str, int]:
    """``{"prompt": n, "completion": m}`` from a document output's ``prompt_tokens`` and ``completion_tokens``
    (JSON); empty when it has none, or its counts are not counts."""
    if not output or "completion_tokens" not in output:
        return {}
    try:
        data = json.loads(output)
    except ValueError:
        return {}
    if not isinstance(data, Mapping):
        return {}
    try:
        return read_counts({CHAT_PROMPT: data.get("prompt_tokens", 0),
                            CHAT_COMPLETION: data.get("completion_tokens", 0)}, "chat_tokens")
    except ValueError:
        return {}


def across_tasks(usages: Iterable[Usage]) -> Usage:
    """What one document cost over the tasks its job asked for (docs/tasks.md "What a job of several tasks costs").

    Each task's result carries the document's pages, chunks and tokens and the chunker's time: those are
    the document's once (the largest, as they agree). Model time and every stage but the chunker's are
    each task's own: they add up.
    """
    pages = chunks = tokens = 0
    model_us: dict[str, int] = {}
    stage_us: dict[str, int] = {}
    chat_tokens: dict[str, int] = {}
    for usage in usages:
        pages, chunks, tokens = max(pages, usage.pages), max(chunks, usage.chunks), max(tokens, usage.tokens)
        model_us = add_counts(model_us, usage.model_us)
        chat_tokens = add_counts(chat_tokens, usage.chat_tokens)
        for stage, value in usage.stage_us.items():
            stage_us[stage] = max(stage_us.get(stage, 0), value) if stage == STAGE_CHUNKER else \
                stage_us.get(stage, 0) + value
    return Usage(pages, chunks, tokens, model_us, dict(sorted(stage_us.items())), chat_tokens)


def total_usage(usages: Iterable[Usage | None]) -> Usage:
    """The sum of ``usages`` (None counts as nothing): a job's documents, a tenant's jobs."""
    total = Usage()
    for usage in usages:
        if usage is not None:
            total = total.plus(usage)
    return total
