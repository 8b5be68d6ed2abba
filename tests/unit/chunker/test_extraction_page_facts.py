"""docstream_chunker.extraction.page_facts on real generated PDFs (PyMuPDF), through to the page verdict."""

from __future__ import annotations

import pymupdf
import pytest

from docstream_chunker.extraction import block_flags, extract_pages, page_facts
from docstream_chunker.page_quality import PageFacts, assess_page, needs_ocr
from tests.fixtures.documents import VERDICT_KINDS, make_epub, make_pdf, make_png, make_verdict_pdf

EXPECTED = {
    "normal": "ok",
    "nearly_empty": "ok",
    "figure": "ok",
    "scan": "no_text_layer",
    "ocr_layer": "ok_with_ocr_layer",
    "nbsp": "unmapped",
    "spaces": "unmapped",
    "no_tounicode": "mojibake",
    "cp1251": "mojibake",
}


def facts_of(data: bytes) -> PageFacts:
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        return page_facts(doc[0])
    finally:
        doc.close()


def test_every_kind_has_its_expected_verdict() -> None:
    assert set(EXPECTED) == set(VERDICT_KINDS)


@pytest.mark.parametrize("kind", VERDICT_KINDS)
@pytest.mark.parametrize("languages", [["eng"], ["rus"], ["eng", "rus"]])
def test_generated_pages_get_their_verdicts(kind: str, languages: list[str]) -> None:
    verdict = assess_page(facts_of(make_verdict_pdf(kind)), languages=languages)
    assert verdict.verdict == EXPECTED[kind], verdict.reason
    assert needs_ocr(verdict) == (EXPECTED[kind] not in ("ok", "ok_with_ocr_layer"))


def test_an_image_only_page_has_no_glyphs_and_a_page_sized_image() -> None:
    facts = facts_of(make_verdict_pdf("scan"))
    assert (facts.text.strip(), facts.glyphs, facts.traced) == ("", 0, True)
    assert facts.image_area > 0.95


def test_invisible_text_over_an_image_is_counted_from_the_glyph_trace() -> None:
    facts = facts_of(make_verdict_pdf("ocr_layer"))
    assert facts.traced
    assert facts.glyphs > 500
    assert facts.invisible_glyphs == facts.glyphs
    assert "Student" in facts.text  # MuPDF extracts invisible text: it is the page's text


def test_nbsp_glyphs_are_drawn_but_map_to_nothing() -> None:
    for kind in ("nbsp", "spaces"):
        facts = facts_of(make_verdict_pdf(kind))
        assert facts.traced and facts.glyphs > 500
        assert not facts.text.split()  # nothing but (no-break) spaces
        assert facts.fonts == 1 and facts.fonts_without_unicode == 0  # the map exists; it maps to spaces


def test_a_font_without_tounicode_is_read_from_the_fonts() -> None:
    facts = facts_of(make_verdict_pdf("no_tounicode"))
    assert facts.traced
    assert (facts.fonts, facts.fonts_without_unicode) == (1, 1)
    assert not any("\u0400" <= c <= "\u04ff" for c in facts.text)  # no Cyrillic comes out
    verdict = assess_page(facts, languages=["rus"])
    assert "without a Unicode map" in verdict.reason


def test_a_legacy_8bit_mapping_gives_latin1_letters() -> None:
    facts = facts_of(make_verdict_pdf("cp1251"))
    assert facts.text.startswith("Æèçíü êîðîòêà")  # Жизнь коротка
    assert assess_page(facts, languages=["rus"]).quality < 0.1


@pytest.mark.parametrize("options", [{}, {"non_ascii": True}, {"two_column_every": 2}, {"toc": True}])
def test_normal_pages_stay_in_the_cheap_stage(options: dict[str, object]) -> None:
    data = make_pdf(6, seed=5, **options).data  # type: ignore[arg-type]
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        for page, text in zip(doc, extract_pages(doc), strict=True):
            facts = page_facts(page, text=text.text)
            assert not facts.traced
            assert facts.fonts == 0 and facts.invisible_glyphs == 0
            assert assess_page(facts, languages=["eng"]).verdict == "ok"
    finally:
        doc.close()


def test_the_text_is_extracted_when_not_given() -> None:
    data = make_verdict_pdf("normal")
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        given = page_facts(doc[0], text=next(extract_pages(doc)).text)
        read = page_facts(doc[0])
    finally:
        doc.close()
    assert given.text.split() == read.text.split()
    assert assess_page(given) == assess_page(read)


@pytest.mark.parametrize("kind", VERDICT_KINDS)
def test_blocks_with_their_images_give_the_same_facts_without_looking_at_resources(kind: str) -> None:
    doc = pymupdf.open(stream=make_verdict_pdf(kind), filetype="pdf")
    try:
        page = doc[0]
        blocks = page.get_text("blocks", flags=block_flags())
        text = "\n\n".join(b[4] for b in blocks if b[6] == 0)
        from_blocks = page_facts(page, text=text, blocks=blocks)
        from_page = page_facts(page, text=text)
    finally:
        doc.close()
    assert from_blocks.image_area == pytest.approx(from_page.image_area, abs=0.01)
    assert assess_page(from_blocks).verdict == assess_page(from_page).verdict == EXPECTED[kind]


def test_other_formats_a_picture_is_a_scan_and_an_epub_page_is_text() -> None:
    picture = pymupdf.open(stream=make_png(), filetype="png")
    book = pymupdf.open(stream=make_epub(), filetype="epub")
    try:
        assert assess_page(page_facts(picture[0])).verdict == "no_text_layer"
        facts = page_facts(book[0])
        assert not facts.traced
        assert assess_page(facts).verdict == "ok"
    finally:
        picture.close()
        book.close()
