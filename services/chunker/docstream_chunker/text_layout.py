"""Pure: the layout of a page's text: blocks in reading order, OCR pieces into paragraphs; the CER.

``reading_order`` is the one column rule, for the text layer's blocks (docstream_chunker.extraction)
and for OCR's paragraphs alike.

An OCR engine gives pieces of text with their boxes (Tesseract: one per line; RapidOCR: one per
run of text, a line may come in several). ``page_text`` joins the pieces of one line (same
row, small gaps, left to right), gathers lines into paragraphs (a line directly under the
previous one of a paragraph, overlapping it horizontally, with a gap below
``PARAGRAPH_GAP`` times the line height) and orders the paragraphs like the text layer's blocks
(``reading_order``: top to bottom, side-by-side columns one after the other). Paragraphs are
separated by a blank line, a paragraph's lines by one space: the format of
docs/chunking.md "Extraction".

``without_nul`` is the one place every page's text passes before chunking (the text layer's, OCR's, the
tables' cells): a NUL becomes U+FFFD, so that no store or sink is handed one (PostgreSQL refuses ``\x00`` in text).

``character_error_rate`` is the measure of the accuracy tests and the OCR benchmark.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from docstream.tables import PageTable
from docstream_chunker.chunking import PageText

__all__ = [
    "LINE_JOIN_GAP",
    "NUL_STAND_IN",
    "PARAGRAPH_GAP",
    "OcrLine",
    "character_error_rate",
    "join_lines",
    "levenshtein",
    "page_text",
    "reading_order",
    "unspaced",
    "without_nul",
]

LINE_JOIN_GAP = 2.0
"""Pieces on one row join into one line when the gap between them is at most this times their height."""
PARAGRAPH_GAP = 0.8
"""A line starts a new paragraph when the gap above it exceeds this times the line height."""
_SAME_ROW = 0.5
"""Two pieces are on one row when their vertical overlap is at least this share of the lower one."""
NUL_STAND_IN = "\ufffd"
"""What a NUL of a page's text becomes: one character for one, so every offset into the text holds, and the
character Unicode has for "a character was here that could not be kept" (the tokenizers drop both alike)."""
_NUL = "\x00"


@dataclass(frozen=True, slots=True)
class OcrLine:
    """A piece of recognised text and its box, in page coordinates (points, origin top left)."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str

    @property
    def height(self) -> float:
        """The box's height (at least a point)."""
        return max(self.y1 - self.y0, 1.0)


@dataclass(slots=True)
class _Paragraph:
    lines: list[OcrLine] = field(default_factory=list)

    @property
    def box(self) -> tuple[float, float, float, float]:
        return (
            min(line.x0 for line in self.lines),
            min(line.y0 for line in self.lines),
            max(line.x1 for line in self.lines),
            max(line.y1 for line in self.lines),
        )

    def takes(self, line: OcrLine, height: float) -> bool:
        last = self.lines[-1]
        gap = line.y0 - last.y1
        overlap = min(line.x1, last.x1) - max(line.x0, last.x0)
        return -0.5 * height <= gap <= PARAGRAPH_GAP * height and overlap > 0


def page_text(pieces: Sequence[OcrLine], width: float) -> str:
    """The page's text from an engine's pieces: paragraphs in reading order, blank lines between.

    Args:
        pieces: recognised text with boxes, in any order.
        width: the page's width, in the pieces' coordinates (for the column rule).
    """
    lines = _join_rows([p for p in pieces if p.text.strip()])
    if not lines:
        return ""
    height = statistics.median(line.height for line in lines)
    paragraphs: list[_Paragraph] = []
    for line in sorted(lines, key=lambda li: (li.y0, li.x0)):
        open_ = [p for p in paragraphs if p.takes(line, height)]
        if open_:
            max(open_, key=lambda p: p.lines[-1].y1).lines.append(line)
        else:
            paragraphs.append(_Paragraph([line]))
    blocks = sorted(((*p.box, " ".join(li.text for li in p.lines)) for p in paragraphs), key=lambda b: (b[1], b[0]))
    return "\n\n".join(b[4] for b in reading_order(blocks, width))


def _join_rows(pieces: list[OcrLine]) -> list[OcrLine]:
    """Pieces of one row, close enough, as one line (left to right, one space between)."""
    lines: list[OcrLine] = []
    for piece in sorted(pieces, key=lambda p: (p.x0, p.y0)):
        for i, line in enumerate(lines):
            overlap = min(line.y1, piece.y1) - max(line.y0, piece.y0)
            gap = piece.x0 - line.x1
            if overlap >= _SAME_ROW * min(line.height, piece.height) and gap <= LINE_JOIN_GAP * piece.height:
                lines[i] = OcrLine(
                    line.x0, min(line.y0, piece.y0), max(line.x1, piece.x1), max(line.y1, piece.y1),
                    f"{line.text} {' '.join(piece.text.split())}",
                )
                break
        else:
            lines.append(OcrLine(piece.x0, piece.y0, piece.x1, piece.y1, " ".join(piece.text.split())))
    return lines


def reading_order(blocks: Sequence[tuple[Any, ...]], width: float) -> list[tuple[Any, ...]]:
    """Blocks ``(x0, y0, x1, y1, ...)`` sorted top to bottom, but side-by-side columns one after the other.

    Between two blocks that cross the page's middle (full-width titles, footers), the blocks
    wholly left of the middle come first, then those wholly right of it. Left-side blocks below
    the right column stay in the left column: columns rarely end level.
    """
    middle = width / 2

    def side(block: tuple[Any, ...]) -> int:
        if block[2] <= middle + 2:
            return -1
        return 1 if block[0] >= middle - 2 else 0

    sides = [side(b) for b in blocks]
    if -1 not in sides or 1 not in sides:
        return list(blocks)
    ordered: list[tuple[Any, ...]] = []
    section: list[tuple[tuple[Any, ...], int]] = []
    for block, where in zip(blocks, sides, strict=True):
        if where == 0:
            ordered.extend(_columns(section))
            section = []
            ordered.append(block)
        else:
            section.append((block, where))
    ordered.extend(_columns(section))
    return ordered


def _columns(section: list[tuple[tuple[Any, ...], int]]) -> list[tuple[Any, ...]]:
    right = [b for b, where in section if where > 0]
    left = [b for b, where in section if where < 0]
    if not right or not left:
        return [b for b, _ in section]
    return left + right


def levenshtein(a: str, b: str) -> int:
    """The edit distance between ``a`` and ``b`` (insertions, deletions, substitutions, each 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def character_error_rate(recognized: str, reference: str, *, spaces: bool = True) -> float:
    """Levenshtein distance / reference length, over whitespace-normalised texts (runs of whitespace → one space).

    Args:
        recognized: the text read.
        reference: the true text.
        spaces: False drops all whitespace first (scripts written without spaces, such as
            Chinese, where a line break is no word boundary).

    Raises:
        ValueError: the reference is empty (nothing to measure against).
    """
    joiner = " " if spaces else ""
    hypothesis, truth = joiner.join(recognized.split()), joiner.join(reference.split())
    if not truth:
        raise ValueError("the reference text is empty")
    return levenshtein(hypothesis, truth) / len(truth)


def join_lines(lines: Iterable[str]) -> str:
    """The lines of one paragraph as one line: joined by a space, except between two characters of
    scripts written without spaces (Han, Kana), where a line break is no word boundary."""
    out = ""
    for line in (line.strip() for line in lines):
        if not line:
            continue
        if out and not (unspaced(out[-1]) and unspaced(line[0])):
            out += " "
        out += line
    return out


def unspaced(char: str) -> bool:
    """Whether ``char`` belongs to a script written without spaces between words (Han, Kana, their full-width forms)."""
    return "\u3000" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff" or "\uff00" <= char <= "\uffef"


def _nul_free(text: str) -> str:
    return text.replace(_NUL, NUL_STAND_IN) if _NUL in text else text


def _table_without_nul(table: PageTable) -> PageTable:
    cells = tuple(replace(c, text=_nul_free(c.text)) if _NUL in c.text else c for c in table.cells)
    caption = None if table.caption is None else _nul_free(table.caption)
    return replace(table, cells=cells, caption=caption)


def without_nul(page: PageText) -> PageText:
    """``page`` with every NUL of its text, its headings and its tables (cells, caption) replaced by
    ``NUL_STAND_IN``; ``page`` itself when it holds none.

    Only NUL goes: the other C0 controls are kept (every store and sink takes them; PostgreSQL refuses NUL alone).
    """
    tables_nul = any(_NUL in (t.caption or "") or any(_NUL in c.text for c in t.cells) for t in page.tables)
    if _NUL not in page.text and not tables_nul and not any(_NUL in h.title for h in page.headings):
        return page
    return replace(page, text=_nul_free(page.text),
                   headings=tuple(replace(h, title=_nul_free(h.title)) for h in page.headings),
                   tables=tuple(_table_without_nul(t) for t in page.tables) if tables_nul else page.tables)
