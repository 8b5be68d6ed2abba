"""OCR accuracy on generated scans of known text, through docstream_chunker.ocr (real Tesseract, real RapidOCR).

The scans (tests.fixtures.documents.make_scanned_pdf) are pages drawn in several fonts and sizes,
rendered grey and kept as images only. The character error rate of each page is measured against
the drawn text (docstream_chunker.text_layout.character_error_rate); pages/s are printed, never asserted.
Bounds: English ≤ 5 % (the issue's); Russian and Chinese at the bounds of docs/chunking.md
"OCR engines", a few times the worst page measured there.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence

import pymupdf
import pytest

from docstream.errors import ConfigError
from docstream.settings import OcrSettings
from docstream_chunker.ocr import OcrEngine, open_engine
from docstream_chunker.text_layout import character_error_rate
from tests.fixtures.documents import ScannedPdf, make_scanned_pdf

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENGLISH_CER = 0.05
RUSSIAN_CER = 0.03
CHINESE_CER = 0.05


def _engine(engine: str, languages: Sequence[str]) -> OcrEngine:
    try:
        return open_engine(OcrSettings(engine=engine, languages=list(languages)))  # type: ignore[arg-type]
    except ConfigError as exc:  # `make setup` installs both (deploy/install-ocr.sh, the [rapidocr] extra)
        pytest.fail(f"{engine} is not installed: {exc.message}")


def _read(
    engine: OcrEngine, scans: ScannedPdf, languages: Sequence[str], dpi: int, *, spaces: bool = True
) -> list[float]:
    doc = pymupdf.open(stream=scans.data)
    rates, paragraphs_ok = [], []
    started = time.perf_counter()
    for page, reference, style in zip(doc, scans.page_texts, scans.page_styles, strict=True):
        text = engine.recognize(page, languages=languages, dpi=dpi).text
        rates.append(character_error_rate(text, reference, spaces=spaces))
        paragraphs_ok.append(text.count("\n\n") == reference.count("\n\n"))
        print(f"  {engine.name} {'+'.join(languages)} {style[0]} {style[1]:g} pt: CER {rates[-1]:.2%}")
    elapsed = time.perf_counter() - started
    doc.close()
    print(f"{engine.name} {'+'.join(languages)} at {dpi} dpi: {len(rates)} pages, worst CER {max(rates):.2%}, "
          f"{len(rates) / elapsed:.2f} pages/s")
    assert all(paragraphs_ok), "the text has the drawn paragraphs, separated by blank lines"
    return rates


@pytest.mark.parametrize("scan_dpi", [300, 200])
def test_tesseract_reads_english_scans_in_four_fonts_and_three_sizes(scan_dpi: int) -> None:
    fonts = ("helv", "tiro", "cour", "dejavu-sans")
    scans = make_scanned_pdf(12 if scan_dpi == 300 else 4, seed=scan_dpi, fonts=fonts, sizes=(10, 12, 14), dpi=scan_dpi)
    assert {font for font, _ in scans.page_styles} == set(fonts)
    rates = _read(_engine("tesseract", ["eng"]), scans, ["eng"], dpi=200)
    assert max(rates) <= ENGLISH_CER


def test_tesseract_reads_russian_scans() -> None:
    fonts = ("dejavu-sans", "dejavu-serif", "dejavu-mono")
    scans = make_scanned_pdf(6, seed=7, language="rus", fonts=fonts, sizes=(10, 12, 14), dpi=300)
    rates = _read(_engine("tesseract", ["rus"]), scans, ["rus"], dpi=200)
    assert max(rates) <= RUSSIAN_CER


def test_tesseract_reads_english_and_russian_pages_with_both_languages() -> None:
    english = make_scanned_pdf(1, seed=3, fonts=("dejavu-serif",), sizes=(12,))
    russian = make_scanned_pdf(1, seed=3, language="rus", fonts=("dejavu-serif",), sizes=(12,))
    engine = _engine("tesseract", ["eng", "rus"])
    assert max(_read(engine, english, ["eng", "rus"], dpi=200)) <= ENGLISH_CER
    assert max(_read(engine, russian, ["eng", "rus"], dpi=200)) <= RUSSIAN_CER


@pytest.mark.skipif(importlib.util.find_spec("rapidocr_onnxruntime") is None, reason="the [rapidocr] extra")
def test_rapidocr_reads_chinese_scans() -> None:
    scans = make_scanned_pdf(2, seed=5, language="chi_sim", fonts=("china-s",), sizes=(12, 14), dpi=300)
    rates = _read(_engine("rapidocr", ["chi_sim"]), scans, ["chi_sim"], dpi=200, spaces=False)
    assert max(rates) <= CHINESE_CER
