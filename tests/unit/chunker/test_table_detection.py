"""docstream_chunker.table_detection, fed lists: the cheap checks, grid cells and their words, the content-stream
scan, captions, header spans and the layout model's tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from docstream.tables import PageTable, TableCell, header_rows, header_texts
from docstream_chunker.table_detection import (
    aligned_columns,
    caption_index,
    content_paths,
    form_matrix,
    grid_cells,
    header_spans,
    looks_tabular,
    ruled_grid,
    ruled_rows,
    side_by_side_boxes,
    split_at_gaps,
    split_at_lines,
    split_spanning_rows,
    with_layout_grids,
    with_layout_tables,
    without_empty_columns,
)
from tests.unit.lib.test_tables import make_table


def _chars(text: str, x: float, y: float) -> list[tuple[float, float, float, float, str]]:
    """Characters 5 points wide from (x, y), a line's end after them."""
    out = [(x + 5 * i, y, x + 5 * i + 5, y + 8, char) for i, char in enumerate(text)]
    return [*out, (0.0, 0.0, 0.0, 0.0, "\n")]


def _rows_of(texts: list[tuple[str, float]], *, x: float = 52, width: float = 200) -> tuple[list, list]:
    """A ruled column from x 50 to 50 + ``width`` beside a first one (0 to 50), a row of 10 points a text, each
    text at its x (characters 5 points wide, 8 high: the gap of the split is 0.8 x 8 points)."""
    boxes, chars = [], []
    for row, (text, at) in enumerate(texts):
        boxes += [(0, 10 * row, 50, 10 * row + 10), (50, 10 * row, 50 + width, 10 * row + 10)]
        chars += [*_chars(f"r{row}", 2, 10 * row + 1), *_chars(text, at, 10 * row + 1)]
    return boxes, chars


def test_a_ruled_column_that_the_text_aligns_in_two_is_split_and_a_title_across_it_spans_both() -> None:
    # "0.535E+00" then, 15 points on, "3.6" (a c|rr pair): every row but the title
    pairs = [("0.535E+00   3.6", 52), ("0.450E-01   3.6", 52), ("0.458E-02   3.3", 52), ("lambda = 1", 90),
             ("0.680E-03   3.5", 52)]
    boxes, chars = _rows_of(pairs)
    rows, columns, cells = grid_cells(split_at_gaps(boxes, chars), chars)
    assert (rows, columns) == (5, 3)
    by_row = {r: [(c.col, c.col_span, c.text) for c in cells if c.row == r] for r in range(rows)}
    assert by_row[0] == [(0, 1, "r0"), (1, 1, "0.535E+00"), (2, 1, "3.6")]
    assert by_row[3] == [(0, 1, "r3"), (1, 2, "lambda = 1")], "the title crosses the gap: one cell of two columns"


@pytest.mark.parametrize(("texts", "why"), [
    ([("12.3 ms", 52), ("4.5 ms", 57), ("10.0 ms", 52), ("7.1 ms", 57)], "a word space is no column gap"),
    ([("0.535E+00   3.6", 52), ("0.450E-01   3.6", 52), ("only left", 52), ("x", 52)], "two rows on both sides"),
    ([("Alpha", 52), ("Beta", 52), ("Gamma", 52)], "one run of text a row"),
])
def test_a_column_without_a_gap_that_most_rows_share_stays_whole(texts: list[tuple[str, float]], why: str) -> None:
    boxes, chars = _rows_of(texts)
    assert split_at_gaps(boxes, chars) == boxes, why


def test_grid_cells_gives_rows_columns_spans_and_each_cells_words_in_order() -> None:
    # a 3 x 3 grid on x 0/50/100/150, y 0/10/20/30: (0, 1) spans two columns, (1, 0) two rows
    boxes = [(0, 0, 50, 10), (50, 0, 150, 10.4), (0, 10, 50, 30), (50, 10, 100, 20), (100, 10, 150, 20),
             (50, 20, 100, 30), (100, 20, 150, 30)]
    chars = [*_chars("Name", 2, 1), *_chars("Both columns", 52, 1), *_chars("tall", 2, 11), *_chars("one", 2, 21),
             *_chars("b", 52, 11), *_chars("c", 102, 11), *_chars("d e", 52, 21), (400.0, 0.0, 410.0, 8.0, "x")]
    rows, columns, cells = grid_cells(boxes, chars)
    assert (rows, columns) == (3, 3)
    assert cells == (
        TableCell(0, 0, 1, 1, "Name"), TableCell(0, 1, 1, 2, "Both columns"), TableCell(1, 0, 2, 1, "tall one"),
        TableCell(1, 1, 1, 1, "b"), TableCell(1, 2, 1, 1, "c"), TableCell(2, 1, 1, 1, "d e"),
        TableCell(2, 2, 1, 1, ""),
    )


def test_unspaced_text_across_two_cells_is_parted_at_the_edge() -> None:
    boxes = [(0, 0, 30, 10), (30, 0, 60, 10), (0, 10, 30, 20), (30, 10, 60, 20)]
    row = [(2.0 + 7 * i, 11.0, 9.0 + 7 * i, 19.0, c) for i, c in enumerate("3,59机の上")]
    _, _, cells = grid_cells(boxes, [*_chars("名前", 2, 1), *_chars("件数", 32, 1), *row])
    assert [c.text for c in cells] == ["名前", "件数", "3,59", "机の上"]


def test_a_word_an_edge_cuts_goes_whole_to_the_cell_holding_most_of_it() -> None:
    # the layout model's edge at x 38 runs through "можно" (chars 2-37 and 37-44): the word stays one
    boxes = [(0, 0, 38, 10), (38, 0, 80, 10), (0, 10, 38, 20), (38, 10, 80, 20)]
    row = [(2.0 + 7 * i, 11.0, 9.0 + 7 * i, 19.0, c) for i, c in enumerate("можно")] + [(40.0, 11.0, 45.0, 19.0, " ")]
    row += [(50.0 + 5 * i, 11.0, 55.0 + 5 * i, 19.0, c) for i, c in enumerate("49,810")]
    _, _, cells = grid_cells(boxes, [*_chars("Город", 2, 1), *_chars("Число", 40, 1), *row])
    assert [c.text for c in cells] == ["Город", "Число", "можно", "49,810"]


def test_a_cjk_cells_text_wrapped_over_two_lines_is_one_word() -> None:
    boxes = [(0, 0, 60, 10), (0, 10, 60, 30), (60, 0, 90, 30)]
    chars = [*_chars("地域", 2, 1), *_chars("静かな先生", 2, 11), *_chars("が", 2, 21), *_chars("x", 62, 1)]
    assert [c.text for c in grid_cells(boxes, chars)[2]] == ["地域", "x", "静かな先生が"]
    latin = [*_chars("Region", 2, 1), *_chars("quiet", 2, 11), *_chars("teacher", 2, 21), *_chars("x", 62, 1)]
    assert [c.text for c in grid_cells(boxes, latin)[2]] == ["Region", "x", "quiet teacher"]


def test_without_empty_columns_drops_a_column_split_off_and_joins_a_name_to_its_numbers() -> None:
    def table(*rows: tuple[str, ...]) -> PageTable:
        cells = tuple(TableCell(r, c, 1, 1, text) for r, row in enumerate(rows) for c, text in enumerate(row))
        return PageTable(1, (0, 0, 100, 100), len(rows), len(rows[0]), cells)

    empty = table(("名前", "件数", "", "割合"), ("雪1", "33,433", "", "天気"), ("見2", "49,757", "", "新聞"))
    assert without_empty_columns(empty) == table(("名前", "件数", "割合"), ("雪1", "33,433", "天気"),
                                                 ("見2", "49,757", "新聞"))
    apart = table(("Name", "Count", "", "Share"), ("a", "", "47,325", "x"), ("b", "", "79,535", "y"))
    assert without_empty_columns(apart) == table(("Name", "Count", "Share"), ("a", "47,325", "x"), ("b", "79,535", "y"))
    sparse = table(("Name", "Count", "Share"), ("a", "", "1"), ("b", "2", ""))
    assert without_empty_columns(sparse) == sparse, "a column with a name and a body keeps its empty cells"
    spanned = replace(table(("Name", "Counts", ""), ("a", "1", "2"), ("b", "3", "4")),
                      cells=(TableCell(0, 0, 1, 1, "Name"), TableCell(0, 1, 1, 2, "Counts"),
                             *table(("Name", "Counts", ""), ("a", "1", "2"), ("b", "3", "4")).cells[3:]))
    assert without_empty_columns(spanned) == spanned


def test_the_layout_models_grid_replaces_the_bands_the_finder_cut_a_booktabs_table_into() -> None:
    def table(bbox: tuple[float, float, float, float], rows: int, columns: int = 2) -> PageTable:
        cells = tuple(TableCell(r, c, 1, 1, f"{r}.{c}") for r in range(rows) for c in range(columns))
        return PageTable(1, bbox, rows, columns, cells)

    header, body = table((100, 100, 400, 120), 1), table((100, 122, 400, 250), 1)
    beside = table((100, 400, 400, 500), 5)
    grid = table((100, 100, 400, 250), 8, 3)
    assert with_layout_grids([header, body, beside], [grid]) == [grid, beside], "in the place of the first band"
    assert with_layout_grids([beside], [grid]) == [beside, grid], "a table the finder missed is added"
    ruled = table((100, 100, 400, 250), 7, 3)
    assert with_layout_grids([ruled, beside], [grid]) == [ruled, beside], "the finder's whole table stays"
    assert with_layout_grids([header, body], []) == [header, body]


def test_the_layout_models_tables_take_the_place_of_a_ruled_grid_read_as_two_rows() -> None:
    def table(bbox: tuple[float, float, float, float], rows: int) -> PageTable:
        cells = tuple(TableCell(r, c, 1, 1, f"{r}.{c}") for r in range(rows) for c in range(3))
        return PageTable(1, bbox, rows, 3, cells)

    # the lines finder: a grid of 12 rows, and one whose body rows no rule parts (2 rows: each cell a column)
    whole, collapsed = table((60, 270, 270, 540), 12), table((300, 345, 520, 420), 2)
    # the layout model: the same grid (its spans unread) and the collapsed one row by row, and one beside
    again, rows, beside = table((62, 272, 268, 538), 12), table((302, 350, 518, 418), 4), table((300, 80, 520, 170), 5)
    assert with_layout_tables([whole, collapsed], [again, rows, beside], every=False) == [rows, beside, whole]
    assert with_layout_tables([whole, collapsed], [again, rows, beside], every=True) == [again, rows, beside]
    assert with_layout_tables([whole], [again], every=False) == [whole], "the ruled grid's own reading stays"
    # rules beside the grids, and the layout model cut the ruled grid in two tables of fewer rows: the rules' stays
    top, bottom = table((62, 272, 268, 400), 6), table((62, 405, 268, 538), 6)
    assert with_layout_tables([whole, collapsed], [top, bottom, rows, beside], every=True) == [rows, beside, whole]
    # the rules' rows read from the text (split_at_lines), three columns of values in one cell where no rule parts
    # them: the model's reading of fewer rows and more columns has more cells with text, and takes its place
    finer = PageTable(1, (62, 272, 268, 538), 10, 7,
                      tuple(TableCell(r, c, 1, 1, f"{r}.{c}") for r in range(10) for c in range(7)))
    assert with_layout_tables([whole], [finer], every=True) == [finer]


def _line(x0: float, x1: float, y: float) -> tuple[float, float, float, float]:
    return (x0, y, x1, y + 10)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # a header and four rows of three columns: names left-aligned, numbers right-aligned
        ([_line(58, 90, 100), _line(150, 190, 100), _line(260, 290, 100)]
         + [line for r in range(1, 5)
            for line in (_line(58, 80 + 3 * r, 100 + 18 * r), _line(150, 200 - r, 100 + 18 * r),
                         _line(262 - 4 * r, 290, 100 + 18 * r))], True),
        # two columns of prose: two lines a row, but a table needs three columns
        ([line for r in range(8) for line in (_line(54, 290, 100 + 12 * r), _line(310, 558, 100 + 12 * r))], False),
        # an option list: "-c, --check   checks the syntax only", two columns
        ([line for r in range(5)
          for line in (_line(101, 160 + r, 100 + 14 * r), _line(227, 300 + 9 * r, 100 + 14 * r))], False),
        # three columns, but three rows far apart: headings set flush right over paragraphs, not a table
        ([line for r in range(3) for line in (_line(90, 140, 100 + 200 * r), _line(200, 300, 100 + 200 * r),
                                              _line(474, 522, 100 + 200 * r))], False),
        # two rows of three columns only: a header and one body row are not enough to tell
        ([line for r in range(2) for line in (_line(58, 90, 100 + 18 * r), _line(150, 190, 100 + 18 * r),
                                              _line(260, 290, 100 + 18 * r))], False),
        # three rows of three lines whose edges line up nowhere
        ([_line(58 + 37 * r, 90 + 37 * r, 100 + 18 * r) for r in range(3)]
         + [_line(150 + 29 * r, 190 + 31 * r, 100 + 18 * r) for r in range(3)]
         + [_line(260 + 23 * r, 290 + 27 * r, 100 + 18 * r) for r in range(3)], False),
    ],
    ids=["table", "two-column-prose", "option-list", "rows-far-apart", "two-rows", "unaligned"],
)
def test_aligned_columns(lines: list[tuple[float, float, float, float]], expected: bool) -> None:
    assert aligned_columns(lines) is expected
    assert aligned_columns(reversed(lines)) is expected, "whatever the order"


def test_side_by_side_boxes_are_the_blocks_looks_tabular_counts() -> None:
    row = (58.0, 149.0, 299.0, 161.0, "bridge 1\nforest machine\n8,272\nmarket harbour\n")
    prose = (54.0, 54.0, 558.0, 97.0, "A line of body text that runs the width of the column here\n" * 3)
    head = (54.0, 20.0, 558.0, 30.0, "Chapter 2: Handling\n17\n")
    assert side_by_side_boxes([prose, row, head], 792.0) == [row[:4]]


def test_grid_cells_of_no_boxes_is_empty() -> None:
    assert grid_cells([], _chars("a b", 0, 0)) == (0, 0, ())


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        # a table's rows: each block holds one row's cells as lines side by side (MuPDF's blocks of a grid)
        ([(58, 131, 262, 143, "Name\nRegion\nCount\nShare\n"),
          (58, 149, 299, 161, "bridge 1\nforest machine\n8,272\nmarket harbour\n")], True),
        # the whole table in one block: rows stacked, cells side by side
        ([(54, 100, 330, 154, "".join(f"cell{r}{c} val\n" for r in range(5) for c in range(4)))], True),
        # paragraphs: stacked lines as wide as the block
        ([(54, 54, 558, 97, "A line of body text that runs the width of the column here\n" * 3)], False),
        # Japanese paragraph: full-width characters, stacked
        ([(54, 54, 540, 120, "東京の学校で先生が学生の友達と家族会社に仕事を電車で駅まで行きます\n" * 4)], False),
        # a running head ("Chapter 2 ... 17") in the top margin, however side by side
        ([(54, 20, 558, 30, "Chapter 2: Handling\n17\n")], False),
        # one side-by-side block of two lines in the body: not enough for two rows of two cells
        ([(54, 300, 558, 310, "Term\nits definition\n")], False),
        # a manual's definition lines (libtasn1's): a row each, paragraphs between them, not one under the other
        ([(90, 150, 522, 161, "[Function]\nint asn1_parser2tree (const char * file, asn1 node *\n"),
          (90, 260, 522, 271, "[Function]\nvoid asn1_perror (int error)\n")],
         False),
        # the same rows a table's: two row heights apart, and the order the blocks come in does not matter
        ([(90, 172, 522, 183, "[Function]\nvoid asn1_perror (int error)\n"),
          (90, 150, 522, 161, "[Function]\nint asn1_parser2tree (const char * file, asn1 node *\n")], True),
    ],
    ids=["row-blocks", "one-block", "paragraph", "cjk-paragraph", "running-head", "two-lines", "definition-lines",
         "rows-one-under-the-other"],
)
def test_looks_tabular(blocks: list[tuple[float, float, float, float, str]], expected: bool) -> None:
    assert looks_tabular(blocks, 792.0) is expected


def test_ruled_grid_wants_three_rules_each_way() -> None:
    grid = [("l", (0, y, 100, y)) for y in (0, 10, 20)] + [("l", (x, 0, x, 20)) for x in (0, 50, 100)]
    assert ruled_grid(grid)
    cells = [("re", (x, y, x + 50, y + 10)) for x in (0, 50) for y in (0, 10)]
    assert ruled_grid(cells)
    thin = [("re", (0, y, 100, y + 0.5)) for y in (0, 10, 20)] + [("re", (x, 0, x + 0.5, 20)) for x in (0, 50, 99)]
    assert ruled_grid(thin)
    assert not ruled_grid([("re", (0, 0, 100, 50)), ("re", (0, 60, 100, 90))])  # two framed boxes, stacked
    assert not ruled_grid([("l", (0, y, 100, y)) for y in (0, 10, 90)])  # booktabs: horizontal rules only
    assert not ruled_grid([("l", (0, 0, 2, 0))] * 9)  # too short to be rules


def test_content_paths_reads_lines_and_rectangles_of_a_stream() -> None:
    stream = b"q 0.6 w\n10 20 m\n110 20 l\n110 80 l S\n5 5 40 -10 re f\nBT /F1 9 Tf (x) Tj ET\n1 2 l\nQ"
    assert list(content_paths(stream)) == [
        ("l", (10.0, 20.0, 110.0, 20.0)), ("l", (110.0, 20.0, 110.0, 80.0)), ("re", (5.0, -5.0, 45.0, 5.0)),
        ("l", (5.0, 5.0, 1.0, 2.0)),
    ]
    assert list(content_paths(b"/Tf l\n(word) re\n")) == []  # operands that are not numbers


def test_content_paths_place_each_rule_by_its_cm_as_pdftex_draws_booktabs_and_hline_tables() -> None:
    # pdfTeX: every rule drawn at 0 0 inside q ... Q, moved into place by its own cm
    rule = "q\n1 0 0 1 60.34 {y} cm\n[]0 d 0 J 0.61 w 0 0 m 224.28 0 l S\nQ\nBT /F1 9 Tf (Q) Tj ET\n"
    stream = "".join(rule.format(y=y) for y in (786.79, 766.251, 725.782)).encode()
    paths = list(content_paths(stream))
    assert paths == [("l", (60.34, y, 284.62, y)) for y in (786.79, 766.251, 725.782)]
    assert ruled_rows(paths)
    # a scale and a nested q: 0.1 units drawn under a 10x matrix are points
    scaled = b"q 10 0 0 10 0 0 cm q 1 0 0 1 2 3 cm 0 0 m 9 0 l S Q 0 0 5 1 re f Q 1 1 m 2 2 l S"
    assert list(content_paths(scaled)) == [
        ("l", (20.0, 30.0, 110.0, 30.0)), ("re", (0.0, 0.0, 50.0, 10.0)), ("l", (1.0, 1.0, 2.0, 2.0)),
    ]


def test_content_paths_follow_the_forms_a_stream_shows_where_it_places_them() -> None:
    forms = {"Fm0": (b"0 0 m 50 0 l S /Fm1 Do", (2.0, 0.0, 0.0, 2.0, 0.0, 0.0)),
             "Fm1": (b"0 0 10 10 re f /Fm1 Do", (1.0, 0.0, 0.0, 1.0, 5.0, 5.0))}  # Fm1 shows itself: bounded
    stream = b"q 1 0 0 1 100 200 cm /Fm0 Do Q /Im9 Do 0 0 m 1 0 l S"
    paths = list(content_paths(stream, forms=forms.get))
    assert paths[0] == ("l", (100.0, 200.0, 200.0, 200.0))  # the form's matrix, then the cm at its Do
    assert paths[1] == ("re", (110.0, 210.0, 130.0, 230.0))
    assert len(paths) == 2 + 3 and paths[-1] == ("l", (0.0, 0.0, 1.0, 0.0))  # 4 forms deep at most; an image: none
    assert list(content_paths(stream)) == [("l", (0.0, 0.0, 1.0, 0.0))]  # no lookup: forms skipped


def test_a_forms_matrix_is_read_from_its_array_else_the_identity() -> None:
    assert form_matrix(("array", "[2 0 0 2 5 -1.5]")) == (2.0, 0.0, 0.0, 2.0, 5.0, -1.5)
    for key in (("null", "null"), ("array", "[1 0 0 1]"), ("array", "[1 0 0 1 x 0]")):
        assert form_matrix(key) == (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def test_caption_is_the_nearest_caption_like_block_above_else_below() -> None:
    table = (100.0, 200.0, 400.0, 300.0)
    blocks = [
        (100, 150, 300, 160, "Table 2: too far above\n"),
        (100, 180, 300, 192, "Some paragraph right above\n"),
        (100, 305, 300, 315, "Table 3: just below\n"),
        (100, 185, 300, 196, "Tab. IV — above\n"),
        (500, 190, 600, 198, "Table 5: not beside it\n"),
    ]
    assert caption_index(table, blocks) == 3
    assert caption_index(table, blocks[:3]) == 2
    assert caption_index(table, [(100, 186, 300, 197, "Таблица 1: города\n")]) == 0
    assert caption_index(table, [(100, 186, 300, 197, "表3: 一覧\n")]) == 0
    assert caption_index(table, [(100, 186, 300, 197, "Tables are nice\n")]) is None


def test_header_spans_reads_a_two_row_header_that_no_rule_shows() -> None:
    flat = make_table([["Name", "Counts", "", "Notes"], ["", "in", "out", ""], ["a", "1", "2", "x"],
                       ["b", "3", "4", "y"]])
    spanned = header_spans(flat)
    assert {(c.row, c.col, c.row_span, c.col_span, c.text) for c in spanned.cells if c.row < 2} == {
        (0, 0, 2, 1, "Name"), (0, 1, 1, 2, "Counts"), (0, 3, 2, 1, "Notes"), (1, 1, 1, 1, "in"), (1, 2, 1, 1, "out")}
    assert [c for c in spanned.cells if c.row >= 2] == [c for c in flat.cells if c.row >= 2]
    assert header_rows(spanned) == 2 and header_texts(spanned) == ("Name", "Counts in", "Counts out", "Notes")
    # every name a group: 2023 over in/out, 2024 over in/out
    years = make_table([["2023", "", "2024", ""], ["in", "out", "in", "out"], ["1", "2", "3", "4"]])
    assert header_texts(header_spans(years)) == ("2023 in", "2023 out", "2024 in", "2024 out")


@pytest.mark.parametrize(
    "rows",
    [
        [["Name", "Value", ""], ["a", "1", "2"], ["b", "3", "4"]],  # a body row: its first column has text
        [["Name", "Counts", "", "Notes"], ["", "in", "", ""], ["a", "1", "2", "x"]],  # a group column unnamed
        [["", "A", "B"], ["x", "1", ""], ["y", "2", "3"]],  # an empty corner over a named row
        [["Name", "Count", "Notes"], ["", "", ""], ["a", "1", "x"]],  # no group
        [["Name", "Counts", ""], ["", "in", "out"]],  # no body row
    ],
    ids=["body-row", "group-unnamed", "corner", "no-group", "no-body"],
)
def test_header_spans_leaves_other_tables_as_they_are(rows: list[list[str]]) -> None:
    table = make_table(rows)
    assert header_spans(table) is table


def test_header_spans_leaves_a_table_whose_drawing_gave_its_header_spans() -> None:
    drawn = make_table([["Name", "Counts", "", "Notes"], ["", "in", "out", ""], ["a", "1", "2", "x"]], {(0, 1): (1, 2)})
    assert header_spans(drawn) is drawn


def test_a_glyph_of_a_hostile_width_ends_at_its_cell() -> None:
    """Unclamped, its 2e12 points would be 4e12 steps of the strip search (a MemoryError here)."""
    pairs = [("0.535E+00   3.6", 52), ("0.450E-01   3.6", 52), ("0.458E-02   3.3", 52), ("0.680E-03   3.5", 52),
             ("0.633E-04   3.4", 52)]
    boxes, chars = _rows_of(pairs)
    wide = (-1e12, 51.0, 1e12 + 300, 59.0, "W")  # centred in the column, a row of its own
    boxes += [(0, 50, 50, 60), (50, 50, 250, 60)]
    split = split_at_gaps(boxes, [*chars, wide])
    assert (50, 50, 250, 60) in split, "the row the glyph fills crosses the gap: it stays whole"
    assert len(split) == len(boxes) + 5, "the five rows of pairs are split"


def _band(cells: list[list[str]], *, line: float = 12, top: float = 20) -> tuple[list, list]:
    """A header row (0 to 20), one ruled row holding the columns' lines of text (``cells``, one list of lines a
    column, 60 points wide), each line ``line`` points below the one above (a column of one line is centred),
    then a ruled row of one line a cell."""
    height = line * max(len(c) for c in cells) + 4
    foot = top + height
    boxes = [(60 * i, 0, 60 * i + 60, top) for i in range(len(cells))]
    boxes += [(60 * i, top, 60 * i + 60, foot) for i in range(len(cells))]
    boxes += [(60 * i, foot, 60 * i + 60, foot + 20) for i in range(len(cells))]
    chars = [ch for i in range(len(cells)) for ch in _chars(f"h{i}", 60 * i + 2, 6)]
    for i, lines in enumerate(cells):
        first = top + 2 + (height - 4 - line * len(lines)) / 2 if len(lines) == 1 else top + 2
        for j, text in enumerate(lines):
            chars += _chars(text, 60 * i + 2, first + line * j)
    chars += [ch for i in range(len(cells)) for ch in _chars(f"f{i}", 60 * i + 2, foot + 6)]
    return boxes, chars


def test_a_ruled_row_of_lines_level_across_its_cells_is_split_into_them_and_a_label_of_one_line_spans_them() -> None:
    # rules between groups of rows only (\hline after each group, \multirow label): the finder's one row a group
    cells = [["Group A"], ["1.5", "2.5", "3.5"], ["0.1", "0.2", "0.3"], ["x", "y", "z"]]
    boxes, chars = _band(cells)
    rows, columns, found = grid_cells(split_at_lines(boxes, chars), chars)
    assert (rows, columns) == (5, 4)
    assert {(c.row, c.col, c.row_span, c.text) for c in found if c.col == 0} == {
        (0, 0, 1, "h0"), (1, 0, 3, "Group A"), (4, 0, 1, "f0")}
    assert [c.text for c in found if c.col == 1] == ["h1", "1.5", "2.5", "3.5", "f1"]
    assert [c.text for c in found if c.row == 3] == ["3.5", "0.3", "z"]


def test_a_superscript_is_no_line_of_its_own_and_a_header_over_one_body_row_is_left_to_the_layout_model() -> None:
    cells = [["Group A"], ["1.5", "2.5", "3.5"], ["0.1", "0.2", "0.3"], ["x", "y", "z"]]
    boxes, chars = _band(cells)
    raised = [(c[0] + 3, c[1] - 3, c[2] + 2, c[1] + 2, "5") for c in chars if c[4] == "."]  # 10^5 beside each value
    split = split_at_lines(boxes, [*chars, *raised])
    assert len(split) == len(boxes) + 3 * 2, "three cells of three lines: two cuts each"
    header_and_body = [b for b in boxes if b[1] < 20 + 40]
    assert split_at_lines(header_and_body, chars) == header_and_body, "two ruled rows: few_rows' case"


@pytest.mark.parametrize(("cells", "why"), [
    ([["a long", "text that", "wraps"], ["notes", "that wrap"], ["and more", "words", "over", "lines"], ["x"]],
     "cells of different numbers of lines: wrapped text"),
    ([["Group A"], ["1.5", "2.5", "3.5"], ["0.1", "0.2", "0.3"], ["x"]], "two cells of several lines only"),
    ([["one"], ["two"], ["three"], ["four"]], "one line a cell"),
])
def test_a_ruled_row_whose_lines_are_not_rows_stays_whole(cells: list[list[str]], why: str) -> None:
    boxes, chars = _band(cells)
    assert split_at_lines(boxes, chars) == boxes, why


def test_lines_that_are_not_level_across_the_cells_leave_the_row_whole() -> None:
    boxes, chars = _band([["1.5", "2.5", "3.5"], ["0.1", "0.2", "0.3"], ["x", "y", "z"]])
    lowered = [(c[0], c[1] + 5, c[2], c[3] + 5, c[4]) if 120 <= c[0] < 180 and c[1] > 20 else c for c in chars]
    assert split_at_lines(boxes, lowered) == boxes, "the third column's lines sit half a line lower"


def test_a_header_whose_names_wrap_onto_two_lines_stays_one_row() -> None:
    names = [["Unseen", "damage"], ["Out-of", "sample"], ["Mean", "error"], ["Run", "time"]]
    boxes = [(60 * i, 0, 60 * i + 60, 28) for i in range(4)]
    boxes += [(60 * i, y, 60 * i + 60, y + 20) for i in range(4) for y in (28, 48)]
    chars = [ch for i, lines in enumerate(names) for j, text in enumerate(lines)
             for ch in _chars(text, 60 * i + 2, 2 + 12 * j)]
    chars += [ch for i in range(4) for y in (34, 54) for ch in _chars(f"{i}.{y}", 60 * i + 2, y)]
    assert split_at_lines(boxes, chars) == boxes


def _shaded_column(left: list[list[str]], right: list[str], *, label: str | None = None) -> tuple[list, list]:
    """A header row (0 to 20), then rows of 12 points that only the last column rules (one shaded cell a row, text
    in ``right``); the columns before it are one tall box each over those rows, holding ``left``'s lines (a line a
    row, or ``label`` alone, centred); 60 points a column."""
    width = len(left) + 1
    rows = len(right)
    boxes = [(60 * i, 0, 60 * i + 60, 20) for i in range(width)]
    boxes += [(60 * i, 20, 60 * i + 60, 20 + 12 * rows) for i in range(len(left))]
    boxes += [(60 * len(left), 20 + 12 * r, 60 * width, 32 + 12 * r) for r in range(rows)]
    chars = [ch for i in range(width) for ch in _chars(f"h{i}", 60 * i + 2, 6)]
    chars += [ch for r, text in enumerate(right) for ch in _chars(text, 60 * len(left) + 2, 22 + 12 * r)]
    for i, lines in enumerate(left):
        if label is not None and i == 0:
            chars += _chars(label, 2, 22 + 12 * (rows - 1) / 2)
            continue
        chars += [ch for r, text in enumerate(lines) for ch in _chars(text, 60 * i + 2, 22 + 12 * r)]
    return boxes, chars


def test_a_box_over_rows_that_another_column_rules_is_split_when_it_holds_a_line_level_with_each_row() -> None:
    values = ["36.2", "39.0", "37.9", "37.4"]
    boxes, chars = _shaded_column([["1", "3", "5", "10"], ["300", "100", "64", "32"]], values, label="Group")
    rows, columns, cells = grid_cells(split_spanning_rows(boxes, chars), chars)
    assert (rows, columns) == (5, 3)
    assert {(c.row, c.col, c.row_span, c.text) for c in cells if c.col == 0} == {(0, 0, 1, "h0"), (1, 0, 4, "Group")}
    assert [c.text for c in cells if c.col == 1] == ["h1", "300", "100", "64", "32"]


def test_a_box_over_rows_whose_lines_are_not_one_a_row_stays_whole() -> None:
    values = ["36.2", "39.0", "37.9", "37.4"]
    boxes, chars = _shaded_column([["1", "3", "5", "10"]], values)
    shifted = [(c[0], c[1] + 5, c[2], c[3] + 5, c[4]) if c[0] < 60 and c[1] > 20 else c for c in chars]
    assert split_spanning_rows(boxes, shifted) == boxes, "its lines sit half a row lower than the rows' text"
    three = [c for c in chars if not (c[0] < 60 and c[1] > 50)]  # three lines over four rows: the last row lost
    assert split_spanning_rows(boxes, three) == boxes


def test_a_column_of_three_aligned_runs_is_split_twice() -> None:
    triples = [("0.53   3.6   1.1", 52), ("0.45   3.6   1.2", 52), ("0.45   3.3   1.3", 52), ("0.68   3.5   1.4", 52)]
    boxes, chars = _rows_of(triples)
    rows, columns, cells = grid_cells(split_at_gaps(boxes, chars), chars)
    assert (rows, columns) == (4, 4)
    assert [c.text for c in cells if c.row == 0] == ["r0", "0.53", "3.6", "1.1"]

