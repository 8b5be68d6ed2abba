"""Where a born-digital page has a table, and its cells with their spans and caption. Pure.

Extraction (``docstream_chunker.extraction``) finds tables with PyMuPDF's ``Page.find_tables`` on pages whose
text is kept from the text layer, where cheap checks say a table may be there (``looks_tabular`` on the
text blocks it already has, then ``ruled_grid`` or ``ruled_rows`` on the page's vector paths, or
``aligned_columns`` on the lines of the blocks ``side_by_side_boxes`` names), and lays each out here:
``grid_cells`` gives the cells with their spans from the finder's cell boxes and the page's characters,
``without_empty_columns`` drops the columns the layout model split off, ``header_spans`` the spans of a
header of two rows that no rule between its cells shows (booktabs, shaded rows), ``caption_index`` the block
that captions it. ``docstream.tables`` holds what the other services read of a table.
"""

from __future__ import annotations

import itertools
import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from statistics import median_high
from typing import cast

from docstream.tables import Box, PageTable, TableCell
from docstream_chunker.text_layout import unspaced

__all__ = [
    "Forms",
    "Matrix",
    "aligned_columns",
    "caption_index",
    "content_paths",
    "few_rows",
    "form_matrix",
    "grid_cells",
    "header_spans",
    "inside",
    "looks_tabular",
    "overlapping",
    "ruled_grid",
    "ruled_rows",
    "side_by_side_boxes",
    "split_at_gaps",
    "with_layout_grids",
    "with_layout_tables",
    "without_empty_columns",
]

_SNAP = 2.0
"""Cell edges nearer than this (points) are one grid line."""
_SIDE_BY_SIDE = 0.8
"""A block's lines are side by side, not stacked, below this line pitch over character width (module docs)."""
_MARGIN = 0.08
"""Share of the page's height at its top and bottom where running heads and feet are."""
_MIN_CELLS = 4
"""Side-by-side lines a page needs to hint at a table."""
_MIN_ROWS = 3
"""Rows whose lines stand at shared edges that make a table with nothing drawn: a header and two body rows."""
_MIN_COLUMNS = 3
"""Lines at shared edges a row needs to count as a table's row."""
_ALIGN = 3.0
"""Points within which the edges of lines in different rows are one column's."""
_TOUCH = 0.25
"""Characters further apart than this share of their height are not one piece of a word (``grid_cells``)."""
_ROW_PITCH = 4.0
"""Most line heights between a table's rows (a row of cells wrapped over two lines in between): further apart
they are lines of different things, headings set flush right over paragraphs."""
_MIN_EDGE = 3.0
"""Shorter strokes are not table rules (PyMuPDF's edge_min_length)."""
_THIN = 1.5
"""A filled rectangle thinner than this is a rule."""
_MIN_EDGES = 3
"""A grid of two rows and two columns has at least three horizontal and three vertical rules."""
_MIN_RULE_WIDTH = 72.0
"""Rules and bands narrower than this (points: an inch) frame no table: underlines, strike-throughs."""
_MAX_BAND = 40.0
"""Filled rectangles taller than this are boxes, not the shading of a row."""
_MIN_RULES = 3
"""Horizontal rules of one width a booktabs table draws: top, middle and bottom."""
_MIN_BANDS = 2
"""Row-high bands of one width shaded rows draw (the header's and every other row's)."""
_CAPTION_GAP = 24.0
"""Most points between a caption and its table."""
_CAPTION = re.compile(
    r"^\s*(?:table|tab\.|tabelle|tableau|tabla|tabella|tabel|tabela|tabulka|taulukko|tablo|"
    r"таблица|табл\.|таблиця|πίνακας|جدول|טבלה|तालिका|表|표)\s*[0-9IVXLCivxlc一二三四五六七八九十百]",
    re.IGNORECASE,
)



def looks_tabular(blocks: Iterable[tuple[float, float, float, float, str]], height: float) -> bool:
    """Whether a page's text blocks hint at a table: the first, free check before any table is looked for.

    MuPDF puts the cells of a table's row, far apart on one baseline, in one block as lines side by
    side. Stacked lines make a block about ``lines x line height`` tall and as wide as its longest
    line; for side-by-side lines the line pitch (height / lines) against the character width
    (width / longest line's characters) comes out far smaller: below 0.8, where stacked lines give
    about 2.4 in Latin type and 1.2 in CJK type. A page hints at a table when such blocks, one under
    the other, hold at least four lines (two rows of two cells) outside its top and bottom 8 % (a
    running head, "Chapter 2 ... 17", is one such block of two lines). One under the other: each
    at most ``_ROW_PITCH`` line heights below those above it (a block's height stands for its line
    height, the smaller of the two), as a table's rows are; a manual's definition lines, a name set
    flush left and ``[Function]`` flush right with paragraphs between them, are blocks of one row
    each, ten line heights and more apart.

    Args:
        blocks: the page's text blocks: x0, y0, x1, y1 and the text, lines ending in newlines.
        height: the page's height.
    """
    rows = sorted((block[1], block[3], lines) for block in blocks
                  if (lines := _side_by_side_lines(block, height)))
    run, bottom, line = 0, 0.0, 0.0
    for top, low, lines in rows:
        if run and top - bottom > _ROW_PITCH * min(line, low - top):
            run = 0
        run, bottom, line = run + lines, max(bottom, low) if run else low, low - top
        if run >= _MIN_CELLS:
            return True
    return False


def side_by_side_boxes(blocks: Iterable[tuple[float, float, float, float, str]], height: float) -> list[Box]:
    """The boxes of the blocks ``looks_tabular`` counts: those whose lines lie side by side, in the page's body."""
    return [cast(Box, tuple(block[:4])) for block in blocks if _side_by_side_lines(block, height)]


def _side_by_side_lines(block: tuple[float, float, float, float, str], height: float) -> int:
    """How many lines a block holds side by side (``looks_tabular``); 0 for stacked lines or the page's margins."""
    x0, y0, x1, y1, text = block
    count = text.count("\n")
    if count < 2 or x1 <= x0 or y1 <= y0 or not _MARGIN * height < (y0 + y1) / 2 < (1 - _MARGIN) * height:
        return 0
    # the longest line is at least the mean line: a block whose mean line is long enough is stacked
    most = _SIDE_BY_SIDE * (x1 - x0) * count / (y1 - y0)
    if len(text) / count - 1 >= most:
        return 0
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    if len(lines) >= 2 and max(map(len, lines)) * count / len(lines) < most:
        return len(lines)
    return 0


def aligned_columns(lines: Iterable[Box]) -> bool:
    """Whether text lines stand in columns: a table that draws nothing, neither rules nor shading.

    The lines (MuPDF's: a run of text on one baseline, parted where a wide gap parts a row's cells)
    are grouped in rows by their baselines. A column is a left or a right edge (left-aligned words,
    right-aligned numbers) that ``_MIN_ROWS`` rows of two lines or more share, within ``_ALIGN``
    points. The lines stand in columns when ``_MIN_ROWS`` rows one under the other (at most
    ``_ROW_PITCH`` line heights apart) each have lines at ``_MIN_COLUMNS`` columns at least: a header
    and two body rows of three columns. Two columns are not enough: a list of terms and definitions,
    an option list (``-c, --check   checks the syntax only``) and fields with their types look the
    same, and the layout model finds no table in them. A page this says yes to is given to PyMuPDF's
    layout model, like ``ruled_rows``'s.

    Args:
        lines: the lines' boxes (x0, y0, x1, y1), in any order: those of the blocks whose lines lie
            side by side (``side_by_side_boxes``), since two columns of prose share baselines too.
    """
    rows = [row for row in _baseline_rows(lines) if len(row) >= 2]
    if len(rows) < _MIN_ROWS:
        return False
    lefts = _shared_edges([[box[0] for box in row] for row in rows])
    rights = _shared_edges([[box[2] for box in row] for row in rows])
    run, previous = 0, None
    for row in rows:
        if sum(1 for box in row if _near(lefts, box[0]) or _near(rights, box[2])) < _MIN_COLUMNS:
            continue
        centre, line = (row[0][1] + row[0][3]) / 2, row[0][3] - row[0][1]
        run = run + 1 if previous is not None and centre - previous <= _ROW_PITCH * line else 1
        if run >= _MIN_ROWS:
            return True
        previous = centre
    return False


def _baseline_rows(lines: Iterable[Box]) -> list[list[Box]]:
    """Lines grouped by row: a line whose vertical centre lies within the row's first line's height, top first."""
    rows: list[list[Box]] = []
    for box in sorted(lines, key=lambda b: (b[1] + b[3]) / 2):
        first = rows[-1][0] if rows else None
        if first is not None and abs((box[1] + box[3]) - (first[1] + first[3])) / 2 <= (first[3] - first[1]) / 2:
            rows[-1].append(box)
        else:
            rows.append([box])
    return rows


def _shared_edges(rows: Sequence[Sequence[float]]) -> list[float]:
    """The edges (grouped as ``_snap`` groups grid lines) that at least ``_MIN_ROWS`` rows have a line at."""
    edges = _snap(x for row in rows for x in row)
    counts = [0] * len(edges)
    for row in rows:
        for i in {_line_of(edges, x) for x in row}:
            counts[i] += 1
    return [edge for edge, count in zip(edges, counts, strict=True) if count >= _MIN_ROWS]


def _near(edges: Sequence[float], value: float) -> bool:
    """Whether ``value`` lies within ``_ALIGN`` points of one of ``edges``."""
    return bool(edges) and abs(edges[_line_of(edges, value)] - value) <= _ALIGN


def ruled_grid(paths: Iterable[tuple[str, Box]]) -> bool:
    """Whether a page's vector paths could make a ruled table of two rows and two columns.

    Such a grid has horizontal rules at three heights at least and vertical rules at three
    places at least (two framed boxes, one under the other, have vertical rules at two only).

    Args:
        paths: each path item's kind (``l`` a line, ``re`` a rectangle, ``qu`` a quad: its box)
            and its box. A thin rectangle is one rule; a larger one, four (its sides).
    """
    heights: list[float] = []
    places: list[float] = []
    for kind, (x0, y0, x1, y1) in paths:
        width, height = abs(x1 - x0), abs(y1 - y0)
        if kind == "l" or min(width, height) <= _THIN:
            if height <= _THIN and width >= _MIN_EDGE:
                heights.append((y0 + y1) / 2)
            elif width <= _THIN and height >= _MIN_EDGE:
                places.append((x0 + x1) / 2)
        elif kind in ("re", "qu"):
            heights.extend((y0, y1))
            places.extend((x0, x1))
    return len(_snap(heights)) >= _MIN_EDGES and len(_snap(places)) >= _MIN_EDGES


def ruled_rows(paths: Iterable[tuple[str, Box]]) -> bool:
    """Whether a page's vector paths could frame a table without vertical rules: booktabs or shaded rows.

    Such a table draws ``_MIN_RULES`` horizontal rules of one width at three heights (booktabs'
    top, middle and bottom rules), or ``_MIN_BANDS`` row-high filled bands of one width at two
    heights (shaded rows). Rules and bands narrower than ``_MIN_RULE_WIDTH`` do not count. A
    page this says yes to is given to PyMuPDF's layout model, which costs ~0.2-0.5 s: a text page
    without such rules never pays it.

    Args:
        paths: as ``ruled_grid`` takes them.
    """
    rules: dict[tuple[int, int], list[float]] = {}
    bands: dict[tuple[int, int], list[float]] = {}
    for kind, (x0, y0, x1, y1) in paths:
        width, height = abs(x1 - x0), abs(y1 - y0)
        if width < _MIN_RULE_WIDTH:
            continue
        extent = (round(min(x0, x1) / _SNAP), round(max(x0, x1) / _SNAP))
        if height <= _THIN:
            rules.setdefault(extent, []).append((y0 + y1) / 2)
        elif kind in ("re", "qu") and height <= _MAX_BAND:
            bands.setdefault(extent, []).append(min(y0, y1))
    return (any(len(_snap(ys)) >= _MIN_RULES for ys in rules.values())
            or any(len(_snap(ys)) >= _MIN_BANDS for ys in bands.values()))


_PATH_OPERATOR = re.compile(rb"(?<![^\s])(re|m|l|cm|q|Q|Do)(?=[\s\[\]<>(){}/%]|$)")
r"""An operator after whitespace or at the start, before a delimiter or at the end. One negative lookbehind, not
``(?:^|(?<=\s))``: the same matches, in two thirds of the time (the scan runs on every page the first check
passes)."""
_MAX_FORM_DEPTH = 4
"""Forms shown inside forms are followed this deep."""
_OPERANDS_SPAN = 144
"""Bytes before an operator its operands are looked for in (six numbers of up to 20 characters)."""
Matrix = tuple[float, float, float, float, float, float]
_IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _operands(stream: bytes, end: int, count: int) -> list[float] | None:
    """The ``count`` numbers just before ``end``, or None when they are not numbers."""
    words = stream[max(0, end - _OPERANDS_SPAN) : end].split()[-count:]
    if len(words) < count:
        return None
    try:
        return [float(word) for word in words]
    except ValueError:
        return None


def _concat(m: Sequence[float], n: Matrix) -> Matrix:
    """``m`` then ``n``: the matrix ``cm`` makes of operand ``m`` and the current one ``n`` (PDF 8.3.4)."""
    return (m[0] * n[0] + m[1] * n[2], m[0] * n[1] + m[1] * n[3],
            m[2] * n[0] + m[3] * n[2], m[2] * n[1] + m[3] * n[3],
            m[4] * n[0] + m[5] * n[2] + n[4], m[4] * n[1] + m[5] * n[3] + n[5])


def _point(ctm: Matrix, x: float, y: float) -> tuple[float, float]:
    return ctm[0] * x + ctm[2] * y + ctm[4], ctm[1] * x + ctm[3] * y + ctm[5]


Forms = Callable[[str], "tuple[bytes, Matrix] | None"]
"""A form XObject's content stream and its ``/Matrix`` by the name a stream shows it by; None: not a form."""


def content_paths(stream: bytes, matrix: Matrix = _IDENTITY, forms: Forms | None = None, *,
                  depth: int = 0) -> Iterator[tuple[str, Box]]:
    """Lines (``l``) and rectangles (``re``) a PDF content stream draws, with their boxes in ``matrix``'s space.

    A scan, not a parse: the numbers before ``m``, ``l`` and ``re`` operators, the current point
    kept from one to the next (a closing ``h`` is not followed), placed by the transformation
    matrix that ``cm`` operators set and ``q``/``Q`` save and restore. pdfTeX draws each rule of a
    table at 0 0 and moves it into place with a ``cm`` of its own: without the matrix every rule of
    a LaTeX table was at one place, and no LaTeX table was found. Words inside a text string that
    read as a path are taken too: a page that may hold a table more, never one less.

    Args:
        stream: a decompressed content stream (a page's or a form XObject's).
        matrix: the one the stream starts with: a page's ``transformation_matrix`` gives boxes in the
            page's coordinates, where its words and tables are.
        forms: looks up the forms the stream shows (``/Name Do``); each is read where it is placed (its
            matrix, then the one at its ``Do``), to ``_MAX_FORM_DEPTH`` forms deep. None: forms are skipped.
        depth: how many forms deep this stream is.
    """
    ctm, saved = matrix, []
    current: tuple[float, float] | None = None
    for match in _PATH_OPERATOR.finditer(stream):
        operator = match[1]
        if operator == b"q":
            saved.append(ctm)
            continue
        if operator == b"Q":
            ctm = saved.pop() if saved else matrix  # an unbalanced Q (a word of a string) starts over
            continue
        if operator == b"Do":
            shown = _form(stream, match.start(), forms) if depth < _MAX_FORM_DEPTH else None
            if shown is not None:
                yield from content_paths(shown[0], _concat(shown[1], ctm), forms, depth=depth + 1)
            continue
        numbers = _operands(stream, match.start(), 6 if operator == b"cm" else 4 if operator == b"re" else 2)
        if numbers is None:
            continue
        if operator == b"cm":
            ctm = _concat(numbers, ctm)
            continue
        if operator == b"re":
            x, y, width, height = numbers
            corners = [_point(ctm, cx, cy) for cx in (x, x + width) for cy in (y, y + height)]
            xs, ys = [c[0] for c in corners], [c[1] for c in corners]
            yield "re", (min(xs), min(ys), max(xs), max(ys))
            current = _point(ctm, x, y)
            continue
        point = _point(ctm, numbers[0], numbers[1])
        if operator == b"l" and current is not None:
            yield "l", (*current, *point)
        current = point


def form_matrix(key: tuple[str, str]) -> Matrix:
    """A form's ``/Matrix`` from PyMuPDF's ``xref_get_key`` answer; the identity when it has none or it is malformed."""
    kind, value = key
    try:
        numbers = [float(word) for word in value.strip("[]").split()] if kind == "array" else []
    except ValueError:
        numbers = []
    return cast(Matrix, tuple(numbers)) if len(numbers) == 6 else _IDENTITY


def _form(stream: bytes, end: int, forms: Forms | None) -> tuple[bytes, Matrix] | None:
    """The form shown by the ``Do`` at ``end`` (its name is the word before), if ``forms`` knows it."""
    if forms is None:
        return None
    words = stream[max(0, end - _OPERANDS_SPAN) : end].split()
    if not words or not words[-1].startswith(b"/"):
        return None
    return forms(words[-1][1:].decode("latin-1"))


def _snap(values: Iterable[float]) -> list[float]:
    """Distinct grid lines: values nearer than ``_SNAP`` to the previous line are that line."""
    lines: list[float] = []
    for value in sorted(values):
        if not lines or value - lines[-1] > _SNAP:
            lines.append(value)
    return lines


def _line_of(lines: Sequence[float], value: float) -> int:
    """Index of the grid line nearest ``value``."""
    i = bisect_left(lines, value)
    if i == len(lines) or (i > 0 and value - lines[i - 1] <= lines[i] - value):
        i -= 1
    return i


def inside(box: Box, outer: Box, tolerance: float = 1.0) -> bool:
    """Whether the centre of ``box`` lies in ``outer`` (grown by ``tolerance`` points)."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return outer[0] - tolerance <= cx <= outer[2] + tolerance and outer[1] - tolerance <= cy <= outer[3] + tolerance


def overlapping(a: Box, b: Box) -> bool:
    """Whether two boxes share more than half of the smaller one's area (one table found twice)."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return False
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return width * height > smaller / 2


_GAP_HEIGHTS = 0.8
"""A column's text parts into two columns across a free strip at least this many character heights wide: wider
than a word space (about a third of one), narrower than LaTeX's space between columns (12 points at 10-point
type, about a character height)."""
_GAP_ROWS = 3
"""Rows whose cell has text on both sides of the strip, at least, for a column to be split there."""
_GAP_PASSES = 4
"""Passes of ``split_at_gaps`` over the columns at most: a column of five aligned runs needs three."""


def split_at_gaps(boxes: Sequence[Box], chars: Sequence[tuple[float, float, float, float, str]]) -> list[Box]:
    """The finder's cell boxes with each column that the text's alignment divides split in two.

    A ruled grid may set two columns side by side with no rule between them (``c|rr|rr``): the ``lines``
    finder reads the pair as one column, and each cell holds two values. Where a vertical strip at least
    ``_GAP_HEIGHTS`` character heights wide holds no character of most of a column's one-column cells (all but
    a fifth: a centred title over several columns may cross it), and at least ``_GAP_ROWS`` of them have
    characters on both sides of it, each of those cells that no character crosses is split at the strip's
    middle. A cell that one crosses stays whole (``grid_cells`` gives it a span of two). One split per column
    at a time, at the widest strip; the columns split are looked at again, so a column of three (``ccc``) is
    split twice, at most ``_GAP_PASSES`` times over.

    Args:
        boxes: the finder's cell boxes.
        chars: the characters inside the table: x0, y0, x1, y1 and the character.
    """
    glyphs = [c for c in chars if c[4].strip() and c[2] > c[0]]
    if not boxes or not glyphs:
        return list(boxes)
    height = median_high(c[3] - c[1] for c in glyphs)
    centres = sorted(((g[0] + g[2]) / 2, (g[1] + g[3]) / 2, g[0], g[2]) for g in glyphs)
    out = list(boxes)
    for _ in range(_GAP_PASSES):
        split = _split_columns(out, centres, height)
        if len(split) == len(out):
            break
        out = split
    return out


def _split_columns(boxes: Sequence[Box], centres: Sequence[tuple[float, float, float, float]], height: float
                   ) -> list[Box]:
    """One pass of ``split_at_gaps``: each column split at its widest strip, where one qualifies."""
    xs = _snap(x for box in boxes for x in (box[0], box[2]))
    out = list(boxes)
    for left, right in itertools.pairwise(xs):
        column = sorted((b for b in out if abs(b[0] - left) <= _SNAP and abs(b[2] - right) <= _SNAP),
                        key=lambda b: b[1])
        if len(column) < _GAP_ROWS:
            continue
        spans = _glyph_spans(column, centres[bisect_left(centres, (left,)):bisect_right(centres, (right, math.inf))])
        cut = _column_gap([cell for cell in spans.values() if cell], height * _GAP_HEIGHTS)
        if cut is None:
            continue
        split = {b for b, cell in spans.items() if not any(x0 < cut < x1 for x0, x1 in cell)}
        out = [piece for b in out for piece in
               (((b[0], b[1], cut, b[3]), (cut, b[1], b[2], b[3])) if b in split else (b,))]
    return out


def _glyph_spans(column: Sequence[Box], centres: Sequence[tuple[float, float, float, float]]
                 ) -> dict[Box, list[tuple[float, float]]]:
    """The x extents of the characters whose centre is in each box of ``column`` (sorted by its top), from the
    column's characters: (centre x, centre y, x0, x1)."""
    tops = [b[1] for b in column]
    spans: dict[Box, list[tuple[float, float]]] = {b: [] for b in column}
    for _, cy, x0, x1 in centres:
        i = bisect_right(tops, cy) - 1
        box = column[i] if i >= 0 else None
        if box is not None and cy <= box[3]:
            spans[box].append((max(x0, box[0]), min(x1, box[2])))  # a hostile glyph's width ends at the cell's
    return spans


_GAP_STEP = 0.5
"""The resolution (points) at which a column's strips are looked at."""
_GAP_STEPS = 4000
"""At most this many steps across a column (a coarser step on a column wider than 2,000 points)."""


def _column_gap(cells: Sequence[Sequence[tuple[float, float]]], least: float) -> float | None:
    """The middle of the widest strip at least ``least`` points wide that the characters' x extents of all but a
    fifth of ``cells`` leave free, with characters on both sides in at least ``_GAP_ROWS`` of them; None when
    there is none."""
    if len(cells) < _GAP_ROWS:
        return None
    lo = min(x0 for cell in cells for x0, _ in cell)
    hi = max(x1 for cell in cells for _, x1 in cell)
    step = max(_GAP_STEP, (hi - lo) / _GAP_STEPS)
    steps = int((hi - lo) / step) + 1
    crossing = [0] * steps
    for cell in cells:
        reach = -1  # the cell's characters, merged: each step counted once a cell, whatever its characters
        for first, last in sorted((int((x0 - lo) / step), int((x1 - lo) / step)) for x0, x1 in cell):
            for i in range(max(first, reach + 1), last + 1):
                crossing[i] += 1
            reach = max(reach, last)
    allowed = len(cells) // 5
    best: tuple[int, int] | None = None
    start: int | None = None
    for i, count in enumerate([*crossing, len(cells) + 1]):
        if count <= allowed and start is None:
            start = i
        elif count > allowed and start is not None:
            if 0 < start and i < steps and (best is None or i - start > best[1] - best[0]):
                best = (start, i)
            start = None
    if best is None or (best[1] - best[0]) * step < least:
        return None
    cut = lo + (best[0] + best[1]) / 2 * step
    both = sum(1 for cell in cells if any(x1 <= cut for _, x1 in cell) and any(x0 >= cut for x0, _ in cell))
    return cut if both >= _GAP_ROWS else None


_LINE_CELLS = 3
"""Cells of a ruled row that hold its lines of text, at least, for the row to be split at them."""
_LINE_ALIGN = 1 / 3
"""How far (in character heights) a cell's line may sit from the same line of the row's other cells."""
_FULL_HEIGHT = 0.8
"""Characters at least this share of the table's usual character height make its lines (a superscript is not one)."""


def split_at_lines(boxes: Sequence[Box], chars: Sequence[tuple[float, float, float, float, str]]) -> list[Box]:
    """The finder's cell boxes with each ruled row that holds several rows of text split into those rows.

    A table ruled only between groups of rows (``\\hline`` after every few lines, vertical rules between the
    columns) gives the ``lines`` finder one row per group, each cell holding a column of values. A row is split
    when at least ``_LINE_CELLS`` of its one-row cells hold the same number (two or more) of lines of text,
    each line level with the same line of the others (within ``_LINE_ALIGN`` of a character height; the lines
    are those of full-height characters, so a superscript is no line of its own): at the middle between each
    two lines, in each of those cells and each empty one. A cell of one line (a label over the group,
    ``\\multirow``) stays whole, so ``grid_cells`` gives it a row span. A row whose cells hold different numbers
    of lines (wrapped paragraphs, a label beside its wrapped text) stays as it is, and so does the first row: a
    header's names wrap onto two lines, level across its cells, as often as a header of two rows is ruled as
    one. A table of ``_FEW_ROWS`` ruled rows or fewer is left as it is: a header and one body row is what
    ``few_rows`` gives to the layout model, which reads it row by row.

    Args:
        boxes: the finder's cell boxes.
        chars: the characters inside the table: x0, y0, x1, y1 and the character.
    """
    ruled = _snap(y for box in boxes for y in (box[1], box[3]))
    lined = _line_centres(chars)
    if lined is None or len(ruled) - 1 <= _FEW_ROWS:
        return list(boxes)
    height, centres = lined
    cut_at: dict[Box, list[float]] = {}
    for row, band in _one_row_cells(boxes, ruled).items():
        if row == 0 or len(band) < _LINE_CELLS:  # the header's row stays whole: its names wrap
            continue
        lines = _text_lines(band, _between(centres, ruled[row], ruled[row + 1]), height)
        cuts = _row_cuts([found for found in lines.values() if len(found) > 1], height)
        cut_at.update((b, cuts) for b, found in lines.items() if cuts and len(found) in (0, len(cuts) + 1))
    return [piece for b in boxes for piece in (_cut_rows(b, cut_at[b]) if b in cut_at else (b,))]


def split_spanning_rows(boxes: Sequence[Box], chars: Sequence[tuple[float, float, float, float, str]]
                        ) -> list[Box]:
    """The finder's cell boxes with each box that covers several rows of the grid, and holds one line of text
    level with each of those rows' text, split at the rows' lines.

    A grid whose rows one column rules (a column of shaded cells, ``\\cellcolor``) and the others do not gives
    the ``lines`` finder one tall box over all those rows in each other column, holding a line per row. A box is
    split when its lines are as many as the rows it covers, each level (within ``_LINE_ALIGN`` of a character
    height) with the one line of that row's one-row cells. A label of one line over its rows (``\\multirow``)
    is one line: it stays whole.

    Args:
        boxes: the finder's cell boxes.
        chars: the characters inside the table: x0, y0, x1, y1 and the character.
    """
    ruled = _snap(y for box in boxes for y in (box[1], box[3]))
    lined = _line_centres(chars)
    if lined is None or len(ruled) < 3:
        return list(boxes)
    height, centres = lined
    levels: dict[int, float] = {}  # each row's level: the one line of its one-row cells (their median)
    for row, band in _one_row_cells(boxes, ruled).items():
        ones = [found[0] for found in _text_lines(band, _between(centres, ruled[row], ruled[row + 1]),
                                                  height).values() if len(found) == 1]
        if ones:
            levels[row] = median_high(ones)
    cut_at: dict[Box, list[float]] = {}
    for box in boxes:
        top, bottom = _line_of(ruled, box[1]), _line_of(ruled, box[3])
        if bottom - top < 2 or any(row not in levels for row in range(top, bottom)):
            continue
        found = _text_lines([box], _between(centres, box[1], box[3]), height)[box]
        if len(found) == bottom - top and all(abs(y - levels[row]) <= height * _LINE_ALIGN
                                              for row, y in zip(range(top, bottom), found, strict=True)):
            cut_at[box] = ruled[top + 1:bottom]
    return [piece for b in boxes for piece in (_cut_rows(b, cut_at[b]) if b in cut_at else (b,))]


def _line_centres(chars: Sequence[tuple[float, float, float, float, str]]
                  ) -> tuple[float, list[tuple[float, float]]] | None:
    """The usual character height of ``chars`` (the median), and the centres (y, x) of the full-height ones,
    sorted: the lines are those of full-height characters, a superscript or subscript sits between them. None
    without a visible character."""
    glyphs = [c for c in chars if c[4].strip() and c[3] > c[1]]
    if not glyphs:
        return None
    height = median_high(c[3] - c[1] for c in glyphs)
    return height, sorted(((g[1] + g[3]) / 2, (g[0] + g[2]) / 2) for g in glyphs
                          if g[3] - g[1] >= height * _FULL_HEIGHT)


def _one_row_cells(boxes: Sequence[Box], ruled: Sequence[float]) -> dict[int, list[Box]]:
    """The boxes that cover one row of the grid ``ruled`` (its row lines), by the row's index."""
    bands: dict[int, list[Box]] = {}
    for box in boxes:
        row = _line_of(ruled, box[1])
        if _line_of(ruled, box[3]) == row + 1:
            bands.setdefault(row, []).append(box)
    return bands


def _between(centres: Sequence[tuple[float, float]], top: float, bottom: float) -> Sequence[tuple[float, float]]:
    """The centres (y, x; sorted) from ``top`` down to ``bottom``."""
    return centres[bisect_left(centres, (top,)):bisect_right(centres, (bottom, math.inf))]


def _text_lines(band: Sequence[Box], centres: Sequence[tuple[float, float]], height: float
                ) -> dict[Box, list[float]]:
    """The middle heights of the lines of text in each cell of a row ``band``, top first, from the characters'
    centres (y, x) of the row, sorted: a character more than half a character height below its cell's line
    above starts a line. Each character is placed by one search among the cells' left edges."""
    cells = sorted(band)
    lefts = [b[0] for b in cells]
    lines: dict[Box, list[list[float]]] = {b: [] for b in cells}
    for cy, cx in centres:
        i = bisect_right(lefts, cx) - 1
        if i < 0 or cx > cells[i][2]:
            continue
        found = lines[cells[i]]
        if found and cy - found[-1][-1] <= height / 2:
            found[-1].append(cy)
        else:
            found.append([cy])
    return {b: [sum(line) / len(line) for line in found] for b, found in lines.items()}


def _row_cuts(cells: Sequence[Sequence[float]], height: float) -> list[float]:
    """Where a row whose cells hold ``cells`` lines (each cell's line heights, of two lines or more) is cut: the
    middles between the lines, when at least ``_LINE_CELLS`` cells hold the same number of lines, each level
    with the others'; else none."""
    if len(cells) < _LINE_CELLS or len({len(c) for c in cells}) != 1:
        return []
    levels = [median_high(c[i] for c in cells) for i in range(len(cells[0]))]
    if any(abs(c[i] - level) > height * _LINE_ALIGN for c in cells for i, level in enumerate(levels)):
        return []
    return [(a + b) / 2 for a, b in itertools.pairwise(levels)]


def _cut_rows(box: Box, cuts: Sequence[float]) -> list[Box]:
    """``box`` cut across at each height of ``cuts`` (top first)."""
    edges = [box[1], *cuts, box[3]]
    return [(box[0], a, box[2], b) for a, b in itertools.pairwise(edges)]


def grid_cells(
    boxes: Sequence[Box], chars: Iterable[tuple[float, float, float, float, str]]
) -> tuple[int, int, tuple[TableCell, ...]]:
    """The grid of a table from its cells' boxes, and each cell's text from the characters inside it.

    The grid lines are the cells' edges (snapped within 2 points); a cell covers the rows and
    columns between its edges: its spans. A character belongs to the cell holding its centre,
    so a run of unspaced text that crosses a cell's edge (CJK cells side by side, which MuPDF's
    words join) is parted there where a gap parts it; the characters of a word that touch go whole to
    the cell holding most of them (an edge the layout model draws through a word). A cell's
    characters keep their order; a space goes between two
    of them where a space, a line's end or another cell's character came between, except at a
    line's end between two characters of a script written without spaces (``text_layout.unspaced``:
    a Japanese cell's text wrapped over two lines is one word).

    Args:
        boxes: the finder's cell boxes (``Table.cells``), one per cell, in any order.
        chars: the page's characters in reading order: x0, y0, x1, y1 and the character (a
            whitespace character, whatever its box, separates words).

    Returns:
        Rows, columns and the cells, row-major (empty when there are no boxes).
    """
    if not boxes:
        return 0, 0, ()
    xs = _snap(x for box in boxes for x in (box[0], box[2]))
    ys = _snap(y for box in boxes for y in (box[1], box[3]))
    placed: dict[tuple[int, int], tuple[int, int, Box]] = {}
    for box in boxes:
        row, col = _line_of(ys, box[1]), _line_of(xs, box[0])
        row_end, col_end = max(_line_of(ys, box[3]), row + 1), max(_line_of(xs, box[2]), col + 1)
        placed.setdefault((row, col), (row_end - row, col_end - col, box))
    texts: dict[tuple[int, int], list[str]] = {key: [] for key in placed}
    last: tuple[int, int] | None = None
    line_end = False
    for piece in _pieces(chars):
        if isinstance(piece, str):
            last, line_end = None, line_end or piece == "\n"
            continue
        keys = Counter(k for k in (_slot_of(placed, xs, ys, char) for char in piece) if k is not None)
        key = keys.most_common(1)[0][0] if keys else None
        if key is not None:
            text = texts[key]
            if key != last and text and not (line_end and unspaced(text[-1]) and unspaced(piece[0][4])):
                text.append(" ")
            text.extend(char[4] for char in piece)
        last, line_end = key, False
    cells = tuple(
        TableCell(row, col, spans[0], spans[1], " ".join("".join(texts[(row, col)]).split()))
        for (row, col), spans in sorted(placed.items())
    )
    return len(ys) - 1, len(xs) - 1, cells


def _pieces(chars: Iterable[tuple[float, float, float, float, str]]
            ) -> Iterator[str | list[tuple[float, float, float, float, str]]]:
    """``chars`` as whitespace characters and pieces: runs of characters that touch, to be placed whole.

    Characters of a word further apart than ``_TOUCH`` of their height are two pieces, and a character of a
    script written without spaces (``text_layout.unspaced``) is a piece of its own: MuPDF joins unspaced CJK
    cells side by side into one word, and nothing but the edge parts them."""
    piece: list[tuple[float, float, float, float, str]] = []
    for char in chars:
        alone = char[4].isspace() or unspaced(char[4])
        if piece and (alone or char[0] - piece[-1][2] > _TOUCH * max(piece[-1][3] - piece[-1][1], 1.0)):
            yield piece
            piece = []
        if char[4].isspace():
            yield char[4]
        elif alone:
            yield [char]
        else:
            piece.append(char)
    if piece:
        yield piece


def _slot_of(placed: dict[tuple[int, int], tuple[int, int, Box]], xs: Sequence[float], ys: Sequence[float],
             char: tuple[float, float, float, float, str]) -> tuple[int, int] | None:
    """The top-left slot of the cell holding a character's centre, or None outside every cell."""
    cx, cy = (char[0] + char[2]) / 2, (char[1] + char[3]) / 2
    if not (xs[0] <= cx <= xs[-1] and ys[0] <= cy <= ys[-1]):
        return None
    return _cell_of(placed, bisect_right(ys, cy) - 1, bisect_right(xs, cx) - 1, char[:4])


def _cell_of(
    placed: dict[tuple[int, int], tuple[int, int, Box]], row: int, col: int, word: Box
) -> tuple[int, int] | None:
    """The top-left slot of the cell holding a word found in grid slot (row, col): its own, or one spanning it."""
    found = placed.get((row, col))
    if found is not None and inside(word, found[2], 0.5):
        return (row, col)
    for key, (rs, cs, box) in placed.items():
        if key[0] <= row < key[0] + rs and key[1] <= col < key[1] + cs and inside(word, box, 0.5):
            return key
    return None


def caption_index(bbox: Box, blocks: Sequence[tuple[float, float, float, float, str]]) -> int | None:
    """The block that captions a table: just above it (else just below), beside it, reading like a caption.

    A caption starts with the word for "table" in a common language and a number ("Table 3",
    "Tab. II", "Таблица 2", "表3"), lies at most 24 points above the table's top (or below its
    bottom) and overlaps it horizontally.

    Args:
        bbox: the table's box.
        blocks: the page's text blocks outside the table: x0, y0, x1, y1, text.

    Returns:
        The index in ``blocks``, or None.
    """
    best: tuple[int, float, int] | None = None
    for i, (x0, y0, x1, y1, text) in enumerate(blocks):
        if x1 <= bbox[0] or x0 >= bbox[2] or not _CAPTION.match(text):
            continue
        above, below = bbox[1] - y1, y0 - bbox[3]
        for rank, gap in ((0, above), (1, below)):
            if -1.0 <= gap <= _CAPTION_GAP and (best is None or (rank, gap) < best[:2]):
                best = (rank, gap, i)
    return best[2] if best is not None else None


def header_spans(table: PageTable) -> PageTable:
    """``table`` with the spans of a header of two rows that its drawing does not show, else ``table`` as it is.

    Without rules between cells (booktabs, shaded rows, the layout model's tables) the finder gives each slot a
    cell of its own: a group name over its columns is a name beside empty cells, with the columns' own names in
    the row below, which is empty under the other names. Such a header is two rows when row 0 has a name
    followed by empty cells, every column under it is named in row 1, and row 1 is empty under every other name
    of row 0 (a body row under a header has its first column's text). The group name then spans its columns,
    each other name both rows, and the table's ``header_rows`` is 2.
    """
    if table.rows < 3 or any(c.row < 2 and (c.row_span, c.col_span) != (1, 1) for c in table.cells):
        return table
    top, sub = [""] * table.columns, [""] * table.columns
    for cell in table.cells:
        if cell.row < 2 and 0 <= cell.col < table.columns:
            (top if cell.row == 0 else sub)[cell.col] = cell.text.strip()
    names: list[tuple[int, int]] = []  # (first column, columns) of each name of row 0
    for col, text in enumerate(top):
        if text:
            names.append((col, 1))
        elif names and names[-1][0] + names[-1][1] == col:
            names[-1] = (names[-1][0], names[-1][1] + 1)
        elif sub[col]:
            return table  # a column named below an empty corner: not a header's shape
    groups = [(col, width) for col, width in names if width > 1]
    if not groups or not all(all(sub[col : col + width]) for col, width in groups):
        return table
    if any(sub[col] for col, width in names if width == 1):
        return table
    spans = {col: (1, width) if width > 1 else (2, 1) for col, width in names}
    covered = {(0, col + i) for col, width in names for i in range(1, width)}
    covered |= {(1, col) for col, width in names if width == 1}
    cells = tuple(
        TableCell(0, c.col, *spans[c.col], c.text) if c.row == 0 and c.col in spans else c
        for c in table.cells if (c.row, c.col) not in covered
    )
    return replace(table, cells=cells, header_rows=2)


def without_empty_columns(table: PageTable) -> PageTable:
    """``table`` without the columns its finder split off a column, else as it is.

    Where no rule is drawn between cells, PyMuPDF's layout model may draw a column's edge through a word or a
    number set with a wide separator (a CJK font's comma: ``33,937``); ``grid_cells`` gives the word whole to
    the cell holding most of it, which leaves the slot beside it empty in every row: that column goes. And
    it may put a column's name and its right-aligned numbers in two columns: a column with text in row 0
    alone, beside one with text in its body rows alone, is one column. A column a cell spans into is kept.
    """
    for col in range(table.columns - 1, -1, -1):
        rows = {c.row for c in table.cells if c.col == col and c.text.strip()}
        if table.columns < 2 or any(c.col < col < c.col + c.col_span for c in table.cells):
            continue
        if not rows:
            table = _without_column(table, col)
        elif rows == {0} and col + 1 < table.columns and _body_only(table, col + 1):
            (name,) = [c for c in table.cells if c.col == col and c.row == 0]
            if (name.row_span, name.col_span) == (1, 1):
                kept = [c for c in table.cells if c.col != col and (c.col, c.row) != (col + 1, 0)]
                cells = [name, *(replace(c, col=c.col - 1) if c.col > col else c for c in kept)]
                table = replace(table, columns=table.columns - 1,
                                cells=tuple(sorted(cells, key=lambda c: (c.row, c.col))))
    return table


def _body_only(table: PageTable, col: int) -> bool:
    """Whether column ``col`` has text below row 0 and none in it, and no cell of it spans another column."""
    cells = [c for c in table.cells if c.col == col]
    return (all(c.col_span == 1 for c in cells) and any(c.text.strip() for c in cells if c.row > 0)
            and not any(c.text.strip() for c in cells if c.row == 0))


def _without_column(table: PageTable, col: int) -> PageTable:
    """``table`` without column ``col`` (none of whose cells spans another), the cells right of it moved left."""
    cells = tuple(replace(c, col=c.col - 1) if c.col > col else c for c in table.cells if c.col != col)
    return replace(table, columns=table.columns - 1, cells=cells)


def with_layout_grids(found: Sequence[PageTable], grids: Sequence[PageTable]) -> list[PageTable]:
    """The finder's tables with the layout model's own grids where those read the page better.

    PyMuPDF's finder with the layout model (``union``) fuses the model's tables with the ruled candidates,
    and between booktabs' rules those are bands: the header one table of one row, the body another, every
    body line in one cell. A grid of the model's takes the place of the finder's tables it overlaps (where
    the first of them was, in the finder's order) when each of those has one row, or fewer than half its
    rows; it is added at the end where the finder found nothing there; else the finder's tables stay (they
    carry the spans the finder reads from the rules).

    Args:
        found: the finder's tables on a page, laid out.
        grids: the layout model's predicted grids on that page, laid out.
    """
    tables = list(found)
    for grid in grids:
        over = [i for i, t in enumerate(tables) if overlapping(t.bbox, grid.bbox)]
        if not all(tables[i].rows == 1 or 2 * tables[i].rows < grid.rows for i in over):
            continue
        at = over[0] if over else len(tables)  # in the finder's order, where the first it replaces was
        tables = [t for i, t in enumerate(tables) if i not in over]
        tables.insert(at, grid)
    return tables


_FEW_ROWS = 2
"""A ruled table of this many rows or fewer is likely a grid whose body rows no rule parts (``few_rows``)."""


def few_rows(table: PageTable) -> bool:
    """Whether a table the ``lines`` finder read from a ruled grid has so few rows that its body rows are likely
    not ruled apart (an ``\\hline`` under the header and at the foot only): each body cell then holds a
    whole column, one line a row. The layout model's finder reads such a table row by row."""
    return table.rows <= _FEW_ROWS


def with_layout_tables(found: Sequence[PageTable], by_layout: Sequence[PageTable], *, every: bool) -> list[PageTable]:
    """The ``lines`` finder's tables of a ruled page with the layout model's finder's where those read it better.

    ``every``: the page has rules no ruled grid explains (a booktabs or ``\\hline`` table beside the grids), and
    the layout model's tables take the place of the finder's tables they overlap, unless none of them has as many
    cells with text as the finder's table: the layout model then cut a ruled grid in pieces or lost rows of it (a
    grid of shaded cells read as two tables of two rows), and the rules' reading stays. Cells, not rows: a
    finder's table whose rows ``split_at_lines`` read from its text may have more rows than the model's reading
    and still hold whole columns of values in one cell where no rule parts them. Otherwise they take the place only
    of those with ``few_rows``. A table of the layout model's that overlaps a table kept is left out; the others
    come first, in their finder's order, then the tables kept.
    """
    kept = [t for t in found if _keeps(t, [o for o in by_layout if overlapping(t.bbox, o.bbox)], every=every)]
    return [o for o in by_layout if not any(overlapping(o.bbox, k.bbox) for k in kept)] + kept


def _keeps(table: PageTable, over: Sequence[PageTable], *, every: bool) -> bool:
    """Whether the ``lines`` finder's ``table`` stays against the layout model's tables ``over`` it."""
    if not over:
        return True
    if few_rows(table):
        return False
    return not every or max(_filled(o) for o in over) < _filled(table)


def _filled(table: PageTable) -> int:
    """The cells of ``table`` that hold text."""
    return sum(1 for c in table.cells if c.text)
