"""docstream_chunker.provenance: which pages are OCRed, which text each keeps, and what chunks and documents record."""

from __future__ import annotations

from typing import get_args

import pytest

from docstream_chunker.page_quality import PageVerdict
from docstream_chunker.provenance import (
    REASONS,
    ChunkSource,
    DocumentSources,
    OcrReading,
    PageSource,
    Reason,
    agrees,
    chunk_source,
    document_failure,
    ocr_wins,
    settle_page,
    time_limit,
    wants_ocr,
)
from docstream_chunker.redecoding import Redecoding

OK = PageVerdict("ok", 0.9, "a text layer")
SCAN = PageVerdict("no_text_layer", 0.0, "no text, images cover the page")
MOJIBAKE = PageVerdict("mojibake", 0.2, "latin-1 where cyrillic is expected")
OCR_LAYER = PageVerdict("ok_with_ocr_layer", 0.8, "invisible text over an image")
RUSSIAN = "Кто нет дом лето ответ перед. Друг а лучше книга сидеть и! Потому мы работать вот можно"
MISDECODED = PageVerdict("mojibake", 0.3, "cp1251 read as Latin-1", "rus", Redecoding(RUSSIAN, "cp1251"))


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


def _reading(text: str, verdict: PageVerdict, languages: tuple[str, ...] = ("eng",),
             engine: str = "tesseract", page_language: str | None = None) -> OcrReading:
    return OcrReading(text, engine, languages, verdict, page_language)


READ_OK = PageVerdict("ok", 0.95, "a text layer", "eng")


def test_a_page_without_ocr_keeps_its_text_layer() -> None:
    settled = settle_page(3, "auto", "Some words here.", OK)
    assert settled.text == "Some words here."
    assert settled.source == PageSource(3, "ok", "text_layer", None, ocred=False, reason="text_layer")


def test_auto_keeps_the_ocr_text_when_it_reads_better_and_records_the_layers_verdict() -> None:
    settled = settle_page(1, "auto", "", SCAN, _reading("Scanned words of a page.", READ_OK))
    assert settled.text == "Scanned words of a page."
    assert settled.source == PageSource(1, "no_text_layer", "ocr", "tesseract", True, "ocr_reads_better", "eng")


def test_auto_keeps_the_text_layer_when_the_ocr_reads_no_better() -> None:
    worse = PageVerdict("mojibake", 0.1, "")
    settled = settle_page(2, "auto", "привет".encode().decode("latin-1"), MOJIBAKE, _reading("@#! ~~", worse))
    assert settled.source == PageSource(2, "mojibake", "text_layer", None, True, "ocr_not_better", "eng")
    assert settled.text == "", "a page still unusable gives no text"


def test_a_tie_keeps_the_text_layer() -> None:
    settled = settle_page(1, "auto", "", SCAN, _reading("", SCAN, engine="rapidocr"))
    assert settled.source.text_source == "text_layer" and settled.source.ocred
    assert settled.source.reason == "ocr_not_better"


def test_latin_noise_never_wins_on_a_page_of_another_script() -> None:
    # what OCR in English read from an Arabic exam (issue 28): word-like, and all in the wrong script
    noise = "2018-2017 doeuly all Aduull Bqy seal ygiSall digs rosa bal ladle aio poly"
    broken = PageVerdict("mojibake", 0.3, "quality 0.3 < 0.7", None)
    in_arabic = _reading(noise, READ_OK, ("ara", "eng"), page_language="ara")
    assert not ocr_wins("", broken, in_arabic)
    settled = settle_page(1, "auto", "", broken, in_arabic)
    assert (settled.text, settled.source.text_source, settled.source.reason) == ("", "text_layer", "ocr_not_better")
    arabic = "السنة الدراسية ثانوية المدينة امتحان مادة اللغة العربية للصف الثالث"
    read = _reading(arabic, PageVerdict("ok", 1.0, "", "ara"), ("ara", "eng"), page_language="ara")
    assert ocr_wins("", broken, read)


def test_a_reading_in_the_configured_languages_is_judged_in_the_one_it_claims() -> None:
    russian = _reading("Жизнь коротка, искусство вечно.", PageVerdict("ok", 1.0, "", "rus"), ("eng", "rus"))
    assert russian.judged_in == "rus"
    outside = _reading("Some English words here.", PageVerdict("ok", 1.0, "", "eng"), ("rus",))
    assert outside.judged_in == "rus", "a claim outside the languages it was read in does not count"


def test_ocr_never_replaces_a_usable_layer_in_auto() -> None:
    assert not ocr_wins("Exact words of the page.", OK, _reading("Exact words of the page.", READ_OK))


def test_force_keeps_the_ocr_text_even_when_the_layer_reads_better() -> None:
    settled = settle_page(1, "force", "Exact words.", OK, _reading("Exaet words.", PageVerdict("ok", 0.5, "")))
    assert (settled.text, settled.source.text_source, settled.source.reason) == ("Exaet words.", "ocr", "ocr_forced")


def test_an_ocr_layer_page_keeps_its_text() -> None:
    settled = settle_page(1, "auto", "Already OCRed.", OCR_LAYER)
    assert settled.text == "Already OCRed." and settled.source.verdict == "ok_with_ocr_layer"


@pytest.mark.parametrize("skipped", ["ocr_unavailable_for_script", "ocr_unavailable", "ocr_failed"])
def test_a_page_ocr_skipped_keeps_its_layer_and_says_why(skipped: Reason) -> None:
    settled = settle_page(1, "auto", "", SCAN, skipped=skipped, wanted="tha")
    assert settled.text == ""
    assert settled.source == PageSource(1, "no_text_layer", "text_layer", None, False, skipped, "tha")


def test_an_unusable_layer_with_ocr_off_says_so() -> None:
    assert settle_page(1, "off", "", SCAN).source.reason == "ocr_off"
    assert set(REASONS) == set(get_args(Reason))


def test_a_chunk_is_ocr_when_any_of_its_pages_is() -> None:
    pages = {
        1: PageSource(1, "ok"),
        2: PageSource(2, "no_text_layer", "ocr", "tesseract", ocred=True, reason="ocr_reads_better"),
        3: PageSource(3, "no_text_layer", "ocr", "rapidocr", ocred=True, reason="ocr_reads_better"),
    }
    assert chunk_source(1, 1, pages) == ChunkSource("text_layer", None, ("ok",), ("text_layer",))
    assert chunk_source(1, 3, pages) == ChunkSource(
        "ocr", "tesseract", ("ok", "no_text_layer", "no_text_layer"),
        ("text_layer", "ocr_reads_better", "ocr_reads_better"),
    )
    assert chunk_source(3, 3, pages).ocr_engine == "rapidocr"


def test_a_document_whose_script_ocr_cannot_read_fails_with_its_own_code() -> None:
    pages = [PageSource(1, "no_text_layer", reason="ocr_unavailable_for_script", ocr_languages="tha")] * 2
    failure = document_failure(pages, has_chunks=False)
    assert failure is not None and failure[0] == "ocr_unavailable_for_script"
    assert "tha" in failure[1] and "deploy/install-ocr.sh" in failure[1]


def test_the_document_counts_pages_by_verdict_and_source() -> None:
    pages = [
        PageSource(1, "ok"),
        PageSource(2, "ok", "ocr", "tesseract", ocred=True),
        PageSource(3, "no_text_layer", ocred=True),
        PageSource(4, "ok"),
    ]
    sources = DocumentSources.of(pages)
    assert sources.by_reason == {"text_layer": 4}
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


def test_the_time_limit_grows_per_ocr_page_up_to_its_ceiling() -> None:
    assert time_limit(300.0, 0, 60.0, 3600.0) == 300.0, "a document without OCR never pays for it"
    assert time_limit(300.0, 10, 60.0, 3600.0) == 900.0
    assert time_limit(300.0, 150, 60.0, 3600.0) == 3600.0
    assert time_limit(300.0, 5, 60.0, None) == 600.0
    assert time_limit(300.0, 5, 60.0, 100.0) == 300.0, "a ceiling below the base never shrinks it"


def test_each_page_the_layout_model_reads_adds_its_allowance_beside_ocrs() -> None:
    assert time_limit(300.0, 0, 60.0, 3600.0, layout_pages=0, per_layout_page_s=10.0) == 300.0
    assert time_limit(300.0, 2, 60.0, 3600.0, layout_pages=30, per_layout_page_s=10.0) == 720.0
    assert time_limit(300.0, 0, 60.0, 3600.0, layout_pages=1000, per_layout_page_s=10.0) == 3600.0


def _read(text: str) -> OcrReading:
    return OcrReading(text, "tesseract", ("rus",), PageVerdict("ok", 1.0, "a text layer", "rus"), "rus", 0.95)


def test_a_misdecoded_layer_keeps_its_redecoded_text_where_ocr_agrees() -> None:
    ocr_text = RUSSIAN.replace("лучше", "лучшe")  # one letter misread
    settled = settle_page(3, "auto", "Êòî íåò", MISDECODED, _read(ocr_text))
    assert settled.text == RUSSIAN
    assert settled.source.reason == "layer_redecoded" and settled.source.text_source == "text_layer"
    assert settled.source.ocred and settled.source.verdict == "mojibake"


def test_a_misdecoded_layer_ocr_disagrees_with_keeps_the_ocr_text() -> None:
    other = "Зима год старый река эти были? Же писать чтобы потому между так после жизнь"
    settled = settle_page(3, "auto", "Êòî íåò", MISDECODED, _read(other))
    assert settled.text == other and settled.source.reason == "ocr_reads_better"


@pytest.mark.parametrize("skipped", ["ocr_unavailable_for_script", "ocr_unavailable", "ocr_failed", None])
def test_a_misdecoded_layer_ocr_could_not_read_keeps_its_redecoded_text(skipped: Reason | None) -> None:
    settled = settle_page(3, "auto" if skipped else "off", "Êòî íåò", MISDECODED, None, skipped=skipped)
    assert settled.text == RUSSIAN and settled.source.reason == "layer_redecoded" and not settled.source.ocred


def test_force_keeps_the_ocr_text_over_a_redecoded_layer() -> None:
    settled = settle_page(3, "force", "Êòî íåò", MISDECODED, _read(RUSSIAN))
    assert settled.source.reason == "ocr_forced"


def test_agreement_counts_the_layers_words_found_in_the_reading() -> None:
    assert agrees("один два три четыре", "Один, два; три пять")
    assert not agrees("один два три четыре", "один пять шесть семь")
    assert not agrees("", "один"), "no words: no agreement"
