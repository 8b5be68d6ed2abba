# mypy: disable-error-code="no-untyped-call"
# (PyMuPDF ships without type annotations.)
"""Text extraction with PyMuPDF: bytes → pages of text in reading order → chunks.

Every document PyMuPDF opens takes the same path (PDF, EPUB, XPS, plain text, HTML, ...).
Failures raise ``DocumentError`` with the codes of docs/chunking.md: ``empty``,
``not_a_document``, ``corrupt``, ``encrypted``, ``zero_pages``, ``too_many_pages``,
``too_large``, ``no_text``, ``unreadable_text``, ``timeout``.

Every page gets a quality verdict (``docstream_chunker.page_quality``); with ``chunker.ocr`` it is
OCRed where the mode says (``docstream_chunker.provenance`` decides which pages, and which text each
keeps), and every chunk carries where its text came from.

Per page, text comes from ``page.get_text("blocks", sort=True)``: one paragraph per text
block, its lines joined by spaces, paragraphs separated by blank lines. Where a page has two
columns side by side, each column is read top to bottom before the next (``sort=True`` alone
interleaves them). Headings come from the outline when the document has one, else from the
blocks' geometry: a short block of at most two lines whose line height is 1.25 times the
body's. (Font sizes from ``get_text("dict")`` cost a third of the extraction speed;
line height is the same signal for free.)

With ``tables`` ``auto`` (``chunker.tables``), tables on PDF pages that keep their text
layer are found with PyMuPDF's finder where cheap checks see one (``find_page_tables``), taken
out of the page's paragraphs and handed on beside them (``PageText.tables``): chunking makes them
table chunks (docs/chunking.md "Tables").

PyMuPDF is imported on first use: a process that only hands chunks on (the chunker's parent,
whose extraction runs in a child process) does not pay its import, ~0.5 s of CPU.
"""

from __future__ import annotations

import functools
import inspect
import io
import lzma
import statistics
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, cast

from docstream.errors import ConfigError, DocumentError
from docstream.logging import get_logger
from docstream.models.tokenization import ModelTokenCounter
from docstream.tables import Box, PageTable
from docstream_chunker.chunking import (
    Chunk,
    ChunkingConfig,
    Edge,
    Heading,
    PageText,
    TokenCounter,
    chunk_document,
    chunker_settings,
)
from docstream_chunker.continuation import join_continued
from docstream_chunker.furniture import edge_of, strip_furniture
from docstream_chunker.markup_tables import MarkupTable, marker_index, take_tables
from docstream_chunker.ocr import OcrEngine, OcrResult, open_engine
from docstream_chunker.page_quality import (
    MIN_GLYPHS,
    SCAN_IMAGE_AREA,
    USABLE,
    PageFacts,
    PageVerdict,
    assess_page,
    lookalike_share,
    script_quality,
)
from docstream_chunker.provenance import (
    GARBAGE_VERDICTS,
    OCR,
    TEXT_LAYER,
    ChunkSource,
    DocumentSources,
    OcrMode,
    OcrReading,
    PageSource,
    Reason,
    chunk_source,
    document_failure,
    settle_page,
    time_limit,
    wants_ocr,
)
from docstream_chunker.scripts import (
    CJK_LANGUAGES,
    font_script,
    ocr_languages,
    osd_language,
    script_of_language,
    trial_languages,
)
from docstream_chunker.table_detection import (
    Matrix,
    aligned_columns,
    caption_index,
    content_paths,
    few_rows,
    form_matrix,
    grid_cells,
    header_spans,
    inside,
    looks_tabular,
    ruled_grid,
    ruled_rows,
    side_by_side_boxes,
    split_at_gaps,
    split_at_lines,
    split_spanning_rows,
    with_layout_grids,
    with_layout_tables,
    without_empty_columns,
)
from docstream_chunker.text_layout import reading_order, without_nul

if TYPE_CHECKING:
    import pymupdf

    from docstream.settings import OcrSettings

__all__ = [
    "ChunkedDocument",
    "DocumentFormat",
    "FoundTable",
    "FurnitureMode",
    "OcrPageStarted",
    "PageOcr",
    "TableMode",
    "chunk_bytes",
    "detect_format",
    "extract_pages",
    "find_page_tables",
    "mupdf_errors",
    "open_document",
    "page_facts",
]

_log = get_logger(__name__)

TableMode = Literal["auto", "off"]
"""``chunker.tables``: ``auto`` finds ruled tables on pages that keep their text layer; ``off`` never looks."""
FurnitureMode = Literal["auto", "off"]
"""``chunker.furniture``: ``auto`` takes page furniture out of the text (``docstream_chunker.furniture``); ``off``
leaves it in."""
_MARKUP_TYPES = frozenset({"html", "xhtml"})
"""Formats whose tables are read from their markup (``docstream_chunker.markup_tables``), with EPUB's files."""
_DAMAGED_ZIP: tuple[type[Exception], ...] = (
    zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, lzma.LZMAError, OSError, ValueError, NotImplementedError,
    EOFError, RuntimeError,
)
"""What reading a damaged or hostile zip raises (a bad header, a broken deflate stream, an encrypted member)."""
_MAX_INFLATED = 256 << 20
"""Most bytes an EPUB's files may hold for its tables to be read from them (it is read whole, in memory)."""
_MAX_INFLATION = 40
"""Most times its own size an EPUB's files may hold for its tables to be read (a zip bomb is left to MuPDF's own
bounds)."""

_HEADING_RATIO = 1.25
_HEADING_MAX_CHARS = 150
_HEADING_MAX_WORDS = 20
_STORE_SHRINK_EVERY = 64
_SNIFF_BYTES = 64 * 1024
_NOT_CONTROL = bytes(b for b in range(256) if b >= 0x20 or b in b"\t\n\r\f")
_SUSPICIOUS_UNMAPPED_SHARE = 0.1
_PRINTABLE_ASCII = bytes(range(0x20, 0x7F)) + b"\n"
_STANDARD_ENCODINGS = frozenset(
    {"WinAnsiEncoding", "MacRomanEncoding", "StandardEncoding", "MacExpertEncoding", "PDFDocEncoding"}
)

_MEDIA_TYPES = {
    "pdf": "application/pdf",
    "epub": "application/epub+zip",
    "xps": "application/vnd.ms-xpsdocument",
    "oxps": "application/oxps",
    "txt": "text/plain",
    "html": "text/html",
    "xhtml": "application/xhtml+xml",
    "fb2": "application/x-fictionbook+xml",
    "cbz": "application/vnd.comicbook+zip",
    "mobi": "application/x-mobipocket-ebook",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "tiff": "image/tiff",
    "bmp": "image/bmp",
}
_BY_MEDIA_TYPE = {media: filetype for filetype, media in _MEDIA_TYPES.items()} | {
    "text/markdown": "txt",
    "text/x-markdown": "txt",
    "text/csv": "txt",
    "application/xml": "xhtml",
}
_BY_EXTENSION = {
    ".pdf": "pdf", ".epub": "epub", ".xps": "xps", ".oxps": "oxps", ".txt": "txt", ".text": "txt",
    ".md": "txt", ".csv": "txt", ".log": "txt", ".html": "html", ".htm": "html", ".xhtml": "xhtml",
    ".fb2": "fb2", ".cbz": "cbz", ".mobi": "mobi", ".svg": "svg",
}
_TEXT_TYPES = frozenset({"txt", "html", "xhtml", "fb2", "svg"})
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"BM", "bmp"),
)


@dataclass(frozen=True, slots=True)
class DocumentFormat:
    """What the bytes are, as far as sniffing and hints tell.

    Attributes:
        filetype: the type passed to PyMuPDF, or None to let it decide (zip packages).
        media_type: the IANA media type recorded for the document.
        recognized: the bytes carry a known signature, so a failure to open means ``corrupt``.
    """

    filetype: str | None
    media_type: str
    recognized: bool


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    """A document's chunks and what was learnt about it.

    Attributes:
        page_count: pages (for reflowable formats: after PyMuPDF's layout).
        media_type: the detected media type.
        chunker_settings: the canonical settings string of the chunks (part of chunk ids).
        chunks: the chunks in order (never empty).
        chunk_sources: each chunk's provenance, in the same order (empty: not recorded).
        sources: the document's pages counted by verdict and by text source.
        tokenizer: the fingerprint of the tokenizer that made the chunks' ``token_ids`` (None: none carried).
    """

    page_count: int
    media_type: str
    chunker_settings: str
    chunks: tuple[Chunk, ...]
    chunk_sources: tuple[ChunkSource, ...] = ()
    sources: DocumentSources = field(default_factory=DocumentSources)
    tokenizer: str | None = None

    @property
    def token_count(self) -> int:
        """Tokens over all chunks (overlaps counted in every chunk)."""
        return sum(chunk.token_count for chunk in self.chunks)


def with_token_ids(document: ChunkedDocument, counter: ModelTokenCounter) -> ChunkedDocument:
    """``document`` with each chunk's token ids (``ModelTokenCounter.token_ids``) and the tokenizer's fingerprint; as
    it is when the tokenizer has none."""
    if counter.fingerprint is None:
        return document
    ids = counter.token_ids([chunk.text for chunk in document.chunks])
    return replace(document, chunks=tuple(replace(chunk, token_ids=packed)
                                          for chunk, packed in zip(document.chunks, ids, strict=True)),
                   tokenizer=counter.fingerprint)


def _hint(filename: str | None, media_type: str | None) -> str | None:
    if media_type:
        base = media_type.split(";", 1)[0].strip().lower()
        if base in _BY_MEDIA_TYPE:
            return _BY_MEDIA_TYPE[base]
    if filename:
        return _BY_EXTENSION.get(PurePosixPath(filename.replace("\\", "/")).suffix.lower())
    return None


def _looks_like_text(head: bytes) -> bool:
    """Text in any common encoding: a UTF-16 byte-order mark, or no NUL and at most 5% control bytes."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    if b"\x00" in head:
        return False
    return len(head.translate(None, _NOT_CONTROL)) * 20 <= len(head)


def _sniff_markup(head: bytes) -> str | None:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:512].lower()
    if start.startswith((b"<!doctype html", b"<html")) or (start.startswith(b"<") and b"<html" in head[:4096].lower()):
        return "html"
    if start.startswith(b"<?xml") and b"<fictionbook" in head[:4096].lower():
        return "fb2"
    if start.startswith((b"<svg", b"<?xml")) and b"<svg" in head[:4096].lower():
        return "svg"
    return None


def detect_format(data: bytes, *, filename: str | None = None, media_type: str | None = None) -> DocumentFormat:
    """Decide how PyMuPDF should open the bytes: signatures first, then the media type or file name.

    Raises:
        DocumentError: ``empty`` for zero bytes; ``not_a_document`` when nothing recognizes them.
    """
    if not data:
        raise DocumentError("the document has zero bytes", code="empty")
    head = data[:_SNIFF_BYTES]
    hint = _hint(filename, media_type)
    if b"%PDF-" in head[:1024]:
        return DocumentFormat("pdf", _MEDIA_TYPES["pdf"], True)
    if head.startswith(b"PK\x03\x04"):
        if head[30:58] == b"mimetypeapplication/epub+zip":
            return DocumentFormat("epub", _MEDIA_TYPES["epub"], True)
        filetype = hint if hint in ("xps", "oxps", "epub", "cbz") else None
        return DocumentFormat(filetype, _MEDIA_TYPES.get(filetype or "", "application/zip"), filetype is not None)
    for magic, image in _IMAGE_MAGIC:
        if head.startswith(magic):
            return DocumentFormat(image, _MEDIA_TYPES[image], True)
    if _looks_like_text(head):
        markup = _sniff_markup(head)
        filetype = hint if hint in _TEXT_TYPES else (markup or "txt")
        return DocumentFormat(filetype, _MEDIA_TYPES[filetype], False)
    raise DocumentError("the bytes are not a document format PyMuPDF reads", code="not_a_document")


def open_document(data: bytes, fmt: DocumentFormat, *, max_pages: int) -> pymupdf.Document:
    """Open the bytes with PyMuPDF and refuse what cannot be chunked.

    Args:
        data: the document bytes.
        fmt: from ``detect_format``.
        max_pages: documents with more pages fail.

    Raises:
        DocumentError: ``corrupt`` (unreadable, truncated, or repaired into nothing),
            ``not_a_document``, ``encrypted``, ``zero_pages``, ``too_many_pages``.
    """
    import pymupdf

    try:
        doc = pymupdf.open(stream=data, filetype=fmt.filetype)
    except mupdf_errors() as exc:
        raise _unreadable(fmt, exc) from exc
    try:
        _refuse(doc, data, max_pages)
    except mupdf_errors() as exc:  # counting the pages walks the page tree: damaged past repair
        doc.close()
        raise _unreadable(fmt, exc) from exc
    except BaseException:
        doc.close()
        raise
    return doc


def mupdf_errors() -> tuple[type[Exception], ...]:
    """What PyMuPDF raises on damaged input, to catch as one.

    ``RuntimeError`` (``FileDataError`` and most messages), ``ValueError``, and MuPDF's own typed
    errors (``pymupdf.mupdf.FzErrorFormat``, ``FzErrorSyntax``, ``FzErrorLimit``, ...), which since
    PyMuPDF 1.24 derive from ``FzErrorBase(Exception)``, not from ``RuntimeError``: found by the
    extraction fuzz (docs/chunking.md "Robustness"), where they failed whole documents with
    ``extraction_failed`` instead of one empty page or ``corrupt``.
    """
    import pymupdf

    return (RuntimeError, ValueError, pymupdf.mupdf.FzErrorBase)


def _unreadable(fmt: DocumentFormat, exc: Exception) -> DocumentError:
    if fmt.recognized:
        return DocumentError(f"the {fmt.media_type} document is corrupt: {exc}", code="corrupt")
    return DocumentError(f"the bytes are not a readable document: {exc}", code="not_a_document")


def _refuse(doc: pymupdf.Document, data: bytes, max_pages: int) -> None:
    if doc.needs_pass:
        raise DocumentError("the document is encrypted with a password", code="encrypted")
    repaired = bool(doc.is_pdf and doc.is_repaired)
    if repaired and b"%%EOF" not in data[-2048:]:
        raise DocumentError("the PDF is truncated (no %%EOF; MuPDF had to repair it)", code="corrupt")
    if doc.page_count == 0:
        if repaired:
            raise DocumentError("the PDF is corrupt: repairing it found no pages", code="corrupt")
        raise DocumentError("the document has no pages", code="zero_pages")
    if doc.page_count > max_pages:
        raise DocumentError(f"the document has {doc.page_count} pages, more than {max_pages}", code="too_many_pages")


@dataclass(frozen=True, slots=True)
class OcrPageStarted:
    """OCR starts on a page: what a progress display and the time limit need.

    Attributes:
        ocr_pages: pages of this document OCR has started on, this one included.
        page: the page's 1-based number.
        page_count: the document's pages.
    """

    ocr_pages: int
    page: int
    page_count: int


class PageOcr:
    """OCR for ``extract_pages``: the mode, languages and dpi, an engine opened on first use, and the document's script.

    The engine is opened when the first page that needs it comes (never for documents whose
    pages all have a usable text layer), then reused: one per extraction process. An engine
    that cannot be opened (``ocr_unavailable``) is logged once and not tried again; pages then
    keep their text layer (and a document with no usable page fails, its message saying why).

    Each page is OCRed in its own script's language (``read``), decided per page:

    * the script its text layer claims, unless that layer is garbage (``unmapped``,
      ``mojibake``: its characters say nothing of the page's script), except a layer that is a
      known mis-decoding, whose re-decoded text names its script (Windows-1251 bytes read as
      Latin-1 are Russian);
    * else the script the page's font names say (``scripts.font_script``: TeX's T2A, a code page's Greek);
    * else the script of the page before it (its usable layer, or what OCR read it in);
    * else the script the engine's detection sees on the page image (Tesseract OSD);
    * else the configured languages.

    A reading that came from a neighbour's script and that the engine is unsure of (mean word
    confidence below ``SCRIPT_SURE``) is checked against the page image: OSD names its script,
    and when that is another, the page is read in it too and the surer reading is kept; without OSD,
    a strip of the page is tried in each installed script (``_try_scripts``). A
    manual whose first pages are Latin and whose later pages are Cyrillic in fonts without a
    Unicode map is read in Cyrillic from its first Cyrillic page. A script whose language data
    is not installed is not read with another script's: the page is flagged
    ``ocr_unavailable_for_script``.

    Args:
        settings: ``chunker.ocr``.
        opener: opens the engine (``docstream_chunker.ocr.open_engine``).
    """

    def __init__(self, settings: OcrSettings, *, opener: Callable[[OcrSettings], OcrEngine] = open_engine) -> None:
        self.mode: OcrMode = settings.mode
        self.languages: tuple[str, ...] = tuple(settings.languages)
        self.dpi = settings.dpi
        self._settings = settings
        self._opener = opener
        self._engine: OcrEngine | None = None
        self._previous: str | None = None
        self._on_page: Callable[[OcrPageStarted], None] | None = None
        self._page_count = 0
        self.pages_started = 0
        """Pages of this document OCR started on."""
        self.unavailable: str | None = None
        """Why the engine could not be opened, once that was tried and failed."""

    def engine(self) -> OcrEngine | None:
        """The engine, opened now if this is its first use; None when it cannot be opened."""
        if self._engine is None and self.unavailable is None:
            try:
                self._engine = self._opener(self._settings)
            except ConfigError as exc:
                self.unavailable = exc.message
                _log.warning("ocr_unavailable", engine=self._settings.engine, error=exc.message[:500])
                return None
            _log.info("ocr_engine_opened", engine=self._engine.name)
        return self._engine

    def begin_document(self, *, on_page: Callable[[OcrPageStarted], None] | None = None,
                       page_count: int = 0) -> None:
        """Forget the previous document's script and OCR count.

        Args:
            on_page: told when OCR starts on a page of the new document.
            page_count: the new document's pages.
        """
        self._previous = None
        self.pages_started = 0
        self._on_page = on_page
        self._page_count = page_count

    def _starting(self, number: int) -> None:
        self.pages_started += 1
        if self._on_page is not None:
            self._on_page(OcrPageStarted(self.pages_started, number, max(self._page_count, number)))

    def note(self, language: str | None) -> None:
        """The page just settled is written in ``language`` (its usable layer claims it, or OCR read it so)."""
        if language is not None:
            self._previous = language

    def previous_language(self) -> str | None:
        """The language of the last page of this document whose script is known, None before any."""
        return self._previous

    def read(
        self, page: pymupdf.Page, number: int, layer: PageVerdict, *, image_area: float = 0.0
    ) -> tuple[OcrReading | None, Reason | None, str]:
        """OCR ``page`` in its own script's language.

        Args:
            page: the page.
            number: its 1-based number.
            layer: its text layer's verdict (the script that layer claims).
            image_area: the page's image area (a reading is judged as the text of that page).

        Returns:
            The reading (None when OCR did not run), why it did not run (``ocr_unavailable``,
            ``ocr_unavailable_for_script``, ``ocr_failed``) and the language wanted.
        """
        engine = self.engine()
        if engine is None:
            return None, "ocr_unavailable", self.languages[0]
        self._starting(number)
        trusted = layer.verdict not in GARBAGE_VERDICTS or layer.redecoded is not None
        language = (layer.language if trusted else None) or _fonts_language(page, number) or self.previous_language()
        guessed = language is not None and not (trusted and layer.language)
        detected = None
        if language is None:
            detected = _detect_script(engine, page, self.dpi)
            language = (osd_language(detected) or detected) if detected else None
        if language is None:  # nothing names the page's script: the document's languages, all of them
            reading = _recognize(engine, page, number, self.languages, self.dpi, None, image_area)
            if reading is None:
                return None, "ocr_failed", self.languages[0]
            if _unsure(reading):  # and OSD could not say
                reading = self._try_scripts(engine, page, number, reading, reading.judged_in, image_area)
            return reading, None, self.languages[0]
        languages = ocr_languages(language, self.languages, engine.installed)
        if languages is None:
            _log.warning("ocr_unavailable_for_script", page=number, language=language,
                         installed=sorted(engine.installed))
            return None, "ocr_unavailable_for_script", language
        page_language: str | None = language
        if detected in _HAN and languages == ("chi_sim",) and "chi_tra" in engine.installed:
            # OSD's Han is either: both read it (CER 0.07 on either, 1.8x the time of one), and the
            # reading's own characters say which (its claim), for the document's other pages
            languages, page_language = ("chi_sim", "chi_tra"), None
        reading = _recognize(engine, page, number, languages, self.dpi, page_language, image_area)
        if reading is None:
            return None, "ocr_failed", language
        if guessed and _unsure(reading):
            checked, unavailable = self._check_script(engine, page, number, reading, language, image_area)
            if unavailable is not None:
                return None, "ocr_unavailable_for_script", unavailable
            reading = checked
        if detected is not None and page_language in CJK_LANGUAGES:  # not after both Han varieties read it
            reading = self._settle_cjk(engine, page, number, reading, language, image_area)
        return reading, None, reading.judged_in

    def _check_script(
        self, engine: OcrEngine, page: pymupdf.Page, number: int, reading: OcrReading, language: str,
        image_area: float,
    ) -> tuple[OcrReading, str | None]:
        """An unsure reading in a neighbour's script, checked against the script OSD sees on the page.

        Returns the surer of the two readings, or ``(reading, language)`` when the page's script
        has no language data installed (the caller flags the page: it is not kept in another
        script's letters).
        """
        detected = _detect_script(engine, page, self.dpi)
        if detected is None:  # no OSD (its data missing, too little text for it): the scripts tried on a strip
            return self._try_scripts(engine, page, number, reading, language, image_area), None
        other = osd_language(detected) or detected
        if script_of_language(other) == script_of_language(language):
            return reading, None
        languages = ocr_languages(other, self.languages, engine.installed)
        if languages is None:
            _log.warning("ocr_unavailable_for_script", page=number, language=other, installed=sorted(engine.installed))
            return reading, other
        again = _recognize(engine, page, number, languages, self.dpi, other, image_area)
        kept = again if again is not None and (again.confidence or 0.0) > (reading.confidence or 0.0) else reading
        _log.info("ocr_script_checked", page=number, guessed=language, detected=other,
                  kept="+".join(kept.languages), confidence=kept.confidence)
        return kept, None

    def _try_scripts(
        self, engine: OcrEngine, page: pymupdf.Page, number: int, reading: OcrReading, language: str,
        image_area: float,
    ) -> OcrReading:
        """An unsure reading whose script OSD cannot check, checked by trial: a strip across the page
        (``_trial_strip``) is read in the reading's language and in each other script that has language data
        (``scripts.trial_languages``), and when another script reads the strip surer, the page is read in it and
        the surer of the two page readings kept. Without the engine's confidences (MuPDF's built-in Tesseract,
        which reads whole pages only) the page is read in each of them, and the reading with the fewest look-alike
        words (``page_quality.lookalike_share``) kept."""
        candidates = trial_languages(language, self.languages, engine.installed)
        own = ocr_languages(language, self.languages, engine.installed)
        if not candidates or own is None:
            return reading
        if reading.confidence is None:
            return self._try_whole_pages(engine, page, number, reading, candidates, image_area)
        strip = _trial_strip(page, number)
        best, surest = own, _strip_confidence(engine, page, number, own, self.dpi, strip)
        for languages in candidates:
            confidence = _strip_confidence(engine, page, number, languages, self.dpi, strip)
            if confidence > surest:
                best, surest = languages, confidence
        kept = reading
        if best != own:
            again = _recognize(engine, page, number, best, self.dpi, best[0], image_area)
            if again is not None and (again.confidence or 0.0) > (reading.confidence or 0.0):
                kept = again
        _log.info("ocr_scripts_tried", page=number, guessed=language, tried=len(candidates),
                  strip_best="+".join(best), kept="+".join(kept.languages), confidence=kept.confidence)
        return kept

    def _try_whole_pages(
        self, engine: OcrEngine, page: pymupdf.Page, number: int, reading: OcrReading,
        candidates: Sequence[tuple[str, ...]], image_area: float,
    ) -> OcrReading:
        """``_try_scripts`` without confidences: the page read in each candidate, the reading with the fewest
        look-alike words kept (the first of equals: the reading in hand before any other)."""
        kept, fewest = reading, lookalike_share(reading.text)
        for languages in candidates:
            if not fewest:
                break
            again = _recognize(engine, page, number, languages, self.dpi, languages[0], image_area)
            share = lookalike_share(again.text) if again is not None else 1.0
            if again is not None and share < fewest:
                kept, fewest = again, share
        _log.info("ocr_scripts_tried", page=number, guessed=reading.judged_in, tried=len(candidates),
                  kept="+".join(kept.languages), lookalike_share=fewest)
        return kept

    def _settle_cjk(
        self, engine: OcrEngine, page: pymupdf.Page, number: int, reading: OcrReading, language: str,
        image_area: float,
    ) -> OcrReading:
        """OSD tells Han, Japanese and Korean apart least well (it read a traditional Chinese page as
        Korean): a reading it chose that the engine is unsure of is tried in the other CJK languages,
        and the surest kept; without confidences, the reading's own script settles it."""
        if reading.confidence is None:
            claim = reading.verdict.language
            if claim not in CJK_LANGUAGES or claim == language:
                return reading
            other = ocr_languages(claim, self.languages, engine.installed)
            again = _recognize(engine, page, number, other, self.dpi, claim, image_area) if other else None
            if again is not None and script_quality(again.text, claim) > script_quality(reading.text, language):
                return again
            return reading
        if reading.confidence >= CJK_SURE:
            return reading
        best = reading
        for candidate in sorted(CJK_LANGUAGES - {language}):
            languages = ocr_languages(candidate, self.languages, engine.installed)
            again = _recognize(engine, page, number, languages, self.dpi, candidate, image_area) if languages else None
            if again is not None and (again.confidence or 0.0) > (best.confidence or 0.0):
                best = again
        _log.info("ocr_cjk_settled", page=number, detected=language, kept="+".join(best.languages),
                  confidence=best.confidence)
        return best


_HAN = frozenset({"Han", "HanS", "HanT"})
SCRIPT_SURE = 0.7
"""A reading in a script taken from a neighbouring page, with a mean word confidence below this, is checked against
the script OSD sees on the page (measured on generated pages at 200 dpi: 0.86-0.96 in the right language, 0.16-0.53
in a wrong script's)."""
LOOKALIKES_SURE = 0.02
"""The same for a reading without a confidence (MuPDF's built-in Tesseract): a share of look-alike words
(``page_quality.lookalike_share``) above this makes it unsure (measured on generated pages: 0.0 in the right script;
0.15-0.40 in Latin for Cyrillic and Greek, 0.04 in Cyrillic for Greek). An unsure reading costs a reading of the page
in each other installed script; the fewest look-alikes decide."""


def _unsure(reading: OcrReading) -> bool:
    """Whether a reading may be in the wrong script: its engine's confidence below ``SCRIPT_SURE``, or without one,
    its look-alike words above ``LOOKALIKES_SURE``."""
    if reading.confidence is not None:
        return reading.confidence < SCRIPT_SURE
    return lookalike_share(reading.text) > LOOKALIKES_SURE
TRIAL_STRIP_SHARE = 0.3
"""The height of the strip of a page read in each installed script when OSD cannot check an unsure reading's script
(``PageOcr._try_scripts``), as a share of the page's height."""
CJK_SURE = 0.6
"""A CJK reading chosen by OSD with a mean word confidence below this is tried in the other CJK
languages (measured: 0.91-0.93 in the right language, 0.27-0.31 in a wrong one)."""


def _fonts_language(page: pymupdf.Page, number: int) -> str | None:
    """The language of the script the page's font names say (``scripts.font_script``: TeX's T2A or LGR fonts, a
    code page's Cyrillic or Greek fonts), None when they say none: what a layer that lies still tells of its
    script. A guess like a neighbouring page's script: an unsure reading in it is checked against OSD."""
    failures: tuple[type[Exception], ...] = (*mupdf_errors(), ValueError)
    try:
        names = [str(font[3]) for font in page.get_fonts()]
    except failures as exc:
        _log.warning("page_fonts_unreadable", page=number, error=str(exc)[:300])
        return None
    script = font_script(names)
    language = osd_language(script) if script else None
    if language is not None:
        _log.info("ocr_script_from_fonts", page=number, script=script, language=language)
    return language


def _detect_script(engine: OcrEngine, page: pymupdf.Page, dpi: int) -> str | None:
    failures: tuple[type[Exception], ...] = (*mupdf_errors(), OSError)
    try:
        script = engine.detect_script(page, dpi=dpi)
    except failures as exc:
        _log.warning("ocr_script_detection_failed", engine=engine.name, error=str(exc)[:300])
        return None
    _log.info("ocr_script_detected", engine=engine.name, script=script)
    return script


def extract_pages(
    doc: pymupdf.Document,
    *,
    check: Callable[[], None] | None = None,
    ocr: PageOcr | None = None,
    sources: list[PageSource] | None = None,
    on_ocr_page: Callable[[OcrPageStarted], None] | None = None,
    tables: TableMode = "auto",
    markup_tables: Sequence[MarkupTable] = (),
    on_layout_page: Callable[[], None] | None = None,
) -> Iterator[PageText]:
    """Pages of text in reading order, with headings, one page in memory at a time.

    Every page gets a verdict (``page_quality.assess_page``); with ``ocr``, pages are OCRed as
    its mode says and keep the text ``provenance.settle_page`` chooses. A page whose verdict is
    still not usable yields no text. With ``tables`` ``auto``, a PDF page that keeps its text
    layer is looked at for ruled tables (``find_page_tables``): each table found leaves the
    page's paragraphs (its caption too) and comes beside them, in ``PageText.tables``. A NUL in
    any of it comes out as U+FFFD (``text_layout.without_nul``).

    Args:
        doc: an open document.
        check: called before each page and before each OCR; raises to stop (the time limit).
        ocr: OCR settings and engine; None: no OCR.
        sources: when given, each page's provenance is appended to it.
        on_ocr_page: told when OCR starts on a page (``OcrPageStarted``).
        on_layout_page: called when PyMuPDF's layout model starts on a page's tables (the time limit grows).
        tables: ``chunker.tables``.
        markup_tables: an HTML document's tables read from its markup (``markup_tables.take_tables``),
            each placed where its marker paragraph comes.

    Raises:
        DocumentError: whatever ``check`` raises (``timeout``).
    """
    import pymupdf

    flags = block_flags()
    if ocr is not None:
        ocr.begin_document(on_page=on_ocr_page, page_count=doc.page_count)
    outline = _outline(doc)
    body = _BodyLineHeight()
    find_tables = tables == "auto" and doc.is_pdf
    for number in range(1, doc.page_count + 1):
        if check is not None:
            check()
        if number % _STORE_SHRINK_EVERY == 0:
            pymupdf.TOOLS.store_shrink(100)  # MuPDF's cache would otherwise grow to 256 MB
        try:
            page = doc.load_page(number - 1)
            textpage = page.get_textpage(flags=flags)  # the blocks', and the table check's words on some pages
            blocks = page.get_text("blocks", sort=True, textpage=textpage)
            rect = page.rect
        except mupdf_errors():  # one damaged page: the others still count
            if sources is not None:
                sources.append(PageSource(number, "no_text_layer"))
            yield PageText(number, "", ())
            continue
        titles = outline.get(number)
        learnt = body.value
        layer = _page_text(number, blocks, rect, titles, body, markup=markup_tables)
        settled, source = _settle(page, blocks, layer, titles, ocr, check)
        if sources is not None:
            sources.append(source)
        if find_tables and settled is layer and layer.text and source.text_source == TEXT_LAYER:
            settled = _with_tables(page, rect, layer, blocks, titles, body, learnt, textpage, on_layout_page)
        yield without_nul(settled)  # the text layer's, OCR's and the tables' text alike: no store takes a NUL


def _with_tables(
    page: pymupdf.Page, rect: pymupdf.Rect, layer: PageText, blocks: Sequence[tuple[Any, ...]],
    titles: list[str] | None, body: _BodyLineHeight, learnt: float | None, textpage: pymupdf.TextPage,
    on_layout: Callable[[], None] | None = None,
) -> PageText:
    """The page with its tables beside its text, or ``layer`` itself when it has none.

    The body line height is learnt again without the tables' blocks (a row's cells, side by side
    in one block, look like lines a few points high), from what it was before this page.
    """
    found = find_page_tables(page, layer.number, blocks, height=rect.height, textpage=textpage, on_layout=on_layout)
    if not found:
        return layer
    body.value = learnt
    return _page_text(layer.number, blocks, rect, titles, body, found)


@dataclass(frozen=True, slots=True)
class FoundTable:
    """A table found on a page and the text blocks it takes from the page's paragraphs.

    Attributes:
        table: the table (``offset`` 0: ``extract_pages`` places it in the page's text).
        blocks: block numbers (``get_text("blocks")``'s sixth item) of its cells' blocks and its caption's.
    """

    table: PageTable
    blocks: frozenset[int]


def find_page_tables(
    page: pymupdf.Page,
    number: int,
    blocks: Sequence[tuple[Any, ...]],
    *,
    height: float | None = None,
    gated: bool = True,
    layout: bool = False,
    textpage: pymupdf.TextPage | None = None,
    on_layout: Callable[[], None] | None = None,
) -> list[FoundTable]:
    """Tables on a PDF page, with their cells, spans and caption (``docstream.tables``).

    Three steps, each only when the one before says a table may be there: ``tables.looks_tabular``
    on the text blocks extraction already has (free); then the lines and rectangles its content
    streams draw (a scan of the streams, ~0.1 ms): where ``tables.ruled_grid`` sees rules both ways,
    PyMuPDF's finder, ``page.find_tables()`` with its ``lines`` strategy (20-190 ms a page), without
    the layout model PyMuPDF 2 consults first when ``pymupdf_layout`` is installed; where only
    ``tables.ruled_rows`` sees rules of one width at three heights (booktabs) or row-high bands
    (shaded rows), or, with nothing drawn, ``tables.aligned_columns`` sees the side-by-side blocks'
    lines (from their words, ~0.2 ms) stand in three columns over three rows, the finder with that
    layout model (~0.2-0.5 s a page: docs/chunking.md "Tables"), since the ``lines`` strategy needs
    rules both ways. On a ruled grid's page, row rules left
    outside the grids found bring in the layout model's finder too, whose tables replace those they
    overlap, and so do the layout model's tables over a ruled table of two rows or fewer (a grid whose
    body rows are not ruled apart: ``tables.few_rows``). A table keeps at least two rows, two columns
    and two cells with text. Other formats than PDF are not looked at.

    Args:
        page: a loaded page.
        number: its 1-based number.
        blocks: its ``get_text("blocks")``.
        height: its height (None: read from the page).
        gated: False: run the finder whatever the checks say (the benchmark measures what they miss).
        layout: let PyMuPDF's layout model gate and complete the finder on every page the first check
            passes (the benchmark's comparison).
        textpage: the page's text page that ``blocks`` came from (None: one is made when the words are needed).
        on_layout: called once before the layout model first runs on the page (the time limit grows with it).

    Returns:
        The tables, in the finder's order; empty when there are none or the page is damaged (logged).
    """
    text_blocks = [b for b in blocks if b[6] == 0]
    height = page.rect.height if height is None else height
    if gated and not looks_tabular((b[:5] for b in text_blocks), height):
        return []
    if not page.parent.is_pdf:
        return []
    try:
        paths: list[tuple[str, Box]] = []
        if gated and not layout:
            paths = list(_drawn_paths(page))
            if not ruled_grid(paths):
                if not ruled_rows(paths) and not aligned_columns(_lines_in(
                        page, text_blocks, side_by_side_boxes((b[:5] for b in text_blocks), height), textpage)):
                    return []
                layout = True
        if layout and on_layout is not None:
            on_layout()
        found = _finder_tables(page, number, layout)
        # rules no ruled grid found explains (a table ruled by rows only, booktabs or \hline, beside the grids),
        # or a grid whose rows are not all ruled (a body of one row): the layout model's finder reads them
        if paths and not layout:
            beside = ruled_rows([p for p in paths if not any(inside(p[1], t.bbox) for t in found)])
            if beside or any(few_rows(t) for t in found):
                if on_layout is not None:
                    on_layout()
                found = with_layout_tables(found, _finder_tables(page, number, True), every=beside)
    except mupdf_errors() as exc:  # a damaged page: its text stays as it is
        _log.warning("page_tables_failed", page=number, error=str(exc)[:300])
        return []
    return _claim_blocks(found, text_blocks)


def block_flags() -> int:
    """The text flags a page's blocks are read with: MuPDF's for blocks, and image blocks (page_facts' image area)."""
    import pymupdf

    return int(pymupdf.TEXTFLAGS_BLOCKS | pymupdf.TEXT_PRESERVE_IMAGES)


def _lines_in(page: pymupdf.Page, blocks: Sequence[tuple[Any, ...]], boxes: Sequence[Box],
              textpage: pymupdf.TextPage | None) -> list[Box]:
    """The boxes of the text lines of the ``blocks`` centred in one of ``boxes``.

    A line's box is the union of its words' (``get_text("words")`` numbers each word's block and line as
    ``get_text("dict")`` does, for a fifth of its cost on the same text page), so ``blocks`` must come from
    ``textpage`` when it is given, and be read with ``block_flags()`` when it is not.
    """
    if not boxes:
        return []
    if textpage is None:
        textpage = page.get_textpage(flags=block_flags())
    chosen = {b[5] for b in blocks if any(inside(tuple(b[:4]), box) for box in boxes)}
    lines: dict[tuple[int, int], Box] = {}
    for x0, y0, x1, y1, _, block, line, _ in page.get_text("words", textpage=textpage):
        if block in chosen:
            seen = lines.get((block, line))
            lines[block, line] = (x0, y0, x1, y1) if seen is None else (
                min(seen[0], x0), min(seen[1], y0), max(seen[2], x1), max(seen[3], y1))
    return list(lines.values())


def _finder_tables(page: pymupdf.Page, number: int, layout: bool) -> list[PageTable]:
    """PyMuPDF's finder's tables of ``page`` (with its layout model or not), laid out.

    With the layout model, its own table grids too (``_layout_grids``): they take the place of the finder's
    tables where the finder cut a table into bands (``table_detection.with_layout_grids``). The model runs
    once: ``get_layout`` leaves its reading on the page, and the finder reads it there.
    """
    if layout and hasattr(page, "get_layout"):  # PyMuPDF 2 and later
        page.get_layout(return_raw=True)
    finder = page.find_tables(**_finder_options(layout))
    tables = finder.tables if finder is not None else []
    found = [_laid_out(number, tuple(tab.bbox), [c for c in tab.cells if c is not None], _chars(page, tab.bbox))
             for tab in tables]
    if not layout:
        return [t for t in found if t is not None]
    # the layout model's tables draw no rule between cells: the columns and a header's spans are read from the text
    return with_layout_grids([header_spans(without_empty_columns(t)) for t in found if t is not None],
                             _layout_grids(page, number))


def _layout_grids(page: pymupdf.Page, number: int) -> list[PageTable]:
    """The tables PyMuPDF's layout model predicts on ``page`` (``get_layout(return_raw=True)`` read before), each
    from its predicted row and column lines, laid out like the finder's."""
    grids = []
    for box in getattr(page, "layout_information", None) or ():
        grid = box.get("table_grid") if isinstance(box, dict) and box.get("class_name") == "table" else None
        if not grid:
            continue
        x0, y0, x1, y1 = (float(v) for v in box["group_bbox"])
        ys = [y0, *(y0 + h for h in grid.h_lines), y1]
        xs = [x0, *(x0 + v for v in grid.v_lines), x1]
        boxes = [(xs[j], ys[i], xs[j + 1], ys[i + 1]) for i in range(len(ys) - 1) for j in range(len(xs) - 1)]
        table = _laid_out(number, (x0, y0, x1, y1), boxes, _chars(page, (x0, y0, x1, y1)))
        if table is not None:
            grids.append(header_spans(without_empty_columns(table)))
    return grids


@functools.cache
def _finder_options(layout: bool) -> dict[str, Any]:
    """``find_tables`` keywords: ``use_layout`` where this PyMuPDF has it (2.0 and later), and with the layout
    model ``union`` and ``refine`` where it has them: the model's table grids fused with the ruled candidates,
    then each grid's rows and columns split where text and shading say the lines merged them. Union found
    more of pdf-parse-bench's LaTeX tables (benchmarks/tables_external.py); refine keeps shaded rows apart,
    which union alone merged."""
    import pymupdf.table

    parameters = inspect.signature(pymupdf.table.find_tables).parameters
    options: dict[str, Any] = {"use_layout": layout} if "use_layout" in parameters else {}
    if layout and "union" in parameters and "refine" in parameters:
        options.update(union=True, refine=True)
    return options


def _drawn_paths(page: pymupdf.Page) -> Iterator[tuple[str, Box]]:
    """The lines and rectangles of a PDF page's content streams and of the form XObjects they show, where they
    are shown, in the page's coordinates (those of its words and of the finder's tables).

    Read from the streams (``tables.content_paths``): a third or less of what ``get_cdrawings()``
    costs, which runs the page's text through MuPDF again.
    """
    doc = page.parent
    matrix = cast(Matrix, tuple(page.transformation_matrix))

    @functools.cache
    def names() -> dict[str, int]:  # read only when a stream shows a form, as before forms were placed
        return {item[1]: item[0] for item in page.get_xobjects()}

    def form(name: str) -> tuple[bytes, Matrix] | None:
        xref = names().get(name)
        if xref is None:
            return None
        return doc.xref_stream(xref) or b"", form_matrix(doc.xref_get_key(xref, "Matrix"))

    for xref in page.get_contents():
        yield from content_paths(doc.xref_stream(xref) or b"", matrix, form)


def _chars(page: pymupdf.Page, bbox: Box) -> Iterator[tuple[float, float, float, float, str]]:
    """The characters inside ``bbox`` in MuPDF's order, a newline after each line (``rawdict``)."""
    for block in page.get_text("rawdict", clip=bbox)["blocks"]:
        for line in block.get("lines", ()):
            for span in line["spans"]:
                for char in span["chars"]:
                    yield (*char["bbox"], char["c"])
            yield (0.0, 0.0, 0.0, 0.0, "\n")


def _laid_out(number: int, bbox: Box, boxes: list[Box], chars: Iterable[tuple[float, float, float, float, str]]
              ) -> PageTable | None:
    """The table of ``boxes`` and ``chars``, its boxes split where the text says the rules left cells merged:
    a tall box over rows that another column rules (``table_detection.split_spanning_rows``), then a column that
    the text's alignment divides (``split_at_gaps``: columns no rule or predicted line parts), then a ruled row
    that holds several rows of text (``split_at_lines``: rules between groups of rows only)."""
    chars = list(chars)
    rows, columns, cells = grid_cells(split_at_lines(split_at_gaps(split_spanning_rows(boxes, chars), chars), chars),
                                      chars)
    if rows < 2 or columns < 2 or sum(1 for c in cells if c.text) < 2:
        return None
    return PageTable(number, bbox, rows, columns, cells)


def _claim_blocks(tables: list[PageTable], text_blocks: Sequence[tuple[Any, ...]]) -> list[FoundTable]:
    """Each table with the blocks inside it, and its caption: the block ``tables.caption_index`` picks."""
    claimed = [frozenset(b[5] for b in text_blocks if inside(b[:4], t.bbox)) for t in tables]
    taken = frozenset().union(*claimed)
    free = [b for b in text_blocks if b[5] not in taken]
    found = []
    for table, members in zip(tables, claimed, strict=True):
        i = caption_index(table.bbox, [b[:5] for b in free])
        if i is None:
            found.append(FoundTable(table, members))
            continue
        caption = free.pop(i)
        found.append(FoundTable(replace(table, caption=" ".join(caption[4].split())), members | {caption[5]}))
    return found


def _settle(
    page: pymupdf.Page,
    blocks: Sequence[tuple[Any, ...]],
    layer: PageText,
    titles: list[str] | None,
    ocr: PageOcr | None,
    check: Callable[[], None] | None,
) -> tuple[PageText, PageSource]:
    """The page's verdict, its OCR where the mode asks, and the text it keeps."""
    languages = ocr.languages if ocr is not None else ("eng",)
    mode: OcrMode = ocr.mode if ocr is not None else "off"
    try:
        facts = page_facts(page, text=layer.text, blocks=blocks)
    except mupdf_errors():  # the page's fonts or glyphs are damaged: judge its text alone
        facts = _text_facts(layer.text, 0.0)
    verdict = assess_page(facts, languages=languages)
    reading: OcrReading | None = None
    skipped: Reason | None = None
    wanted: str | None = None
    if ocr is not None and wants_ocr(mode, verdict):
        if check is not None:
            check()
        reading, skipped, wanted = ocr.read(page, layer.number, verdict, image_area=facts.image_area)
    settled = settle_page(layer.number, mode, layer.text, verdict, reading, skipped=skipped, wanted=wanted)
    if ocr is not None:  # the script of the text the page keeps is the next page's first guess
        if settled.source.text_source == OCR and reading is not None:
            ocr.note(reading.judged_in)
        elif verdict.verdict in USABLE or settled.source.reason == "layer_redecoded":
            ocr.note(verdict.language)
    if reading is not None:
        _log.info(
            "page_ocred", page=layer.number, engine=reading.engine, languages="+".join(reading.languages),
            verdict=verdict.verdict, ocr_verdict=reading.verdict.verdict, reason=settled.source.reason,
            quality=round(verdict.quality, 3), ocr_quality=round(reading.verdict.quality, 3),
        )
    if settled.text == layer.text:
        return layer, settled.source
    return _titled(layer.number, settled.text, titles), settled.source


def _trial_strip(page: pymupdf.Page, number: int) -> pymupdf.Rect:
    """The strip of a page its scripts are tried on: the top of what its text blocks cover (of a scan: its images),
    ``TRIAL_STRIP_SHARE`` of the page's height at most, as wide as they are; the whole page when it has neither."""
    import pymupdf

    rect = page.rect
    try:
        boxes = [pymupdf.Rect(block[:4]) for block in page.get_text("blocks")]
        boxes = boxes or [pymupdf.Rect(image["bbox"]) for image in page.get_image_info()]
    except mupdf_errors() as exc:
        _log.warning("page_layout_unreadable", page=number, error=str(exc)[:300])
        boxes = []
    area = pymupdf.Rect()
    for box in boxes:
        area |= box
    area &= rect
    if area.is_empty:
        area = pymupdf.Rect(rect)
    return pymupdf.Rect(area.x0, area.y0, area.x1, min(area.y1, area.y0 + rect.height * TRIAL_STRIP_SHARE))


def _strip_confidence(engine: OcrEngine, page: pymupdf.Page, number: int, languages: tuple[str, ...], dpi: int,
                      strip: pymupdf.Rect) -> float:
    """The engine's mean word confidence reading ``strip`` of the page in ``languages``; 0 when it reads nothing
    there or fails."""
    result = _engine_read(engine, page, number, languages, dpi, strip)
    return (result.confidence or 0.0) if result is not None else 0.0


def _engine_read(engine: OcrEngine, page: pymupdf.Page, number: int, languages: tuple[str, ...], dpi: int,
                 clip: pymupdf.Rect | None = None) -> OcrResult | None:
    """What the engine reads of the page (or its ``clip``) in ``languages``; None when it failed on it (logged)."""
    failures: tuple[type[Exception], ...] = (*mupdf_errors(), OSError, ConfigError)
    try:
        return engine.recognize(page, languages=languages, dpi=dpi, clip=clip)
    except failures as exc:
        _log.warning("page_ocr_failed", page=number, engine=engine.name, error=str(exc)[:500])
        return None


def _recognize(
    engine: OcrEngine,
    page: pymupdf.Page,
    number: int,
    languages: tuple[str, ...],
    dpi: int,
    page_language: str | None,
    image_area: float,
) -> OcrReading | None:
    result = _engine_read(engine, page, number, languages, dpi)
    if result is None:  # the engine failed on this page: keep the text layer
        return None
    # the OCR text is judged on its own: the fonts and the glyph trace are the text layer's, not its
    after = assess_page(_text_facts(result.text, image_area), languages=languages)
    return OcrReading(result.text, result.engine, languages, after, page_language, result.confidence)


def _text_facts(text: str, image_area: float) -> PageFacts:
    """Facts of a text alone (an OCR text, a page whose fonts cannot be read): page_facts' untraced estimate."""
    return PageFacts(text, glyphs=len(text) - text.count(" ") - text.count("\n"), image_area=image_area)


def _titled(number: int, text: str, titles: list[str] | None) -> PageText:
    """A page whose text is not its text layer's: headings only from the outline."""
    if not text:
        return PageText(number, "", ())
    return PageText(number, text, tuple(Heading(_find(text, title), title) for title in titles or ()))


class _BodyLineHeight:
    """The running body line height: median of the last page that had multi-line blocks."""

    def __init__(self) -> None:
        self.value: float | None = None

    def update(self, blocks: Sequence[tuple[Any, ...]]) -> None:
        heights = [(b[3] - b[1]) / n for b in blocks if (n := b[4].count("\n")) >= 3]
        if heights:
            self.value = statistics.median(heights)

    def is_heading(self, block: tuple[Any, ...], text: str) -> bool:
        lines = max(1, block[4].count("\n"))
        if self.value is None or lines > 2 or len(text) > _HEADING_MAX_CHARS:
            return False
        if len(text.split()) > _HEADING_MAX_WORDS or not any(c.isalpha() for c in text):
            return False
        return bool((block[3] - block[1]) / lines >= _HEADING_RATIO * self.value)


def _outline(doc: pymupdf.Document) -> dict[int, list[str]]:
    try:
        toc = doc.get_toc(simple=True)
    except mupdf_errors():
        return {}
    titles: dict[int, list[str]] = {}
    for _level, title, page in toc:
        title = " ".join(str(title).split())
        if title and isinstance(page, int) and page >= 1:
            titles.setdefault(page, []).append(title)
    return titles


def page_facts(
    page: pymupdf.Page, *, text: str | None = None, blocks: Sequence[tuple[Any, ...]] | None = None
) -> PageFacts:
    """What ``docstream_chunker.page_quality.assess_page`` needs to know of a page, read in two stages.

    The cheap stage, on every page: the text, a glyph estimate from it (its characters other
    than spaces and newlines), and the image area. When those look suspicious (images over half
    the page, fewer than ``MIN_GLYPHS`` characters, a tenth of them NBSP or U+FFFD, control,
    private-use or format characters), the expensive stage reads every glyph
    (``get_texttrace()``: count, invisible ones) and the fonts (``get_fonts()``: ToUnicode map or
    standard encoding). On normal text pages the second stage never runs: it costs about what
    extracting the page's text costs.

    The cheapest call passes what extraction already has: ``blocks``, the page's
    ``get_text("blocks")`` extracted with ``TEXT_PRESERVE_IMAGES`` (keeping the image blocks
    costs nothing measurable), whose image blocks give the image area; and ``text``, the page's
    text. Without ``blocks``, the images are looked for with ``page.get_images()`` (a look at the
    resources of a PDF) and ``get_image_info()`` (which runs the content stream) when there are
    some; formats other than PDF list no images, so theirs are looked for only on pages without
    text. Without ``text``, it comes from ``blocks`` or ``page.get_text()``.

    Args:
        page: a loaded page.
        text: the page's text as already extracted.
        blocks: the page's ``get_text("blocks", flags=...)`` with image blocks kept.

    Raises:
        Exception: what PyMuPDF raises on a damaged page; catch ``mupdf_errors()`` (MuPDF's typed
            ``FzError*`` errors are not ``RuntimeError``s).
    """
    if text is None:
        text = page.get_text() if blocks is None else "\n".join(b[4] for b in blocks if b[6] == 0)
    glyphs = len(text) - text.count(" ") - text.count("\n")  # extraction's separators; NBSPs stand for glyphs
    ascii_only = text.isascii()
    nbsp = 0 if ascii_only else text.count("\xa0")
    unmapped = 0 if ascii_only else nbsp + text.count("\ufffd")
    if blocks is None:
        image_area = _image_area(page, without_text=glyphs < MIN_GLYPHS)
    else:
        image_area = _covered(page, (b[:4] for b in blocks if b[6] == 1))
    suspicious = (
        image_area >= SCAN_IMAGE_AREA
        or glyphs < MIN_GLYPHS
        or unmapped >= _SUSPICIOUS_UNMAPPED_SHARE * glyphs
        or _has_unprintable(text, nbsp=bool(nbsp))
    )
    if not suspicious:
        return PageFacts(text, glyphs=glyphs, image_area=image_area)
    drawn = invisible = 0
    for span in page.get_texttrace():
        count = len(span["chars"])
        drawn += count
        if span["type"] == 3 or span["opacity"] == 0:  # render mode 3 (an OCR layer), or fully transparent
            invisible += count
    fonts = page.get_fonts()
    without = sum(1 for font in fonts if not _font_has_unicode(page.parent, font))
    return PageFacts(text, drawn, invisible, image_area, len(fonts), without, traced=True)


def _has_unprintable(text: str, *, nbsp: bool) -> bool:
    """Control, private-use or format characters (the separators extraction writes left aside)."""
    if text.isascii():
        return bool(text.encode().translate(None, _PRINTABLE_ASCII))
    visible = text.replace("\n", " ")
    return not (visible.replace("\xa0", " ") if nbsp else visible).isprintable()


def _image_area(page: pymupdf.Page, *, without_text: bool) -> float:
    """Share of the page covered by images, read from the page itself.

    A PDF lists its images in the page's resources, a cheap look; other formats (a picture,
    EPUB, XPS) list none, so their images are looked for only on pages without text.
    """
    if not page.get_images() if page.parent.is_pdf else not without_text:
        return 0.0
    return _covered(page, (info["bbox"] for info in page.get_image_info()))


def _covered(page: pymupdf.Page, boxes: Iterable[Sequence[float]]) -> float:
    """Share of the page under ``boxes`` (overlaps counted twice, capped at 1)."""
    boxes = list(boxes)
    if not boxes:
        return 0.0
    import pymupdf

    rect = page.rect
    if rect.is_empty:
        return 0.0
    covered: float = sum(abs(pymupdf.Rect(box) & rect) for box in boxes)
    return min(1.0, covered / float(abs(rect)))


def _font_has_unicode(doc: pymupdf.Document, font: tuple[Any, ...]) -> bool:
    """A ToUnicode map, a standard or glyph-name encoding, or a Unicode-keyed CMap: text maps to characters.

    ``font`` is a row of ``page.get_fonts()``: (xref, extension, type, basefont, name, encoding).
    """
    xref, extension, kind, encoding = font[0], font[1], font[2], font[5]
    if xref <= 0 or doc.xref_get_key(xref, "ToUnicode")[0] != "null":
        return True
    if kind == "Type0":
        return not str(encoding).startswith("Identity")  # predefined CMaps map through their ordering
    if kind == "Type3":
        return False  # glyph procedures with names of the producer's choosing
    if encoding in _STANDARD_ENCODINGS or doc.xref_get_key(xref, "Encoding")[0] == "dict":
        return True
    return bool(extension == "n/a")  # a standard font, not embedded: its standard encoding


def _page_text(
    number: int,
    blocks: Sequence[tuple[Any, ...]],
    rect: pymupdf.Rect,
    titles: list[str] | None,
    body: _BodyLineHeight,
    tables: Sequence[FoundTable] = (),
    *,
    markup: Sequence[MarkupTable] = (),
) -> PageText:
    """The page's paragraphs, headings and furniture candidates (``furniture.edge_of``); with ``tables``, their
    blocks left out and each table placed.

    A table sits where its first block comes in reading order (the start of the next paragraph).
    """
    height = rect.height
    ordered = reading_order([b for b in blocks if b[6] == 0], rect.width)
    edges: list[Edge] = []
    use_geometry = titles is None
    owners = {block: i for i, table in enumerate(tables) for block in table.blocks}
    if use_geometry:
        body.update([b for b in ordered if b[5] not in owners] if owners else ordered)
    placed: dict[int, int] = {}
    paragraphs: list[str] = []
    headings: list[Heading] = []
    from_markup: list[PageTable] = []
    offset = 0
    for block in ordered:
        owner = owners.get(block[5])
        if owner is not None:
            placed.setdefault(owner, offset)
            continue
        text = block[4].replace("\n", " ").strip()
        if not text:
            continue
        index = marker_index(text) if markup else None
        if index is not None and index < len(markup):
            table = markup[index]
            from_markup.append(PageTable(number, tuple(block[:4]), table.rows, table.columns, table.cells,
                                         table.caption, offset))
            continue
        if use_geometry and body.is_heading(block, text):
            headings.append(Heading(offset, " ".join(text.split())))
        edge = edge_of(text, lines=max(1, block[4].count("\n")), y0=block[1], y1=block[3], height=height)
        if edge is not None:
            edges.append(edge)
        paragraphs.append(text)
        offset += len(text) + 2
    page = "\n\n".join(paragraphs)
    for title in titles or ():
        headings.append(Heading(_find(page, title), title))
    found = tuple(replace(t.table, offset=min(placed.get(i, len(page)), len(page))) for i, t in enumerate(tables))
    found += tuple(replace(t, offset=min(t.offset, len(page))) for t in from_markup)
    return PageText(number, page, tuple(headings), found, tuple(edges))


def _find(page: str, title: str) -> int:
    found = page.find(title)
    if found < 0:
        found = page.lower().find(title.lower())
    return max(found, 0)


def _markup_tables(data: bytes, fmt: DocumentFormat) -> tuple[bytes, list[MarkupTable]]:
    """An HTML or EPUB document with its tables taken out of its markup (``markup_tables.take_tables``), and the
    tables; other formats, and an EPUB that is no readable zip or would inflate past ``_MAX_INFLATED``, as they are.

    Bytes outside the tables are kept as they were (decoded as UTF-8 with ``surrogateescape``, whatever the
    document's own charset), so MuPDF lays out the same document less its tables.
    """
    if fmt.filetype in _MARKUP_TYPES:
        html, taken = take_tables(data.decode("utf-8", "surrogateescape"))
        return (html.encode("utf-8", "surrogateescape"), taken) if taken else (data, [])
    if fmt.filetype != "epub":
        return data, []
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            members = package.infolist()
            if sum(m.file_size for m in members) > min(_MAX_INFLATED, _MAX_INFLATION * len(data)):
                return data, []
            found: list[MarkupTable] = []
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as rewritten:
                for member in members:
                    content = package.read(member)
                    if member.filename.lower().endswith((".xhtml", ".html", ".htm")) and b"<table" in content:
                        html, tables = take_tables(content.decode("utf-8", "surrogateescape"), first=len(found))
                        content = html.encode("utf-8", "surrogateescape")
                        found.extend(tables)
                    rewritten.writestr(member, content, compress_type=member.compress_type)
    except _DAMAGED_ZIP:
        return data, []  # damaged: MuPDF says what is wrong with it
    return (out.getvalue(), found) if found else (data, [])


def chunk_bytes(
    data: bytes,
    *,
    config: ChunkingConfig,
    counter: TokenCounter,
    max_pages: int,
    max_bytes: int,
    filename: str | None = None,
    media_type: str | None = None,
    timeout_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    ocr: PageOcr | None = None,
    ocr_page_s: float = 0.0,
    max_timeout_s: float | None = None,
    on_ocr_page: Callable[[OcrPageStarted], None] | None = None,
    tables: TableMode = "auto",
    furniture: FurnitureMode = "auto",
    layout_page_s: float = 0.0,
    on_layout_page: Callable[[int], None] | None = None,
) -> ChunkedDocument:
    """Open, extract and chunk one document.

    Args:
        data: the document bytes.
        config: chunk size and overlap.
        counter: the model tokenizer's counter.
        max_pages: more pages fail with ``too_many_pages``.
        max_bytes: more bytes fail with ``too_large``.
        filename: the submitted file name (a hint for formats without a signature).
        media_type: the submitted media type (the same kind of hint).
        timeout_s: the time limit, checked between pages (and before each page's OCR).
        clock: monotonic seconds.
        ocr: OCR (``chunker.ocr`` and its engine); None: none, pages keep their text layer.
        ocr_page_s: what each page OCR starts on adds to the time limit (``provenance.time_limit``).
        max_timeout_s: the most the time limit grows to (None: no ceiling).
        on_ocr_page: told when OCR starts on a page (``OcrPageStarted``; the extraction child tells its parent).
        tables: ``chunker.tables``: ``auto`` makes the ruled tables of pages that keep their text
            layer chunks of their own (docs/chunking.md "Tables"); ``off`` leaves them in the text.
        furniture: ``chunker.furniture``: ``auto`` takes running heads, page numbers and footers out
            of the text (``docstream_chunker.furniture``) and records them on the chunks of their
            pages; ``off`` leaves them in.
        layout_page_s: what each page PyMuPDF's layout model starts on (its tables) adds to the time limit.
        on_layout_page: told, with their count so far, when the layout model starts on a page (the extraction
            child tells its parent).

    Raises:
        DocumentError: see the module docstring; ``no_text`` when no page holds a word,
            ``unreadable_text`` when the only text there is reads as garbage by its verdict.
        InputError: ``invalid_options`` for an impossible chunk size or overlap.
    """
    started = clock()
    if len(data) > max_bytes:
        raise DocumentError(f"the document is larger than {max_bytes} bytes", code="too_large")
    fmt = detect_format(data, filename=filename, media_type=media_type)
    markup: list[MarkupTable] = []
    if tables == "auto":
        data, markup = _markup_tables(data, fmt)
    doc = open_document(data, fmt, max_pages=max_pages)

    laid_out = 0

    def layout_page() -> None:
        nonlocal laid_out
        laid_out += 1
        if on_layout_page is not None:
            on_layout_page(laid_out)

    def check() -> None:
        if timeout_s is None:
            return
        ocred = ocr.pages_started if ocr is not None else 0
        limit = time_limit(timeout_s, ocred, ocr_page_s, max_timeout_s, layout_pages=laid_out,
                           per_layout_page_s=layout_page_s)
        if clock() - started > limit:
            raise DocumentError(f"extraction took longer than {limit:g} s ({ocred} pages OCRed, {laid_out} read "
                                "by the layout model)", code="timeout")

    pages: list[PageSource] = []
    taken: dict[int, tuple[str, ...]] = {}
    joins: list[int] = []

    def noted(stream: Iterable[PageText]) -> Iterator[PageText]:
        for page in stream:
            if page.furniture:
                taken[page.number] = page.furniture
            if any(t.row_pages for t in page.tables):
                joins.append(page.number)
            yield page

    try:
        extracted = extract_pages(doc, check=check, ocr=ocr, sources=pages, on_ocr_page=on_ocr_page, tables=tables,
                                  markup_tables=markup, on_layout_page=layout_page)
        if furniture == "auto":  # first: a running head above a continued table would part it from its rows
            extracted = strip_furniture(extracted)
        if tables == "auto" and fmt.filetype == "pdf":  # a markup table is never laid out over two pages
            extracted = join_continued(extracted)
        chunks = chunk_document(noted(extracted), config, counter)
        page_count = doc.page_count
    finally:
        doc.close()
    failure = document_failure(pages, has_chunks=bool(chunks))
    if failure is not None:
        code, message = failure
        if ocr is not None and ocr.unavailable is not None:
            message = f"{message}; OCR is unavailable: {ocr.unavailable}"
        raise DocumentError(message, code=code)
    by_number = {page.number: page for page in pages}
    return ChunkedDocument(
        page_count=page_count,
        media_type=fmt.media_type,
        chunker_settings=chunker_settings(config, counter, tables=any(c.kind == "table" for c in chunks),
                                          furniture=bool(taken), continued=bool(joins),
                                          headers=any(c.table is not None and c.table.header_rows > 1 for c in chunks)),
        chunks=tuple(chunks),
        chunk_sources=tuple(chunk_source(c.page_start, c.page_end, by_number, taken) for c in chunks),
        sources=DocumentSources.of(pages),
    )
