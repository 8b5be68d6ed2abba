"""The entities task's fold: a document's mentions, overlap duplicates merged, and its index of entities. Pure.

State: ``{"m": [[start, end, label, text, page, score, cut], ...], "t": truncated}``, every raw mention
of the chunks folded so far, kept sorted (so the state itself does not depend on the order chunks
arrive in) and bounded by ``MAX_DOCUMENT_MENTIONS``: past it the mentions with the lowest
``(start, end, label)`` are kept, which is the same set whatever the order, and ``t`` is set.

``finish`` merges (docs/tasks.md "entities"):

1. a ``cut`` mention that overlaps any mention that is not cut (any label) is dropped: an entity cut
   at a chunk boundary is taken from the chunk that holds it whole;
2. the cut fragments left of one label are joined where the chunk overlap shows them to be one
   entity longer than the overlap: in order of start, a fragment that starts after the joined span
   starts, no later than it ends (overlapping or touching) and ends after it, and whose text agrees
   with it where they overlap, extends it. A joined mention spans its pieces, its text is the first
   piece's followed by each later piece past the overlap (so it is the document's text of the span),
   its page the first piece's, its score the lowest of its pieces', and it is not ``cut``; a
   fragment joined to nothing stays ``cut``;
3. of mentions with the same label whose spans overlap (the same entity seen by two overlapping
   chunks) one is kept: the longer span, then the higher score, then the lower start, then the text.
"""

from __future__ import annotations

import bisect
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from docstream.tasks.base import (
    MAX_CHUNK_MENTIONS,
    DocumentOutput,
    EntitySummary,
    FoldInput,
    Mention,
    TaskOutputError,
)

__all__ = ["MAX_DOCUMENT_MENTIONS", "EntitiesFold", "merge_mentions", "normalize_entity_text", "summarize_entities"]

MAX_DOCUMENT_MENTIONS = 5000
"""Most raw mentions the fold keeps of one document (the lowest offsets; ``mentions_truncated`` says so)."""

_SPACES = re.compile(r"\s+")

_Row = list[Any]  # [start, end, label, text, page, score, cut]


def normalize_entity_text(text: str) -> str:
    """The key of an entity's text in the index: NFKC, whitespace collapsed to one space, casefolded."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def _row(mention: Mention, where: str) -> _Row:
    if not isinstance(mention, Mention):
        raise TaskOutputError(f"{where}: a mention is {type(mention).__name__}, not a Mention")
    score = float(mention.score)
    if not (0 <= mention.start < mention.end and len(mention.text) == mention.end - mention.start
            and mention.label and mention.page >= 1 and math.isfinite(score) and 0.0 <= score <= 1.0):
        raise TaskOutputError(f"{where}: invalid mention {mention.label!r} at {mention.start}..{mention.end} "
                              f"(text of {len(mention.text)} characters, page {mention.page}, score {score})")
    return [mention.start, mention.end, mention.label, mention.text, mention.page, score, bool(mention.cut)]


def _order(row: _Row) -> tuple[Any, ...]:
    return (row[0], row[1], row[2], row[3], row[4], row[5], row[6])


def _mention(row: Sequence[Any]) -> Mention:
    return Mention(str(row[3]), str(row[2]), int(row[0]), int(row[1]), int(row[4]), float(row[5]), bool(row[6]))


class _Intervals:
    """Non-overlapping half-open intervals, sorted; ``overlaps`` in O(log n)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self._ends, start + 1)  # the first interval ending after ``start``
        return i < len(self._starts) and self._starts[i] < end

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._ends.insert(i, end)


def _overlaps_any(starts: Sequence[int], reach: Sequence[int], start: int, end: int) -> bool:
    # intervals sorted by start; reach[i] is the largest end among the first i + 1 of them
    i = bisect.bisect_left(starts, end) - 1  # the last one starting before ``end``
    return i >= 0 and reach[i] > start


def _agrees(joined: _Row, piece: _Row) -> bool:
    # both are the document's text, so where they overlap they are the same characters
    overlap = joined[1] - piece[0]
    return str(joined[3])[len(joined[3]) - overlap:] == str(piece[3])[:overlap]


def _join_fragments(fragments: Iterable[_Row]) -> list[_Row]:
    """``fragments`` (cut rows) with the pieces of one entity joined (the module's rule 2)."""
    # a total order on the rows (label, start, the longest first, the highest score first), so the
    # joins do not depend on the order the fragments came in
    ordered = sorted(fragments, key=lambda r: (r[2], r[0], -r[1], -r[5], r[3], r[4]))
    out: list[_Row] = []
    span: _Row | None = None
    for r in ordered:
        if span is not None and r[2] == span[2] and span[0] < r[0] <= span[1] < r[1] and _agrees(span, r):
            span = [span[0], r[1], span[2], str(span[3]) + str(r[3])[span[1] - r[0]:], span[4],
                    min(span[5], r[5]), False]
        elif span is not None and r[2] == span[2] and span[0] <= r[0] and r[1] <= span[1]:
            out.append(r)  # inside the span: seen again by another chunk, rule 3 keeps the span
        else:
            if span is not None:
                out.append(span)
            span = r
    if span is not None:
        out.append(span)
    return out


def merge_mentions(mentions: Iterable[Mention]) -> tuple[Mention, ...]:
    """Every mention once: cut fragments joined or removed, overlap duplicates removed (the module's rules).

    The result does not depend on the order of ``mentions``; it is in document order
    ``(start, end, label)``. A mention in it is ``cut`` only when it is a fragment that no whole
    mention overlaps and no other fragment joins (an entity whose other pieces were not found).

    Raises:
        TaskOutputError: a malformed mention.
    """
    rows = [_row(m, "mention") for m in mentions]
    whole = sorted((r for r in rows if not r[6]), key=_order)
    starts = [r[0] for r in whole]
    reach: list[int] = []
    for r in whole:
        reach.append(max(r[1], reach[-1]) if reach else r[1])
    candidates = whole + _join_fragments(r for r in rows if r[6] and not _overlaps_any(starts, reach, r[0], r[1]))
    # longest first, then highest score, lower start, text; the rest of the row makes the order total
    candidates.sort(key=lambda r: (r[0] - r[1], -r[5], r[0], r[3], r[1], r[2], r[4], r[6]))
    kept: dict[str, _Intervals] = {}
    out: list[_Row] = []
    for r in candidates:
        taken = kept.setdefault(r[2], _Intervals())
        if not taken.overlaps(r[0], r[1]):
            taken.add(r[0], r[1])
            out.append(r)
    out.sort(key=_order)
    return tuple(_mention(r) for r in out)


def summarize_entities(mentions: Iterable[Mention]) -> tuple[EntitySummary, ...]:
    """The distinct ``(label, normalised text)`` of ``mentions`` with counts and sorted pages, by (label, text)."""
    counts: dict[tuple[str, str], int] = {}
    pages: dict[tuple[str, str], set[int]] = {}
    for m in mentions:
        key = (m.label, normalize_entity_text(m.text))
        counts[key] = counts.get(key, 0) + 1
        pages.setdefault(key, set()).add(m.page)
    return tuple(EntitySummary(label, text, counts[(label, text)], tuple(sorted(pages[(label, text)])))
                 for label, text in sorted(counts))


class EntitiesFold:
    """Document mentions in document offsets, overlap duplicates merged, cut fragments joined, and their index."""

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"m": [], "t": False}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """The state with ``chunk``'s mentions added (sorted, the lowest ``MAX_DOCUMENT_MENTIONS`` kept).

        Raises:
            TaskOutputError: a malformed mention, or more than ``MAX_CHUNK_MENTIONS`` in one chunk.
        """
        if len(chunk.mentions) > MAX_CHUNK_MENTIONS:
            raise TaskOutputError(f"chunk {chunk.index} has {len(chunk.mentions)} mentions, at most "
                                  f"{MAX_CHUNK_MENTIONS}")
        rows = [list(r) for r in state["m"]] + [_row(m, f"chunk {chunk.index}") for m in chunk.mentions]
        rows.sort(key=_order)
        truncated = bool(state["t"]) or len(rows) > MAX_DOCUMENT_MENTIONS
        return {"m": rows[:MAX_DOCUMENT_MENTIONS], "t": truncated}

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """The merged mentions in document order, the index of distinct entities, and whether mentions were cut off."""
        mentions = merge_mentions(_mention(r) for r in state["m"])
        return DocumentOutput(mentions=mentions, entities=summarize_entities(mentions),
                              mentions_truncated=bool(state["t"]))
