# mypy: disable-error-code="no-untyped-call"
# (PyMuPDF and RapidOCR ship without type annotations.)
"""OCR engines behind one small interface: a rendered page in, its text out.

An engine runs fully offline (its models ship with what the project installs) inside the
chunker's extraction child, under its time limit and memory bound. ``open_engine(settings)``
gives the configured engine or fails with ``ConfigError`` (code ``ocr_unavailable``) naming
what to install. docs/chunking.md "OCR engines" compares them (accuracy, pages/s).

* ``tesseract`` (the default): MuPDF's built-in Tesseract through
  ``page.get_textpage_ocr(full=True)``, reading the language files (``<lang>.traineddata``) of
  Debian's ``tesseract-ocr-<lang>`` packages; any language Tesseract has (eng, rus, deu,
  chi_sim, ...). ``make setup`` installs them (deploy/install-ocr.sh).
* ``rapidocr``: RapidOCR 1.4.4 on ONNX Runtime, models inside its wheel; Chinese and English only.

Both render the page at the configured dpi (less where a huge page would pass
``MAX_OCR_PIXELS``), one page at a time, and free the image before returning. Their text is
laid out by ``docstream.text_layout.page_text``: paragraphs in reading order, blank lines
between, as the text layer's. PyMuPDF, NumPy and RapidOCR are imported on first use: the
chunker's parent process never imports them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from docstream.errors import ConfigError
from docstream.text_layout import OcrLine, page_text

if TYPE_CHECKING:
    import pymupdf

    from docstream.settings import OcrSettings

__all__ = [
    "MAX_OCR_PIXELS",
    "RAPIDOCR_LANGUAGES",
    "OcrEngine",
    "OcrResult",
    "RapidOcrEngine",
    "TesseractEngine",
    "open_engine",
    "render_dpi",
]

MAX_OCR_PIXELS = 40_000_000
"""Most pixels a page is rendered to for OCR (A4 at 600 dpi is 35 M): ~40 MB grey, 120 MB RGB."""
RAPIDOCR_LANGUAGES = frozenset({"eng", "chi_sim"})
"""What the models in RapidOCR's wheel read (PP-OCRv4: simplified Chinese, with Latin letters and digits)."""
_RAPIDOCR_MAX_SIDE = 8192
"""RapidOCR shrinks images past this side; MAX_OCR_PIXELS keeps pages below it."""
_TESSERACT_PACKAGES = "apt-get install tesseract-ocr tesseract-ocr-{package} (or run deploy/install-ocr.sh)"


@dataclass(frozen=True, slots=True)
class OcrResult:
    """A page's OCR text, the engine that read it (``tesseract``, ``rapidocr``) and its mean confidence."""

    text: str
    engine: str
    confidence: float | None = None


class OcrEngine(Protocol):
    """Reads the text of one page."""

    name: str

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int) -> OcrResult:
        """The text of ``page`` rendered at ``dpi``, in reading order, paragraphs separated by blank lines."""
        ...


def render_dpi(width_pt: float, height_pt: float, dpi: int, *, max_pixels: int = MAX_OCR_PIXELS) -> int:
    """The resolution for a page of ``width_pt`` by ``height_pt`` points: ``dpi``, or less past ``max_pixels``."""
    pixels = (width_pt / 72 * dpi) * (height_pt / 72 * dpi)
    if pixels <= max_pixels:
        return dpi
    return max(1, math.floor(dpi * math.sqrt(max_pixels / pixels)))


def open_engine(settings: OcrSettings) -> OcrEngine:
    """The engine ``settings.engine`` names, checked against ``settings.languages``.

    Raises:
        ConfigError: ``ocr_unavailable``: the engine (or a language of ``settings.languages``) is not installed.
    """
    if settings.engine == "rapidocr":
        return RapidOcrEngine(settings.languages)
    return TesseractEngine(settings.languages, tessdata=settings.tessdata)


class TesseractEngine:
    """MuPDF's built-in Tesseract over the page rendered at ``dpi``; language files from ``tessdata``."""

    name = "tesseract"

    def __init__(self, languages: Sequence[str], *, tessdata: str | None = None) -> None:
        """Finds the language files of ``languages``.

        Args:
            languages: Tesseract language codes (``eng``, ``rus``, ``chi_sim``).
            tessdata: the folder of ``<lang>.traineddata``; None: ``TESSDATA_PREFIX``, else the
                installed ``tesseract``'s own folder.

        Raises:
            ConfigError: ``ocr_unavailable``: no tessdata folder, or a language without its file.
        """
        import pymupdf

        try:
            folder = pymupdf.get_tessdata(tessdata)
        except RuntimeError as exc:
            raise ConfigError(
                f"OCR engine 'tesseract' is not installed ({exc}): {_TESSERACT_PACKAGES.format(package='eng')}",
                code="ocr_unavailable",
            ) from exc
        self._tessdata = str(folder)
        self._checked: set[str] = set()
        self._check(languages)

    def _check(self, languages: Sequence[str]) -> None:
        missing = [
            lang for lang in languages if lang not in self._checked and not _has_traineddata(self._tessdata, lang)
        ]
        if missing:
            packages = " ".join(f"tesseract-ocr-{lang.replace('_', '-').lower()}" for lang in missing)
            raise ConfigError(
                f"Tesseract has no language data for {', '.join(missing)} in {self._tessdata}: "
                f"apt-get install {packages} (or run deploy/install-ocr.sh {' '.join(missing)})",
                code="ocr_unavailable",
            )
        self._checked.update(languages)

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int) -> OcrResult:
        """The page's text as Tesseract reads it (no per-page confidence through MuPDF).

        Raises:
            ConfigError: ``ocr_unavailable``: a language without its file.
        """
        self._check(languages)
        rect = page.rect
        textpage = page.get_textpage_ocr(
            flags=0,
            language="+".join(languages) or "eng",
            dpi=render_dpi(rect.width, rect.height, dpi),
            full=True,
            tessdata=self._tessdata,
        )
        try:
            layout = page.get_text("dict", textpage=textpage)
        finally:
            del textpage
        return OcrResult(page_text(_dict_lines(layout), rect.width), self.name)


def _has_traineddata(folder: str, language: str) -> bool:
    safe = bool(language) and language.replace("_", "").isalnum()
    return safe and (Path(folder) / f"{language}.traineddata").is_file()


def _dict_lines(layout: dict[str, Any]) -> list[OcrLine]:
    lines: list[OcrLine] = []
    for block in layout.get("blocks", ()):
        for line in block.get("lines", ()):
            text = "".join(span.get("text", "") for span in line.get("spans", ()))
            x0, y0, x1, y1 = line["bbox"]
            lines.append(OcrLine(x0, y0, x1, y1, text))
    return lines


class RapidOcrEngine:
    """RapidOCR (PP-OCRv4 on ONNX Runtime, models in its wheel) over the page rendered grey at ``dpi``."""

    name = "rapidocr"

    def __init__(self, languages: Sequence[str]) -> None:
        """Loads the models (about 0.2 s).

        Raises:
            ConfigError: ``ocr_unavailable``: rapidocr-onnxruntime is not installed, or a language
                is none of ``RAPIDOCR_LANGUAGES``.
        """
        self._check(languages)
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise ConfigError(
                "OCR engine 'rapidocr' is not installed: pip install 'rapidocr-onnxruntime==1.4.4' "
                "(pyproject.toml pins it)",
                code="ocr_unavailable",
            ) from exc
        # RapidOCR gives its logger a stderr handler of its own; its lines go through ours instead.
        rapid_logger = logging.getLogger("RapidOCR")
        rapid_logger.handlers.clear()
        rapid_logger.propagate = True
        rapid_logger.setLevel(logging.WARNING)
        # No angle classifier: on upright scans it turned some lines of Chinese upside down (18 % CER on
        # a 12 pt page, 0 % without). No shrinking past RapidOCR's default 2,000 px: at the configured
        # dpi English 10 pt pages read at 0.5 % CER instead of 4 %, in no more time (docs/chunking.md).
        self._ocr = RapidOCR(use_cls=False, max_side_len=_RAPIDOCR_MAX_SIDE)

    def _check(self, languages: Sequence[str]) -> None:
        unsupported = sorted(set(languages) - RAPIDOCR_LANGUAGES)
        if unsupported:
            raise ConfigError(
                f"OCR engine 'rapidocr' reads only {', '.join(sorted(RAPIDOCR_LANGUAGES))}, "
                f"not {', '.join(unsupported)}: use engine 'tesseract' with tesseract-ocr-<lang>",
                code="ocr_unavailable",
            )

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int) -> OcrResult:
        """The page's text as RapidOCR reads it, with the mean score of its lines.

        Raises:
            ConfigError: ``ocr_unavailable``: a language RapidOCR does not read.
        """
        import numpy as np
        import pymupdf

        self._check(languages)
        rect = page.rect
        used = render_dpi(rect.width, rect.height, dpi)
        pixmap = page.get_pixmap(dpi=used, colorspace=pymupdf.csGRAY, alpha=False)
        image = np.frombuffer(pixmap.samples, dtype=np.uint8).reshape(pixmap.height, pixmap.width)
        del pixmap
        found, _elapsed = self._ocr(image)
        del image
        scale = 72 / used
        pieces: list[OcrLine] = []
        scores: list[float] = []
        for box, text, score in found or ():
            xs, ys = [p[0] * scale for p in box], [p[1] * scale for p in box]
            pieces.append(OcrLine(min(xs), min(ys), max(xs), max(ys), str(text)))
            scores.append(float(score))
        confidence = sum(scores) / len(scores) if scores else None
        return OcrResult(page_text(pieces, rect.width), self.name, confidence)
