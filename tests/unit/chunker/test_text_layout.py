"""docstream_chunker.text_layout: OCR pieces into a page's text, the column rule, and the CER."""

from __future__ import annotations

import pytest

from docstream_chunker.text_layout import OcrLine, character_error_rate, levenshtein, page_text, reading_order


def _line(x0: float, y0: float, text: str, *, width: float = 400.0, height: float = 10.0) -> OcrLine:
    return OcrLine(x0, y0, x0 + width, y0 + height, text)


def test_lines_close_together_are_one_paragraph_and_a_gap_starts_the_next() -> None:
    pieces = [
        _line(72, 100, "The river flows past"),
        _line(72, 114, "the old bridge."),
        _line(72, 150, "Letters arrived"),
        _line(72, 164, "in winter."),
    ]
    assert page_text(pieces, 612) == "The river flows past the old bridge.\n\nLetters arrived in winter."


def test_pieces_come_in_any_order() -> None:
    pieces = [_line(72, 164, "in winter."), _line(72, 100, "First."), _line(72, 150, "Letters arrived")]
    assert page_text(pieces, 612) == "First.\n\nLetters arrived in winter."


def test_pieces_of_one_row_join_left_to_right_with_one_space() -> None:
    pieces = [
        OcrLine(200, 101, 300, 111, "past  the"),
        OcrLine(72, 100, 190, 110, "The river flows"),
        OcrLine(72, 114, 300, 124, "old bridge."),
    ]
    assert page_text(pieces, 612) == "The river flows past the old bridge."


def test_two_columns_are_read_one_after_the_other() -> None:
    title = OcrLine(72, 60, 540, 74, "A Title Across The Page")
    left = [_line(72, 100 + 14 * i, f"left{i}", width=200) for i in range(3)]
    right = [_line(330, 100 + 14 * i, f"right{i}", width=200) for i in range(3)]
    text = page_text([title, *right, *left], 612)
    assert text == "A Title Across The Page\n\nleft0 left1 left2\n\nright0 right1 right2"


def test_a_far_piece_on_the_same_row_is_not_joined() -> None:
    pieces = [OcrLine(72, 100, 250, 110, "left column"), OcrLine(400, 100, 540, 110, "right column")]
    assert page_text(pieces, 612) == "left column\n\nright column"


def test_empty_pieces_give_an_empty_page() -> None:
    assert page_text([], 612) == ""
    assert page_text([_line(72, 100, "   ")], 612) == ""


def test_reading_order_keeps_single_column_blocks_as_they_are() -> None:
    blocks = [(72, 100, 540, 110, "a"), (72, 120, 540, 130, "b")]
    assert reading_order(blocks, 612) == blocks


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [("", "", 0), ("abc", "", 3), ("", "abc", 3), ("kitten", "sitting", 3), ("flaw", "lawn", 2), ("книга", "кнева", 2)],
)
def test_levenshtein(a: str, b: str, distance: int) -> None:
    assert levenshtein(a, b) == distance
    assert levenshtein(b, a) == distance


def test_cer_normalises_whitespace_and_divides_by_the_reference_length() -> None:
    assert character_error_rate("the  river\n\nflows", "the river flows") == 0.0
    assert character_error_rate("the rivar flows", "the river flows") == pytest.approx(1 / 15)
    assert character_error_rate("", "abcd") == 1.0


def test_cer_without_spaces_for_scripts_written_without_them() -> None:
    assert character_error_rate("北京 上海\n\n中国", "北京上海中国", spaces=False) == 0.0
    assert character_error_rate("北京 上海", "北京上海", spaces=True) == pytest.approx(1 / 4)


def test_cer_needs_a_reference() -> None:
    with pytest.raises(ValueError, match="empty"):
        character_error_rate("text", " \n ")
