"""docstream_chunker.markup_tables: an HTML document's tables read from its markup, bounded (pure)."""

from __future__ import annotations

from docstream.tables import TableCell
from docstream_chunker.markup_tables import MAX_COLUMNS, MAX_ROWS, MAX_TABLES, marker, marker_index, take_tables

TABLE = (
    "<table><caption>Table 1: Regions</caption>"
    "<tr><th>Name</th><th colspan='2'>Region</th><th>Share</th></tr>"
    "<tr><td>river</td><td>north</td><td>south</td><td>12</td></tr>"
    "<tr><td rowspan=2>forest</td><td>east</td><td>west &amp; more</td><td>7</td></tr>"
    "<tr><td>up</td><td>down<br>low</td><td>9</td></tr></table>"
)


def test_a_table_is_read_with_its_spans_caption_and_entities_and_a_marker_takes_its_place() -> None:
    html, (table,) = take_tables(f"<p>before</p>{TABLE}<p>after</p>")
    assert html == f"<p>before</p><p>{marker(0)}</p><p>after</p>"
    assert (table.rows, table.columns, table.caption) == (4, 4, "Table 1: Regions")
    assert table.cells == (
        TableCell(0, 0, 1, 1, "Name"), TableCell(0, 1, 1, 2, "Region"), TableCell(0, 3, 1, 1, "Share"),
        TableCell(1, 0, 1, 1, "river"), TableCell(1, 1, 1, 1, "north"), TableCell(1, 2, 1, 1, "south"),
        TableCell(1, 3, 1, 1, "12"),
        TableCell(2, 0, 2, 1, "forest"), TableCell(2, 1, 1, 1, "east"), TableCell(2, 2, 1, 1, "west & more"),
        TableCell(2, 3, 1, 1, "7"),
        TableCell(3, 1, 1, 1, "up"), TableCell(3, 2, 1, 1, "down low"), TableCell(3, 3, 1, 1, "9"),
    ), "the row-spanning cell's slot is skipped in the row under it"
    assert marker_index(marker(0)) == 0 and marker_index(" " + marker(17) + " ") == 17
    assert marker_index("DOCSTREAMTABLE1X and more") is None and marker_index("a paragraph") is None


def test_a_nested_table_is_its_cells_text_and_a_layout_table_of_one_column_stays() -> None:
    nested = "<table><tr><td>a</td><td>b<table><tr><td>x</td><td>y</td></tr></table></td></tr>" \
             "<tr><td>c</td><td>d</td></tr></table>"
    layout = "<table><tr><td>only one column</td></tr><tr><td>of layout</td></tr></table>"
    html, tables = take_tables(nested + layout)
    assert html == f"<p>{marker(0)}</p>{layout}"
    assert [c.text for c in tables[0].cells] == ["a", "b x y", "c", "d"]


def test_hostile_markup_is_bounded() -> None:
    huge_span = "<table><tr><td rowspan=-3>a</td><td colspan=99999999>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    _, (table,) = take_tables(huge_span)
    assert table.columns == MAX_COLUMNS, "a span is clamped to the grid's bound"
    assert (table.cells[0].row_span, table.cells[1].col_span) == (1, MAX_COLUMNS - 1)
    past = "<table><tr><td colspan=99999999>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    assert take_tables(past) == (past, []), "a cell past the last column: the table stays as it is"
    too_long = "<table>" + "<tr><td>a</td><td>b</td></tr>" * (MAX_ROWS + 1) + "</table>"
    html, tables = take_tables(too_long)
    assert tables == [] and html == too_long, "a table past the bounds stays as MuPDF lays it out"
    many = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>" * (MAX_TABLES + 5)
    _, tables = take_tables(many)
    assert len(tables) == MAX_TABLES
    broken = "<table><tr><td>a</td><td>b<tr><td>c</td><td>d"  # never closed: not taken
    assert take_tables(broken) == (broken, [])


def test_an_epubs_files_number_their_markers_on() -> None:
    html, tables = take_tables(TABLE, first=3)
    assert html == f"<p>{marker(3)}</p>" and len(tables) == 1
