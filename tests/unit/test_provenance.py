"""docstream.provenance: which pages are OCRed, which text each keeps, and what chunks and documents record."""

from __future__ import annotations

import pytest

from docstream.page_quality import PageVerdict
from docstream.provenance import (
    ChunkSource,
    DocumentSources,
    PageSource,
    chunk_source,
    document_failure,
    settle_page,
    wants_ocr,
)

OK = PageVerdict("ok", 0.9, "a text layer")
SCAN = PageVerdict("no_text_layer", 0.0, "no text, images cover the page")
MOJIBAKE = PageVerdict("mojibake", 0.2, "latin-1 where cyrillic is expected")
OCR_LAYER = PageVerdict("ok_with_ocr_layer", 0.8, "invisible text over an image")


@pytest.mark.parametrize(
    ("mode", "verdict", "expected"),
    [
        ("off", SCAN, False), ("off", OK, False),
        ("auto", SCAN, True), ("auto", MOJIBAKE, True), ("auto", OK, False), ("auto", OCR_LAYER, False),
        ("force", OK, True), ("force", SCAN, True),
    ],
)
def test_which_pages_are_ocred(mode: str, verdict: PageVerdict, expected: bool) -> None:
    assert wants_ocr(mode, verdict) is expected  # type: ignore[arg-type]


def test_a_page_without_ocr_keeps_its_text_layer() -> None:
    settled = settle_page(3, "auto", "Some words here.", OK)
    assert settled.text == "Some words here."
    assert settled.source == PageSource(3, "ok", "text_layer", None, ocred=False)


def test_auto_keeps_the_ocr_text_when_it_reads_better() -> None:
    settled = settle_page(1, "auto", "", SCAN, ("Scanned words.", "tesseract", PageVerdict("ok", 0.95, "")))
    assert settled.text == "Scanned words."
    assert settled.source == PageSource(1, "ok", "ocr", "tesseract", ocred=True)


def test_auto_keeps_the_text_layer_when_the_ocr_reads_no_better() -> None:
    worse = PageVerdict("mojibake", 0.1, "")
    settled = settle_page(2, "auto", "привет".encode().decode("latin-1"), MOJIBAKE, ("@#! ~~", "tesseract", worse))
    assert settled.source == PageSource(2, "mojibake", "text_layer", None, ocred=True)
    assert settled.text == "", "a page still unusable gives no text"


def test_a_tie_keeps_the_text_layer() -> None:
    settled = settle_page(1, "auto", "", SCAN, ("", "rapidocr", SCAN))
    assert settled.source.text_source == "text_layer" and settled.source.ocred


def test_force_keeps_the_ocr_text_even_when_the_layer_reads_better() -> None:
    settled = settle_page(1, "force", "Exact words.", OK, ("Exaet words.", "tesseract", PageVerdict("ok", 0.5, "")))
    assert (settled.text, settled.source.text_source) == ("Exaet words.", "ocr")


def test_an_ocr_layer_page_keeps_its_text() -> None:
    settled = settle_page(1, "auto", "Already OCRed.", OCR_LAYER)
    assert settled.text == "Already OCRed." and settled.source.verdict == "ok_with_ocr_layer"


def test_a_chunk_is_ocr_when_any_of_its_pages_is() -> None:
    pages = {
        1: PageSource(1, "ok"),
        2: PageSource(2, "ok", "ocr", "tesseract", ocred=True),
        3: PageSource(3, "ok", "ocr", "rapidocr", ocred=True),
    }
    assert chunk_source(1, 1, pages) == ChunkSource("text_layer", None, ("ok",))
    assert chunk_source(1, 3, pages) == ChunkSource("ocr", "tesseract", ("ok", "ok", "ok"))
    assert chunk_source(3, 3, pages).ocr_engine == "rapidocr"


def test_the_document_counts_pages_by_verdict_and_source() -> None:
    pages = [
        PageSource(1, "ok"),
        PageSource(2, "ok", "ocr", "tesseract", ocred=True),
        PageSource(3, "no_text_layer", ocred=True),
        PageSource(4, "ok"),
    ]
    sources = DocumentSources.of(pages)
    assert sources.by_verdict == {"no_text_layer": 1, "ok": 3}
    assert sources.by_source == {"ocr": 1, "text_layer": 3}
    assert sources.ocr_pages == 2


def test_a_document_with_chunks_never_fails() -> None:
    assert document_failure([PageSource(1, "mojibake"), PageSource(2, "ok")], has_chunks=True) is None


def test_a_document_of_scans_ocr_could_not_read_fails_with_no_text() -> None:
    failure = document_failure([PageSource(1, "no_text_layer", ocred=True)] * 2, has_chunks=False)
    assert failure is not None and failure[0] == "no_text"
    assert "after OCR of 2" in failure[1]


def test_a_document_of_garbage_fails_with_unreadable_text() -> None:
    failure = document_failure([PageSource(1, "mojibake"), PageSource(2, "unmapped")], has_chunks=False)
    assert failure == ("unreadable_text", "no page of 2 holds readable text: mojibake 1, unmapped 1")


def test_a_blank_document_fails_with_no_text() -> None:
    assert document_failure([PageSource(1, "ok")], has_chunks=False) == (
        "no_text", "none of the 1 pages holds extractable text")
