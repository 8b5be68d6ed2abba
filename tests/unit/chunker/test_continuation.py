"""docstream_chunker.continuation: a table continued on the next page joined into one, its repeated header once."""

from __future__ import annotations

from docstream.models.tokenization import load_token_counter
from docstream.tables import PageTable, TableCell
from docstream_chunker.chunking import ChunkingConfig, PageText, chunk_document
from docstream_chunker.continuation import continues, join_continued, joined

HEADER = ("Name", "Count")


def _table(page: int, rows: list[tuple[str, str]], *, header: bool = True, offset: int = 0,
           caption: str | None = None, x1: float = 400.0) -> PageTable:
    grid = [HEADER, *rows] if header else rows
    cells = tuple(TableCell(r, c, 1, 1, text) for r, row in enumerate(grid) for c, text in enumerate(row))
    return PageTable(page, (72.0, 100.0, x1, 700.0), len(grid), 2, cells, caption, offset)


def _rows(first: int, count: int) -> list[tuple[str, str]]:
    return [(f"item {i}", str(i * 10)) for i in range(first, first + count)]


def test_a_table_ending_its_page_goes_on_with_the_one_starting_the_next_and_its_repeated_header_goes() -> None:
    text = "A paragraph before the table."
    one = PageText(1, text, tables=(_table(1, _rows(1, 3), offset=len(text), caption="Table 1: Items"),))
    two = PageText(2, "A paragraph after it.", tables=(_table(2, _rows(4, 2)),))
    first, second = join_continued([one, two])
    (table,) = first.tables
    assert (table.rows, table.caption, second.tables) == (6, "Table 1: Items", ())
    assert [c.text for c in table.cells if c.col == 0] == ["Name"] + [f"item {i}" for i in range(1, 6)]
    assert table.row_pages == (1, 1, 1, 1, 2, 2), "each row keeps its page"
    assert second.text == "A paragraph after it."


def test_a_continuation_without_its_header_keeps_its_first_row() -> None:
    assert joined(_table(1, _rows(1, 2)), _table(2, _rows(3, 2), header=False)).rows == 5


def test_a_table_over_three_pages_is_one() -> None:
    pages = [PageText(1, "", tables=(_table(1, _rows(1, 3)),)), PageText(2, "", tables=(_table(2, _rows(4, 3)),)),
             PageText(3, "after", tables=(_table(3, _rows(7, 3)),))]
    out = list(join_continued(pages))
    assert [len(p.tables) for p in out] == [1, 0, 0]
    assert out[0].tables[0].rows == 10 and out[0].tables[0].row_pages[-1] == 3


def test_tables_that_do_not_continue_stay_two() -> None:
    text = "before"
    ends = _table(1, _rows(1, 3), offset=len(text))
    cases = [
        (PageText(1, text + "\n\nafter", tables=(ends,)), _table(2, _rows(4, 2))),  # text after the first
        (PageText(1, text, tables=(ends,)), _table(2, _rows(4, 2), offset=5)),  # text before the second
        (PageText(1, text, tables=(ends,)), _table(2, _rows(4, 2), caption="Table 2: Other")),  # its own caption
        (PageText(1, text, tables=(ends,)), _table(2, _rows(4, 2), header=False, x1=300.0)),  # other columns
        (PageText(1, text, tables=(ends,)), _table(2, _rows(4, 2), header=False, x1=404.5)),  # its right edge moved
    ]
    for one, start in cases:
        two = PageText(2, "text" if start.offset else "", tables=(start,))
        assert [len(p.tables) for p in join_continued([one, two])] == [1, 1]
    assert not continues(_table(1, _rows(1, 2)), _table(1, _rows(3, 2))), "the same page: no continuation"


def test_a_continuation_whose_right_edge_moved_joins_when_it_repeats_the_header() -> None:
    """A table without vertical rules ends where its widest cell does, on each page its own: the header drawn
    again says it goes on; without it, the edges must agree."""
    text = "before"
    ends = _table(1, _rows(1, 3), offset=len(text))
    wider = _table(2, _rows(4, 2), x1=418.0)
    first, second = join_continued([PageText(1, text, tables=(ends,)), PageText(2, "", tables=(wider,))])
    assert (len(first.tables), len(second.tables), first.tables[0].rows) == (1, 0, 6)
    assert not continues(ends, _table(2, _rows(4, 2), header=False, x1=418.0))
    assert not continues(ends, _table(2, [("Name", "Total"), *_rows(4, 2)], header=False, x1=418.0)), \
        "another header: another table"
    moved = PageTable(2, (90.0, 100.0, 400.0, 700.0), wider.rows, 2, wider.cells)
    assert not continues(ends, moved), "the left edge still has to agree"


def _banded(page: int, first: int, count: int, *, header: bool = True) -> PageTable:
    """A table of three columns whose header is two rows: "Name" spans both, "Counts" two columns over "in"/"out"."""
    head = [TableCell(0, 0, 2, 1, "Name"), TableCell(0, 1, 1, 2, "Counts"), TableCell(1, 1, 1, 1, "in"),
            TableCell(1, 2, 1, 1, "out")] if header else []
    top = 2 if header else 0
    body = [TableCell(top + r, c, 1, 1, text) for r, i in enumerate(range(first, first + count))
            for c, text in enumerate((f"item {i}", str(i), str(i * 2)))]
    return PageTable(page, (72.0, 100.0, 400.0, 700.0), top + count, 3, tuple(head + body))


def test_a_repeated_header_of_two_rows_goes_whole_and_a_table_without_it_keeps_its_rows() -> None:
    table, after = _banded(1, 1, 3), _banded(2, 4, 2)
    assert continues(table, after)
    whole = joined(table, after)
    assert whole.rows == 7 and [c.text for c in whole.cells if c.col == 0] == ["Name"] + [
        f"item {i}" for i in range(1, 6)]
    assert whole.row_pages == (1, 1, 1, 1, 1, 2, 2)
    assert joined(table, _banded(2, 4, 2, header=False)).rows == 7
    # a first row that spans rows without repeating the header: a body cell the join would cut
    spanning = PageTable(2, table.bbox, 2, 3, (TableCell(0, 0, 2, 1, "g"), TableCell(0, 1, 1, 1, "a"),
                                               TableCell(0, 2, 1, 1, "b"), TableCell(1, 1, 1, 1, "c"),
                                               TableCell(1, 2, 1, 1, "d")))
    assert not continues(table, spanning)


def test_a_continued_tables_chunks_say_the_pages_of_their_rows() -> None:
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    one = PageText(1, "before", tables=(_table(1, _rows(1, 30), offset=6),))
    two = PageText(2, "after", tables=(_table(2, _rows(31, 30)),))
    chunks = chunk_document(join_continued([one, two]), ChunkingConfig(64, 8), counter)
    parts = [c for c in chunks if c.kind == "table"]
    assert parts[0].page_start == parts[0].page_end == 1 and parts[-1].page_start == parts[-1].page_end == 2
    assert [r for c in parts for r in range(c.table.row_start, c.table.row_end)] == list(range(1, 61))  # type: ignore[union-attr]
    assert all(c.table is not None and c.table.header == HEADER for c in parts)
