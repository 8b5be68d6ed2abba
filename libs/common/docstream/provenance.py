"""Where each page's text came from, and what that makes of a chunk and a document. Pure.

Per page, the extraction edge (``docstream.extraction``) reads the text layer, asks
``docstream.page_quality.assess_page`` for a verdict, and asks this module what to do:

* ``wants_ocr(mode, verdict)``: ``off`` never OCRs, ``force`` OCRs every page, ``auto`` the
  pages whose verdict is not usable (``page_quality.needs_ocr``);
* ``settle_page(...)``: which text the page keeps. ``force`` keeps the OCR text; ``auto`` keeps
  the OCR text only when ``text_quality`` ranks it above the text layer's (a tie keeps the text
  layer: exact, and free), with the verdict of the text it kept. A page whose final verdict is
  still not usable contributes no text (garbage is never embedded); its verdict is recorded.

Then per chunk (``chunk_source``): ``text_source`` is ``ocr`` when any of its pages' text came
from OCR, with the first such page's engine, and the verdicts of its pages in page order; per
document (``DocumentSources``): pages counted by verdict and by source, and the failure of a
document with no usable page (``document_failure``: ``unreadable_text`` when some page held
text that its verdict calls garbage, else ``no_text``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from docstream.page_quality import USABLE, PageVerdict, Verdict, needs_ocr

__all__ = [
    "GARBAGE_VERDICTS",
    "OCR",
    "TEXT_LAYER",
    "ChunkSource",
    "DocumentSources",
    "OcrMode",
    "PageSource",
    "SettledPage",
    "TextSource",
    "chunk_source",
    "document_failure",
    "settle_page",
    "wants_ocr",
]

TextSource = Literal["text_layer", "ocr"]
OcrMode = Literal["off", "auto", "force"]
TEXT_LAYER: TextSource = "text_layer"
OCR: TextSource = "ocr"
GARBAGE_VERDICTS: frozenset[str] = frozenset({"unmapped", "mojibake"})
"""Verdicts of a page that holds text, but text that does not read: ``unreadable_text``."""


@dataclass(frozen=True, slots=True)
class PageSource:
    """One page's provenance.

    Attributes:
        number: 1-based page number.
        verdict: the verdict of the text the page kept.
        text_source: ``text_layer`` or ``ocr``.
        ocr_engine: the engine that read the page, when ``text_source`` is ``ocr``.
        ocred: whether OCR ran on the page (its text may still be the text layer's).
    """

    number: int
    verdict: Verdict
    text_source: TextSource = TEXT_LAYER
    ocr_engine: str | None = None
    ocred: bool = False


@dataclass(frozen=True, slots=True)
class SettledPage:
    """What a page keeps: its text ("" when its verdict is not usable) and its provenance."""

    text: str
    source: PageSource


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """A chunk's provenance: where its text came from and its pages' verdicts, in page order."""

    text_source: TextSource
    ocr_engine: str | None
    page_verdicts: tuple[Verdict, ...]


def wants_ocr(mode: OcrMode, verdict: PageVerdict) -> bool:
    """Whether a page with this text-layer verdict is OCRed under ``mode``."""
    if mode == "force":
        return True
    return mode == "auto" and needs_ocr(verdict)


def settle_page(
    number: int,
    mode: OcrMode,
    layer_text: str,
    layer: PageVerdict,
    ocr: tuple[str, str, PageVerdict] | None = None,
) -> SettledPage:
    """The text a page keeps and why.

    Args:
        number: 1-based page number.
        mode: ``chunker.ocr.mode``.
        layer_text: the text layer's text.
        layer: its verdict.
        ocr: when OCR ran: its text, the engine's name, and the verdict of that text.
    """
    text, verdict, source, engine = layer_text, layer, TEXT_LAYER, None
    if ocr is not None:
        ocr_text, ocr_engine, ocr_verdict = ocr
        if mode == "force" or ocr_verdict.quality > layer.quality:
            text, verdict, source, engine = ocr_text, ocr_verdict, OCR, ocr_engine
    kept = text if verdict.verdict in USABLE else ""
    return SettledPage(kept, PageSource(number, verdict.verdict, source, engine, ocred=ocr is not None))


def chunk_source(page_start: int, page_end: int, pages: Mapping[int, PageSource]) -> ChunkSource:
    """The provenance of a chunk spanning pages ``page_start``..``page_end`` (1-based, inclusive)."""
    spanned = [pages[n] for n in range(page_start, page_end + 1) if n in pages]
    ocred = [p for p in spanned if p.text_source == OCR]
    return ChunkSource(
        text_source=OCR if ocred else TEXT_LAYER,
        ocr_engine=ocred[0].ocr_engine if ocred else None,
        page_verdicts=tuple(p.verdict for p in spanned),
    )


@dataclass(frozen=True, slots=True)
class DocumentSources:
    """A document's pages counted by verdict and by text source.

    Attributes:
        by_verdict: pages per final verdict.
        by_source: pages per text source (``text_layer``, ``ocr``).
        ocr_pages: pages OCR ran on (whichever text they kept).
    """

    by_verdict: Mapping[str, int] = field(default_factory=dict)
    by_source: Mapping[str, int] = field(default_factory=dict)
    ocr_pages: int = 0

    @classmethod
    def of(cls, pages: Iterable[PageSource]) -> DocumentSources:
        """Count the pages."""
        verdicts: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        ocred = 0
        for page in pages:
            verdicts[page.verdict] += 1
            sources[page.text_source] += 1
            ocred += page.ocred
        return cls(dict(sorted(verdicts.items())), dict(sorted(sources.items())), ocred)


def document_failure(pages: Sequence[PageSource], *, has_chunks: bool) -> tuple[str, str] | None:
    """The ``(error_code, message)`` of a document left with no usable text, else None.

    Args:
        pages: every page's provenance.
        has_chunks: whether the kept text made any chunk.
    """
    if has_chunks:
        return None
    garbage = sum(1 for p in pages if p.verdict in GARBAGE_VERDICTS)
    ocred = sum(1 for p in pages if p.ocred)
    after = f" (after OCR of {ocred})" if ocred else ""
    if garbage:
        counts = DocumentSources.of(pages).by_verdict
        found = ", ".join(f"{verdict} {n}" for verdict, n in counts.items())
        return "unreadable_text", f"no page of {len(pages)} holds readable text{after}: {found}"
    return "no_text", f"none of the {len(pages)} pages holds extractable text{after}"
