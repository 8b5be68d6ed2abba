"""A table continued on the next page, joined into one table. Pure.

A long table breaks at the page's end and goes on at the top of the next page, its header row
drawn again there. Found page by page, it was two tables: two captions' worth of context for
one, and the second part's header read as a body row when it was not repeated. Here a table
that ends its page's text is joined with the table that starts the next page's text when they
have the same columns in the same place (``continues``): the next page's rows follow its own,
the repeated header dropped (its rows read as the table's header: ``docstream.tables.header_rows``
and ``header_texts``), and each row keeps the page it is on
(``PageTable.row_pages``), so a chunk of rows from the second page says that page. A table may
run over several pages: the join goes on while each page holds nothing but the table's rows.

``join_continued`` works on a stream of pages and holds only the pages of an open table (one
page for a table that ends its page, more for one that fills pages), never the document.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from docstream.tables import PageTable, TableCell, header_rows, header_texts
from docstream_chunker.chunking import PageText

__all__ = ["X_TOLERANCE", "continues", "join_continued", "joined"]

X_TOLERANCE = 4.0
"""Points by which the left and right edges of a table and its continuation may differ."""


def _ends_page(page: PageText) -> PageTable | None:
    """The table that ends ``page``'s text (nothing after it), if any."""
    if not page.tables:
        return None
    last = max(page.tables, key=lambda t: t.offset)
    return last if last.offset >= len(page.text.rstrip()) else None


def _starts_page(page: PageText) -> PageTable | None:
    """The table that starts ``page``'s text (nothing before it, no caption of its own), if any."""
    if not page.tables:
        return None
    first = min(page.tables, key=lambda t: t.offset)
    return first if first.offset == 0 and first.caption is None else None


def continues(table: PageTable, after: PageTable) -> bool:
    """Whether ``after`` (on the next page) goes on with ``table``: the same number of columns, its left edge
    within ``X_TOLERANCE``, its right edge too unless its first rows repeat the header, and no cell of its first
    row spanning rows unless they repeat the header (a body cell spanning rows would be cut from the rows it joins).

    The right edge of a table without vertical rules is where its widest cell ends, which moves from page to
    page (a booktabs table of Cyrillic cells: 310 points on one page, 328 on the next); the header drawn again,
    the same text in every column, says it is the same table."""
    repeats = _repeats_header(table, after)
    return (
        after.page > table.page
        and after.columns == table.columns
        and abs(after.bbox[0] - table.bbox[0]) <= X_TOLERANCE
        and (abs(after.bbox[2] - table.bbox[2]) <= X_TOLERANCE or repeats)
        and (not any(c.row == 0 and c.row_span > 1 for c in after.cells) or repeats)
    )


def _repeats_header(table: PageTable, after: PageTable) -> bool:
    return header_rows(after) == header_rows(table) and header_texts(after) == header_texts(table)


def joined(table: PageTable, after: PageTable) -> PageTable:
    """``table`` with ``after``'s rows below its own, ``after``'s first rows dropped when they repeat the header."""
    drop = header_rows(table) if _repeats_header(table, after) else 0
    base = table.rows - drop
    moved = tuple(
        TableCell(c.row + base, c.col, c.row_span, c.col_span, c.text) for c in after.cells if c.row >= drop
    )
    pages = table.row_pages or (table.page,) * table.rows
    return replace(
        table,
        rows=table.rows + after.rows - drop,
        cells=table.cells + moved,
        row_pages=pages + (after.page,) * (after.rows - drop),
    )


def join_continued(pages: Iterable[PageText]) -> Iterator[PageText]:
    """``pages`` in order, each table continued from the page before joined into the page where it starts."""
    held: list[PageText] = []  # the page holding the open table, then pages that held only its rows
    for page in pages:
        if held:
            open_table = _ends_page(held[0])
            start = _starts_page(page)
            if open_table is not None and start is not None and continues(open_table, start):
                whole = joined(open_table, start)
                head = held[0]
                held[0] = replace(head, tables=tuple(whole if t is open_table else t for t in head.tables))
                rest = replace(page, tables=tuple(t for t in page.tables if t is not start))
                held.append(rest)
                if rest.text.strip() or rest.tables:  # the page goes on past the table: the join ends here
                    yield from held
                    held = []
                continue
            yield from held
            held = []
        if _ends_page(page) is not None:
            held = [page]
        else:
            yield page
    yield from held
