"""The ranges and the enumerations of record fields, stated once: the settings, the intake's request checks, the
API's request and response models and the chunker import them from here. Pure.

The enumerations Avro declares (``ChunkStatus``, ``DocumentStatus``, ``JobState``) come from the schemas with the
records (``docstream.records.generated``); the lanes are ``docstream.lanes``'.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Final, Literal

from docstream.records.generated import DocumentCompleted

__all__ = [
    "CHUNK_MAX_TOKENS",
    "CHUNK_OVERLAP_TOKENS",
    "OUTPUT_TOO_LARGE",
    "ChunkKind",
    "Range",
    "TextSource",
    "output_too_large",
    "record_limit",
]


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive range of integers.

    Attributes:
        least: the smallest value in it.
        most: the largest value in it.
    """

    least: int
    most: int

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.least <= value <= self.most

    def __str__(self) -> str:
        return f"{self.least}-{self.most}"


CHUNK_MAX_TOKENS: Final = Range(8, 8192)
"""Most tokens in a chunk: ``chunker.max_tokens`` and a job's ``chunk_max_tokens`` (DocumentSubmitted)."""
CHUNK_OVERLAP_TOKENS: Final = Range(0, CHUNK_MAX_TOKENS.most - 1)
"""Tokens shared by consecutive chunks of a job (``chunk_overlap_tokens``); also below its chunk size."""

TextSource = Literal["text_layer", "ocr"]
"""Where a chunk's text came from (``ChunkCreated.text_source``): the document's text layer, or OCR."""

ChunkKind = Literal["text", "table"]
"""What a chunk holds (``ChunkCreated.kind``): text, or one part of a table (docs/chunking.md "Tables")."""


# -- the size of a record ----------------------------------------------------------------------------------

OUTPUT_TOO_LARGE = "output_too_large"
"""error_code of a document whose DocumentCompleted would be larger than a record may be (``record_limit``)."""

_RECORD_HEADROOM_BYTES = 64 * 1024
_COST_KEYS = ("kind", "prompt_tokens", "completion_tokens")


def record_limit(max_message_bytes: int) -> int:
    """The most bytes a record's serialized value may hold, under a bound of ``max_message_bytes`` on the whole
    record (``kafka.max_message_bytes``: the producers' and the topics'). A quarter of it, at most 64 KiB, is left
    to the key, the record's framing and headers, and what the reducer adds after it measured the value (the
    documents row's source, filename and page counts)."""
    return max_message_bytes - min(_RECORD_HEADROOM_BYTES, max_message_bytes // 4)


def output_too_large(completed: DocumentCompleted, size: int, limit: int) -> DocumentCompleted:
    """``completed`` failed with ``OUTPUT_TOO_LARGE``: its results dropped (embedding, scores, mentions, entities,
    output), its counts kept, and of its output what it cost (``kind``, ``prompt_tokens``, ``completion_tokens``:
    a job's chat tokens are the server's bill whatever became of the answers)."""
    return replace(completed, status="failed", error_code=OUTPUT_TOO_LARGE,
                   error=f"the document's result is at least {size} bytes, over the {limit} a record holds "
                         "(kafka.max_message_bytes less headroom)",
                   embedding=[], label_scores={}, top_label=None, top_chunks=[], mentions=[], entities=[],
                   mentions_truncated=False, output=_cost_of(completed.output))


def _cost_of(output: str | None) -> str | None:
    try:
        value = json.loads(output) if output else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    kept = {key: value[key] for key in _COST_KEYS
            if isinstance(value.get(key), int) or (isinstance(value.get(key), str) and len(value[key]) <= 64)}
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":")) if kept else None
