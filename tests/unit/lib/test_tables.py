"""docstream.tables, fed lists: cells and spans, Markdown, splitting by rows and header rows."""

from __future__ import annotations

import pytest

from docstream.tables import (
    PageTable,
    TableCell,
    TablePart,
    header_rows,
    header_texts,
    row_lines,
    split_table,
    table_markdown,
)
from tests.unit.chunker.test_chunking import FakeCounter, JoinTaxCounter

COUNT = FakeCounter().count


def make_table(rows: list[list[str]], spans: dict[tuple[int, int], tuple[int, int]] | None = None,
           caption: str | None = None) -> PageTable:
    spans = spans or {}
    covered = {(r + i, c + j) for (r, c), (rs, cs) in spans.items() for i in range(rs) for j in range(cs)} - set(spans)
    cells = tuple(TableCell(r, c, *spans.get((r, c), (1, 1)), text) for r, row in enumerate(rows)
                  for c, text in enumerate(row) if (r, c) not in covered)
    return PageTable(3, (10.0, 20.0, 200.0, 300.0), len(rows), len(rows[0]), cells, caption)


def test_markdown_writes_the_header_the_delimiter_and_spanning_cells_once() -> None:
    table = make_table([["Name", "Both", ""], ["a|b", "x", "y"], ["c", "z", "w"]], {(0, 1): (1, 2), (1, 0): (2, 1)})
    header, delimiter, lines = row_lines(table)
    assert header == "| Name | Both |  |"
    assert delimiter == "|---|---|---|"
    assert lines == ["| a\\|b | x | y |", "|  | z | w |"]
    assert table_markdown(header, delimiter, lines[:1], "Table 1:  Cells") == (
        "Table 1: Cells\n\n| Name | Both |  |\n|---|---|---|\n| a\\|b | x | y |")


def _long(rows: int) -> PageTable:
    body = [[f"item{r}", str(r * 7), "some words of note"] for r in range(1, rows)]
    return make_table([["Item", "Value", "Note"], *body], caption="Table 9: Long")


def test_a_table_that_fits_is_one_part_with_its_caption() -> None:
    table = _long(4)
    parts = split_table(table, 254, COUNT)
    assert len(parts) == 1
    text, tokens, part = parts[0]
    assert text.startswith("Table 9: Long\n\n| Item | Value | Note |\n|---|---|---|\n| item1 |")
    assert tokens == COUNT([text])[0]
    assert (part.row_start, part.row_end, part.part, part.parts, part.caption) == (1, 4, 0, 1, "Table 9: Long")
    assert part.header == ("Item", "Value", "Note") and part.cells == table.cells


def test_a_long_table_is_split_between_rows_each_part_with_the_header_within_the_budget() -> None:
    table = _long(60)
    header, delimiter, lines = row_lines(table)
    parts = split_table(table, 60, COUNT)
    assert len(parts) > 3
    covered = []
    for i, (text, tokens, part) in enumerate(parts):
        assert tokens <= 60 and tokens == COUNT([text])[0]
        body = text.split("\n\n")[-1].split("\n")
        assert body[:2] == [header, delimiter], "the header row is repeated on every part"
        assert body[2:] == lines[part.row_start - 1 : part.row_end - 1], "whole rows, in order"
        assert (part.caption is not None) == (i == 0) and text.startswith("Table 9") == (i == 0)
        assert (part.part, part.parts) == (i, len(parts))
        assert {c.row for c in part.cells} == {0, *range(part.row_start, part.row_end)}
        covered.extend(range(part.row_start, part.row_end))
    assert covered == list(range(1, 60))


def test_rows_a_spanning_cell_joins_stay_in_one_part() -> None:
    rows = [["Group", "Item"]] + [[f"g{r}", f"item {r} with several words"] for r in range(1, 13)]
    table = make_table(rows, {(5, 0): (3, 1)})
    parts = split_table(table, 40, COUNT)
    ranges = [(p.row_start, p.row_end) for _, _, p in parts]
    assert len(ranges) > 2 and any(a <= 5 and b >= 8 for a, b in ranges), ranges
    assert not any(a in (6, 7) for a, _ in ranges), ranges


def test_a_spanning_cell_cut_by_the_budget_is_written_again_atop_the_next_part() -> None:
    rows = [["Group", "Item"]] + [["g", f"item {r} with a few more words here"] for r in range(1, 9)]
    table = make_table(rows, {(1, 0): (8, 1)})
    parts = split_table(table, 30, COUNT)
    assert len(parts) > 1
    for text, _, part in parts:
        first_row = text.split("\n")[2]
        assert first_row.startswith("| g |"), text
        assert TableCell(1, 0, 8, 1, "g") in part.cells


def test_a_row_larger_than_the_budget_is_a_part_of_its_own() -> None:
    rows = [["Item", "Text"], ["a", "short"], ["b", " ".join(["wordy"] * 60)], ["c", "short"]]
    parts = split_table(make_table(rows), 30, COUNT)
    assert [(p.row_start, p.row_end) for _, _, p in parts] == [(1, 2), (2, 3), (3, 4)]
    assert [tokens > 30 for _, tokens, _ in parts] == [False, True, False]


def test_parts_are_packed_again_for_a_tokenizer_that_does_not_add_up() -> None:
    counter = JoinTaxCounter()
    parts = split_table(_long(60), 60, counter.count)
    assert all(tokens <= 60 for _, tokens, _ in parts)
    assert all(counter.count([text])[0] == tokens for text, tokens, _ in parts)


def test_a_table_without_body_rows_has_no_parts() -> None:
    assert split_table(make_table([["a", "b"]]), 100, COUNT) == []


def test_a_table_part_round_trips_as_its_record() -> None:
    _, _, part = split_table(_long(5), 254, COUNT)[0]
    record = part.to_record()
    assert record["bbox"] == [10.0, 20.0, 200.0, 300.0] and record["cells"][0] == {
        "row": 0, "col": 0, "row_span": 1, "col_span": 1, "text": "Item"}
    assert TablePart.from_record(record) == part
    with pytest.raises(ValueError, match="four numbers"):
        TablePart.from_record({**record, "bbox": [1.0, 2.0]})


def _two_row_header(body_rows: int, words: str = "x") -> PageTable:
    # "Name" spans both header rows; "Revenue" spans two columns over "2023" and "2024"
    rows = [["Name", "Revenue", "", "Notes"], ["", "2023", "2024", ""]]
    rows += [[f"item{r}", str(r * 3), str(r * 5), words] for r in range(1, body_rows + 1)]
    return make_table(rows, {(0, 0): (2, 1), (0, 1): (1, 2), (0, 3): (2, 1)})


def test_a_header_cell_spanning_two_rows_makes_a_header_of_two_rows_whose_titles_join_top_first() -> None:
    table = _two_row_header(3)
    assert header_rows(table) == 2
    assert header_texts(table) == ("Name", "Revenue 2023", "Revenue 2024", "Notes")
    header, _, lines = row_lines(table)
    assert header == "| Name | Revenue 2023 | Revenue 2024 | Notes |"
    assert lines == ["| item1 | 3 | 5 | x |", "| item2 | 6 | 10 | x |", "| item3 | 9 | 15 | x |"]
    (_, _, part), = split_table(table, 254, COUNT)
    assert (part.row_start, part.row_end, part.header_rows) == (2, 5, 2)
    assert part.header == header_texts(table) and part.cells == table.cells
    assert TablePart.from_record(part.to_record()) == part


def test_a_header_of_one_row_stays_one_row_whatever_spans_columns_or_the_body() -> None:
    spanning_columns = make_table([["Name", "Both", ""], ["a", "x", "y"], ["c", "z", "w"]], {(0, 1): (1, 2)})
    assert header_rows(spanning_columns) == 1 and header_texts(spanning_columns) == ("Name", "Both", "")
    body_span = make_table([["Group", "Item"], ["g", "a"], ["", "b"]], {(1, 0): (2, 1)})
    assert header_rows(body_span) == 1
    # a cell of row 0 spanning every row, or more than three, is a stub of the body, not a header
    whole = make_table([["Stub", "a"], ["", "b"], ["", "c"]], {(0, 0): (3, 1)})
    assert header_rows(whole) == 1
    tall = make_table([["Stub", f"r{r}"] if r == 0 else ["", f"r{r}"] for r in range(6)], {(0, 0): (4, 1)})
    assert header_rows(tall) == 1


def test_a_long_table_with_a_two_row_header_repeats_both_rows_on_every_part() -> None:
    table = _two_row_header(40, "some words of note here")
    header, delimiter, lines = row_lines(table)
    parts = split_table(table, 60, COUNT)
    assert len(parts) > 3
    covered = []
    for text, tokens, part in parts:
        assert tokens <= 60
        assert text.split("\n")[:2] == [header, delimiter]
        assert text.split("\n")[2:] == lines[part.row_start - 2 : part.row_end - 2]
        assert {c.row for c in part.cells} == {0, 1, *range(part.row_start, part.row_end)}
        assert part.header_rows == 2
        covered.extend(range(part.row_start, part.row_end))
    assert covered == list(range(2, 42))


def test_a_part_record_written_before_header_rows_reads_as_a_header_of_one_row() -> None:
    _, _, part = split_table(_long(5), 254, COUNT)[0]
    record = part.to_record()
    del record["header_rows"]
    assert TablePart.from_record(record).header_rows == 1
