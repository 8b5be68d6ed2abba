"""chunk_bytes on generated PDFs with tables of known cells (tests/fixtures/tables.py): table chunks and their cells.

Everything is real: the PDFs drawn by PyMuPDF, its table finder, the checks before it, the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable

import pymupdf
import pytest

from docstream.errors import DocumentError
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.settings import OcrSettings
from docstream.tables import TableCell
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import (
    ChunkedDocument,
    PageOcr,
    block_flags,
    chunk_bytes,
    extract_pages,
    find_page_tables,
)
from docstream_chunker.table_detection import ruled_rows
from tests.fixtures.documents import make_epub, make_pdf
from tests.fixtures.tables import (
    KnownTable,
    TableSpec,
    long_table,
    make_continued_table_pdf,
    make_mixed_pdf,
    make_table_pdf,
    table_rows,
)
from tests.unit.chunker.test_extraction_ocr import FakeEngine, Opener

CONFIG = ChunkingConfig(256, 32)
SPANS = ((0, 1, 1, 2), (2, 0, 2, 1))


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


def _chunk(data: bytes, counter: ModelTokenCounter, **options: object) -> ChunkedDocument:
    return chunk_bytes(data, config=CONFIG, counter=counter, max_pages=100, max_bytes=1 << 28,
                       **options)  # type: ignore[arg-type]


def _cells(known: KnownTable) -> set[TableCell]:
    return {TableCell(c.row, c.col, c.row_span, c.col_span, c.text) for c in known.cells}


def _found_cells(result: ChunkedDocument, page: int) -> set[TableCell]:
    return {cell for c in result.chunks if c.table is not None and c.table.page == page for cell in c.table.cells}


@pytest.mark.parametrize("style", ["grid", "html"])
def test_a_ruled_table_is_one_chunk_with_its_header_caption_and_known_cells(
    style: str, counter: ModelTokenCounter
) -> None:
    spec = TableSpec(table_rows(4, 6, 4), caption="Table 1: Regions and counts", style=style)
    pdf = make_mixed_pdf(spec, pages=3, seed=4)
    result = _chunk(pdf.data, counter)
    tables = [c for c in result.chunks if c.kind == "table"]
    assert len(tables) == 1
    chunk, known = tables[0], pdf.tables[0]
    assert chunk.table is not None
    assert chunk.page_start == chunk.page_end == 2 == chunk.table.page
    assert chunk.table.header == spec.rows[0] and chunk.table.caption == known.caption
    assert chunk.text.startswith("Table 1: Regions and counts\n\n| Name | Region | Count | Share |\n|---|---|---|---|")
    assert set(chunk.table.cells) == _cells(known)
    assert all(abs(a - b) <= 2 for a, b in zip(chunk.table.bbox, known.bbox, strict=True))
    texts = " ".join(c.text for c in result.chunks if c.kind == "text")
    assert "Regions and counts" not in texts and spec.rows[1][1] not in texts, "the table left the text"
    assert result.chunker_settings.endswith(";tables=v3")
    assert [c.kind for c in result.chunks].index("table") > 0, "in document order, after page 1's text"


@pytest.mark.parametrize("style", ["grid", "html"])
def test_merged_cells_come_with_their_spans(style: str, counter: ModelTokenCounter) -> None:
    spec = TableSpec(table_rows(2, 6, 4), spans=SPANS, caption="Table 2: Merged", style=style)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    assert _found_cells(result, 1) == _cells(pdf.tables[0])
    spanning = {(c.row, c.col, c.row_span, c.col_span) for c in _found_cells(result, 1) if c.row_span * c.col_span > 1}
    assert spanning == set(SPANS)


@pytest.mark.parametrize("script", ["cyrillic", "japanese"])
def test_a_table_in_another_script_keeps_its_cells(script: str, counter: ModelTokenCounter) -> None:
    caption = "Таблица 3: Города" if script == "cyrillic" else "表3: 一覧"
    spec = TableSpec(table_rows(3, 5, 3, script=script), caption=caption, script=script)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    (chunk,) = [c for c in result.chunks if c.kind == "table"]
    assert chunk.table is not None and chunk.table.caption == caption
    assert set(chunk.table.cells) == _cells(pdf.tables[0])
    assert chunk.text.split("\n")[2] == "| " + " | ".join(spec.rows[0]) + " |"


def test_a_long_table_is_split_by_whole_rows_each_part_with_the_header(counter: ModelTokenCounter) -> None:
    spec = long_table(rows=41)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    parts = [c for c in result.chunks if c.kind == "table"]
    assert len(parts) >= 3
    header = "| " + " | ".join(spec.rows[0]) + " |"
    rows: list[int] = []
    for i, chunk in enumerate(parts):
        assert chunk.table is not None and chunk.token_count <= 254
        lines = chunk.text.split("\n")
        assert header in lines and lines[lines.index(header) + 1] == "|---|---|---|---|"
        assert (chunk.table.caption is not None) == (i == 0) == chunk.text.startswith("Table 1: Long inventory")
        assert (chunk.table.part, chunk.table.parts) == (i, len(parts))
        span = range(chunk.table.row_start, chunk.table.row_end)
        assert lines[lines.index(header) + 2 :] == ["| " + " | ".join(spec.rows[r]) + " |" for r in span]
        rows.extend(span)
    assert rows == list(range(1, 41)), "every row once, in order, none cut"
    assert _found_cells(result, 1) == _cells(pdf.tables[0])


@pytest.mark.parametrize(("style", "script"), [("rules", "latin"), ("rules", "cyrillic"), ("shaded", "latin"),
                                              ("shaded", "japanese"), ("plain", "latin"), ("plain", "cyrillic"),
                                              ("plain", "japanese")])
def test_booktabs_shaded_and_plain_tables_are_tables_with_their_header_caption_and_known_cells(
    style: str, script: str, counter: ModelTokenCounter,
) -> None:
    # no vertical rule: booktabs' three horizontal rules, row-high shading, or nothing drawn (columns of text
    # alone); PyMuPDF's layout model reads them
    caption = {"latin": "Table 4: Unruled", "cyrillic": "Таблица 4: Без линий", "japanese": "表4: 罫線なし"}[script]
    spec = TableSpec(table_rows(5, 5, 3, script=script), caption=caption, style=style, script=script)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    (chunk,) = [c for c in result.chunks if c.kind == "table"]
    assert chunk.table is not None and chunk.table.caption == caption
    assert chunk.table.header == spec.rows[0]
    assert set(chunk.table.cells) == _cells(pdf.tables[0])
    assert chunk.text.split("\n")[2] == "| " + " | ".join(spec.rows[0]) + " |"
    assert spec.rows[2][1] not in " ".join(c.text for c in result.chunks if c.kind == "text"), "it left the text"


@pytest.mark.parametrize("script", ["latin", "cyrillic", "japanese"])
def test_a_table_ruled_between_groups_of_rows_keeps_each_row_and_each_groups_label_spans_its_rows(
    script: str, counter: ModelTokenCounter,
) -> None:
    # rules between the columns, and across only above and below the header and each group (\hline, then
    # \multirow): the lines finder sees one row per group, each cell a column of values
    spans = ((1, 0, 3, 1), (4, 0, 4, 1))
    spec = TableSpec(table_rows(7, 8, 4, script=script), spans=spans, caption="Table 6: Groups", style="groups",
                     script=script)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    (chunk,) = [c for c in result.chunks if c.kind == "table"]
    assert chunk.table is not None and chunk.table.header == spec.rows[0]
    assert set(chunk.table.cells) == _cells(pdf.tables[0])
    assert (chunk.table.rows, chunk.table.columns) == (8, 4)


@pytest.mark.parametrize(("style", "script"), [("rules", "japanese"), ("shaded", "japanese"), ("plain", "japanese"),
                                              ("html", "japanese"), ("shaded", "cyrillic")])
def test_unruled_tables_keep_every_cell_whatever_their_body(style: str, script: str) -> None:
    # bodies on which the layout model drew an edge through a word or a number ("можн|о", "33,|937"), or put a
    # column's name and its numbers apart, and an HTML cell wrapped over two lines ("静かな先生 が"). Each has a
    # caption: the layout model finds some of the plain ones only beside their caption.
    flags = block_flags()
    specs = [TableSpec(table_rows(seed, 4 + seed % 5, 3 + seed % 3, script=script), caption=f"Table {seed + 1}: x",
                       style=style, script=script) for seed in range(9)]
    pdf = make_table_pdf(specs)
    with pymupdf.open(stream=pdf.data, filetype="pdf") as doc:
        for known in pdf.tables:
            page = doc[known.page - 1]
            found = find_page_tables(page, known.page, page.get_text("blocks", sort=True, flags=flags))
            assert [set(t.table.cells) for t in found] == [_cells(known)], f"page {known.page}"


def test_two_columns_with_nothing_drawn_stay_in_the_text(counter: ModelTokenCounter) -> None:
    # a list of terms and definitions looks the same: a table without rules needs three columns
    spec = TableSpec(table_rows(6, 5, 2), caption="Table 5: Plain columns", style="plain")
    result = _chunk(make_table_pdf([spec]).data, counter)
    assert {c.kind for c in result.chunks} == {"text"}
    assert spec.rows[2][1] in " ".join(c.text for c in result.chunks)
    assert ";tables=" not in result.chunker_settings


def test_tables_off_leaves_the_table_in_the_text(counter: ModelTokenCounter) -> None:
    spec = TableSpec(table_rows(4, 6, 4), caption="Table 1: Off")
    data = make_mixed_pdf(spec).data
    off = _chunk(data, counter, tables="off")
    assert {c.kind for c in off.chunks} == {"text"} and all(c.table is None for c in off.chunks)
    assert "Table 1: Off" in " ".join(c.text for c in off.chunks)
    assert ";tables=" not in off.chunker_settings


def test_text_only_pdfs_chunk_the_same_with_tables_auto_or_off(counter: ModelTokenCounter) -> None:
    for data in (make_pdf(6, seed=3, two_column_every=2).data, make_pdf(4, seed=4, non_ascii=True, toc=True).data):
        assert _chunk(data, counter, tables="auto") == _chunk(data, counter, tables="off")


def test_ocred_pages_are_never_looked_at_for_tables(counter: ModelTokenCounter) -> None:
    spec = TableSpec(table_rows(4, 6, 4), caption="Table 1: Read by OCR")
    pdf = make_table_pdf([spec])
    ocr = PageOcr(OcrSettings(mode="force"), opener=Opener(FakeEngine(["Table 1: Read by OCR and its cells."])))
    result = _chunk(pdf.data, counter, ocr=ocr)
    assert {c.kind for c in result.chunks} == {"text"}
    assert result.chunk_sources[0].text_source == "ocr"


def test_the_page_text_leaves_the_table_out_and_places_it(counter: ModelTokenCounter) -> None:
    spec = TableSpec(table_rows(6, 4, 3), caption="Table 5: Placed")
    pdf = make_table_pdf([spec], seed=6)
    with pymupdf.open(stream=pdf.data, filetype="pdf") as doc:
        (page,) = list(extract_pages(doc))
    assert page.text == pdf.page_texts[0]
    (table,) = page.tables
    assert table.offset == page.text.index("\n\n") + 2, "between the paragraph above and the one below"
    assert (table.rows, table.columns, table.caption) == (4, 3, "Table 5: Placed")


def test_rules_of_one_width_at_three_heights_or_two_bands_ask_for_the_layout_model() -> None:
    rule = lambda y, x0=72.0, x1=400.0: ("l", (x0, y, x1, y))  # noqa: E731
    assert ruled_rows([rule(100), rule(120), rule(300)]), "booktabs: top, middle and bottom rules"
    assert not ruled_rows([rule(100), rule(300)]), "two rules frame a listing, not a table"
    assert not ruled_rows([rule(100), rule(120, 72, 300), rule(300, 100, 400)]), "three rules of three widths"
    assert not ruled_rows([rule(100, 72, 120), rule(120, 72, 120), rule(140, 72, 120)]), "underlines"
    assert ruled_rows([("re", (72, 100, 400, 114)), ("re", (72, 128, 400, 142))]), "shaded rows"
    assert not ruled_rows([("re", (72, 100, 400, 114))]), "one band: a highlighted line"
    assert not ruled_rows([("re", (72, 100, 400, 300)), ("re", (72, 400, 400, 600))]), "boxes, not rows"


def test_the_finder_runs_only_where_both_checks_see_a_grid() -> None:
    flags = block_flags()
    text_only = make_pdf(2, seed=8).data
    with pymupdf.open(stream=text_only, filetype="pdf") as doc:
        page = doc[0]
        blocks = page.get_text("blocks", sort=True, flags=flags)
        assert find_page_tables(page, 1, blocks) == []
        assert find_page_tables(page, 1, blocks, gated=False) == [], "no ruled grid: nothing found either way"
    boxed = make_table_pdf([TableSpec(table_rows(1, 4, 3))]).data
    with pymupdf.open(stream=boxed, filetype="pdf") as doc:
        page = doc[0]
        found = find_page_tables(page, 1, page.get_text("blocks", sort=True, flags=flags))
        assert [(t.table.rows, t.table.columns) for t in found] == [(4, 3)]


MARKUP_TABLE = (
    "<table><caption>Table 6: Regions</caption>"
    "<tr><th>Name</th><th colspan='2'>Region</th><th>Share</th></tr>"
    "<tr><td>river</td><td>north</td><td>south</td><td>12</td></tr>"
    "<tr><td rowspan='2'>forest</td><td>east</td><td>west &amp; more</td><td>7</td></tr>"
    "<tr><td>up</td><td>down</td><td>9</td></tr></table>"
)
MARKUP_CELLS = {
    TableCell(0, 0, 1, 1, "Name"), TableCell(0, 1, 1, 2, "Region"), TableCell(0, 3, 1, 1, "Share"),
    TableCell(1, 0, 1, 1, "river"), TableCell(1, 1, 1, 1, "north"), TableCell(1, 2, 1, 1, "south"),
    TableCell(1, 3, 1, 1, "12"), TableCell(2, 0, 2, 1, "forest"), TableCell(2, 1, 1, 1, "east"),
    TableCell(2, 2, 1, 1, "west & more"), TableCell(2, 3, 1, 1, "7"), TableCell(3, 1, 1, 1, "up"),
    TableCell(3, 2, 1, 1, "down"), TableCell(3, 3, 1, 1, "9"),
}


def test_an_html_documents_table_comes_from_its_markup_with_spans_and_caption(counter: ModelTokenCounter) -> None:
    html = (f"<html><head><meta charset='utf-8'></head><body><p>Vor der Tabelle: Größe und Maß.</p>{MARKUP_TABLE}"
            "<p>After the table.</p></body></html>").encode()
    result = _chunk(html, counter, filename="report.html")
    assert [c.kind for c in result.chunks] == ["text", "table", "text"]
    table = result.chunks[1]
    assert table.table is not None and table.table.caption == "Table 6: Regions"
    assert set(table.table.cells) == MARKUP_CELLS and table.table.header == ("Name", "Region", "", "Share")
    assert table.text.startswith("Table 6: Regions\n\n| Name | Region |  | Share |\n|---|---|---|---|\n| river |")
    assert result.chunks[0].text == "Vor der Tabelle: Größe und Maß.", "the rest of the document as it was"
    assert "forest" not in result.chunks[2].text and result.chunker_settings.endswith(";tables=v3")
    off = _chunk(html, counter, filename="report.html", tables="off")
    assert {c.kind for c in off.chunks} == {"text"} and "west & more" in off.chunks[0].text


def test_an_epubs_tables_come_from_its_files_markup(counter: ModelTokenCounter) -> None:
    epub = make_epub(seed=2, chapters=2, paragraph_count=2, extra_html=MARKUP_TABLE.replace("'", '"'))
    result = _chunk(epub, counter)
    tables = [c for c in result.chunks if c.kind == "table"]
    assert len(tables) == 2, "one in each chapter"
    assert all(c.table is not None and set(c.table.cells) == MARKUP_CELLS for c in tables)
    assert [c.page_start for c in tables] == sorted(c.page_start for c in tables)


@pytest.mark.parametrize("repeat_header", [True, False])
def test_a_table_continued_on_the_next_page_is_one_table_its_header_once(
    repeat_header: bool, counter: ModelTokenCounter,
) -> None:
    spec = TableSpec(table_rows(3, 14, 4), caption="Table 7: Continued")
    pdf = make_continued_table_pdf(spec, 8, repeat_header=repeat_header)
    result = _chunk(pdf.data, counter)
    parts = [c for c in result.chunks if c.kind == "table"]
    assert {c.table.rows for c in parts if c.table is not None} == {14}, "one table of all its rows"
    assert _found_cells(result, 1) == _cells(pdf.tables[0]), "the repeated header is not a body row"
    assert (parts[0].page_start, parts[-1].page_end) == (1, 2)
    assert result.chunker_settings.endswith(";tables=v3;continued=v1")
    texts = [c.text for c in result.chunks if c.kind == "text"]
    assert texts == list(pdf.page_texts), "the paragraphs before and after, as written"


TWO_ROW_HEADERS = {
    "latin": (("Name", "Counts", "", "Notes"), ("", "in", "out", "")),
    "cyrillic": (("Название", "Числа", "", "Заметки"), ("", "вход", "выход", "")),
    "japanese": (("名前", "件数", "", "備考"), ("", "入力", "出力", "")),
}
TWO_ROW_SPANS = ((0, 0, 2, 1), (0, 1, 1, 2), (0, 3, 2, 1))
"""A header of two rows: "Name" and "Notes" span both, "Counts" spans the two columns "in" and "out" name."""


def _two_row_spec(script: str, style: str, body: int = 5, seed: int = 6) -> TableSpec:
    rows = table_rows(seed, body + 1, 4, script=script)[1:]
    return TableSpec((*TWO_ROW_HEADERS[script], *rows), spans=TWO_ROW_SPANS, caption="Table 4: Two rows",
                     style=style, script=script)


# Japanese bodies of three seeds, one a style: every seed's cells are kept since a touching piece of a word or number
# stays whole (test_unruled_tables_keep_every_cell_whatever_their_body runs nine bodies a style)
@pytest.mark.parametrize(("script", "style", "seed"), [
    ("latin", "grid", 6), ("latin", "html", 6), ("latin", "rules", 6), ("latin", "shaded", 6),
    ("cyrillic", "grid", 6), ("cyrillic", "rules", 6), ("japanese", "html", 7), ("japanese", "shaded", 5),
    ("japanese", "rules", 1),
])
def test_a_header_of_two_rows_is_read_as_one_with_each_columns_names_top_first(
    script: str, style: str, seed: int, counter: ModelTokenCounter,
) -> None:
    spec = _two_row_spec(script, style, seed=seed)
    pdf = make_table_pdf([spec])
    result = _chunk(pdf.data, counter)
    (chunk,) = [c for c in result.chunks if c.kind == "table"]
    assert chunk.table is not None and chunk.table.header_rows == 2
    (top, sub) = TWO_ROW_HEADERS[script]
    assert chunk.table.header == (top[0], f"{top[1]} {sub[1]}", f"{top[1]} {sub[2]}", top[3])
    assert set(chunk.table.cells) == _cells(pdf.tables[0]), "the header's spans, as drawn or as the text shows"
    assert chunk.text.split("\n")[2] == "| " + " | ".join(chunk.table.header) + " |"
    assert chunk.text.split("\n")[4].startswith(f"| {spec.rows[2][0]} |"), "the first body row under the delimiter"
    assert result.chunker_settings.endswith(";tables=v3;headers=v1")


def test_a_table_with_a_two_row_header_continued_on_the_next_page_is_one_its_header_once(
    counter: ModelTokenCounter,
) -> None:
    spec = _two_row_spec("latin", "grid", body=14, seed=3)
    pdf = make_continued_table_pdf(spec, 9, header_rows=2)
    result = _chunk(pdf.data, counter)
    parts = [c for c in result.chunks if c.kind == "table" and c.table is not None]
    assert {(c.table.rows, c.table.header_rows) for c in parts if c.table is not None} == {(16, 2)}
    assert _found_cells(result, 1) == _cells(pdf.tables[0]), "the repeated header rows are not body rows"
    assert result.chunker_settings.endswith(";tables=v3;continued=v1;headers=v1")


def test_a_damaged_epub_is_laid_out_as_it_is_never_an_untyped_error(counter: ModelTokenCounter) -> None:
    # the chaos fuzz found these: a member whose deflate stream is broken made the markup read raise zlib.error
    epub = bytearray(make_epub(seed=3, chapters=2, paragraph_count=2, extra_html=MARKUP_TABLE.replace("'", '"')))
    member = epub.index(b"OEBPS/c0.xhtml") + len(b"OEBPS/c0.xhtml")
    for at in range(member + 20, member + 60, 7):
        epub[at] ^= 0x5A
    try:
        result = _chunk(bytes(epub), counter)
    except DocumentError as exc:
        assert exc.code in ("corrupt", "no_text", "zero_pages")
    else:
        assert result.chunks


def test_each_page_the_layout_model_reads_adds_to_the_time_limit(counter: ModelTokenCounter) -> None:
    """A clock that moves a second a reading: four booktabs pages (the layout model's) pass a limit of a few seconds
    with 10 s a page of the model, and time out without it, saying what the model read."""
    pdf = make_table_pdf([TableSpec(table_rows(seed, 5, 3), caption=f"Table {seed}", style="rules")
                          for seed in range(4)], seed=2)

    def ticking() -> Callable[[], float]:
        ticks = iter(range(10_000))
        return lambda: float(next(ticks))

    told: list[int] = []
    result = _chunk(pdf.data, counter, timeout_s=3.0, clock=ticking(), layout_page_s=10.0, on_layout_page=told.append)
    assert told == [1, 2, 3, 4] and sum(c.kind == "table" for c in result.chunks) == 4
    with pytest.raises(DocumentError) as err:
        _chunk(pdf.data, counter, timeout_s=3.0, clock=ticking(), layout_page_s=0.01)
    assert err.value.code == "timeout" and "read by the layout model" in err.value.message
