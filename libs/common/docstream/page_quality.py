"""Is a page's text usable? One verdict per page, from pure functions over facts about the page.

The extraction edge (``docstream.extraction.page_facts``) reads a page's facts from PyMuPDF;
everything here is pure: the verdict, the text-quality measure that decides between a text
layer and an OCR text, and whether a page needs OCR. Thresholds are module constants, stated
and tested (tests/unit/test_page_quality.py); docs/chunking.md lists them.

Verdicts:

* ``ok``: a usable text layer;
* ``no_text_layer``: an image-only page (a scan);
* ``unmapped``: the page draws glyphs, but the text comes out as spaces, NBSP or U+FFFD
  (fonts without a Unicode map);
* ``mojibake``: text in a script that does not fit the fonts or the document's language
  (Latin-1 letters where Cyrillic is expected), or a very low share of word-like tokens;
* ``ok_with_ocr_layer``: invisible OCR text over an image (a scan someone already OCRed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["USABLE", "PageFacts", "PageVerdict", "Verdict", "assess_page", "needs_ocr", "text_quality"]

Verdict = Literal["ok", "no_text_layer", "unmapped", "mojibake", "ok_with_ocr_layer"]
USABLE: frozenset[str] = frozenset({"ok", "ok_with_ocr_layer"})
"""Verdicts whose text is kept without OCR."""


@dataclass(frozen=True, slots=True)
class PageFacts:
    """What a page holds, as the extraction edge read it (no PyMuPDF object: tests build these).

    Attributes:
        text: the text layer's text, as extracted.
        glyphs: characters the text layer draws, visible or not.
        invisible_glyphs: of those, the ones drawn invisibly (render mode 3: an OCR layer).
        image_area: share of the page's area covered by images, 0..1.
        fonts: fonts the page uses.
        fonts_without_unicode: of those, fonts with no ToUnicode map and no standard encoding.
    """

    text: str
    glyphs: int = 0
    invisible_glyphs: int = 0
    image_area: float = 0.0
    fonts: int = 0
    fonts_without_unicode: int = 0


@dataclass(frozen=True, slots=True)
class PageVerdict:
    """A page's verdict, the quality of its text (``text_quality``) and why, for logs and docs."""

    verdict: Verdict
    quality: float
    reason: str


def text_quality(text: str, *, languages: Sequence[str] = ("en",)) -> float:
    """How much of ``text`` reads as words of ``languages``' scripts, 0 (garbage) to 1.

    The one measure that ranks two texts of one page (text layer against OCR).
    """
    words = text.split()
    if not words:
        return 0.0
    wordlike = sum(1 for w in words if sum(c.isalpha() for c in w) >= max(1, len(w) // 2))
    return wordlike / len(words)


def assess_page(facts: PageFacts, *, languages: Sequence[str] = ("en",)) -> PageVerdict:
    """The verdict of one page (placeholder rules; the thresholds come with their tests)."""
    quality = text_quality(facts.text, languages=languages)
    if not facts.text.strip() and facts.image_area > 0.5:
        return PageVerdict("no_text_layer", quality, "no text, images cover the page")
    if facts.glyphs and facts.invisible_glyphs / facts.glyphs > 0.5:
        return PageVerdict("ok_with_ocr_layer", quality, "invisible text over an image")
    return PageVerdict("ok", quality, "a text layer")


def needs_ocr(verdict: PageVerdict) -> bool:
    """Whether ``ocr.mode = auto`` OCRs this page."""
    return verdict.verdict not in USABLE
