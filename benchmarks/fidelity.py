"""Extraction fidelity in ten scripts, against ground truth no one typed.

    .venv/bin/python benchmarks/fidelity.py [--pages 3] [--dpi 200 300] [--scripts latin arabic ...] [--json PATH]

Per script (``tests.fixtures.scripts.SCRIPTS``: Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari,
simplified and traditional Han, Japanese, Korean), a born-digital PDF of everyday words
(``make_script_pdf``: shaped right-to-left and complex scripts, filled pages) and its
image-only copies at each ``--dpi`` (``rasterise``: each page rendered grey, no text layer)
go through docstream's real extraction: ``open_document`` + ``extract_pages`` with
``PageOcr(OcrSettings())``, the default settings (mode auto, languages ["eng"], OCR at 200 dpi).
The script's language is never passed: what the pipeline makes of each page is what is measured.

The reference is the born-digital copy's text layer as PyMuPDF extracts it. Reported per copy:

* born-digital: the share of pages whose extracted text equals the layer (``normalise_text``:
  NFKC, no zero-width or bidi marks, whitespace runs as one space), the share kept from the
  text layer and the pages OCRed: 100 %, 100 % and 0 where the pipeline leaves good layers alone;
* image-only: the character error rate (``docstream_chunker.text_layout.character_error_rate`` over
  normalised texts; Han and Japanese without spaces), the share of pages whose text came from
  the text layer, and seconds per page (wall time of the whole extraction / pages);
* each page's provenance (``PageSource``: verdict, text source, engine, and whatever fields it
  has grown), counted.

The CPU model and flags and the installed Tesseract languages are printed first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402
from machine import cpu_banner, load_average  # noqa: E402

from docstream.logging import configure_logging  # noqa: E402
from docstream.settings import OcrSettings  # noqa: E402
from docstream_chunker.extraction import PageOcr, detect_format, extract_pages, open_document  # noqa: E402
from docstream_chunker.provenance import PageSource  # noqa: E402
from docstream_chunker.text_layout import character_error_rate  # noqa: E402
from tests.fixtures.scripts import (  # noqa: E402
    SCRIPTS,
    ScriptPdf,
    make_script_pdf,
    normalise_text,
    rasterise,
)

_UNSPACED = frozenset({"han_simplified", "han_traditional", "japanese"})
"""Scripts written without spaces: a line break there is no word boundary, so CER ignores whitespace."""
_BASE_SOURCE_FIELDS = ("number", "verdict", "text_source", "ocr_engine", "ocred")


@dataclass(frozen=True)
class Row:
    """One copy of one script's document through the extraction."""

    script: str
    language: str
    copy: str
    pages: int
    exact: float | None
    """Born-digital: share of pages whose text equals the layer (normalised)."""
    text_layer: float
    ocred: int
    cer_mean: float | None
    cer_max: float | None
    seconds_per_page: float
    sources: str


@dataclass(frozen=True)
class Extracted:
    """Each page's text and provenance, and the extraction's wall seconds."""

    texts: tuple[str, ...]
    sources: tuple[PageSource, ...]
    seconds: float


def extract(data: bytes, settings: OcrSettings | None = None) -> Extracted:
    """The document's pages through ``extract_pages`` with OCR (default ``OcrSettings``)."""
    started = time.perf_counter()
    doc = open_document(data, detect_format(data), max_pages=10_000)
    sources: list[PageSource] = []
    try:
        texts = tuple(page.text for page in extract_pages(doc, ocr=PageOcr(settings or OcrSettings()), sources=sources))
    finally:
        doc.close()
    return Extracted(texts, tuple(sources), time.perf_counter() - started)


def page_cer(script: str, recognised: str, reference: str) -> float:
    """The CER of ``recognised`` against ``reference``, both normalised; Han and Japanese without spaces."""
    return character_error_rate(
        normalise_text(recognised), normalise_text(reference), spaces=script not in _UNSPACED
    )


def describe(source: PageSource) -> str:
    """A page's provenance in one word group: verdict/text source[/engine], then any newer fields."""
    parts = [source.verdict, source.text_source, *([source.ocr_engine] if source.ocr_engine else [])]
    extra = {
        f.name: getattr(source, f.name)
        for f in dataclasses.fields(source)
        if f.name not in _BASE_SOURCE_FIELDS and getattr(source, f.name) not in (None, "", (), [])
    }
    return "/".join(str(p) for p in parts) + "".join(f" {k}={v}" for k, v in extra.items())


def _summary(sources: tuple[PageSource, ...]) -> str:
    return ", ".join(f"{count} x {what}" for what, count in Counter(map(describe, sources)).items())


def _measure(pdf: ScriptPdf, copy: str, data: bytes) -> Row:
    out = extract(data)
    pages = len(out.texts)
    born_digital = copy == "born-digital"
    exact = None
    cers: list[float] = []
    if born_digital:
        same = [normalise_text(t) == normalise_text(r) for t, r in zip(out.texts, pdf.page_texts, strict=True)]
        exact = sum(same) / pages
    else:
        cers = [page_cer(pdf.script, t, r) for t, r in zip(out.texts, pdf.page_texts, strict=True)]
    return Row(
        script=pdf.script,
        language=pdf.language,
        copy=copy,
        pages=pages,
        exact=exact,
        text_layer=sum(s.text_source == "text_layer" for s in out.sources) / pages,
        ocred=sum(s.ocred for s in out.sources),
        cer_mean=statistics.fmean(cers) if cers else None,
        cer_max=max(cers) if cers else None,
        seconds_per_page=out.seconds / pages,
        sources=_summary(out.sources),
    )


def tesseract_languages() -> str:
    """The folder of Tesseract's language files PyMuPDF finds, and the languages there."""
    try:
        folder = Path(pymupdf.get_tessdata())
    except (RuntimeError, ValueError, OSError) as exc:
        return f"Tesseract language data: not found ({exc})"
    languages = sorted(p.stem for p in folder.glob("*.traineddata"))
    return f"Tesseract language data in {folder}: {' '.join(languages)}"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def print_table(rows: list[Row]) -> None:
    """The rows as a Markdown table."""
    print("| script | lang | copy | pages | layer text kept exactly | from text layer | OCRed | CER mean "
          "| CER worst page | s/page | page sources |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.script} | {r.language} | {r.copy} | {r.pages} | {_percent(r.exact)} | {_percent(r.text_layer)} "
              f"| {r.ocred} | {_percent(r.cer_mean)} | {_percent(r.cer_max)} | {r.seconds_per_page:.2f} "
              f"| {r.sources} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3, help="pages per script")
    parser.add_argument("--dpi", type=int, nargs="+", default=[200, 300], help="resolutions of the image-only copies")
    parser.add_argument("--scripts", nargs="+", choices=SCRIPTS, default=list(SCRIPTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    configure_logging(level="WARNING", fmt="console")
    print(cpu_banner())
    print(tesseract_languages(), flush=True)
    started = time.perf_counter()
    rows: list[Row] = []
    for script in args.scripts:
        pdf = make_script_pdf(script, args.pages, seed=args.seed)
        copies = [("born-digital", pdf.data)] + [(f"{dpi} dpi image", rasterise(pdf.data, dpi)) for dpi in args.dpi]
        for copy, data in copies:
            rows.append(_measure(pdf, copy, data))
            r = rows[-1]
            print(f"  {script} {copy}: exact {_percent(r.exact) or '-'}, CER {_percent(r.cer_mean) or '-'}, "
                  f"{r.seconds_per_page:.2f} s/page, {r.sources}", flush=True)
    elapsed = time.perf_counter() - started
    print(f"\n{len(args.scripts)} scripts, {args.pages} pages each, in {elapsed:.0f} s; "
          f"load average after: {load_average()}")
    print_table(rows)
    if args.json:
        report: dict[str, Any] = {"cpu": cpu_banner(), "seconds": elapsed, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
