"""OCR in each page's real script, whatever its text layer claims: real Tesseract on layers that lie.

A manual made by an old producer opens with Latin pages, then sets Cyrillic or Greek in fonts
whose layer says nothing true of the script: glyph ids without a ToUnicode map, or each glyph's
legacy 8-bit byte (Windows-1251, KOI8-R, Windows-1253) read as Latin-1. Read once per document
in the script of its first pages, such a document completed as Latin look-alikes of its text
(``KTO HeT QOM`` for ``Кто нет дом``). Here every page is held as ``tests.fixtures.scripts.
make_misread_pdf`` makes it, with the text it shows as ground truth, and goes through the
chunker's real extraction (``extract_pages``, default OCR settings: mode auto, languages
``eng``; Debian's Tesseract and its language data, ``deploy/install-ocr.sh``).

Measured at 200 dpi (seed below): the re-decoded layers give their source back exactly (CER
0.0 %); OCR of the pages without a usable layer reads Cyrillic at 0.0 % CER and Greek at 4.5 %
(FreeSerif's accents). ``CER_BOUNDS``: the fidelity suite's bounds (tests/integration/test_fidelity.py), Greek's
twice what was measured here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pymupdf
import pytest

from docstream.settings import OcrSettings
from docstream_chunker.extraction import PageOcr, detect_format, extract_pages, open_document
from docstream_chunker.provenance import PageSource
from docstream_chunker.text_layout import character_error_rate
from tests.fixtures.scripts import MisreadPdf, make_misread_pdf, normalise_text, script_paragraphs, script_share

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CER_BOUNDS = {"latin": 0.05, "cyrillic": 0.05, "greek": 0.1}
MUPDF_CER_BOUNDS = {"latin": 0.05, "cyrillic": 0.05, "greek": 0.3}
"""The same through MuPDF's built-in Tesseract (no command), which reads Greek's accents and breathings worse (0.26
here, against at most 0.1 through the command; in a wrong script's letters a page is all errors)."""
"""Worst CER of a page's kept text against the text it shows, per script."""


@functools.cache
def _texts() -> dict[str, str]:
    return {script: "\n\n".join(script_paragraphs(script, 11, 3)) for script in ("latin", "cyrillic", "greek")}


@functools.cache
def _manual() -> tuple[MisreadPdf, tuple[str, ...]]:
    """Two Latin pages, then every way a layer lies about Cyrillic and Greek, and a mixed page; each page's script."""
    t = _texts()
    mixed = t["latin"][:400] + "\n\n" + t["cyrillic"]
    pages = [
        ("layer", t["latin"], "latin"), ("layer", t["latin"], "latin"),
        ("cp1251", t["cyrillic"], "cyrillic"), ("koi8_r", t["cyrillic"], "cyrillic"),
        ("cp1253", t["greek"], "greek"), ("unmapped", t["cyrillic"], "cyrillic"),
        ("scan", t["cyrillic"], "cyrillic"), ("unmapped", t["greek"], "greek"),
        ("cp1251", mixed, "mixed"), ("layer", t["latin"], "latin"), ("scan", t["greek"], "greek"),
    ]
    return make_misread_pdf([(kind, text) for kind, text, _ in pages]), tuple(script for _, _, script in pages)


def _extract(data: bytes, settings: OcrSettings) -> tuple[dict[int, str], list[PageSource]]:
    doc = open_document(data, detect_format(data), max_pages=100)
    sources: list[PageSource] = []
    try:
        texts = {page.number: page.text for page in extract_pages(doc, ocr=PageOcr(settings), sources=sources)}
    finally:
        doc.close()
    return texts, sources


@functools.cache
def _manual_read() -> tuple[dict[int, str], list[PageSource]]:
    return _extract(_manual()[0].data, OcrSettings())


def test_every_page_is_read_in_its_own_script_with_the_cer_per_script_in_bounds() -> None:
    pdf, scripts = _manual()
    texts, sources = _manual_read()
    report = []
    for source, script, shown in zip(sources, scripts, pdf.page_texts, strict=True):
        kept = texts.get(source.number, "")
        cer = character_error_rate(normalise_text(kept), normalise_text(shown))
        report.append((source.number, script, source.verdict, source.reason, source.ocr_languages, round(cer, 4)))
        if script == "mixed":
            assert source.reason == "layer_redecoded" and cer == 0.0, report[-1]
            continue
        assert script_share(kept, script) >= 0.98, f"page {source.number} kept another script's letters: {report[-1]}"
        assert cer <= CER_BOUNDS[script], report[-1]
    print("\n".join(map(str, report)))
    reasons = [s.reason for s in sources]
    assert reasons[2:5] == ["layer_redecoded"] * 3, "a known mis-decoding keeps the document's own characters"
    assert [s.verdict for s in sources][2:5] == ["mojibake"] * 3
    assert all(reasons[i] == "ocr_reads_better" for i in (5, 6, 7, 10))
    assert [s.ocr_languages for s in sources][5:8] == ["rus", "rus", "ell"]


def test_a_document_whose_layer_is_mojibake_never_completes_as_latin_noise() -> None:
    # the whole-corpus check: no page showing Cyrillic or Greek keeps Latin letters in their place
    _, scripts = _manual()
    texts, sources = _manual_read()
    for source, script in zip(sources, scripts, strict=True):
        kept = texts.get(source.number, "")
        if script in ("cyrillic", "greek"):
            assert kept and script_share(kept, "latin") < 0.02, (source, kept[:80])


def test_a_page_whose_script_has_no_language_data_is_flagged_not_read_in_latin(tmp_path: Path) -> None:
    # Tesseract with English and script detection only: the Cyrillic pages cannot be read in their script
    tessdata = Path(pymupdf.get_tessdata())
    for name in ("eng.traineddata", "osd.traineddata", "configs", "tessconfigs"):
        (tmp_path / name).symlink_to(tessdata / name)
    t = _texts()
    pdf = make_misread_pdf([("layer", t["latin"]), ("unmapped", t["cyrillic"]), ("scan", t["cyrillic"])])
    texts, sources = _extract(pdf.data, OcrSettings(tessdata=str(tmp_path)))
    assert [s.reason for s in sources] == ["text_layer", "ocr_unavailable_for_script", "ocr_unavailable_for_script"]
    assert [s.ocr_languages for s in sources][1:] == ["rus", "rus"]
    assert texts[1] and not texts.get(2, "").strip() and not texts.get(3, "").strip(), (
        "no Latin look-alikes of the Cyrillic pages are kept")


def _fonts_renamed(data: bytes, page: int, name: str) -> bytes:
    """``data`` with the fonts of its page ``page`` (0-based) named ``name``, as their producer named them."""
    with pymupdf.open(stream=data, filetype="pdf") as doc:
        for font in doc[page].get_fonts():
            doc.xref_set_key(font[0], "BaseFont", f"/{name}")
        return bytes(doc.tobytes(garbage=3, deflate=True))


@pytest.mark.parametrize(("font", "script", "language"), [("ABCDEF+LARM1000", "cyrillic", "rus"),
                                                         ("TimesNewRomanGreek,Bold", "greek", "ell")])
def test_a_page_whose_font_names_its_script_is_read_in_it_without_script_detection(
    tmp_path: Path, font: str, script: str, language: str,
) -> None:
    # Tesseract without its script detection data: only the font's name (TeX's T2A Computer Modern, a code page's
    # Greek font) says what the page after a Latin one is written in; its layer maps its glyphs to nothing
    tessdata = Path(pymupdf.get_tessdata())
    for name in ("eng.traineddata", f"{language}.traineddata", "configs", "tessconfigs"):
        (tmp_path / name).symlink_to(tessdata / name)
    t = _texts()
    pdf = make_misread_pdf([("layer", t["latin"]), ("unmapped", t[script])])

    texts, sources = _extract(_fonts_renamed(pdf.data, 1, font), OcrSettings(tessdata=str(tmp_path)))

    assert [(s.reason, s.ocr_languages) for s in sources] == [("text_layer", None), ("ocr_reads_better", language)]
    kept = texts[2]
    assert script_share(kept, script) >= 0.98, kept[:80]
    assert character_error_rate(normalise_text(kept), normalise_text(pdf.page_texts[1])) <= CER_BOUNDS[script]


@pytest.mark.parametrize("route", ["tesseract-command", "mupdf-built-in"])
def test_a_page_that_nothing_names_the_script_of_is_tried_in_each_installed_script_without_script_detection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    # Tesseract without its script detection data, and fonts that name no script: a Cyrillic page after a Latin
    # one, then a Greek page after it, each with a layer that maps its glyphs to nothing. Read in the script of
    # the page before, each reading is unsure; a strip of the page read in every installed script finds its own.
    # Without the `tesseract` command on the PATH, MuPDF's built-in Tesseract reads whole pages with no confidence:
    # the Cyrillic page came out as Latin look-alikes ("Jleto xne6 cnylwaTb") and the Greek one as Cyrillic ones,
    # both judged good text; their look-alike words make them unsure, and the page is read in each script
    tessdata = Path(pymupdf.get_tessdata())
    for name in ("eng.traineddata", "rus.traineddata", "ell.traineddata", "configs", "tessconfigs"):
        (tmp_path / name).symlink_to(tessdata / name)
    bounds = CER_BOUNDS
    if route == "mupdf-built-in":
        monkeypatch.setenv("PATH", str(tmp_path / "no-commands"))
        bounds = MUPDF_CER_BOUNDS
    t = _texts()
    pdf = make_misread_pdf([("layer", t["latin"]), ("unmapped", t["cyrillic"]), ("unmapped", t["greek"])])

    texts, sources = _extract(pdf.data, OcrSettings(tessdata=str(tmp_path)))

    assert [(s.reason, s.ocr_languages) for s in sources] == [
        ("text_layer", None), ("ocr_reads_better", "rus"), ("ocr_reads_better", "ell")]
    for number, script in ((2, "cyrillic"), (3, "greek")):
        kept = texts[number]
        assert script_share(kept, script) >= 0.98, kept[:80]
        cer = character_error_rate(normalise_text(kept), normalise_text(pdf.page_texts[number - 1]))
        assert cer <= bounds[script], (number, cer)

    # a document that opens with such a page: no page before it, read in the configured languages (eng), unsure
    first = make_misread_pdf([("unmapped", t["cyrillic"]), ("layer", t["latin"])])
    texts, sources = _extract(first.data, OcrSettings(tessdata=str(tmp_path)))
    assert [(s.reason, s.ocr_languages) for s in sources] == [("ocr_reads_better", "rus"), ("text_layer", None)]
    assert script_share(texts[1], "cyrillic") >= 0.98, texts[1][:80]
