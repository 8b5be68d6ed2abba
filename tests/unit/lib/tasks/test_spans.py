"""place_spans: a chunk's spans as document mentions (offsets, pages, cut, bounds). Pure."""

from __future__ import annotations

from docstream.tasks.base import MAX_CHUNK_MENTIONS, Mention, Span, place_spans

TEXT = "Angela Merkel met Siemens in Munich"  # a chunk's text; "Angela" at 0, "Munich" at the very end


def _place(spans: list[Span], *, char_start: int = 100, page_start: int = 1, page_breaks: tuple[int, ...] = (),
           first: bool = False, last: bool = False, text: str = TEXT) -> tuple[Mention, ...]:
    return place_spans(text, spans, char_start=char_start, page_start=page_start, page_breaks=page_breaks,
                       first=first, last=last)


def test_offsets_move_to_the_document_and_the_text_is_the_chunks() -> None:
    (m,) = _place([Span(18, 25, "ORG", 0.75)])
    assert m == Mention("Siemens", "ORG", 118, 125, 1, 0.75, cut=False)


def test_the_page_is_found_from_the_page_breaks_in_document_offsets() -> None:
    spans = [Span(0, 13, "PERSON"), Span(18, 25, "ORG"), Span(29, 35, "GPE")]
    # page 3 begins at document offset 110 (inside the chunk), page 4 at 129 ("Munich")
    pages = [m.page for m in _place(spans, page_start=3, page_breaks=(110, 129), first=True, last=True)]
    assert pages == [3, 4, 5]
    # a mention starting exactly at a break is on the new page
    (m,) = _place([Span(18, 25, "ORG")], page_start=2, page_breaks=(118,))
    assert m.page == 3


def test_a_mention_touching_an_edge_cut_from_a_neighbour_is_cut() -> None:
    angela, siemens, munich = _place([Span(0, 6, "PERSON"), Span(18, 25, "ORG"), Span(29, 35, "GPE")])
    assert angela.cut and munich.cut and not siemens.cut


def test_only_spaces_between_a_mention_and_the_edge_still_make_it_cut() -> None:
    text = "  Angela met Merkel \n"
    start, end = _place([Span(2, 8, "PERSON"), Span(13, 19, "PERSON")], text=text)
    assert start.cut and end.cut


def test_the_first_and_last_chunk_are_never_cut_on_their_outer_edge() -> None:
    spans = [Span(0, 6, "PERSON"), Span(29, 35, "GPE")]
    first = _place(spans, first=True)
    assert [m.cut for m in first] == [False, True]  # the end of the first chunk is still cut
    last = _place(spans, last=True)
    assert [m.cut for m in last] == [True, False]
    assert [m.cut for m in _place(spans, first=True, last=True)] == [False, False]


def test_spans_outside_the_text_or_empty_are_dropped() -> None:
    spans = [Span(-1, 3, "X"), Span(5, 5, "X"), Span(7, 4, "X"), Span(30, len(TEXT) + 1, "X"), Span(18, 25, "ORG")]
    assert [m.text for m in _place(spans)] == ["Siemens"]


def test_scores_are_clamped_to_the_unit_interval() -> None:
    low, high = _place([Span(0, 6, "A", -0.5), Span(7, 13, "B", 7.0)])
    assert (low.score, high.score) == (0.0, 1.0)


def test_mentions_come_out_by_offset_and_at_most_max_chunk_mentions() -> None:
    text = "ab " * (MAX_CHUNK_MENTIONS + 10)
    spans = [Span(3 * k, 3 * k + 2, "X") for k in reversed(range(MAX_CHUNK_MENTIONS + 10))]
    out = _place(spans, char_start=0, text=text, first=True, last=True)
    assert len(out) == MAX_CHUNK_MENTIONS
    assert [m.start for m in out] == [3 * k for k in range(MAX_CHUNK_MENTIONS)]
