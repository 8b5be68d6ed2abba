"""Where each page's text came from, and what that makes of a chunk and a document. Pure.

Per page, the extraction edge (``docstream_chunker.extraction``) reads the text layer, asks
``docstream_chunker.page_quality.assess_page`` for a verdict, and asks this module what to do:

* ``wants_ocr(mode, verdict)``: ``off`` never OCRs, ``force`` OCRs every page, ``auto`` only
  the pages whose text layer is measurably unusable (``no_text_layer``, ``unmapped``,
  ``mojibake``: ``page_quality.needs_ocr``). A page whose verdict is ``ok`` is never OCRed in
  ``auto``;
* ``settle_page(...)``: which text the page keeps, and why (``PageSource.reason``, one of
  ``REASONS``). ``force`` keeps the OCR text; ``auto`` keeps it only when it wins in the page's
  own script (``ocr_wins``: ``page_quality.script_quality`` in the language OCR read it in,
  where Latin-looking noise from an Arabic page scores 0), else the text layer stays. A page
  whose kept text is not usable contributes no text (garbage is never embedded). A layer that
  is a known mis-decoding (``PageVerdict.redecoded``) keeps its re-decoded text, the document's
  own characters, where OCR agrees with it (``agrees``: most of its words are in the reading) or
  OCR did not run; reason ``layer_redecoded``.

A page's ``verdict`` is always its text layer's; ``text_source`` and ``reason`` say which text it
kept. Then per chunk (``chunk_source``): ``text_source`` is ``ocr`` when any of its pages' text
came from OCR, with the first such page's engine, and the verdicts and reasons of its pages in
page order; per document (``DocumentSources``): pages counted by verdict, by source and by
reason, and the failure of a document with no usable page (``document_failure``:
``ocr_unavailable_for_script`` when OCR could not read a page's script, ``unreadable_text``
when some page held text that its verdict calls garbage, else ``no_text``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from docstream.records import TextSource
from docstream_chunker.page_quality import (
    MOJIBAKE_QUALITY,
    USABLE,
    PageVerdict,
    Verdict,
    expected_scripts,
    needs_ocr,
    script_quality,
)
from docstream_chunker.scripts import script_of_language

__all__ = [
    "AGREEMENT",
    "GARBAGE_VERDICTS",
    "OCR",
    "REASONS",
    "TEXT_LAYER",
    "ChunkSource",
    "DocumentSources",
    "OcrMode",
    "OcrReading",
    "PageSource",
    "Reason",
    "SettledPage",
    "TextSource",
    "agrees",
    "chunk_source",
    "document_failure",
    "ocr_wins",
    "settle_page",
    "time_limit",
    "wants_ocr",
]

OcrMode = Literal["off", "auto", "force"]
TEXT_LAYER: TextSource = "text_layer"
OCR: TextSource = "ocr"
GARBAGE_VERDICTS: frozenset[str] = frozenset({"unmapped", "mojibake"})
"""Verdicts of a page that holds text, but text that does not read: ``unreadable_text``."""
Reason = Literal[
    "text_layer", "layer_redecoded", "ocr_reads_better", "ocr_forced", "ocr_not_better", "ocr_unavailable_for_script",
    "ocr_unavailable", "ocr_failed", "ocr_off",
]
REASONS: dict[str, str] = {
    "text_layer": "the text layer is usable: kept, no OCR",
    "layer_redecoded": "the text layer is a known mis-decoding (Windows-1251 read as Latin-1, ...): kept, read in "
                       "its real encoding, where OCR agrees with it or did not run",
    "ocr_reads_better": "the text layer is unusable and OCR in the page's script reads better: OCR text kept",
    "ocr_forced": "chunker.ocr.mode = force: OCR text kept",
    "ocr_not_better": "OCR ran but did not read better in the page's script: the text layer kept",
    "ocr_unavailable_for_script": "no OCR language data for the page's script is installed: the text layer kept",
    "ocr_unavailable": "the OCR engine is not installed: the text layer kept",
    "ocr_failed": "the OCR engine failed on the page: the text layer kept",
    "ocr_off": "the text layer is unusable and chunker.ocr.mode = off: the text layer kept",
}
"""Why a page kept the text it kept (``PageSource.reason``), in words (docs/chunking.md "Provenance")."""


@dataclass(frozen=True, slots=True)
class PageSource:
    """One page's provenance.

    Attributes:
        number: 1-based page number.
        verdict: the verdict of the page's text layer.
        text_source: ``text_layer`` or ``ocr``: the text the page kept.
        ocr_engine: the engine that read the page, when ``text_source`` is ``ocr``.
        ocred: whether OCR ran on the page (its text may still be the text layer's).
        reason: why the page kept that text (``REASONS``).
        ocr_languages: the languages OCR read the page in (``ara+eng``), when it ran.
    """

    number: int
    verdict: Verdict
    text_source: TextSource = TEXT_LAYER
    ocr_engine: str | None = None
    ocred: bool = False
    reason: Reason = "text_layer"
    ocr_languages: str | None = None


@dataclass(frozen=True, slots=True)
class SettledPage:
    """What a page keeps: its text ("" when that text is not usable) and its provenance."""

    text: str
    source: PageSource


@dataclass(frozen=True, slots=True)
class OcrReading:
    """What OCR read of a page.

    Attributes:
        text: the OCR text.
        engine: the engine's name.
        languages: the languages it read in, the page's own first (``("ara", "eng")``).
        verdict: the verdict of that text on its own.
        page_language: the language of the page's script, when something named it (its text
            layer, the document's other pages, the engine's script detection); None when the
            page was read in the configured languages for want of anything better.
    """

    text: str
    engine: str
    languages: tuple[str, ...]
    verdict: PageVerdict
    page_language: str | None = None
    confidence: float | None = None
    """The engine's mean confidence in its words, 0-1 (None where the engine gives none)."""

    @property
    def judged_in(self) -> str:
        """The language whose script the reading is measured in: the page's, else the one it claims of those it
        was read in."""
        if self.page_language is not None:
            return self.page_language
        claim = self.verdict.language
        if claim is not None and script_of_language(claim) in expected_scripts(self.languages):
            return claim
        return self.languages[0]


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """A chunk's provenance: where its text came from and its pages' verdicts and reasons, in page order."""

    text_source: TextSource
    ocr_engine: str | None
    page_verdicts: tuple[Verdict, ...]
    page_reasons: tuple[Reason, ...] = ()
    page_furniture: tuple[str, ...] = ()


def wants_ocr(mode: OcrMode, verdict: PageVerdict) -> bool:
    """Whether a page with this text-layer verdict is OCRed under ``mode``."""
    if mode == "force":
        return True
    return mode == "auto" and needs_ocr(verdict)


def ocr_wins(layer_text: str, layer: PageVerdict, reading: OcrReading) -> bool:
    """Whether an OCR reading replaces an unusable text layer (``auto``).

    Only when the layer is unusable, the reading is usable on its own, and, measured in the
    page's own script (``OcrReading.judged_in``) by ``script_quality``, the reading reads at
    least ``MOJIBAKE_QUALITY`` and better than the layer. A measure in the page's script cannot
    reward the wrong script: OCR noise in Latin letters scores 0 for an Arabic page.
    """
    if layer.verdict in USABLE or reading.verdict.verdict not in USABLE or not reading.languages:
        return False
    script = reading.judged_in
    ours = script_quality(reading.text, script)
    return ours >= MOJIBAKE_QUALITY and ours > script_quality(layer_text, script)


_WORD = re.compile(r"[^\W\d_]{3,}")
AGREEMENT = 0.5
"""Share of a re-decoded layer's words (of 3 letters or more) found in an OCR reading of the page from which the two
agree (measured: 0.9 and more for the right encoding, 0 for a wrong code page of the same script)."""


def agrees(redecoded: str, reading: str) -> bool:
    """Whether an OCR reading agrees with a re-decoded layer: ``AGREEMENT`` of the layer's words are in it."""
    words = set(_WORD.findall(redecoded.casefold()))
    if not words:
        return False
    read = set(_WORD.findall(reading.casefold()))
    return len(words & read) >= AGREEMENT * len(words)


def settle_page(
    number: int,
    mode: OcrMode,
    layer_text: str,
    layer: PageVerdict,
    reading: OcrReading | None = None,
    *,
    skipped: Reason | None = None,
    wanted: str | None = None,
) -> SettledPage:
    """The text a page keeps and why.

    Args:
        number: 1-based page number.
        mode: ``chunker.ocr.mode``.
        layer_text: the text layer's text.
        layer: its verdict.
        reading: what OCR read, when it ran.
        skipped: why OCR did not run on a page that wanted it (``ocr_unavailable_for_script``,
            ``ocr_unavailable``, ``ocr_failed``).
        wanted: the language OCR was to read the page in, when it was skipped.
    """
    languages = "+".join(reading.languages) if reading is not None else wanted
    redecoded = layer.redecoded
    if redecoded is not None and mode != "force" and (reading is None or agrees(redecoded.text, reading.text)):
        source = PageSource(number, layer.verdict, TEXT_LAYER, None, reading is not None, "layer_redecoded", languages)
        return SettledPage(redecoded.text, source)
    if reading is not None and (mode == "force" or ocr_wins(layer_text, layer, reading)):
        kept = reading.text if reading.verdict.verdict in USABLE else ""
        reason: Reason = "ocr_forced" if mode == "force" else "ocr_reads_better"
        source = PageSource(number, layer.verdict, OCR, reading.engine, True, reason, languages)
        return SettledPage(kept, source)
    if reading is not None:
        reason = "ocr_not_better"
    elif skipped is not None:
        reason = skipped
    else:
        reason = "text_layer" if layer.verdict in USABLE or mode != "off" else "ocr_off"
    kept = layer_text if layer.verdict in USABLE else ""
    source = PageSource(number, layer.verdict, TEXT_LAYER, None, reading is not None, reason, languages)
    return SettledPage(kept, source)


def chunk_source(
    page_start: int, page_end: int, pages: Mapping[int, PageSource],
    furniture: Mapping[int, Sequence[str]] | None = None,
) -> ChunkSource:
    """The provenance of a chunk spanning pages ``page_start``..``page_end`` (1-based, inclusive); with
    ``furniture`` (per page, what left its text as page furniture), the furniture of its pages, each once, in order."""
    spanned = [pages[n] for n in range(page_start, page_end + 1) if n in pages]
    ocred = [p for p in spanned if p.text_source == OCR]
    return ChunkSource(
        text_source=OCR if ocred else TEXT_LAYER,
        ocr_engine=ocred[0].ocr_engine if ocred else None,
        page_verdicts=tuple(p.verdict for p in spanned),
        page_reasons=tuple(p.reason for p in spanned),
        page_furniture=tuple(dict.fromkeys(
            text for n in range(page_start, page_end + 1) for text in (furniture or {}).get(n, ())
        )),
    )


@dataclass(frozen=True, slots=True)
class DocumentSources:
    """A document's pages counted by verdict and by text source.

    Attributes:
        by_verdict: pages per text-layer verdict.
        by_source: pages per text source (``text_layer``, ``ocr``).
        ocr_pages: pages OCR ran on (whichever text they kept).
        by_reason: pages per reason for the text they kept (``REASONS``).
    """

    by_verdict: Mapping[str, int] = field(default_factory=dict)
    by_source: Mapping[str, int] = field(default_factory=dict)
    ocr_pages: int = 0
    by_reason: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, pages: Iterable[PageSource]) -> DocumentSources:
        """Count the pages."""
        verdicts: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        ocred = 0
        for page in pages:
            verdicts[page.verdict] += 1
            sources[page.text_source] += 1
            reasons[page.reason] += 1
            ocred += page.ocred
        return cls(dict(sorted(verdicts.items())), dict(sorted(sources.items())), ocred, dict(sorted(reasons.items())))


def document_failure(pages: Sequence[PageSource], *, has_chunks: bool) -> tuple[str, str] | None:
    """The ``(error_code, message)`` of a document left with no usable text, else None.

    Args:
        pages: every page's provenance.
        has_chunks: whether the kept text made any chunk.
    """
    if has_chunks:
        return None
    unreadable = [p for p in pages if p.reason == "ocr_unavailable_for_script"]
    if unreadable:
        languages = sorted({p.ocr_languages or "?" for p in unreadable})
        return "ocr_unavailable_for_script", (
            f"no page of {len(pages)} holds readable text, and {len(unreadable)} could not be OCRed: no "
            f"Tesseract language data for their script ({', '.join(languages)}; deploy/install-ocr.sh installs it)"
        )
    garbage = sum(1 for p in pages if p.verdict in GARBAGE_VERDICTS)
    ocred = sum(1 for p in pages if p.ocred)
    after = f" (after OCR of {ocred})" if ocred else ""
    if garbage:
        counts = DocumentSources.of(pages).by_verdict
        found = ", ".join(f"{verdict} {n}" for verdict, n in counts.items())
        return "unreadable_text", f"no page of {len(pages)} holds readable text{after}: {found}"
    return "no_text", f"none of the {len(pages)} pages holds extractable text{after}"


def time_limit(base_s: float, ocr_pages: int, per_ocr_page_s: float, most_s: float | None, *,
               layout_pages: int = 0, per_layout_page_s: float = 0.0) -> float:
    """A document's extraction time limit: ``base_s``, plus ``per_ocr_page_s`` for each page OCR started on and
    ``per_layout_page_s`` for each page PyMuPDF's layout model started on (its tables), never past ``most_s``
    (None: no ceiling).

    A document that needs OCR or the layout model on every page gets the time they take; one that needs neither
    never pays for them (docs/chunking.md "Time limits").
    """
    limit = base_s + max(0, ocr_pages) * per_ocr_page_s + max(0, layout_pages) * per_layout_page_s
    return limit if most_s is None else min(limit, max(base_s, most_s))
