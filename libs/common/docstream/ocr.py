"""OCR engines behind one small interface: a rendered page in, its text out.

An engine runs fully offline (its models ship with what the project installs) inside the
chunker's extraction child, under its time limit and memory bound. ``open_engine(settings)``
gives the configured engine or fails with ``ConfigError`` (code ``ocr_unavailable``) naming
what to install. docs/chunking.md compares the engines (accuracy, pages/s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from docstream.errors import ConfigError

if TYPE_CHECKING:
    import pymupdf

    from docstream.settings import OcrSettings

__all__ = ["OcrEngine", "OcrResult", "open_engine"]


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


def open_engine(settings: OcrSettings) -> OcrEngine:
    """The engine ``settings.engine`` names.

    Raises:
        ConfigError: ``ocr_unavailable``: the engine (or a language of ``settings.languages``) is not installed.
    """
    raise ConfigError(f"OCR engine {settings.engine!r} is not available yet", code="ocr_unavailable")
