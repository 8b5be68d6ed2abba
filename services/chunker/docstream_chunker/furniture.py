"""Page furniture: running heads, page numbers and footers, taken out of a document's text. Pure.

A manual repeats its running head ("Chapter 2: ASN.1 structure handling 3") and its page number
on every page. Left in the text, they go into every chunk on their page, where they dilute the
embeddings and match every search for the chapter's name. Here they leave the text and are kept
beside it (``PageText.furniture``, then each chunk's ``page_furniture``).

The rule, by what a page's text layer holds (``Edge``, from ``edge_of``):

* a candidate is a short paragraph (at most ``MAX_EDGE_LINES`` lines and ``MAX_EDGE_CHARS``
  characters) lying wholly in the page's top or bottom band (``FURNITURE_BAND`` of its height);
* it is furniture when the same paragraph (``edge_key``: case folded, every run of digits one
  ``#``, a lone Roman numeral too: "Chapter 2 ... 3" and "Chapter 2 ... 4" are one) stands in the
  same band, within ``Y_TOLERANCE`` points of the same height, on ``MIN_OTHER_PAGES`` other page
  or more among the ``WINDOW`` pages before and after it. A chapter's running head is one
  within its chapter, and a book's left and right pages have their own.

Body text is never taken, however often it repeats: it is not in the bands, or not short there.
A paragraph in a band that does not repeat around it (a section that happens to start at the top
of a page, the last line of body text) stays. OCRed pages have no edges (OCR gives no positions
here) and keep their text whole.

``strip_furniture`` applies the rule to a stream of pages with ``WINDOW`` pages of look-ahead:
a page is decided when the pages after it are read, so extraction still holds a few pages of
text, never the document.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from docstream_chunker.chunking import Edge, Heading, PageText

__all__ = [
    "FURNITURE_BAND",
    "MAX_EDGE_CHARS",
    "MAX_EDGE_LINES",
    "MIN_OTHER_PAGES",
    "WINDOW",
    "Y_TOLERANCE",
    "edge_key",
    "edge_of",
    "furniture_of",
    "strip_furniture",
    "without_furniture",
]

FURNITURE_BAND = 0.08
"""Share of a page's height, at its top and at its bottom, where furniture stands: 63 points of a Letter page, 67 of
an A4 one, the margin a header or footer sits in (half an inch from the edge in a word processor's default, 50-60
points in the Debian manuals measured). A body that starts an inch down, whose first paragraph repeats on every page,
ends below it."""
MAX_EDGE_LINES = 3
"""Most lines of a furniture paragraph (a running head and its page number: two)."""
MAX_EDGE_CHARS = 160
"""Most characters of a furniture paragraph."""
WINDOW = 4
"""Pages before and after a page that its furniture repeats on (4: the first page of a book's left and right heads
still sees two of its own)."""
MIN_OTHER_PAGES = 1
"""Other pages of the window that must hold the same paragraph at the same place (1: a chapter of two pages has its
running head taken too; in the bands, body text does not stand twice at the same height in a few pages)."""
Y_TOLERANCE = 3.0
"""Points by which the same furniture's top may differ from page to page."""
_DIGITS = re.compile(r"\d+")
_ROMAN = re.compile(r"[ivxlcdm]+")


def edge_of(text: str, *, lines: int, y0: float, y1: float, height: float) -> Edge | None:
    """The paragraph ``text`` as a furniture candidate, or None when it is too long or outside the bands.

    Args:
        text: the paragraph as it stands in the page's text.
        lines: its lines on the page.
        y0: its top, in points from the top of the page.
        y1: its bottom.
        height: the page's height.
    """
    if not text or lines > MAX_EDGE_LINES or len(text) > MAX_EDGE_CHARS:
        return None
    band = FURNITURE_BAND * height
    if y1 <= band:
        return Edge(text, True, y0)
    if y0 >= height - band:
        return Edge(text, False, y0)
    return None


def edge_key(text: str) -> str:
    """What two pages' furniture has in common: the text case folded, each run of digits ``#``, a lone Roman
    numeral ``#``, whitespace one space."""
    folded = " ".join(text.casefold().split())
    if _ROMAN.fullmatch(folded):
        return "#"
    return _DIGITS.sub("#", folded)


def furniture_of(pages: Sequence[Sequence[tuple[str, Edge]]], index: int) -> tuple[Edge, ...]:
    """The edges of ``pages[index]`` that are furniture: held in the same place by ``MIN_OTHER_PAGES`` other pages of
    ``pages`` (the window around it), each page's edges given with their ``edge_key``."""
    found = []
    for key, edge in pages[index]:
        others = sum(
            1
            for i, page in enumerate(pages)
            if i != index and any(k == key and e.top == edge.top and abs(e.y - edge.y) <= Y_TOLERANCE for k, e in page)
        )
        if others >= MIN_OTHER_PAGES:
            found.append(edge)
    return tuple(found)


def without_furniture(page: PageText, furniture: Sequence[Edge]) -> PageText:
    """``page`` without the paragraphs of ``furniture`` (a head the first paragraph equal to it, a foot the last),
    its headings and tables moved to their new offsets; a heading that was such a paragraph goes. The page's
    ``furniture`` lists what was taken."""
    paragraphs = page.text.split("\n\n")
    starts = [0]
    for paragraph in paragraphs[:-1]:
        starts.append(starts[-1] + len(paragraph) + 2)
    gone: set[int] = set()
    for edge in furniture:  # a head is the first such paragraph, a foot the last: a body paragraph "3" stays
        order = range(len(paragraphs)) if edge.top else range(len(paragraphs) - 1, -1, -1)
        i = next((i for i in order if paragraphs[i] == edge.text and i not in gone), None)
        if i is not None:
            gone.add(i)
    if not gone:
        return replace(page, edges=())
    text = "\n\n".join(p for i, p in enumerate(paragraphs) if i not in gone)
    taken = {starts[i]: paragraphs[i] for i in gone}

    def moved(offset: int) -> int:
        before = sum(len(paragraphs[i]) + 2 for i in gone if starts[i] < offset)
        return min(max(0, offset - before), len(text))

    headings = tuple(Heading(moved(h.offset), h.title) for h in page.headings if taken.get(h.offset) != h.title)
    tables = tuple(replace(t, offset=moved(t.offset)) for t in page.tables)
    removed = tuple(paragraphs[i] for i in sorted(gone))
    return replace(page, text=text, headings=headings, tables=tables, edges=(), furniture=removed)


def strip_furniture(pages: Iterable[PageText]) -> Iterator[PageText]:
    """``pages`` in order, each without its furniture (``furniture_of`` over the ``WINDOW`` pages around it)."""
    window: deque[tuple[PageText, list[tuple[str, Edge]]]] = deque()
    pending = 0

    def decided() -> PageText:
        page = window[pending][0]
        if not page.edges:
            return page
        first = max(0, pending - WINDOW)
        near = [keyed for _, keyed in list(window)[first : pending + WINDOW + 1]]
        furniture = furniture_of(near, pending - first)
        return without_furniture(page, furniture) if furniture else replace(page, edges=())

    for page in pages:
        window.append((page, [(edge_key(e.text), e) for e in page.edges]))
        if len(window) - 1 - pending >= WINDOW:
            yield decided()
            pending += 1
            if pending > WINDOW:
                window.popleft()
                pending -= 1
    while pending < len(window):
        yield decided()
        pending += 1
