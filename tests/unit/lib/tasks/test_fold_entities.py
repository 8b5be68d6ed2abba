"""EntitiesFold: overlap duplicates, cut fragments, order independence, the cap, the index. Pure."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from docstream.tasks.base import (
    MAX_CHUNK_MENTIONS,
    DocumentOutput,
    FoldInput,
    Mention,
    Span,
    TaskOutputError,
    place_spans,
)
from docstream.tasks.fold_entities import (
    MAX_DOCUMENT_MENTIONS,
    EntitiesFold,
    merge_mentions,
    normalize_entity_text,
)

FOLD = EntitiesFold()

# One document, three overlapping chunks; "Angela Merkel" straddles the end of chunk 0.
DOCUMENT = "Siemens opened in Munich. Later Angela Merkel spoke. Siemens thanked Angela Merkel in Berlin."
# chunk 0 ends inside the first "Angela Merkel" ("... Later Angela"); chunks 1 and 2 share "Siemens thanked"
CHUNKS = ((0, 38), (26, 68), (53, len(DOCUMENT)))


def _span(text: str, needle: str, label: str, *, nth: int = 0, score: float = 1.0) -> Span:
    start = -1
    for _ in range(nth + 1):
        start = text.index(needle, start + 1)
    return Span(start, start + len(needle), label, score)


def _chunk(index: int, spans: list[Span], *, page_breaks: tuple[int, ...] = ()) -> FoldInput:
    start, end = CHUNKS[index]
    text = DOCUMENT[start:end]
    mentions = place_spans(text, spans, char_start=start, page_start=1, page_breaks=page_breaks,
                           first=index == 0, last=index == len(CHUNKS) - 1)
    return FoldInput(index=index, token_count=10, page_start=1, page_end=1, mentions=mentions)


def _model_chunks(page_breaks: tuple[int, ...] = ()) -> list[FoldInput]:
    """What a model finds in each chunk: every entity it sees, fragments included."""
    out = []
    for i, (start, end) in enumerate(CHUNKS):
        text = DOCUMENT[start:end]
        spans = []
        for needle, label in (("Siemens", "ORG"), ("Munich", "GPE"), ("Angela Merkel", "PERSON"), ("Berlin", "GPE")):
            for n in range(text.count(needle)):
                spans.append(_span(text, needle, label, nth=n))
        if i == 0:
            spans.append(_span(text, "Angela", "PERSON"))  # the fragment at the cut
        out.append(_chunk(i, spans, page_breaks=page_breaks))
    return out


def _fold(chunks: list[FoldInput], *, roundtrip: bool = False) -> DocumentOutput:
    state: Any = FOLD.empty()
    for chunk in chunks:
        state = FOLD.add(state, chunk)
        if roundtrip:
            state = json.loads(json.dumps(state))
    return FOLD.finish(state, chunk_count=len(chunks))


def _m(start: int, end: int, label: str = "PERSON", *, score: float = 1.0, cut: bool = False, page: int = 1,
       text: str | None = None) -> Mention:
    return Mention(text if text is not None else "x" * (end - start), label, start, end, page, score, cut)


def _mentions(out: DocumentOutput) -> list[tuple[str, str, int, int]]:
    return [(m.text, m.label, m.start, m.end) for m in out.mentions]


def test_the_fragment_cut_at_a_chunk_end_gives_way_to_the_whole_mention_of_the_next_chunk() -> None:
    chunk0 = _model_chunks()[0]
    fragment = [m for m in chunk0.mentions if m.text == "Angela"]
    assert fragment and fragment[0].cut
    out = _fold(_model_chunks())
    people = [m for m in out.mentions if m.label == "PERSON"]
    first = DOCUMENT.index("Angela Merkel")
    assert [(m.text, m.start, m.end) for m in people] == [
        ("Angela Merkel", first, first + 13),
        ("Angela Merkel", DOCUMENT.index("Angela Merkel", first + 1), DOCUMENT.index("Angela Merkel", first + 1) + 13),
    ]


def test_each_mention_of_the_document_comes_out_once_in_document_order() -> None:
    out = _fold(_model_chunks())
    expected = []
    for needle, label in (("Siemens", "ORG"), ("Munich", "GPE"), ("Angela Merkel", "PERSON"), ("Berlin", "GPE")):
        start = -1
        while (start := DOCUMENT.find(needle, start + 1)) >= 0:
            expected.append((needle, label, start, start + len(needle)))
    assert _mentions(out) == sorted(expected, key=lambda m: (m[2], m[3], m[1]))
    assert all(DOCUMENT[m.start:m.end] == m.text and not m.cut for m in out.mentions)


def test_the_same_mention_from_two_overlapping_chunks_is_kept_once() -> None:
    second = DOCUMENT.index("Siemens", 1)
    chunks = _model_chunks()
    seen = [m for c in chunks for m in c.mentions if m.start == second]
    assert len(seen) == 2  # chunk 1 holds it whole, chunk 2 begins with it (so it is cut there)
    out = _fold(chunks)
    assert [m for m in out.mentions if m.start == second] == [Mention("Siemens", "ORG", second, second + 7, 1)]
    twice = _m(5, 12, "ORG")
    assert merge_mentions([twice, twice]) == (twice,)


def test_the_longer_span_wins_then_the_higher_score() -> None:
    short, long_ = _m(10, 16, score=0.99), _m(10, 23, score=0.5)
    assert merge_mentions([short, long_]) == (long_,)
    low, high = _m(10, 20, score=0.4), _m(12, 22, score=0.9)
    assert merge_mentions([low, high]) == (high,)
    # equal length and score: the lower start, then the text
    assert merge_mentions([_m(12, 22, score=0.5), _m(10, 20, score=0.5)]) == (_m(10, 20, score=0.5),)
    b, a = _m(10, 20, score=0.5, text="b" * 10), _m(10, 20, score=0.5, text="a" * 10)
    assert merge_mentions([b, a]) == (a,)


def test_overlapping_mentions_of_different_labels_are_both_kept_when_neither_is_cut() -> None:
    person, org = _m(0, 13, "PERSON"), _m(7, 25, "ORG")
    assert merge_mentions([org, person]) == (person, org)


def test_a_cut_mention_is_dropped_for_any_whole_mention_it_overlaps_whatever_the_label() -> None:
    cut, whole = _m(30, 36, "PERSON", cut=True), _m(30, 50, "ORG")
    assert merge_mentions([cut, whole]) == (whole,)
    lone = _m(60, 66, "PERSON", cut=True)
    assert merge_mentions([lone]) == (lone,)  # nothing holds it whole nor joins it: kept, and still cut


def test_two_cut_fragments_one_inside_the_other_keep_the_longer_still_cut() -> None:
    # the same start: nothing shows that one is cut at its end and the other at its start
    assert merge_mentions([_m(10, 16, cut=True), _m(10, 23, cut=True)]) == (_m(10, 23, cut=True),)
    assert merge_mentions([_m(12, 16, cut=True), _m(10, 23, cut=True)]) == (_m(10, 23, cut=True),)


# "Angela Merkel" (6..19) is longer than the overlap of the chunks around it: no chunk holds it whole.
SHORT = "Later Angela Merkel spoke in Berlin."
ANGELA = (SHORT.index("Angela Merkel"), SHORT.index("Angela Merkel") + len("Angela Merkel"))


def _short_fold(chunks: tuple[tuple[int, int], ...], needles: tuple[str, ...],
                order: tuple[int, ...] | None = None) -> DocumentOutput:
    """``needles`` (PERSON, one per chunk, "" for none) found in ``SHORT`` cut into ``chunks``, folded."""
    inputs = []
    for i, ((start, end), needle) in enumerate(zip(chunks, needles, strict=True)):
        text = SHORT[start:end]
        spans = [_span(text, needle, "PERSON")] if needle else []
        if "Berlin" in text:
            spans.append(_span(text, "Berlin", "GPE"))
        mentions = place_spans(text, spans, char_start=start, page_start=1, page_breaks=(), first=i == 0,
                               last=i == len(chunks) - 1)
        inputs.append(FoldInput(index=i, token_count=5, page_start=1, page_end=1, mentions=mentions))
    return _fold([inputs[i] for i in order] if order else inputs)


def test_two_overlapping_cut_pieces_of_one_mention_are_joined_into_one_whole_mention() -> None:
    # chunk 0 "Later Angela Mer", chunk 1 "ela Merkel spoke in Berlin.": the pieces share "ela Mer"
    chunks = ((0, 16), (9, len(SHORT)))
    out = _short_fold(chunks, ("Angela Mer", "ela Merkel"))
    assert _mentions(out) == [("Angela Merkel", "PERSON", *ANGELA),
                              ("Berlin", "GPE", SHORT.index("Berlin"), SHORT.index("Berlin") + 6)]
    assert all(SHORT[m.start:m.end] == m.text and not m.cut for m in out.mentions)
    assert [(e.label, e.text) for e in out.entities] == [("GPE", "berlin"), ("PERSON", "angela merkel")]
    assert _short_fold(chunks, ("Angela Mer", "ela Merkel"), order=(1, 0)) == out


def test_two_cut_pieces_that_touch_are_joined() -> None:
    # no overlap, the cut inside the word: "Later Angela Mer" | "kel spoke in Berlin."
    out = _short_fold(((0, 16), (16, len(SHORT))), ("Angela Mer", "kel"))
    assert [(m.text, m.start, m.end, m.cut) for m in out.mentions if m.label == "PERSON"] == [
        ("Angela Merkel", *ANGELA, False)]


def test_the_pieces_of_a_mention_longer_than_a_chunk_are_joined_in_a_chain() -> None:
    # the middle chunk "la Mer" is all inside the mention: cut at both ends
    chunks = ((0, 12), (10, 16), (14, len(SHORT)))
    needles = ("Angela", "la Mer", "erkel")
    out = _short_fold(chunks, needles)
    assert [(m.text, m.start, m.end, m.cut) for m in out.mentions if m.label == "PERSON"] == [
        ("Angela Merkel", *ANGELA, False)]
    for order in itertools.permutations(range(3)):
        assert _short_fold(chunks, needles, order=order) == out


def test_a_joined_mention_has_the_first_pieces_page_and_the_lowest_score() -> None:
    first = _m(10, 20, score=0.9, page=2, cut=True, text="abcdefghij")
    second = _m(15, 25, score=0.6, page=3, cut=True, text="fghijklmno")
    assert merge_mentions([second, first]) == (_m(10, 25, score=0.6, page=2, text="abcdefghijklmno"),)


def test_cut_pieces_that_are_not_one_mention_are_not_joined_and_stay_cut() -> None:
    a = _m(10, 20, cut=True, text="abcdefghij")
    gap = _m(21, 30, cut=True)  # a character between them: neither overlaps nor touches
    assert merge_mentions([a, gap]) == (a, gap)
    other_label = _m(15, 25, "ORG", cut=True, text="fghijklmno")
    assert merge_mentions([a, other_label]) == (a, other_label)
    disagrees = _m(15, 25, cut=True, text="XXXXXklmno")  # not the same characters where they overlap
    assert merge_mentions([a, disagrees]) == (a,)  # one entity seen twice: the lower start is kept


def test_a_piece_that_overlaps_a_whole_mention_is_dropped_before_pieces_are_joined() -> None:
    a, b = _m(10, 20, cut=True, text="abcdefghij"), _m(15, 25, cut=True, text="fghijklmno")
    whole = _m(22, 30, "ORG")
    assert merge_mentions([a, b, whole]) == (a, whole)


def test_joining_does_not_depend_on_the_order_of_the_mentions() -> None:
    text = "abcdefghijklmnopqrstuvwxyz0123456789"
    # a chain of three pieces, one inside it, a piece seen twice and once with a lower score, a piece of
    # another label, and a piece that a whole mention overlaps
    piece = {(s, e): _m(s, e, cut=True, text=text[s:e]) for s, e in ((2, 9), (6, 14), (3, 8), (25, 30))}
    mentions = [*piece.values(), piece[(6, 14)], _m(6, 14, score=0.3, cut=True, text=text[6:14]),
                _m(12, 20, score=0.8, cut=True, text=text[12:20]), _m(12, 18, "ORG", cut=True),
                _m(28, 33, "ORG"), _m(0, 2, "ORG")]
    expected = merge_mentions(mentions)
    assert expected == (_m(0, 2, "ORG"), _m(2, 20, score=0.8, text=text[2:20]), _m(12, 18, "ORG", cut=True),
                        _m(28, 33, "ORG"))
    shuffle = random.Random(7)
    for _ in range(200):
        shuffle.shuffle(mentions)
        assert merge_mentions(mentions) == expected


def test_any_order_and_any_permutation_of_the_chunks_gives_the_same_result() -> None:
    chunks = _model_chunks(page_breaks=(DOCUMENT.index("Siemens thanked"),))
    expected = _fold(chunks)
    for order in itertools.permutations(chunks):
        assert _fold(list(order)) == expected
    # and the state itself is the same
    states = {json.dumps(_state(list(order))) for order in itertools.permutations(chunks)}
    assert len(states) == 1


def _state(chunks: list[FoldInput]) -> Any:
    state: Any = FOLD.empty()
    for chunk in chunks:
        state = FOLD.add(state, chunk)
    return state


def test_the_state_survives_a_json_round_trip_between_adds() -> None:
    chunks = _model_chunks()
    assert _fold(chunks, roundtrip=True) == _fold(chunks)
    assert _fold(list(reversed(chunks)), roundtrip=True) == _fold(chunks)


def test_the_index_holds_the_distinct_entities_with_counts_and_pages() -> None:
    second_page = DOCUMENT.index("Siemens thanked")
    out = _fold(_model_chunks(page_breaks=(second_page,)))
    index = [(e.label, e.text, e.count, e.pages) for e in out.entities]
    assert index == [
        ("GPE", "berlin", 1, (2,)),
        ("GPE", "munich", 1, (1,)),
        ("ORG", "siemens", 2, (1, 2)),
        ("PERSON", "angela merkel", 2, (1, 2)),
    ]
    assert not out.mentions_truncated


def test_the_index_normalises_text_nfkc_whitespace_and_case() -> None:
    assert normalize_entity_text("  Angela\u00a0\n MERKEL ") == "angela merkel"
    assert normalize_entity_text("ﬁrm") == "firm"  # NFKC ligature
    mentions = [Mention("Angela  Merkel", "PERSON", 0, 14, 1), Mention("ANGELA MERKEL", "PERSON", 20, 33, 3)]
    out = FOLD.finish(FOLD.add(FOLD.empty(), FoldInput(0, 5, 1, 3, mentions=tuple(mentions))), chunk_count=1)
    assert [(e.text, e.count, e.pages) for e in out.entities] == [("angela merkel", 2, (1, 3))]


def test_a_one_chunk_document() -> None:
    text = "Angela Merkel met executives of Siemens in Munich."
    spans = [_span(text, "Angela Merkel", "PERSON"), _span(text, "Siemens", "ORG"), _span(text, "Munich", "GPE")]
    mentions = place_spans(text, spans, char_start=0, page_start=1, page_breaks=(), first=True, last=True)
    out = _fold([FoldInput(0, 12, 1, 1, mentions=mentions)])
    assert _mentions(out) == [("Angela Merkel", "PERSON", 0, 13), ("Siemens", "ORG", 32, 39), ("Munich", "GPE", 43, 49)]
    assert len(out.entities) == 3


def test_a_document_without_entities_and_one_without_chunks() -> None:
    out = _fold([FoldInput(0, 12, 1, 1), FoldInput(1, 12, 1, 2)])
    assert out.mentions == () and out.entities == () and not out.mentions_truncated
    assert FOLD.finish(FOLD.empty(), chunk_count=3) == DocumentOutput()


def _cap_chunks() -> list[FoldInput]:
    per = MAX_CHUNK_MENTIONS
    count = MAX_DOCUMENT_MENTIONS // per + 2
    return [FoldInput(i, 10, 1, 1, mentions=tuple(_m(10 * (i * per + j), 10 * (i * per + j) + 4, "ORG")
                                                 for j in range(per)))
            for i in range(count)]


def test_past_the_cap_the_lowest_offsets_are_kept_whatever_the_order() -> None:
    chunks = _cap_chunks()
    out = _fold(chunks)
    assert out.mentions_truncated
    assert len(out.mentions) == MAX_DOCUMENT_MENTIONS
    assert [m.start for m in out.mentions] == [10 * k for k in range(MAX_DOCUMENT_MENTIONS)]
    assert _fold(list(reversed(chunks))) == out
    assert _fold(chunks[1::2] + chunks[::2], roundtrip=True) == out


def test_under_the_cap_nothing_is_truncated() -> None:
    assert not _fold(_cap_chunks()[:2]).mentions_truncated


@pytest.mark.parametrize("mention", [
    Mention("ab", "ORG", 5, 5, 1),  # empty
    Mention("abc", "ORG", 5, 7, 1),  # text does not fit the span
    Mention("ab", "ORG", -2, 0, 1),
    Mention("ab", "", 5, 7, 1),
    Mention("ab", "ORG", 5, 7, 0),
    Mention("ab", "ORG", 5, 7, 1, score=float("nan")),
    Mention("ab", "ORG", 5, 7, 1, score=1.5),
])
def test_a_malformed_mention_is_a_task_output_error(mention: Mention) -> None:
    with pytest.raises(TaskOutputError):
        FOLD.add(FOLD.empty(), FoldInput(3, 10, 1, 1, mentions=(mention,)))


def test_a_chunk_with_more_mentions_than_a_chunk_may_hold_is_a_task_output_error() -> None:
    mentions = tuple(_m(k * 3, k * 3 + 2) for k in range(MAX_CHUNK_MENTIONS + 1))
    with pytest.raises(TaskOutputError):
        FOLD.add(FOLD.empty(), FoldInput(0, 10, 1, 1, mentions=mentions))


def test_add_does_not_change_the_state_it_is_given() -> None:
    state = FOLD.add(FOLD.empty(), _model_chunks()[0])
    before = json.dumps(state)
    FOLD.add(state, _model_chunks()[1])
    assert json.dumps(state) == before
