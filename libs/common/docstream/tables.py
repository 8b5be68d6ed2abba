"""Tables found on born-digital pages: their cells, their Markdown, and parts that fit a chunk. Pure.

The chunker finds tables and lays out their cells (``docstream_chunker.table_detection``). Chunking
(``docstream_chunker.chunking``) turns each ``PageTable`` into chunks with ``split_table``: Markdown for
the model, ``TablePart`` for the record, split between whole rows with the header row repeated.

The rules (docs/chunking.md "Tables"):

* Row 0 is the header, with the rows a cell of row 0 spans down into, or those its finder read as
  the header's (``header_rows``: a header of two or three rows, such as a group name over its
  columns' names). A header of one row gives each
  column its cell's text, a cell spanning columns in its first; a header of more rows gives each
  column the texts of every header cell above it, top first ("Revenue 2024").
* A cell spanning rows or columns is written once, in its top-left slot; a part that starts inside a
  body cell's row span writes that cell's text again in its first row.
* Rows joined by a cell that spans them are kept in one part when they fit; a part ends between
  two rows, never inside one.
* Each part is at most ``budget`` tokens with its header (and the caption, on the first part),
  except a part of one row that alone is larger: it is a part of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HEADERS_VERSION",
    "MAX_HEADER_ROWS",
    "TABLES_VERSION",
    "Box",
    "PageTable",
    "TableCell",
    "TablePart",
    "header_rows",
    "header_texts",
    "row_lines",
    "split_table",
    "table_markdown",
]

TABLES_VERSION = "3"
"""Version of the table rules: in the chunker settings string of every document that has table chunks."""

HEADERS_VERSION = "1"
"""Version of the rules of headers of more than one row: in the chunker settings string of every document that has a
table with one (documents without one keep their chunk ids)."""

MAX_HEADER_ROWS = 3
"""Most rows a header has: a cell of row 0 spanning further down is a body cell's stub, not a header's."""

Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 in PDF points, origin top left (PyMuPDF's page coordinates)."""

_MAX_REPACKS = 8


@dataclass(frozen=True, slots=True)
class TableCell:
    """One cell of a table.

    Attributes:
        row: its first row (0 is the header's first).
        col: its first column.
        row_span: rows it covers.
        col_span: columns it covers.
        text: its words, joined by spaces.
    """

    row: int
    col: int
    row_span: int = 1
    col_span: int = 1
    text: str = ""

    def to_record(self) -> dict[str, Any]:
        """The Avro ``TableCell`` dict."""
        return {"row": self.row, "col": self.col, "row_span": self.row_span, "col_span": self.col_span,
                "text": self.text}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TableCell:
        """From an Avro ``TableCell`` dict (or its JSON)."""
        return cls(int(record["row"]), int(record["col"]), int(record.get("row_span", 1)),
                   int(record.get("col_span", 1)), str(record.get("text", "")))


@dataclass(frozen=True, slots=True)
class PageTable:
    """A table found on a page.

    Attributes:
        page: 1-based page number.
        bbox: the table's box on the page.
        rows: rows of its grid (the header's included).
        columns: columns of its grid.
        cells: every cell, row-major, each once (a spanning cell at its top-left slot).
        caption: the caption's text, when a block next to the table reads as one ("Table 3: ...").
        offset: where the table sits in the page's text (``PageText.text``): the start of the
            paragraph it comes before, or the text's length when it comes last.
        row_pages: the page of each row, for a table continued on the pages after ``page``; empty
            when every row is on ``page``.
        header_rows: rows of its header where its finder knows them (``header_spans`` of the chunker);
            0: read from the spans (``header_rows``).
    """

    page: int
    bbox: Box
    rows: int
    columns: int
    cells: tuple[TableCell, ...]
    caption: str | None = None
    offset: int = 0
    row_pages: tuple[int, ...] = ()
    header_rows: int = 0


@dataclass(frozen=True, slots=True)
class TablePart:
    """The part of a table one chunk holds: what ``ChunkCreated.table`` records.

    Attributes:
        page: 1-based page of the table.
        bbox: the whole table's box on the page.
        caption: the caption, on the first part only.
        header: the header's text, one per column (``header_texts``).
        rows: rows of the whole table (the header's included).
        columns: columns of the whole table.
        row_start: the part's first body row (``header_rows`` for the first part).
        row_end: one past its last row.
        part: 0-based index of the part.
        parts: how many parts the table was split into.
        cells: the header's cells, then the cells of rows ``row_start`` to ``row_end`` (a cell
            spanning into the part from above included); rows and columns are the whole table's.
        header_rows: rows of the header (1 in records written before it was recorded).
    """

    page: int
    bbox: Box
    caption: str | None
    header: tuple[str, ...]
    rows: int
    columns: int
    row_start: int
    row_end: int
    part: int
    parts: int
    cells: tuple[TableCell, ...]
    header_rows: int = 1

    def to_record(self) -> dict[str, Any]:
        """The Avro ``ChunkTable`` dict (JSON-ready: lists, numbers, strings)."""
        return {
            "page": self.page, "bbox": list(self.bbox), "caption": self.caption, "header": list(self.header),
            "rows": self.rows, "columns": self.columns, "row_start": self.row_start, "row_end": self.row_end,
            "part": self.part, "parts": self.parts, "cells": [cell.to_record() for cell in self.cells],
            "header_rows": self.header_rows,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TablePart:
        """From an Avro ``ChunkTable`` dict (or its JSON).

        Raises:
            KeyError: a required field is missing.
            ValueError: the bbox does not hold four numbers.
        """
        bbox = tuple(float(v) for v in record["bbox"])
        if len(bbox) != 4:
            raise ValueError(f"a table bbox holds four numbers, not {len(bbox)}")
        return cls(
            page=int(record["page"]), bbox=(bbox[0], bbox[1], bbox[2], bbox[3]), caption=record.get("caption"),
            header=tuple(str(h) for h in record.get("header", ())), rows=int(record["rows"]),
            columns=int(record["columns"]), row_start=int(record["row_start"]), row_end=int(record["row_end"]),
            part=int(record.get("part", 0)), parts=int(record.get("parts", 1)),
            cells=tuple(TableCell.from_record(cell) for cell in record.get("cells", ())),
            header_rows=int(record.get("header_rows", 1)),
        )


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _row(texts: Sequence[str]) -> str:
    return "| " + " | ".join(_escape(t) for t in texts) + " |"


def _slots(table: PageTable, cells: Iterable[TableCell]) -> list[str]:
    texts = [""] * table.columns
    for cell in cells:
        if 0 <= cell.col < table.columns:
            texts[cell.col] = " ".join(t for t in (texts[cell.col], cell.text) if t)
    return texts


def header_rows(table: PageTable) -> int:
    """Rows of ``table``'s header: those its finder gave, else row 0 and the rows a cell of row 0 spans down into;
    either when that is at most ``MAX_HEADER_ROWS`` rows and a body row remains below them; else 1."""
    span = table.header_rows or max((c.row_span for c in table.cells if c.row == 0), default=1)
    return span if 1 < span <= MAX_HEADER_ROWS and span < table.rows else 1


def header_texts(table: PageTable) -> tuple[str, ...]:
    """The header's text, one per column ("" where none): of a header of one row, its cells' (a cell spanning
    columns in its first); of a header of more rows, the texts of every header cell over the column, top first."""
    rows = header_rows(table)
    if rows == 1:
        return tuple(" ".join(t.split()) for t in _slots(table, (c for c in table.cells if c.row == 0)))
    texts: list[list[str]] = [[] for _ in range(table.columns)]
    for cell in sorted((c for c in table.cells if c.row < rows), key=lambda c: (c.row, c.col)):
        for col in range(max(cell.col, 0), min(cell.col + cell.col_span, table.columns)):
            if cell.text.strip():
                texts[col].append(cell.text)
    return tuple(" ".join(" ".join(parts).split()) for parts in texts)


def row_lines(table: PageTable) -> tuple[str, str, list[str]]:
    """The Markdown header line, the delimiter line, and one line per row after the header (rows
    ``header_rows``..)."""
    by_row: dict[int, list[TableCell]] = {}
    for cell in table.cells:
        by_row.setdefault(cell.row, []).append(cell)
    header = _row(header_texts(table))
    delimiter = "|" + "---|" * table.columns
    return header, delimiter, [_row(_slots(table, by_row.get(r, ()))) for r in range(header_rows(table), table.rows)]


def table_markdown(header: str, delimiter: str, rows: Sequence[str], caption: str | None = None) -> str:
    """A Markdown table: the caption (when given) and a blank line, the header, the delimiter, the rows."""
    table = "\n".join((header, delimiter, *rows))
    return f"{' '.join(caption.split())}\n\n{table}" if caption else table


def _units(table: PageTable, head_rows: int) -> list[tuple[int, int]]:
    """Row ranges [start, end) of the body that no cell crosses: rows a spanning cell joins stay together."""
    reach = list(range(1, table.rows + 1))
    for cell in table.cells:
        if cell.row >= head_rows:
            last = min(cell.row + cell.row_span, table.rows)
            for r in range(cell.row, last):
                reach[r] = max(reach[r], last)
    units, start, end = [], head_rows, head_rows
    for r in range(head_rows, table.rows):
        end = max(end, reach[r])
        if r + 1 >= end:
            units.append((start, end))
            start = end = r + 1
    return units


def _pack(units: list[tuple[int, int]], row_tokens: list[int], head: int, first_extra: int,
          budget: int, head_rows: int) -> list[tuple[int, int]]:
    """Greedy row ranges of at most ``budget`` tokens each with the header; a unit too big is split into rows."""
    pieces: list[tuple[int, int]] = []
    for start, end in units:
        size = sum(row_tokens[start - head_rows : end - head_rows])
        extra = first_extra if not pieces else 0
        if end - start > 1 and head + extra + size > budget:
            pieces.extend((r, r + 1) for r in range(start, end))
        else:
            pieces.append((start, end))
    parts: list[tuple[int, int]] = []
    total = 0
    for start, end in pieces:
        size = sum(row_tokens[start - head_rows : end - head_rows])
        if parts and total + size <= budget:
            parts[-1] = (parts[-1][0], end)
            total += size
        else:
            parts.append((start, end))
            total = head + (first_extra if len(parts) == 1 else 0) + size
    return parts


def _part_cells(table: PageTable, start: int, end: int, head_rows: int) -> tuple[TableCell, ...]:
    return tuple(c for c in table.cells
                 if c.row < head_rows or (c.row < end and c.row + c.row_span > start and c.row >= head_rows))


def _part_rows(table: PageTable, lines: list[str], start: int, end: int, head_rows: int) -> list[str]:
    """The part's row lines; a body cell spanning into the part from above is written again in its first row."""
    rows = lines[start - head_rows : end - head_rows]
    carried = [c for c in table.cells if head_rows <= c.row < start < c.row + c.row_span]
    if carried:
        own = [c for c in table.cells if c.row == start]
        rows = [_row(_slots(table, [*carried, *own])), *rows[1:]]
    return rows


def split_table(
    table: PageTable, budget: int, count: Callable[[Sequence[str]], list[int]]
) -> list[tuple[str, int, TablePart]]:
    """A table's chunks: each part's Markdown, its token count, its record.

    Parts are packed greedily, whole rows at a time (rows a spanning cell joins, together), each at
    most ``budget`` tokens with the header repeated (and the caption, on the first part). A
    part of one row can be larger: a row is never cut. Tokens are counted per line and each part
    is counted again whole; with a tokenizer that does not add up per line, parts are packed again
    against a smaller budget until each fits (at most 8 times).

    Args:
        table: the table (at least two rows).
        budget: most tokens a part holds (the chunk budget).
        count: the model tokenizer's count of each text.

    Returns:
        The parts in order; empty for a table without body rows.
    """
    header, delimiter, lines = row_lines(table)
    if not lines:
        return []
    caption = " ".join(table.caption.split()) if table.caption else None
    counted = count([header, delimiter, *lines, *([caption] if caption else [])])
    head, row_tokens = counted[0] + counted[1], counted[2 : 2 + len(lines)]
    first_extra = counted[-1] if caption else 0
    head_rows = header_rows(table)
    units = _units(table, head_rows)
    limit = budget
    texts: list[str] = []
    exact: list[int] = []
    ranges: list[tuple[int, int]] = []
    for _ in range(_MAX_REPACKS):
        ranges = _pack(units, row_tokens, head, first_extra, limit, head_rows)
        texts = [table_markdown(header, delimiter, _part_rows(table, lines, a, b, head_rows),
                                caption if i == 0 else None)
                 for i, (a, b) in enumerate(ranges)]
        exact = count(texts)
        over = max((n - budget for n, (a, b) in zip(exact, ranges, strict=True) if b - a > 1), default=0)
        if over <= 0:
            break
        limit = max(1, limit - over)
    titles = header_texts(table)
    return [
        (text, tokens, TablePart(table.page, table.bbox, caption if i == 0 else None, titles, table.rows,
                                 table.columns, a, b, i, len(ranges), _part_cells(table, a, b, head_rows), head_rows))
        for i, (text, tokens, (a, b)) in enumerate(zip(texts, exact, ranges, strict=True))
    ]
