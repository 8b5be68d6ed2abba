"""docstream_chunker.furniture: running heads, page numbers and footers leave the text; body text never does (pure)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from docstream.tables import PageTable
from docstream_chunker.chunking import Edge, Heading, PageText
from docstream_chunker.furniture import (
    MIN_OTHER_PAGES,
    WINDOW,
    edge_key,
    edge_of,
    strip_furniture,
    without_furniture,
)

HEIGHT = 792.0
BODY = "The body of the page, which is never furniture however often it repeats."


def _page(number: int, *, head: str | None = None, foot: str | None = None, body: str = BODY,
          head_y: float = 28.0, **kw: object) -> PageText:
    """A page as extraction gives it: its head paragraph first, its foot last, each an edge of its band."""
    paragraphs = [p for p in (head, body, foot) if p]
    edges = []
    if head:
        edges.append(Edge(head, True, head_y))
    if foot:
        edges.append(Edge(foot, False, 760.0))
    return PageText(number, "\n\n".join(paragraphs), edges=tuple(edges), **kw)  # type: ignore[arg-type]


def _stripped(pages: Sequence[PageText]) -> list[PageText]:
    return list(strip_furniture(pages))


def test_running_heads_and_page_numbers_leave_every_page_and_are_kept_beside_it() -> None:
    pages = [_page(n, head=f"Chapter 2: ASN.1 structure handling {n}", foot=str(n)) for n in range(1, 11)]
    out = _stripped(pages)
    assert [p.text for p in out] == [BODY] * 10, "the first and last pages too"
    assert out[0].furniture == ("Chapter 2: ASN.1 structure handling 1", "1")
    assert all(not p.edges for p in out)


def test_body_text_that_repeats_on_every_page_stays() -> None:
    # the same paragraph on every page, in the body (no edge): never taken, however often it repeats
    refrain = "Read this notice before you go on: it is printed on every page on purpose."
    pages = [PageText(n, f"{refrain}\n\n{BODY}\n\n{refrain}") for n in range(1, 9)]
    assert _stripped(pages) == pages


def test_an_edge_that_does_not_repeat_around_it_stays() -> None:
    pages = [_page(n, head="Shared MIME-info Database") for n in range(1, 9)]
    pages[4] = _page(5, head="2.2. The source XML files")  # a section that starts at the top of one page
    out = _stripped(pages)
    assert out[4].text.startswith("2.2. The source XML files") and out[4].furniture == ()
    assert all(p.furniture == ("Shared MIME-info Database",) for i, p in enumerate(out) if i != 4)


def test_each_chapter_has_its_own_head_and_a_book_its_left_and_right_heads() -> None:
    heads = {n: ("Chapter 1: Introduction" if n <= 5 else "Chapter 2: Utilities") for n in range(1, 11)}
    assert all(p.furniture == (heads[p.number],) for p in _stripped([_page(n, head=heads[n]) for n in heads]))
    book = [_page(n, head="docstream manual" if n % 2 else "Chapter 3: Replays", head_y=28.0 if n % 2 else 30.0)
            for n in range(1, 13)]
    assert all(p.text == BODY for p in _stripped(book))


def test_the_same_text_elsewhere_on_the_page_is_not_the_same_furniture() -> None:
    pages = [_page(n, head="Draft", head_y=28.0 + 20 * n) for n in range(1, 9)]  # the same words, never in one place
    assert all(p.furniture == () for p in _stripped(pages))


def test_a_document_too_short_to_show_a_repeat_keeps_its_text() -> None:
    pages = [_page(n, head="Report", foot=str(n)) for n in range(1, MIN_OTHER_PAGES + 1)]  # nothing to repeat on
    assert [p.text for p in _stripped(pages)] == [p.text for p in pages]
    far = [_page(n, head="Report" if n in (1, 2 + WINDOW) else None) for n in range(1, 3 + WINDOW)]
    assert all(p.furniture == () for p in _stripped(far)), "a repeat beyond the window is no repeat"


def test_headings_and_tables_move_with_the_text_and_a_heading_that_was_furniture_goes() -> None:
    table = PageTable(3, (0.0, 0.0, 1.0, 1.0), 2, 2, (), offset=len("Head 3\n\nIntro\n\n"))
    page = PageText(3, "Head 3\n\nIntro\n\nOutro\n\n3", (Heading(0, "Head 3"), Heading(8, "Intro")), (table,),
                    (Edge("Head 3", True, 28.0), Edge("3", False, 760.0)))
    out = without_furniture(page, page.edges)
    assert out.text == "Intro\n\nOutro"
    assert out.headings == (Heading(0, "Intro"),)
    assert out.tables[0].offset == len("Intro\n\n")
    assert out.furniture == ("Head 3", "3")


def test_keys_fold_case_numbers_and_lone_roman_numerals() -> None:
    assert edge_key("Chapter 2:  ASN.1 structure 13") == edge_key("CHAPTER 3: ASN.7 Structure 4")
    assert edge_key("xiv") == edge_key("17") == "#"
    assert edge_key("civil law") != edge_key("#")


def test_only_short_paragraphs_in_the_bands_are_candidates() -> None:
    assert edge_of("Chapter 2 3", lines=2, y0=26, y1=60, height=HEIGHT) == Edge("Chapter 2 3", True, 26)
    assert edge_of("17", lines=1, y0=758, y1=771, height=HEIGHT) == Edge("17", False, 758)
    assert edge_of("body", lines=1, y0=300, y1=320, height=HEIGHT) is None
    assert edge_of("a paragraph of four lines", lines=4, y0=26, y1=60, height=HEIGHT) is None
    assert edge_of("x" * 200, lines=1, y0=26, y1=40, height=HEIGHT) is None
    assert edge_of("crosses the band", lines=2, y0=80, y1=120, height=HEIGHT) is None


def test_pages_are_decided_with_a_bounded_look_ahead() -> None:
    read: list[int] = []

    def pages() -> Iterator[PageText]:
        for n in range(1, 40):
            read.append(n)
            yield _page(n, head="Head", foot=str(n))

    stream = strip_furniture(pages())
    first = next(stream)
    assert first.number == 1 and len(read) == WINDOW + 1, "the first page waits for the WINDOW pages after it only"
    rest = list(stream)
    assert [p.number for p in rest] == list(range(2, 40)) and all(p.text == BODY for p in rest)


def test_a_foot_is_taken_from_the_end_of_the_page_and_a_body_paragraph_like_it_stays() -> None:
    page = PageText(4, "Head\n\n3\n\nbody\n\n3", edges=(Edge("Head", True, 28.0), Edge("3", False, 760.0)))
    assert without_furniture(page, page.edges).text == "3\n\nbody", "the list item 3 before the body stays"
