"""Fetching, extracting and chunking one document, in this process or in a child process.

``ProcessExtractor`` runs the work in a child process (spawned once, reused): a document
that hangs inside MuPDF past the time limit is ended by killing the child, and one that
crashes MuPDF takes down only the child. The child also checks the deadline between pages,
which ends most overruns without a kill. ``InlineExtractor`` does the same work in the
calling process (tests, benchmarks), with the between-page check only.

OCR (``chunker.ocr``) runs where the extraction runs: in the child, so the time limit (the
between-page check, then the kill) and the memory bound (the child is replaced past
``recycle_rss_bytes``) cover it. The engine is opened once per child, on the first page
that needs it. The child runs ``chunker.extraction_nice`` steps nicer than its parent, so
extraction and OCR take the cores the model leaves. Each page OCR starts on adds
``chunker.ocr.page_timeout_s`` to the limit, up to ``chunker.max_timeout_s``
(``docstream_chunker.provenance.time_limit``): the child says so over the pipe before the page's OCR
(``("ocr_page", n, page, page_count)``), and the parent's kill deadline grows with it; the
extractor's caller is told too (``on_ocr_page``), and the chunker shows the progress
(docs/chunking.md "OCR progress"). Each page PyMuPDF's layout model reads for tables adds
``chunker.tables_page_timeout_s`` the same way (``("layout_page", n)``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Protocol

import psutil
import structlog

from docstream.errors import ConfigError, DocstreamError, DocumentError, FatalError, InputError, RetryableError
from docstream.ids import content_sha256
from docstream.logging import configure_logging, get_logger
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.objectstore import ObjectStore
from docstream.settings import ChunkerSettings, InferenceSettings, LogSettings, ObjectStoreSettings
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import ChunkedDocument, OcrPageStarted, PageOcr, chunk_bytes, with_token_ids
from docstream_chunker.ort_sessions import quiet_sessions
from docstream_chunker.provenance import time_limit

__all__ = [
    "KILL_GRACE_S",
    "START_TIMEOUT_S",
    "ChunkRequest",
    "DocumentProcessor",
    "Extractor",
    "ExtractorSettings",
    "InlineExtractor",
    "ProcessExtractor",
    "lower_priority",
]

_log = get_logger(__name__)
_FETCH_CODES = frozenset({"source_not_found", "source_unreadable", "source_not_allowed"})
START_TIMEOUT_S = 120.0
"""The most a child's start may take (spawn, imports, the tokenizer) before it fails ``extractor_start_failed``."""
KILL_GRACE_S = 2.0
"""How long past its time limit a child's answer is waited for before the child is killed."""
_OCR_PROGRESS_EVERY = 10


@dataclass(frozen=True, slots=True)
class ExtractorSettings:
    """What extraction reads, and all a child process is sent: the chunker's limits and OCR, where
    documents are read from, the model whose tokenizer counts the tokens, and the child's log level."""

    chunker: ChunkerSettings
    object_store: ObjectStoreSettings
    model_path: str | None
    model_id: str
    log_level: str = "INFO"

    @classmethod
    def of(cls, chunker: ChunkerSettings, object_store: ObjectStoreSettings, inference: InferenceSettings,
           log: LogSettings) -> ExtractorSettings:
        """What extraction reads of these sections (the tokenizer: ``inference.model_path``/``model_id``; the
        child's log level: ``log.level``)."""
        return cls(chunker, object_store, inference.model_path, inference.model_id, log.level)


@dataclass(frozen=True, slots=True)
class ChunkRequest:
    """What the extractor needs to know about one submitted document."""

    source_uri: str
    content_sha256: str
    max_tokens: int
    overlap_tokens: int
    filename: str | None = None
    media_type: str | None = None
    job_id: str | None = None
    doc_id: str | None = None


class Extractor(Protocol):
    """Turns a request into chunks, or raises DocumentError / InputError / RetryableError."""

    def extract(
        self, request: ChunkRequest, *, on_ocr_page: Callable[[OcrPageStarted], None] | None = None
    ) -> ChunkedDocument:
        """Fetch, extract and chunk one document; ``on_ocr_page`` is told when OCR starts on a page."""
        ...

    def close(self) -> None:
        """Release what the extractor holds."""
        ...


class DocumentProcessor:
    """Fetch (bounded), verify the hash, extract and chunk; the same code in either process.

    Raises:
        ConfigError: the tokenizer or the object store cannot be loaded.
    """

    def __init__(self, settings: ExtractorSettings) -> None:
        quiet_sessions()  # the layout model's and RapidOCR's sessions: no spin-waiting (ort_sessions)
        self._chunker = settings.chunker
        self._objects = ObjectStore(settings.object_store)
        # the OCR engine opens on the first page that needs it, in whichever process runs this
        self._ocr = PageOcr(settings.chunker.ocr)
        self.counter: ModelTokenCounter = load_token_counter(settings.model_path, settings.model_id)

    def process(
        self, request: ChunkRequest, *, on_ocr_page: Callable[[OcrPageStarted], None] | None = None,
        on_layout_page: Callable[[int], None] | None = None,
    ) -> ChunkedDocument:
        """One document; the time limit covers the fetch too, and grows by ``chunker.ocr.page_timeout_s`` per OCR page
        and by ``chunker.tables_page_timeout_s`` per page the layout model reads for tables.

        Args:
            request: the document.
            on_ocr_page: told when OCR starts on a page.
            on_layout_page: told, with their count so far, when the layout model starts on a page.

        Raises:
            DocumentError: the document fails (its code says why; fetch problems are ``fetch_failed``).
            InputError: ``invalid_options`` for an impossible chunk size.
            RetryableError: the object store is unavailable.
        """
        started = time.monotonic()
        config = ChunkingConfig(request.max_tokens, request.overlap_tokens)
        data = self._fetch(request.source_uri)
        if request.content_sha256 and content_sha256(data) != request.content_sha256:
            raise DocumentError("the bytes at source_uri do not hash to content_sha256", code="content_mismatch")
        fetched = time.monotonic() - started
        chunked = chunk_bytes(
            data,
            config=config,
            counter=self.counter,
            max_pages=self._chunker.max_pages,
            max_bytes=self._chunker.max_document_bytes,
            filename=request.filename,
            media_type=request.media_type,
            timeout_s=max(0.0, self._chunker.timeout_s - fetched),
            ocr=self._ocr,
            ocr_page_s=self._chunker.ocr.page_timeout_s,
            max_timeout_s=max(0.0, self._chunker.max_timeout_s - fetched),
            on_ocr_page=on_ocr_page,
            layout_page_s=self._chunker.tables_page_timeout_s,
            on_layout_page=on_layout_page,
            tables=self._chunker.tables,
            furniture=self._chunker.furniture,
        )
        return with_token_ids(chunked, self.counter) if self._chunker.token_ids else chunked

    def _fetch(self, source_uri: str) -> bytes:
        try:
            data: bytes = self._objects.open_bounded(source_uri, self._chunker.max_document_bytes)
        except (DocumentError, InputError) as exc:
            if exc.code in _FETCH_CODES:
                raise DocumentError(f"cannot read the document: {exc.message}", code="fetch_failed") from exc
            raise
        return data


class InlineExtractor:
    """``DocumentProcessor`` in the calling process."""

    def __init__(self, settings: ExtractorSettings) -> None:
        self._processor = DocumentProcessor(settings)

    def extract(
        self, request: ChunkRequest, *, on_ocr_page: Callable[[OcrPageStarted], None] | None = None
    ) -> ChunkedDocument:
        """See ``DocumentProcessor.process``."""
        return self._processor.process(request, on_ocr_page=on_ocr_page)

    def close(self) -> None:
        """Nothing to release."""


def lower_priority(nice: int) -> None:
    """Make this process ``nice`` steps nicer than it is (never less nice): extraction and OCR yield the
    cores to the model (docs/chunking.md "OCR beside the model").
    """
    if nice > 0:
        try:
            os.nice(nice)
        except OSError as exc:  # not allowed here: run at the parent's priority
            _log.warning("extractor_nice_failed", nice=nice, error=str(exc))


def _serve(conn: Connection, settings: ExtractorSettings) -> None:
    """The child: answer requests until told to stop or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the child ends
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    configure_logging(level=settings.log_level, fmt="json", service="chunker-extractor")
    lower_priority(settings.chunker.extraction_nice)
    try:
        processor = DocumentProcessor(settings)
    except DocstreamError as exc:
        conn.send(("fatal", exc.code, exc.message))
        return
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        conn.send(_answer(processor, request, conn))


def _answer(processor: DocumentProcessor, request: ChunkRequest, conn: Connection) -> tuple[Any, ...]:
    # the child's log lines (page_ocred, ocr_unavailable) name the document, as the parent's do
    # (bound over the previous request's; the service name bound at start stays)
    structlog.contextvars.bind_contextvars(job_id=request.job_id, doc_id=request.doc_id)

    def ocr_page(started: OcrPageStarted) -> None:  # before the page's OCR: the parent's kill deadline grows first
        conn.send(("ocr_page", started.ocr_pages, started.page, started.page_count))

    def layout_page(count: int) -> None:  # before the layout model runs: the parent's kill deadline grows first
        conn.send(("layout_page", count))

    try:
        return ("ok", processor.process(request, on_ocr_page=ocr_page, on_layout_page=layout_page))
    except (DocumentError, InputError) as exc:
        return ("document_error", exc.code, exc.message)
    except RetryableError as exc:
        return ("retryable", exc.code, exc.message)
    except Exception as exc:  # noqa: BLE001 - the child's loop: report, never die on one document
        _log.error("extraction_failed", error=str(exc)[:500], exc_info=exc)
        return ("document_error", "extraction_failed", f"{type(exc).__name__}: {exc}"[:1000])


class ProcessExtractor:
    """``DocumentProcessor`` in a spawned child process, killed when a document overruns.

    Args:
        settings: what extraction reads (``ExtractorSettings.of(...)``), sent to the child.
        recycle_rss_bytes: restart the child after a document that left it bigger than this.

    Raises:
        ConfigError: the child cannot load the tokenizer or the object store.
        FatalError: the child does not start.
    """

    def __init__(self, settings: ExtractorSettings, *, recycle_rss_bytes: int = 1 << 30) -> None:
        self._settings = settings
        self._recycle_rss_bytes = recycle_rss_bytes
        self._context = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._start()

    def __enter__(self) -> ProcessExtractor:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The child's process id (None while none runs)."""
        return self._process.pid if self._process is not None else None

    def extract(
        self, request: ChunkRequest, *, on_ocr_page: Callable[[OcrPageStarted], None] | None = None
    ) -> ChunkedDocument:
        """Run one request in the child; a child that died is restarted and tried once more.

        ``on_ocr_page`` is told, in this process, when the child starts OCR on a page.

        Raises:
            DocumentError: the document fails; ``timeout`` past the time limit (the child is
                killed); ``extraction_failed`` when the child dies on it twice.
            InputError: ``invalid_options``.
            RetryableError: the object store is unavailable.
        """
        try:
            return self._round_trip(request, on_ocr_page)
        except _ChildDiedError as first:
            _log.warning("extractor_died", exit_code=first.exit_code)
        try:
            return self._round_trip(request, on_ocr_page)
        except _ChildDiedError as again:
            raise DocumentError(
                f"the extraction process died on this document (exit code {again.exit_code})",
                code="extraction_failed",
            ) from again

    def close(self) -> None:
        """Stop the child (politely, then by force)."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            try:
                conn.send(None)
            except OSError:
                pass  # the child is already gone
            conn.close()
        if process is not None:
            process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join(5.0)
            process.close()

    def _start(self) -> None:
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve, args=(child, self._settings), name="docstream-extractor", daemon=True
        )
        process.start()
        child.close()
        self._process, self._conn = process, parent
        if not parent.poll(START_TIMEOUT_S):
            self._kill()
            raise FatalError("the extraction process did not start", code="extractor_start_failed")
        try:
            reply = parent.recv()
        except EOFError as exc:
            self._kill()
            raise FatalError("the extraction process exited while starting", code="extractor_start_failed") from exc
        if reply[0] == "fatal":
            self.close()
            raise ConfigError(f"the extraction process cannot start: {reply[2]}", code=reply[1])
        _log.info("extractor_started", pid=process.pid)

    def _round_trip(
        self, request: ChunkRequest, on_ocr_page: Callable[[OcrPageStarted], None] | None = None
    ) -> ChunkedDocument:
        if self._process is None or self._conn is None or not self._process.is_alive():
            self._kill()
            self._start()
        assert self._conn is not None
        chunker = self._settings.chunker
        sent = time.monotonic()
        ocr_pages = layout_pages = 0
        try:
            self._conn.send(request)
            while True:
                limit = time_limit(chunker.timeout_s, ocr_pages, chunker.ocr.page_timeout_s, chunker.max_timeout_s,
                                   layout_pages=layout_pages, per_layout_page_s=chunker.tables_page_timeout_s)
                ready = self._conn.poll(max(0.0, sent + limit + KILL_GRACE_S - time.monotonic()))
                reply = self._conn.recv() if ready else None
                if reply is not None and reply[0] == "layout_page":
                    layout_pages = int(reply[1])
                    continue
                if reply is None or reply[0] != "ocr_page":
                    break
                started = OcrPageStarted(int(reply[1]), int(reply[2]), int(reply[3]))
                ocr_pages = started.ocr_pages
                if ocr_pages % _OCR_PROGRESS_EVERY == 0:
                    _log.info("document_ocr_progress", pages=ocr_pages, limit_s=round(limit, 1))
                if on_ocr_page is not None:
                    on_ocr_page(started)
        except (EOFError, OSError) as exc:
            raise _ChildDiedError(self._reap()) from exc
        if reply is None:
            self._kill()
            _log.warning("extractor_killed", limit_s=limit, ocr_pages=ocr_pages, layout_pages=layout_pages)
            raise DocumentError(f"extraction took longer than {limit:g} s ({ocr_pages} pages OCRed, {layout_pages} "
                                "read by the layout model)", code="timeout")
        self._recycle_if_big()
        return _result(reply)

    def _recycle_if_big(self) -> None:
        if self._process is None or self._process.pid is None:
            return
        try:
            rss = psutil.Process(self._process.pid).memory_info().rss
        except psutil.Error:
            return
        if rss > self._recycle_rss_bytes:
            _log.info("extractor_recycled", rss_bytes=rss)
            self.close()

    def _reap(self) -> int | None:
        process = self._process
        code = None
        if process is not None:
            process.join(5.0)
            code = process.exitcode
        self._kill()
        return code

    def _kill(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(5.0)
            process.close()


class _ChildDiedError(Exception):
    def __init__(self, exit_code: int | None) -> None:
        super().__init__(f"extraction process died (exit code {exit_code})")
        self.exit_code = exit_code


def _result(reply: tuple[Any, ...]) -> ChunkedDocument:
    kind = reply[0]
    if kind == "ok":
        result: ChunkedDocument = reply[1]
        return result
    if kind == "retryable":
        raise RetryableError(reply[2], code=reply[1])
    if kind == "document_error" and reply[1] == "invalid_options":
        raise InputError(reply[2], code=reply[1])
    if kind == "document_error":
        raise DocumentError(reply[2], code=reply[1])
    raise FatalError(f"unexpected reply from the extraction process: {kind!r}", code="extractor_protocol")
