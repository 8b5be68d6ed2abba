"""Is a page's text usable? One verdict per page, from pure functions over facts about the page.

The extraction edge (``docstream_chunker.extraction.page_facts``) reads a page's facts from PyMuPDF;
everything here is pure: the verdict, the text-quality measure that decides between a text
layer and an OCR text, and whether a page needs OCR. Thresholds are module constants, stated
and tested (tests/unit/chunker/test_page_quality.py); docs/chunking.md "Page verdicts" lists them.

Verdicts, checked in this order:

* ``ok_with_ocr_layer``: at least ``OCR_LAYER_SHARE`` (half) of the glyphs are invisible
  (render mode 3) and images cover at least ``SCAN_IMAGE_AREA`` (half) of the page: a scan
  someone already OCRed. If that hidden text is itself garbage (quality below
  ``MOJIBAKE_QUALITY``) the page is ``mojibake`` instead;
* ``unmapped``: at least ``MIN_GLYPHS`` (20) glyphs, but fewer than ``UNMAPPED_SHARE`` (half)
  of them come out as characters other than spaces, NBSP or U+FFFD (fonts without a Unicode map);
* ``no_text_layer``: fewer than ``MIN_TEXT_CHARS`` (20) characters in tokens holding letters,
  and images cover at least ``SCAN_IMAGE_AREA`` of the page;
* ``mojibake``: at least ``MIN_TEXT_CHARS`` characters of text, and ``text_quality`` below
  ``MOJIBAKE_QUALITY`` (0.5), or below ``MOJIBAKE_QUALITY_NO_UNICODE`` (0.7) when a font of the
  page has neither a ToUnicode map nor a standard encoding;
* ``ok``: everything else, including nearly empty pages (fewer than ``MIN_TEXT_CHARS``
  characters and no page-sized image: nothing to OCR) and a figure with its caption.

A layer that is a known mis-decoding is ``mojibake`` whatever its quality: one with at least
``REDECODE_MIN_LETTERS`` (6) letters of script-mismatch words (below) in its sample, which
``docstream_chunker.redecoding.redecode`` reads back in its real encoding (Windows-1251, KOI8-R,
Windows-1253, UTF-8, ... read as Latin-1) into a text that claims a script and reads at least
``MOJIBAKE_QUALITY_NO_UNICODE`` (0.7) in it, better than the layer. A page of English names
beside cp1251 Russian reads 0.5-0.7 as a Latin layer and would otherwise pass as ``ok``. The
verdict carries the re-decoded text (``PageVerdict.redecoded``) and its script's language.

``text_quality`` is the share of a page's letter-bearing text that reads as words of the
expected scripts, from 0 (garbage) to 1. The expected scripts come from the languages
(Tesseract codes, ``LANGUAGE_SCRIPTS``); ASCII words always count, since names, terms and
code appear in every language. Tokens are whitespace-separated, with leading and trailing
punctuation stripped. A word is a token that reads as an identifier (``str.isidentifier``: a
letter, then letters, digits or combining marks), once inner joiners (``-'.,:/&``, U+2019, CJK
punctuation: ``well-known``, ``e.g.``, a line of Chinese) are left out. Tokens of digits and
punctuation only count neither way. Words of a real script that was not expected count
``UNEXPECTED_SCRIPT_WEIGHT`` (0.75): a Russian page read with ``eng`` stays usable, and OCR
in the right language outranks it. Garbage: tokens mixing letters with symbols, control or
private-use characters or U+FFFD; NBSPs; and the script mismatch of fonts without a Unicode
map: words of ``MISMATCH_MIN_LETTERS`` (3) or more letters, all non-ASCII Latin
(U+00C0-U+024F: ``Ïðèâåò``, Cyrillic through a legacy 8-bit font; ``ƒƊƃƆƔ``, glyph ids read as
code points), and, where no Latin script is expected, every such word. A word's script is the
256-code-point block of each of its characters. Texts longer than ``QUALITY_SAMPLE_CHARS`` (400)
are measured on that many characters, in four evenly spaced windows: normal PDFs
pay the measure on every page, and it must stay a few percent of extracting the page.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import filterfalse, pairwise, repeat
from typing import Literal

from docstream_chunker.redecoding import Redecoding, redecode
from docstream_chunker.scripts import (
    LANGUAGE_SCRIPTS,
    claimed_language,
    judged_text,
    language_scripts,
    letters_by_script,
)

__all__ = [
    "LANGUAGE_SCRIPTS",
    "MIN_GLYPHS",
    "MIN_TEXT_CHARS",
    "MISMATCH_MIN_LETTERS",
    "MOJIBAKE_QUALITY",
    "MOJIBAKE_QUALITY_NO_UNICODE",
    "OCR_LAYER_SHARE",
    "QUALITY_SAMPLE_CHARS",
    "REDECODE_MIN_LETTERS",
    "SCAN_IMAGE_AREA",
    "UNEXPECTED_SCRIPT_WEIGHT",
    "UNMAPPED_SHARE",
    "USABLE",
    "PageFacts",
    "PageVerdict",
    "Verdict",
    "assess_page",
    "expected_scripts",
    "lookalike_share",
    "needs_ocr",
    "script_quality",
    "text_quality",
]

Verdict = Literal["ok", "no_text_layer", "unmapped", "mojibake", "ok_with_ocr_layer"]
USABLE: frozenset[str] = frozenset({"ok", "ok_with_ocr_layer"})
"""Verdicts whose text is kept without OCR."""

MIN_TEXT_CHARS = 20
"""Fewer characters in letter-bearing tokens: the page holds no text worth judging."""
MIN_GLYPHS = 20
"""Fewer glyphs drawn: too little to call a page ``unmapped`` or an OCR layer."""
SCAN_IMAGE_AREA = 0.5
"""Share of the page covered by images from which a page without text is a scan."""
OCR_LAYER_SHARE = 0.5
"""Share of invisible glyphs (over a scan) that makes the text an OCR layer."""
UNMAPPED_SHARE = 0.5
"""Below this share of glyphs coming out as real characters, the page is ``unmapped``."""
MOJIBAKE_QUALITY = 0.5
"""Below this ``text_quality``, a page with text is ``mojibake``."""
MOJIBAKE_QUALITY_NO_UNICODE = 0.7
"""The same bar when a font of the page has no Unicode map: the text is held to more."""
UNEXPECTED_SCRIPT_WEIGHT = 0.75
"""What a word of a real but unexpected script counts, against 1 for an expected one."""
MISMATCH_MIN_LETTERS = 3
"""Letters from which an all-non-ASCII-Latin token is a script mismatch when Latin is expected."""
REDECODE_MIN_LETTERS = 6
"""Letters of all-non-ASCII-Latin words (of ``MISMATCH_MIN_LETTERS`` or more) in the sample from which a layer is
tried as a mis-decoding (``docstream_chunker.redecoding``): ``âñå îøèáêè`` is ``все ошибки`` in Windows-1251."""
QUALITY_SAMPLE_CHARS = 400
"""``text_quality`` reads at most this many characters: a longer text is sampled in evenly spaced windows."""
_SAMPLE_WINDOWS = 4

_EDGE = (
    "\"'([{<*\u2022\u00b7\u2013\u2014\u00ab\u00bb\u201c\u201d\u201e\u2018\u2019\u201a\u00bf\u00a1-.,;:!?)]}>%"
    "\u2026\u2030\u00b0\u2020\u2021\u00b9\u00b2\u00b3#$\u20ac\u00a3\u00a5\u00a7\u00a9\u00ae\u2122+=/\\|~^@`&"
    "\u3001\u3002\u300a\u300b\u300c\u300d\u300e\u300f\u3010\u3011\uff08\uff09\uff0c\uff0e\uff1a\uff1b\uff01\uff1f"
)
_JOINERS = dict.fromkeys(
    map(ord, "-'\u2019.,:/&\u00b7\u2010\u2011\u3001\u3002\uff0c\uff1a\uff1b\uff01\uff1f\u30fb"
             "\u300c\u300d\u300e\u300f\uff08\uff09"
             # what NFKC makes of the full-width forms above, inside a line of Japanese or Chinese
             "!?;()[]\"")
)
# Punctuation of every script (Arabic comma, Hebrew maqaf, Devanagari danda, CJK brackets), and
# symbols past U+2000 (arrows, maths, boxes), are edges, and punctuation joins inside a token as
# ASCII's does; Latin-1's own symbols are left as they were: mixed into letters they are the
# mojibake of UTF-8 read as Latin-1 (``Ã©``, ``â€™``).
_SCRIPT_PUNCTUATION = "".join(
    c for lo, hi in ((0x0370, 0x1000), (0x2000, 0x2C00), (0x3000, 0x3040), (0xFE10, 0xFE70), (0xFF00, 0xFF66))
    for c in map(chr, range(lo, hi))
    if unicodedata.category(c)[0] == "P" or (unicodedata.category(c)[0] == "S" and ord(c) >= 0x2000)
)
_EDGE += _SCRIPT_PUNCTUATION
_JOINERS.update(dict.fromkeys(ord(c) for c in _SCRIPT_PUNCTUATION if unicodedata.category(c)[0] == "P"))


@dataclass(frozen=True, slots=True)
class PageFacts:
    """What a page holds, as the extraction edge read it (no PyMuPDF object: tests build these).

    Attributes:
        text: the text layer's text, as extracted.
        glyphs: characters the text layer draws, visible or not (when ``traced`` is false, an
            estimate from the text: its non-space characters and NBSPs).
        invisible_glyphs: of those, the ones drawn invisibly (render mode 3: an OCR layer);
            0 when not ``traced``.
        image_area: share of the page's area covered by images, 0..1.
        fonts: fonts the page uses (0 when not ``traced``).
        fonts_without_unicode: of those, fonts with no ToUnicode map and no standard encoding.
        traced: the expensive second stage ran (glyph trace and fonts), because the cheap
            facts looked suspicious.
    """

    text: str
    glyphs: int = 0
    invisible_glyphs: int = 0
    image_area: float = 0.0
    fonts: int = 0
    fonts_without_unicode: int = 0
    traced: bool = False


@dataclass(frozen=True, slots=True)
class PageVerdict:
    """A page's verdict, the quality of its text (``text_quality``) and why, for logs and docs.

    Attributes:
        verdict: the verdict.
        quality: ``text_quality`` of the text in the document's languages and the script it claims.
        reason: why, in words.
        language: the Tesseract language of the script the text claims (``docstream_chunker.scripts.
            claimed_language``), None when it claims none (no text, garbage); for a layer that is a
            known mis-decoding, the language its re-decoded text claims.
        redecoded: the layer read in the encoding it was written in, when it is a known
            mis-decoding (verdict ``mojibake``); None otherwise.
    """

    verdict: Verdict
    quality: float
    reason: str
    language: str | None = None
    redecoded: Redecoding | None = None


@dataclass(frozen=True, slots=True)
class _Measure:
    """Characters of a text by kind, one pass: the parts of every quality figure of this module.

    Attributes:
        letter_bearing: characters of tokens that are not neutral (numbers, punctuation).
        nbsp: NBSPs (each stands for a glyph that should have been a character).
        joined: joiner characters inside word-like tokens (``well-known``, a line of Chinese).
        ascii: ASCII characters of word-like tokens.
        scripts: characters of word-like tokens per script (``docstream_chunker.scripts.letters_by_script``;
            Latin includes the ASCII ones).
        mismatch: characters of all-non-ASCII-Latin words of ``MISMATCH_MIN_LETTERS`` letters or more.
        mismatch_any: the same for words of any length.
        language: the language of the script the text claims.
    """

    letter_bearing: int
    nbsp: int
    joined: int
    ascii: int
    scripts: dict[str, int]
    mismatch: int = 0
    mismatch_any: int = 0
    language: str | None = None

    def quality(
        self, scripts: frozenset[str], *, ascii_counts: bool = True, unexpected: float = UNEXPECTED_SCRIPT_WEIGHT
    ) -> float:
        """The share of letter-bearing characters that read as words of ``scripts``.

        Args:
            scripts: the scripts expected.
            ascii_counts: ASCII words count as expected whatever the scripts (names, terms, code).
            unexpected: what a word of a real script not expected counts.
        """
        total = self.letter_bearing + self.nbsp
        if not total:
            return 0.0
        words = sum(self.scripts.values()) + self.joined
        latin = "Latin" in scripts
        expected = self.joined + sum(self.scripts.get(s, 0) for s in scripts)
        if ascii_counts and not latin:
            expected += self.ascii
        other = words - expected
        if latin:
            expected -= self.mismatch
        else:
            other -= self.mismatch_any
        return min(1.0, (expected + unexpected * max(0, other)) / total)


def expected_scripts(languages: Sequence[str]) -> frozenset[str]:
    """The scripts of ``languages`` (Tesseract codes) by ``LANGUAGE_SCRIPTS``; Latin when none is known."""
    return _scripts(tuple(languages))


@lru_cache(maxsize=64)
def _scripts(languages: tuple[str, ...]) -> frozenset[str]:
    return language_scripts(languages)


def _mismatch(words: list[str], least: int) -> int:
    """Characters of the words of ``least`` letters or more that are all non-ASCII Latin (U+00C0-U+024F)."""
    return sum(
        len(w)
        for w in filterfalse(str.isascii, words)
        if len(w) >= least and min(w) >= "\u00c0" and max(w) <= "\u024f"
    )


def _sample(text: str) -> str:
    """The whole text up to ``QUALITY_SAMPLE_CHARS``, else that many characters in evenly spaced windows.

    A window may cut a token at its edges: a cut word is still letters, cut garbage still garbage.
    """
    if len(text) <= QUALITY_SAMPLE_CHARS:
        return text
    width = QUALITY_SAMPLE_CHARS // _SAMPLE_WINDOWS
    step = (len(text) - width) // (_SAMPLE_WINDOWS - 1)
    return " ".join(text[start : start + width] for start in range(0, step * _SAMPLE_WINDOWS, step))


def _measure(text: str) -> _Measure:
    # Every step is a C loop (split, map/filter over str methods, bytes.translate/count), over a
    # bounded sample: normal PDFs pay this on every page, so it must cost a few percent of
    # extracting the page. Only tokens that fail the first word test get a Python-level second look.
    text = _sample(text)
    nbsp = 0 if text.isascii() else text.count("\xa0")  # before NFKC, which makes them spaces
    text = judged_text(text)
    tokens = text.split()
    plain = list(filter(str.isidentifier, tokens))  # most words: nothing to strip
    cores = list(filter(None, map(str.strip, filterfalse(str.isidentifier, tokens), repeat(_EDGE))))
    words = plain + list(filter(str.isidentifier, cores))
    neutral = sum(map(len, filter(str.isdigit, cores)))
    joined = 0
    for token in filterfalse(str.isdigit, filterfalse(str.isidentifier, cores)):
        core = token.translate(_JOINERS)
        if not core or core.isdigit():
            neutral += len(token)
        elif core.isidentifier():
            words.append(core)
            joined += len(token) - len(core)
    letter_bearing = sum(map(len, plain)) + sum(map(len, cores)) - neutral
    letters = "".join(words)
    if letters.isascii():  # ASCII words count in every language: names, terms, code
        scripts = {"Latin": len(letters)} if letters else {}
        language = claimed_language(scripts, letter_bearing) if letter_bearing >= MIN_TEXT_CHARS else None
        return _Measure(letter_bearing, nbsp, joined, len(letters), scripts, language=language)
    ascii_chars = len(letters.encode("ascii", "ignore"))
    scripts = letters_by_script(letters)
    mismatch = mismatch_any = 0
    if scripts.get("Latin", 0) > ascii_chars:  # non-ASCII Latin letters: look for a script mismatch
        mismatch = _mismatch(words, MISMATCH_MIN_LETTERS)
        mismatch_any = _mismatch(words, 1)
    claims = dict(scripts)
    if mismatch:
        claims["Latin"] -= mismatch
    language = claimed_language(claims, letter_bearing, han_text=text) if letter_bearing >= MIN_TEXT_CHARS else None
    return _Measure(letter_bearing, nbsp, joined, ascii_chars, scripts, mismatch, mismatch_any, language)


def text_quality(text: str, *, languages: Sequence[str] = ("eng",)) -> float:
    """How much of ``text`` reads as words of ``languages``' scripts, 0 (garbage) to 1.

    The characters of word-like tokens over the characters of letter-bearing tokens plus NBSPs
    (the module docstring has the rules), words of other real scripts counting
    ``UNEXPECTED_SCRIPT_WEIGHT``. Empty text, or text of numbers only, is 0.

    Args:
        text: a page's text.
        languages: Tesseract language codes of the document (``eng``, ``rus``, ``chi_sim``...).
    """
    return round(_measure(text).quality(expected_scripts(languages)), 4)


def lookalike_share(text: str) -> float:
    """The share of ``text``'s words (two letters or more) that real words seldom are: a small letter followed by a
    capital inside the word, or letters and digits mixed (``cnylwaTb``, ``xne6``, ``SiaPalo``). OCR in the wrong
    script reads a page's letters as their look-alikes in its own (Cyrillic and Greek as Latin), which makes such
    words, and which ``script_quality`` takes for words. It ranks readings where the engine gives no confidence
    (MuPDF's built-in Tesseract): measured on generated pages, 0.0 in the right script, 0.04-0.40 in a wrong one.
    Over the text's bounded sample; 0 for a text without such words to judge.
    """
    words = [core for core in map(str.strip, _sample(text).split(), repeat(_EDGE))
             if len(core) > 1 and any(map(str.isalpha, core)) and core.isalnum()]
    if not words:
        return 0.0
    odd = sum(1 for word in words if _lookalike(word))
    return round(odd / len(words), 4)


def _lookalike(word: str) -> bool:
    if any(map(str.isdigit, word)):
        return True
    return any(a.islower() and b.isupper() for a, b in pairwise(word))


def script_quality(text: str, language: str) -> float:
    """How much of ``text`` reads as words of ``language``'s own script, 0 to 1: the measure that ranks OCR.

    Unlike ``text_quality``, no other script counts at all, and ASCII counts only where the
    script is Latin: Latin-looking noise that OCR in the wrong script reads from an Arabic page
    scores 0 for Arabic, however word-like it looks.

    Args:
        text: a page's text (its layer, or an OCR reading).
        language: a Tesseract language code (``ara``, ``jpn``, ``eng``).
    """
    return round(_measure(text).quality(expected_scripts((language,)), ascii_counts=False, unexpected=0.0), 4)


def assess_page(facts: PageFacts, *, languages: Sequence[str] = ("eng",)) -> PageVerdict:
    """The verdict of one page, by the rules and thresholds of the module docstring.

    The text is judged in the document's languages and in the script it claims itself
    (``docstream_chunker.scripts.claimed_language``): a correct Arabic or Japanese layer of a document
    configured for ``eng`` reads as the words it is. Garbage claims no script.

    Args:
        facts: what the extraction edge read of the page.
        languages: Tesseract language codes of the document.
    """
    measure = _measure(facts.text)
    scripts = expected_scripts(languages)
    if measure.language is not None:
        scripts = scripts | expected_scripts((measure.language,))
    verdict = _verdict(facts, measure, round(measure.quality(scripts), 4))
    if measure.mismatch >= REDECODE_MIN_LETTERS and verdict.verdict in ("ok", "mojibake"):
        misdecoded = _misdecoded(facts.text, verdict.quality)
        if misdecoded is not None:
            return misdecoded
    return PageVerdict(verdict.verdict, verdict.quality, verdict.reason, measure.language)


def _misdecoded(text: str, quality: float) -> PageVerdict | None:
    """The ``mojibake`` verdict of a layer that is a known mis-decoding whose re-decoded text reads as words of the
    script it claims, better than the layer did; None when it is not one."""
    found = redecode(text)
    if found is None:
        return None
    measure = _measure(found.text)
    if measure.language is None:
        return None
    redecoded = round(measure.quality(expected_scripts((measure.language,))), 4)
    if redecoded < MOJIBAKE_QUALITY_NO_UNICODE or redecoded <= quality:
        return None
    reason = (f"the layer is {found.encoding} read as Latin-1 (quality {quality}); re-decoded, it reads "
              f"{redecoded} in {measure.language}")
    return PageVerdict("mojibake", quality, reason, measure.language, found)


def _verdict(facts: PageFacts, measure: _Measure, quality: float) -> PageVerdict:
    glyphs = facts.glyphs
    scan = facts.image_area >= SCAN_IMAGE_AREA
    if scan and glyphs >= MIN_GLYPHS and facts.invisible_glyphs >= OCR_LAYER_SHARE * glyphs:
        if quality < MOJIBAKE_QUALITY:
            reason = f"invisible text over an image, quality {quality} < {MOJIBAKE_QUALITY}"
            return PageVerdict("mojibake", quality, reason)
        reason = f"{facts.invisible_glyphs} of {glyphs} glyphs invisible over an image"
        return PageVerdict("ok_with_ocr_layer", quality, reason)
    text = facts.text
    mapped = len(text) - text.count(" ") - text.count("\n") if facts.traced else glyphs  # the estimate's definition
    if not text.isascii():
        mapped -= text.count("\xa0") + text.count("\ufffd")
    if glyphs >= MIN_GLYPHS and mapped < UNMAPPED_SHARE * glyphs:
        reason = f"{mapped} of {glyphs} glyphs map to characters other than spaces, NBSP, U+FFFD"
        return PageVerdict("unmapped", quality, reason)
    if measure.letter_bearing < MIN_TEXT_CHARS:
        if scan:
            return PageVerdict("no_text_layer", quality, f"no text, images cover {facts.image_area:.0%} of the page")
        return PageVerdict("ok", quality, "nearly empty page, no page-sized image")
    bar = MOJIBAKE_QUALITY_NO_UNICODE if facts.fonts_without_unicode else MOJIBAKE_QUALITY
    if quality < bar:
        fonts = f", {facts.fonts_without_unicode} font(s) without a Unicode map" if facts.fonts_without_unicode else ""
        return PageVerdict("mojibake", quality, f"quality {quality} < {bar}{fonts}")
    return PageVerdict("ok", quality, "a text layer")


def needs_ocr(verdict: PageVerdict) -> bool:
    """Whether ``ocr.mode = auto`` OCRs this page."""
    return verdict.verdict not in USABLE
