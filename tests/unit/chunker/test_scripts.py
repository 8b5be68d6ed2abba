"""docstream_chunker.scripts and the script-aware parts of docstream_chunker.page_quality (pure)."""

from __future__ import annotations

import pytest

from docstream_chunker.ocr import osd_script, tesseract_text, tsv_confidence
from docstream_chunker.page_quality import PageFacts, assess_page, script_quality, text_quality
from docstream_chunker.scripts import (
    OSD_LANGUAGES,
    SCRIPT_LANGUAGE,
    claimed_language,
    font_script,
    judged_text,
    letters_by_script,
    ocr_languages,
    osd_language,
    trial_languages,
)

# what PyMuPDF gives for a born-digital Arabic exam: presentation forms (U+FExx), as in issue 28
ARABIC_FORMS = "2018-2017 :ﺍﻟﺴﻨﺔﺍﻟﺪﺭﺍﺳﻴﺔ ﺛﺎﻧﻮﻳﺔ ﺍﻟﻤﺪﻳﻨﺔ ﺍﻣﺘﺤﺎﻥ ﻣﺎﺩﺓ ﺍﻟﻠﻐﺔ ﺍﻟﻌﺮﺑﻴﺔ ﻟﻠﺼﻒ ﺍﻟﺜﺎﻟﺚ؟ ﺍﻗﺮﺃ ﺍﻟﻨﺺ ﺍﻟﺘﺎﻟﻲ، ﺛﻢ ﺃﺟﺐ"
# full-width punctuation inside a line: NFKC makes it ASCII, which must still join the line's words
JAPANESE_LINE = "家族コーヒー駅まで働きます先生が！ニュース休みの日学生の犬話します食べます？パソコン話します（机）"
JAPANESE = "pLATEX2ε チートシート 日本語の文書を作成するためのコマンド一覧です。※ 子供たちは朝〜学校へ行きます → ①"
KOREAN = "한국어 설명서입니다. 아이들은 아침에 학교에 갑니다. 선생님은 역사를 가르칩니다. 설정(옵션)을 확인하세요!"
HEBREW = "שלום עולם. זהו מסמך בדיקה בעברית עם כמה משפטים־קצרים. הילדים הלכו לבית הספר בבוקר, והמורה"
HINDI = "भारत एक विशाल देश है। यहाँ अनेक भाषाएँ बोली जाती है। बच्चे सुबह विद्यालय जाते है॥"
TRADITIONAL = "我們今天學習中國歷史。孩子們早上去學校，老師教他們歷史，這是我們的國家。"
SIMPLIFIED = "我们今天学习中国历史。孩子们早上去学校，老师教他们历史，这是我们的国家。"
# what Tesseract's English data read from those pages (issue 28)
NOISE = ("2018-2017 :doeuly all Aduull Bqy0 seal ygiSall digs", "pRTEX 26 F— KF ay a peTEX hae tats ow",
         "OSA] obs OAS -S S Ape] ae ALS Hel AAI")


def _layer(text: str) -> PageFacts:
    # the page of the issue: a font without a Unicode map raised the bar to 0.7
    return PageFacts(text, glyphs=len("".join(text.split())), fonts=1, fonts_without_unicode=1, traced=True)


@pytest.mark.parametrize(
    ("text", "language"),
    [(ARABIC_FORMS, "ara"), (JAPANESE, "jpn"), (JAPANESE_LINE, "jpn"), (KOREAN, "kor"), (HEBREW, "heb"), (HINDI, "hin"),
     (TRADITIONAL, "chi_tra"), (SIMPLIFIED, "chi_sim")],
)
def test_a_correct_layer_in_any_script_is_ok_for_a_document_configured_for_english(text: str, language: str) -> None:
    verdict = assess_page(_layer(text), languages=["eng"])
    assert verdict.verdict == "ok", verdict
    assert verdict.language == language
    assert verdict.quality >= 0.8
    assert script_quality(text, language) >= 0.8


@pytest.mark.parametrize("noise", NOISE)
@pytest.mark.parametrize("language", ["ara", "jpn", "kor"])
def test_latin_noise_scores_nothing_in_another_script(noise: str, language: str) -> None:
    assert script_quality(noise, language) == 0.0
    assert text_quality(noise) > 0.5, "in English it looks like words: why the measure must be the page's script"


def test_judging_folds_presentation_forms_joiners_and_soft_hyphens() -> None:
    assert judged_text("ﺍﻟﺴﻨﺔ") == "السنة"
    assert judged_text("multi\u00adlingual z\u200bero\u200d join\u200e") == "multilingual zero join"
    assert judged_text("ＡＢＣ ﬁle") == "ABC file"
    assert judged_text("plain ascii") == "plain ascii"
    soft = "Interna\u00adtional organi\u00adsation of the infra\u00adstructure and its repre\u00adsentation " * 3
    assert text_quality(soft) == 1.0
    zwnj = "می\u200cخواهم این\u200cها را به\u200cخوبی بنویسم و می\u200cدانم که این کتاب\u200cها خوب هستند"
    assert assess_page(_layer(zwnj), languages=["eng"]).verdict == "ok"


def test_the_claim_follows_the_letters() -> None:
    assert claimed_language(letters_by_script("Россия большая страна"), 19) == "rus"
    assert claimed_language({"Latin": 100, "Cyrillic": 10}, 110) == "eng"
    assert claimed_language({"Latin": 60, "Kana": 20, "Han": 20}, 100) == "jpn"
    assert claimed_language({"Han": 100, "Hangul": 40}, 140) == "kor"
    assert claimed_language({"Han": 100}, 100, han_text=TRADITIONAL) == "chi_tra"
    assert claimed_language({"Han": 100}, 100, han_text=SIMPLIFIED) == "chi_sim"
    assert claimed_language({"Arabic": 10}, 100) is None, "garbage around a few letters claims nothing"
    assert claimed_language({}, 0) is None


def test_garbage_claims_no_script_and_a_misdecoding_the_script_it_reads_back_to() -> None:
    glyph_ids = "ŚƊƉƏƞ ƌƐƒƐƔƌƁ ƊƓƌƕƓƓƔƃƐ ƃƆƙƏƐ ťƃƐƂƐƅƁ ƓƍƐƃƁ Ɗ ƑƆƕƁƔƊ"
    verdict = assess_page(_layer(glyph_ids), languages=["eng"])
    assert verdict.verdict == "mojibake" and verdict.language is None
    cp1251 = "Жизнь коротка, искусство вечно. Свобода слова и печати есть основа".encode("cp1251").decode("cp1252")
    verdict = assess_page(_layer(cp1251), languages=["eng"])
    assert verdict.verdict == "mojibake" and verdict.language == "rus"


@pytest.mark.parametrize(
    ("language", "configured", "installed", "expected"),
    [
        ("ara", ["eng"], ["eng", "ara"], ("ara",)),
        ("ara", ["eng"], ["eng"], None),
        ("eng", ["deu", "eng"], ["eng", "deu"], ("deu", "eng")),
        ("rus", ["ukr", "eng"], ["eng", "ukr", "rus"], ("ukr",)),
        ("chi_sim", ["chi_tra"], ["chi_tra", "chi_sim"], ("chi_tra",)),
        ("jpn", ["chi_sim", "eng"], ["chi_sim", "jpn", "eng"], ("jpn",)),
        ("kor", ["rus"], ["rus", "kor"], ("kor",)),
        ("Tamil", ["eng"], ["eng"], None),
    ],
)
def test_ocr_reads_a_page_in_its_scripts_languages_and_never_another_scripts(
    language: str, configured: list[str], installed: list[str], expected: tuple[str, ...] | None
) -> None:
    assert ocr_languages(language, configured, installed) == expected


def test_osd_names_map_to_languages() -> None:
    output = "Page number: 0\nOrientation in degrees: 0\nScript: Arabic\nScript confidence: 71.11\n"
    assert osd_script(output) == "Arabic"
    assert osd_script("Too few characters. Skipping this page\n") is None
    assert {osd_language(name) for name in ("Japanese", "Korean", "Han", "Latin")} == {"jpn", "kor", "chi_sim", "eng"}
    assert osd_language("Tamil") is None
    assert set(OSD_LANGUAGES.values()) <= set(SCRIPT_LANGUAGE.values()) | {"chi_tra"}


def test_tesseracts_text_output_becomes_paragraphs_and_cjk_lines_join_without_spaces() -> None:
    output = "First line of a\nparagraph here.\n\nSecond paragraph.\n\n我们今天学习\n中国历史。\n\n\f"
    assert tesseract_text(output) == "First line of a paragraph here.\n\nSecond paragraph.\n\n我们今天学习中国历史。"


def test_the_confidence_of_a_reading_is_its_words_mean_weighted_by_length() -> None:
    header = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext"
    rows = ["1\t1\t0\t0\t0\t0\t0\t0\t100\t100\t-1\t", "5\t1\t1\t1\t1\t1\t0\t0\t10\t10\t90\tabcd",
            "5\t1\t1\t1\t1\t2\t0\t0\t10\t10\t30\tab", "5\t1\t1\t1\t1\t3\t0\t0\t10\t10\t95\t "]
    assert tsv_confidence("\n".join([header, *rows])) == round((90 * 4 + 30 * 2) / 6 / 100, 4)
    assert tsv_confidence(header) is None


@pytest.mark.parametrize(("names", "script"), [
    (["ABCDEF+LARM1000"], "Cyrillic"),  # TeX's LH fonts: T2A
    (["labx1200", "CMR10"], "Cyrillic"),  # a T2A font beside Computer Modern's own
    (["lcrm1000"], "Cyrillic"),  # T2C
    (["rxrm1000"], "Cyrillic"),  # X2
    (["WNCYR10"], "Cyrillic"),  # OT2
    (["CMR10-T2A"], "Cyrillic"),
    (["GRMN1000"], "Greek"),  # LGR (cbgreek)
    (["TimesNewRomanCyr,Bold"], "Cyrillic"),  # a code page's fonts
    (["Arial Cyr"], "Cyrillic"),
    (["ArialGreek-Bold"], "Greek"),
    (["TimesNewRomanHebrew"], "Hebrew"),
    (["SimplifiedArabic"], "Arabic"),
])
def test_font_names_that_say_a_script_give_it(names: list[str], script: str) -> None:
    assert font_script(names) == script


@pytest.mark.parametrize("names", [
    [], ["Helvetica"], ["ABCDEF+DejaVuSans"], ["CMR10"], ["SFRM1000"], ["Lato-Bold"], ["Lato1234"], ["LatoBlack"],
    ["Cyrus"], ["Gravity"], ["TimesNewRomanPS-BoldMT"], ["NimbusSans-Regular"],
    ["LARM1000", "GRMN1000"],  # two scripts: neither
])
def test_font_names_that_say_no_one_script_give_none(names: list[str]) -> None:
    assert font_script(names) is None


INSTALLED = ("ara", "chi_sim", "chi_tra", "ell", "eng", "heb", "hin", "jpn", "kor", "osd", "rus", "ukr")


@pytest.mark.parametrize(("language", "configured", "tried"), [
    # one reading per other script with data, in its configured languages first, else its own
    ("eng", ["eng"], [("rus",), ("ell",), ("ara",), ("heb",), ("hin",), ("kor",), ("jpn",), ("chi_sim",)]),
    ("rus", ["eng", "ukr"], [("eng",), ("ell",), ("ara",), ("heb",), ("hin",), ("kor",), ("jpn",), ("chi_sim",)]),
    ("deu", ["deu", "ukr"], [("ukr",), ("ell",), ("ara",), ("heb",), ("hin",), ("kor",), ("jpn",), ("chi_sim",)]),
    # Japanese data reads Han and Kana: neither is tried again for a Japanese reading; Chinese is another script's
    ("jpn", ["eng"], [("eng",), ("rus",), ("ell",), ("ara",), ("heb",), ("hin",), ("kor",)]),
])
def test_the_scripts_a_page_is_tried_in_are_each_other_installed_script_once(
    language: str, configured: list[str], tried: list[tuple[str, ...]],
) -> None:
    assert list(trial_languages(language, configured, INSTALLED)) == tried


def test_no_script_is_tried_without_its_language_data() -> None:
    assert trial_languages("eng", ["eng"], ["eng", "osd"]) == ()
    assert trial_languages("eng", ["eng", "rus"], ["eng", "rus"]) == (("rus",),)
