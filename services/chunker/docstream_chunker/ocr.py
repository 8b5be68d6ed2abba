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

Each engine says which languages it has (``installed``) and, where it can, which script a
page's image is written in (``detect_script``: Tesseract's OSD), so the chunker reads each page
in its own script's language and never in another script's.

Both render the page at the configured dpi (less where a huge page would pass
``MAX_OCR_PIXELS``), one page at a time, and free the image before returning. Their text is
laid out by ``docstream_chunker.text_layout.page_text``: paragraphs in reading order, blank lines
between, as the text layer's. PyMuPDF, NumPy and RapidOCR are imported on first use: the
chunker's parent process never imports them.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from docstream.errors import ConfigError
from docstream.logging import get_logger
from docstream_chunker.text_layout import OcrLine, join_lines, page_text

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
    "osd_script",
    "render_dpi",
    "tesseract_text",
    "tsv_confidence",
]

MAX_OCR_PIXELS = 40_000_000
"""Most pixels a page is rendered to for OCR (A4 at 600 dpi is 35 M): ~40 MB grey, 120 MB RGB."""
RAPIDOCR_LANGUAGES = frozenset({"eng", "chi_sim"})
"""What the models in RapidOCR's wheel read (PP-OCRv4: simplified Chinese, with Latin letters and digits)."""
_RAPIDOCR_MAX_SIDE = 8192
"""RapidOCR shrinks images past this side; MAX_OCR_PIXELS keeps pages below it."""
_log = get_logger(__name__)
_COMMAND_TIMEOUT_S = 60.0

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
    installed: frozenset[str]
    """The languages the engine has data for."""

    def detect_script(self, page: pymupdf.Page, *, dpi: int) -> str | None:
        """The script the page's image is written in (Tesseract OSD names: ``Arabic``, ``Han``,
        ``Japanese``...), or None when the engine cannot tell."""
        ...

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        """The text of ``page`` rendered at ``dpi``, in reading order, paragraphs separated by blank lines;
        with ``clip``, of that part of the page only (a strip read to try a script)."""
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
    """Tesseract over the page rendered at ``dpi`` (Debian's command, else MuPDF's built-in); data from ``tessdata``."""

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
        self.installed = frozenset(path.stem for path in Path(self._tessdata).glob("*.traineddata"))
        self._check(languages)
        self._binary = shutil.which("tesseract")

    def detect_script(self, page: pymupdf.Page, *, dpi: int) -> str | None:
        """Tesseract's orientation and script detection (``--psm 0``) over the page rendered grey at ``dpi``.

        Runs Debian's ``tesseract`` command (package tesseract-ocr, which deploy/install-ocr.sh
        installs beside the language data), since MuPDF's built-in Tesseract does not expose
        it; about 0.6 s a page on one core. None when the command or ``osd.traineddata`` is
        missing, it fails, or it finds too little text.
        """
        if self._binary is None or not (Path(self._tessdata) / "osd.traineddata").is_file():
            return None
        found = self._run(page, dpi, ["--psm", "0"], ())
        return osd_script(found[""]) if found is not None else None

    def _read_command(self, page: pymupdf.Page, languages: Sequence[str], dpi: int,
                      clip: pymupdf.Rect | None = None) -> OcrResult | None:
        """The page (or its ``clip``) as Debian's ``tesseract`` command reads it: its text, and the mean confidence
        of its words."""
        found = self._run(page, dpi, ["-l", "+".join(languages)], ("txt", "tsv"), clip)
        if found is None:
            return None
        return OcrResult(tesseract_text(found["txt"]), self.name, tsv_confidence(found["tsv"]))

    def _run(
        self, page: pymupdf.Page, dpi: int, options: Sequence[str], outputs: Sequence[str],
        clip: pymupdf.Rect | None = None,
    ) -> dict[str, str] | None:
        """Runs the command over the page (or its ``clip``) rendered grey at ``dpi``; its outputs by extension ("" for
        stdout).

        ``outputs`` (``txt``, ``tsv``) are written to a temporary folder and read back; without
        them the command writes to its standard output. One thread (``OMP_THREAD_LIMIT=1``): OCR
        beside the model must not take its cores. None when the command fails (logged).
        """
        import pymupdf

        assert self._binary is not None
        rect = page.rect
        used = render_dpi(rect.width, rect.height, dpi)
        image = page.get_pixmap(dpi=used, colorspace=pymupdf.csGRAY, clip=clip).tobytes("png")
        env = {"OMP_THREAD_LIMIT": "1", "PATH": os.environ.get("PATH", "")}
        with tempfile.TemporaryDirectory(prefix="docstream-ocr-") as folder:
            base = Path(folder) / "page"
            target = str(base) if outputs else "-"
            try:
                done = subprocess.run(
                    [self._binary, "-", target, "--tessdata-dir", self._tessdata, "--dpi", str(used), *options,
                     *outputs],
                    input=image, capture_output=True, timeout=_COMMAND_TIMEOUT_S, check=False, env=env,
                )
                if done.returncode != 0:
                    error = done.stderr[-300:].decode("utf-8", "replace")
                    _log.warning("tesseract_command_failed", exit_code=done.returncode, error=error)
                    return None
                found = {"": done.stdout.decode("utf-8", "replace")}
                for ext in outputs:
                    found[ext] = base.with_suffix(f".{ext}").read_text(encoding="utf-8", errors="replace")
            except (OSError, subprocess.TimeoutExpired) as exc:
                _log.warning("tesseract_command_failed", error=str(exc)[:300])
                return None
        return found

    def _check(self, languages: Sequence[str]) -> None:
        missing = [lang for lang in languages if lang not in self.installed]
        if missing:
            packages = " ".join(f"tesseract-ocr-{lang.replace('_', '-').lower()}" for lang in missing)
            raise ConfigError(
                f"Tesseract has no language data for {', '.join(missing)} in {self._tessdata}: "
                f"apt-get install {packages} (or run deploy/install-ocr.sh {' '.join(missing)})",
                code="ocr_unavailable",
            )

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        """The page's text (of its ``clip`` only, through the command) as Tesseract reads it, with the mean
        confidence of its words (0-1).

        Through Debian's ``tesseract`` command where it is installed (deploy/install-ocr.sh), else
        MuPDF's built-in Tesseract (no confidence; the whole page). Measured on generated pages of ten scripts
        (docs/chunking.md "Fidelity", 200 dpi), MuPDF's route loses word spaces in Devanagari and
        Korean (18.6 % and 40.6 % CER against 0.0 % and 5.9 % through the command), misreads Han
        (10.7-13.7 % against 1.0-1.3 %), and puts some lines of Arabic in visual order, reversed.

        Raises:
            ConfigError: ``ocr_unavailable``: a language without its file.
        """
        self._check(languages)
        if self._binary is not None:
            result = self._read_command(page, languages, dpi, clip)
            if result is not None:
                return result
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


def tesseract_text(output: str) -> str:
    """Tesseract's plain text (lines, a blank line after each paragraph) as a page's text: each
    paragraph's lines joined (``docstream_chunker.text_layout.join_lines``), paragraphs separated by blank lines."""
    paragraphs = (join_lines(block.splitlines()) for block in output.replace("\f", "").split("\n\n"))
    return "\n\n".join(paragraph for paragraph in paragraphs if paragraph)


def tsv_confidence(tsv: str) -> float | None:
    """The mean confidence (0-1) of the words of Tesseract's TSV output, weighted by their length.

    None without words.
    """
    total = weight = 0.0
    for line in tsv.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) < 12 or not fields[11].strip():
            continue
        try:
            confidence = float(fields[10])
        except ValueError:
            continue
        if confidence >= 0:
            total += confidence * len(fields[11].strip())
            weight += len(fields[11].strip())
    return round(total / weight / 100, 4) if weight else None


def osd_script(output: str) -> str | None:
    """The ``Script:`` line of Tesseract's ``--psm 0`` output, or None."""
    for line in output.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Script" and value.strip():
            return value.strip()
    return None


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
        self.installed = RAPIDOCR_LANGUAGES

    def detect_script(self, page: pymupdf.Page, *, dpi: int) -> str | None:
        """RapidOCR has no script detection: None (the document's languages are used)."""
        return None

    def _check(self, languages: Sequence[str]) -> None:
        unsupported = sorted(set(languages) - RAPIDOCR_LANGUAGES)
        if unsupported:
            raise ConfigError(
                f"OCR engine 'rapidocr' reads only {', '.join(sorted(RAPIDOCR_LANGUAGES))}, "
                f"not {', '.join(unsupported)}: use engine 'tesseract' with tesseract-ocr-<lang>",
                code="ocr_unavailable",
            )

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        """The page's text (of its ``clip`` only) as RapidOCR reads it, with the mean score of its lines.

        Raises:
            ConfigError: ``ocr_unavailable``: a language RapidOCR does not read.
        """
        import numpy as np
        import pymupdf

        self._check(languages)
        rect = page.rect
        used = render_dpi(rect.width, rect.height, dpi)
        pixmap = page.get_pixmap(dpi=used, colorspace=pymupdf.csGRAY, alpha=False, clip=clip)
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
