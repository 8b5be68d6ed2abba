"""docstream_chunker.page_quality: the page verdicts and text_quality, on PageFacts built by hand (pure)."""

from __future__ import annotations

import pytest

from docstream_chunker.page_quality import (
    MIN_GLYPHS,
    MIN_TEXT_CHARS,
    MOJIBAKE_QUALITY,
    MOJIBAKE_QUALITY_NO_UNICODE,
    QUALITY_SAMPLE_CHARS,
    SCAN_IMAGE_AREA,
    UNEXPECTED_SCRIPT_WEIGHT,
    PageFacts,
    assess_page,
    expected_scripts,
    lookalike_share,
    needs_ocr,
    text_quality,
)
from tests.fixtures.documents import paragraphs

ENGLISH = " ".join(paragraphs(1, 3))
GERMAN = "Die Größe der Straße in Zürich ist über 40 Meter, sagte der Bürgermeister gestern früh."
FRENCH = "L'été dernier, à Paris, nous avons mangé une crème brûlée ; c'était délicieux, déjà !"
RUSSIAN = "Жизнь коротка, искусство вечно. Свобода слова и печати есть основа общества, сказал он в 2020 году."
CHINESE = "东京是日本的首都，北京是中国的首都。汉字很有意思，我们每天学习新的词语。"
# Russian through a legacy font: each letter's Windows-1251 byte read as Windows-1252
CP1251_AS_LATIN1 = RUSSIAN.encode("cp1251").decode("cp1252")
# Russian as UTF-8 bytes read as Latin-1: the classic double encoding
UTF8_AS_LATIN1 = RUSSIAN.encode("utf-8").decode("cp1252", errors="replace")
# Glyph ids read as code points (an Identity-H font without ToUnicode), spaces as U+0001
GLYPH_IDS = "ŚƊƉƏƞ\x01ƌƐƒƐƔƌƁ\r\x01ƊƓƌƕƓƓƔƃƐ\x01ƃƆƙƏƐ\x0f\x01ťƃƐƂƐƅƁ\x01ƓƍƐƃƁ\x01Ɗ\x01ƑƆƕƁƔƊ"


def facts(text: str, **kw: object) -> PageFacts:
    glyphs = len("".join(text.split())) + text.count("\xa0")
    return PageFacts(text, **{"glyphs": glyphs, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "languages"),
    [(ENGLISH, ["eng"]), (GERMAN, ["deu"]), (FRENCH, ["fra"]), (RUSSIAN, ["rus"]), (CHINESE, ["chi_sim"]),
     (RUSSIAN, ["eng", "rus"]), (ENGLISH, ["rus"])],
)
def test_real_text_in_its_languages_scores_high(text: str, languages: list[str]) -> None:
    assert text_quality(text, languages=languages) >= 0.9
    assert assess_page(facts(text), languages=languages).verdict == "ok"


def test_a_real_script_that_was_not_expected_counts_less_but_stays_usable() -> None:
    for text in (RUSSIAN, CHINESE):
        quality = text_quality(text, languages=["eng"])
        assert UNEXPECTED_SCRIPT_WEIGHT - 0.05 <= quality < 0.9
        assert assess_page(facts(text), languages=["eng"]).verdict == "ok"
    assert text_quality(RUSSIAN, languages=["rus"]) > text_quality(RUSSIAN, languages=["eng"])


@pytest.mark.parametrize("garbage", [CP1251_AS_LATIN1, UTF8_AS_LATIN1, GLYPH_IDS])
@pytest.mark.parametrize("languages", [["rus"], ["eng"], ["eng", "rus"]])
def test_latin_letters_where_cyrillic_was_written_are_mojibake(garbage: str, languages: list[str]) -> None:
    verdict = assess_page(facts(garbage), languages=languages)
    assert verdict.verdict == "mojibake"
    assert verdict.quality < 0.1
    assert needs_ocr(verdict)


def test_the_better_text_of_a_page_wins_by_text_quality() -> None:
    assert text_quality(RUSSIAN, languages=["rus"]) > text_quality(CP1251_AS_LATIN1, languages=["rus"])
    assert text_quality(ENGLISH) > text_quality(ENGLISH.replace("e", "\ufffd"))
    assert text_quality(ENGLISH) > text_quality(ENGLISH.replace(" ", "\xa0", 40))


def test_accents_of_latin_languages_are_no_script_mismatch() -> None:
    words = "été où déjà ça Ångström señor naïve façade Zürich größe ÉTÉ"
    assert text_quality(words, languages=["fra"]) == 1.0


@pytest.mark.parametrize(
    "garbage",
    ["\ufffd" * 30, "\ue001\ue002\ue003 \ue004\ue005\ue006 " * 5, "ab\x01cd\x02ef\x03 gh\x04ij " * 5, ""],
)
def test_replacement_private_use_and_control_characters_score_zero(garbage: str) -> None:
    assert text_quality(garbage) == 0.0


def test_numbers_and_punctuation_count_neither_way() -> None:
    assert text_quality("Total 12 34.5 (6) — 7,8% — 2024: done.") == 1.0
    assert text_quality("12 34 56 7.8 9,10 — %") == 0.0  # nothing to judge
    assert assess_page(facts("12 34 56 7.8 9,10 11 12 13 14 15 16 17 18")).verdict == "ok"


def test_long_texts_are_sampled_evenly() -> None:
    long = " ".join(paragraphs(2, 30))
    assert len(long) > 4 * QUALITY_SAMPLE_CHARS
    assert text_quality(long) == 1.0
    garbage = long.replace("a", "\ufffd").replace("e", "\ufffd")
    assert text_quality(garbage) < 0.2  # garbage everywhere is seen in the sample


def test_languages_map_to_scripts_and_unknown_codes_to_latin() -> None:
    assert expected_scripts(["eng", "deu"]) == {"Latin"}
    assert expected_scripts(["rus", "eng"]) == {"Cyrillic", "Latin"}
    assert expected_scripts(["jpn"]) == {"Han", "Kana"}
    assert expected_scripts(["xyz"]) == {"Latin"}


def test_an_image_only_page_is_no_text_layer() -> None:
    verdict = assess_page(PageFacts("", image_area=0.95, traced=True))
    assert verdict.verdict == "no_text_layer"
    assert needs_ocr(verdict)
    assert assess_page(PageFacts("12\n", glyphs=2, image_area=SCAN_IMAGE_AREA)).verdict == "no_text_layer"


def test_nearly_empty_pages_and_figures_are_ok_not_ocred() -> None:
    assert assess_page(PageFacts("7\n", glyphs=1)).verdict == "ok"
    assert assess_page(PageFacts("", image_area=SCAN_IMAGE_AREA - 0.01)).verdict == "ok"
    caption = "Figure 3: the distribution of measured values over the season."
    verdict = assess_page(facts(caption, image_area=0.4))
    assert verdict.verdict == "ok"
    assert not needs_ocr(verdict)
    assert not needs_ocr(assess_page(facts(caption, image_area=0.9)))  # a full-page figure with its caption


def test_glyphs_that_come_out_as_nbsp_spaces_or_fffd_are_unmapped() -> None:
    for text in ("\xa0" * 300, " " * 300, "\ufffd" * 300, "\xa0\ufffd " * 100 + "a few words"):
        verdict = assess_page(PageFacts(text, glyphs=300, fonts=1, fonts_without_unicode=1, traced=True))
        assert verdict.verdict == "unmapped", text[:20]
        assert needs_ocr(verdict)
    assert assess_page(PageFacts(" " * 10, glyphs=MIN_GLYPHS - 1, traced=True)).verdict == "ok"


def test_invisible_text_over_an_image_is_an_ocr_layer() -> None:
    text = ENGLISH
    glyphs = len(text)
    verdict = assess_page(PageFacts(text, glyphs=glyphs, invisible_glyphs=glyphs, image_area=1.0, traced=True))
    assert verdict.verdict == "ok_with_ocr_layer"
    assert not needs_ocr(verdict)
    # invisible text without an image under it is no OCR layer; a garbage OCR layer is mojibake
    assert assess_page(PageFacts(text, glyphs=glyphs, invisible_glyphs=glyphs, traced=True)).verdict == "ok"
    garbage = PageFacts(CP1251_AS_LATIN1, glyphs=len(CP1251_AS_LATIN1), invisible_glyphs=len(CP1251_AS_LATIN1),
                        image_area=1.0, traced=True)
    assert assess_page(garbage, languages=["rus"]).verdict == "mojibake"


def test_a_font_without_a_unicode_map_raises_the_bar() -> None:
    # about 60% words: ok on its own, mojibake when a font of the page has no Unicode map
    text = " ".join(["word"] * 5 + ["x\x01y"] * 3)
    quality = text_quality(text)
    assert MOJIBAKE_QUALITY <= quality < MOJIBAKE_QUALITY_NO_UNICODE
    assert assess_page(facts(text)).verdict == "ok"
    verdict = assess_page(facts(text, fonts=1, fonts_without_unicode=1, traced=True))
    assert verdict.verdict == "mojibake"
    assert "without a Unicode map" in verdict.reason


def test_a_short_text_is_judged_only_from_min_text_chars() -> None:
    short = CP1251_AS_LATIN1[: MIN_TEXT_CHARS - 5]
    assert assess_page(facts(short), languages=["rus"]).verdict == "ok"
    assert assess_page(facts(CP1251_AS_LATIN1[:80]), languages=["rus"]).verdict == "mojibake"


# readings of MuPDF's built-in Tesseract of a Cyrillic page in eng, and of a Greek page in rus (tests/integration/
# test_ocr_script_per_page.py): look-alikes of the page's letters in the wrong script
CYRILLIC_IN_LATIN = "Jleto xne6 cnylwaTb NOTOM, TaM MONOKO paboTa XOpoliMN G6oNbWON TaM MHe 3UMa? MuTb Takon Neto"
GREEK_IN_CYRILLIC = "Про! илтёра Еёро», шаль ола: отиу баВабо илиеёра х=циоуас ‚огуоро, трёуо драфо. Деу оубролос"


@pytest.mark.parametrize("text", [ENGLISH, GERMAN, FRENCH, RUSSIAN])
def test_real_words_are_no_look_alikes(text: str) -> None:
    assert lookalike_share(text) == 0.0


def test_a_name_with_a_capital_inside_counts_as_one_word_of_its_text() -> None:
    assert lookalike_share("the iPhone they sold in 2020 was new") == round(1 / 7, 4)


def test_a_reading_in_the_wrong_script_is_full_of_look_alikes() -> None:
    assert lookalike_share(CYRILLIC_IN_LATIN) > 0.3
    assert 0.02 < lookalike_share(GREEK_IN_CYRILLIC) < 0.1  # fewer: Cyrillic has fewer of Greek's look-alikes
    assert lookalike_share("") == lookalike_share("12 34, 56") == 0.0
