"""tests/fixtures/tables.py: what a KnownTable says is on the page is there, inside the table's box."""

from __future__ import annotations

import pymupdf
import pytest

from tests.fixtures.tables import TABLE_STYLES, TableSpec, long_table, make_table_pdf, table_rows


@pytest.mark.parametrize("style", TABLE_STYLES)
@pytest.mark.parametrize("script", ["latin", "cyrillic", "japanese"])
def test_every_known_cell_is_written_inside_the_tables_box(style: str, script: str) -> None:
    spec = TableSpec(table_rows(2, 5, 3, script=script), spans=((2, 0, 2, 1),), caption="Table 1: Known",
                     style=style, script=script)
    pdf = make_table_pdf([spec])
    (known,) = pdf.tables
    assert {(c.row, c.col, c.row_span, c.col_span) for c in known.cells if c.row_span > 1} == {(2, 0, 2, 1)}
    assert len(known.cells) == 5 * 3 - 1
    with pymupdf.open(stream=pdf.data, filetype="pdf") as doc:
        inside = " ".join(doc[0].get_text("text", clip=pymupdf.Rect(known.bbox)).split())
        page = " ".join(doc[0].get_text().split())
    joiner = "" if script == "japanese" else " "
    for cell in known.cells:
        assert cell.text.replace(" ", joiner) in inside.replace(" ", joiner), cell
    assert "Table 1: Known" in page and "Table 1: Known" not in inside
    assert pdf.page_texts[0].split("\n\n")[0] in page


def test_a_long_tables_rows_are_distinct_and_wordy() -> None:
    spec = long_table(rows=41)
    assert len(spec.rows) == 41 and len(set(spec.rows[1:])) == 40
    assert all(len(row[-1].split()) == 4 for row in spec.rows[1:])
