"""Tables of an HTML document, read from its markup: ``<table>`` with ``colspan``, ``rowspan`` and ``<caption>``. Pure.

MuPDF lays an HTML document out into pages and draws no rule a table's markup does not ask for,
so the finder of PDF pages sees nothing; yet the markup says exactly where each cell is. Before
MuPDF opens an HTML document, ``take_tables`` reads each outermost ``<table>`` into a grid of
cells (the HTML table model: a cell takes the first free slot of its row, spans mark the slots
it covers) and puts a marker paragraph (``marker(i)``) in its place. Extraction then finds the
marker among the laid-out page's paragraphs and puts the table there (``PageTable``), so the
table becomes table chunks like a PDF's ruled one, its words never in the text chunks.

Everything in the markup is the tenant's: at most ``MAX_TABLES`` tables, ``MAX_ROWS`` rows,
``MAX_COLUMNS`` columns and ``MAX_CELL_CHARS`` characters a cell are read (a table past them stays
in the text as MuPDF lays it out), spans are clamped to the grid, and a nested table's text is
its cell's text. Row 0 is the header, as for a PDF's table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from docstream.tables import TableCell

__all__ = [
    "MAX_CELL_CHARS",
    "MAX_COLUMNS",
    "MAX_ROWS",
    "MAX_TABLES",
    "MarkupTable",
    "marker",
    "marker_index",
    "take_tables",
]

MAX_TABLES = 200
"""Most tables of one document read from its markup."""
MAX_ROWS = 2000
"""Most rows of one table."""
MAX_COLUMNS = 64
"""Most columns of one table."""
MAX_CELL_CHARS = 4000
"""Most characters of one cell (more are cut)."""
_MARKER = re.compile(r"DOCSTREAMTABLE(\d{1,4})X")
_BREAKS = frozenset({"br", "p", "div", "li", "td", "th", "tr", "table", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6"})
"""Tags that part words inside a cell (a nested table's cells, paragraphs, line breaks)."""


@dataclass(frozen=True, slots=True)
class MarkupTable:
    """A table read from markup: its grid and caption (``PageTable`` without a page, a box or an offset)."""

    rows: int
    columns: int
    cells: tuple[TableCell, ...]
    caption: str | None = None


def marker(index: int) -> str:
    """The paragraph that stands in the laid-out text where table ``index`` was: one word no text holds."""
    return f"DOCSTREAMTABLE{index}X"


def marker_index(paragraph: str) -> int | None:
    """The table index of a marker paragraph, None for any other paragraph."""
    found = _MARKER.fullmatch(paragraph.strip())
    return int(found[1]) if found else None


@dataclass
class _Cell:
    text: list[str] = field(default_factory=list)
    row_span: int = 1
    col_span: int = 1


@dataclass
class _Table:
    start: int
    rows: list[list[_Cell]] = field(default_factory=list)
    caption: list[str] = field(default_factory=list)
    in_caption: bool = False
    too_big: bool = False


def _span(value: str | None) -> int:
    try:
        return max(1, min(int((value or "1").strip() or "1"), MAX_ROWS))
    except ValueError:
        return 1


class _Reader(HTMLParser):
    """Collects the outermost tables of a document, with their offsets in the text fed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[int, int, _Table]] = []
        self._table: _Table | None = None
        self._depth = 0
        self._cell: _Cell | None = None

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def read(self, text: str) -> None:
        starts = [0]
        for line in text.split("\n"):
            starts.append(starts[-1] + len(line) + 1)
        self._line_starts = starts
        self._text = text
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._cell is not None and tag in _BREAKS:
            self._cell.text.append(" ")
        if tag == "table":
            self._depth += 1
            if self._depth == 1 and len(self.tables) < MAX_TABLES:
                self._table = _Table(self._offset())
            return
        table = self._table
        if table is None or self._depth != 1 or table.too_big:  # past the bounds: it stays as MuPDF lays it out
            return
        if tag == "tr":
            self._cell = None
            if len(table.rows) >= MAX_ROWS:
                table.too_big = True
                return
            table.rows.append([])
        elif tag in ("td", "th"):
            if not table.rows:
                table.rows.append([])
            named = dict(attrs)
            self._cell = _Cell(row_span=_span(named.get("rowspan")), col_span=_span(named.get("colspan")))
            table.rows[-1].append(self._cell)
        elif tag == "caption":
            table.in_caption = True

    def handle_endtag(self, tag: str) -> None:
        if self._cell is not None and tag in _BREAKS:
            self._cell.text.append(" ")
        if tag == "table":
            if self._depth == 1 and self._table is not None:
                close = self._text.find(">", self._offset())
                if close >= 0:
                    self.tables.append((self._table.start, close + 1, self._table))
                self._table = None
            self._depth = max(0, self._depth - 1)
        elif tag in ("td", "th", "tr") and self._depth == 1:
            self._cell = None
        elif tag == "caption" and self._table is not None:
            self._table.in_caption = False

    def handle_data(self, data: str) -> None:
        table = self._table
        if table is None:
            return
        if table.in_caption:
            table.caption.append(data)
        elif self._cell is not None and sum(map(len, self._cell.text)) < MAX_CELL_CHARS:
            self._cell.text.append(data)


def _grid(table: _Table) -> MarkupTable | None:
    """The HTML table model over ``table``'s rows: each cell at the first free slot of its row."""
    if table.too_big:
        return None
    taken: set[tuple[int, int]] = set()
    cells: list[TableCell] = []
    rows = len(table.rows)
    columns = 0
    for r, row in enumerate(table.rows):
        c = 0
        for cell in row:
            while (r, c) in taken:
                c += 1
            if c >= MAX_COLUMNS:
                return None
            row_span = min(cell.row_span, rows - r)
            col_span = min(cell.col_span, MAX_COLUMNS - c)
            taken.update((r + i, c + j) for i in range(row_span) for j in range(col_span))
            text = " ".join("".join(cell.text).split())[:MAX_CELL_CHARS]
            cells.append(TableCell(r, c, row_span, col_span, text))
            columns = max(columns, c + col_span)
            c += col_span
    if rows < 2 or columns < 2 or sum(1 for cell in cells if cell.text) < 2:
        return None
    caption = " ".join("".join(table.caption).split()) or None
    return MarkupTable(rows, columns, tuple(sorted(cells, key=lambda x: (x.row, x.col))), caption)


def take_tables(html: str, *, first: int = 0) -> tuple[str, list[MarkupTable]]:
    """``html`` with each outermost table read into a ``MarkupTable`` and replaced by its marker paragraph.

    A table that breaks the bounds, or has fewer than two rows, two columns or two cells with text
    (a layout table of one column), stays as it is.

    Args:
        html: the document's markup, decoded.
        first: the number of the first table's marker (an EPUB's files number theirs on from the file before).

    Returns:
        The markup to lay out, and the tables; ``marker(first + i)`` stands for ``tables[i]``.
    """
    reader = _Reader()
    reader.read(html)
    pieces: list[str] = []
    tables: list[MarkupTable] = []
    last = 0
    for start, end, raw in reader.tables:
        table = _grid(raw)
        if table is None or end <= start:
            continue
        pieces.append(html[last:start])
        if first + len(tables) >= MAX_TABLES:
            break
        pieces.append(f"<p>{marker(first + len(tables))}</p>")
        tables.append(table)
        last = end
    pieces.append(html[last:])
    return "".join(pieces), tables
