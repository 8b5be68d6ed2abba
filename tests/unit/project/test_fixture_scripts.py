"""The script fixtures (tests.fixtures.scripts): text layers in the right script, image-only copies without one."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pymupdf
import pytest

from tests.fixtures import scripts
from tests.fixtures.scripts import (
    SCRIPT_LANGUAGES,
    SCRIPTS,
    ScriptPdf,
    make_script_pdf,
    normalise_text,
    rasterise,
    script_share,
    script_words,
)


@functools.cache
def _one_page(script: str) -> ScriptPdf:
    return make_script_pdf(script, 1, seed=3)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_has_a_text_layer_in_its_own_script(script: str) -> None:
    pdf = _one_page(script)
    assert (pdf.script, pdf.language, pdf.page_count) == (script, SCRIPT_LANGUAGES[script], 1)
    with pymupdf.open(stream=pdf.data, filetype="pdf") as doc:
        assert tuple(page.get_text() for page in doc) == pdf.page_texts
    text = pdf.page_texts[0]
    assert len(normalise_text(text)) > 500, "most of the page is filled"
    share = script_share(text, script)
    print(f"{script}: {share:.1%} of letters in the script; {normalise_text(text)[:80]}")
    assert share >= 0.8


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_keeps_enough_words_after_the_round_trip(script: str) -> None:
    words = script_words(script)
    assert len(words) >= 60
    assert len(set(words)) == len(words)


def test_the_same_seed_gives_the_same_document_and_another_seed_another() -> None:
    assert make_script_pdf("greek", 1, seed=3).page_texts == _one_page("greek").page_texts
    assert make_script_pdf("greek", 1, seed=4).page_texts != _one_page("greek").page_texts


def test_pages_follow_one_another() -> None:
    pdf = make_script_pdf("korean", 2, seed=1)
    assert pdf.page_count == 2
    assert all(script_share(text, "korean") >= 0.8 for text in pdf.page_texts)
    assert pdf.page_texts[0] != pdf.page_texts[1]


@pytest.mark.parametrize("script", ["latin", "arabic", "han_simplified"])
def test_rasterise_leaves_no_text_layer_and_keeps_pages_and_their_size(script: str) -> None:
    source = make_script_pdf(script, 2, seed=5) if script == "latin" else _one_page(script)
    scan = rasterise(source.data, 72)
    with pymupdf.open(stream=source.data) as original, pymupdf.open(stream=scan) as copy:
        assert copy.page_count == original.page_count
        for before, after in zip(original, copy, strict=True):
            assert after.rect == before.rect
            assert after.get_text().strip() == ""
            assert len(after.get_images()) == 1


def test_normalise_text_folds_presentation_forms_and_drops_invisible_marks() -> None:
    assert normalise_text("\ufeb3\ufe8e\ufecb\ufe94") == "ساعة"  # presentation forms → letters
    assert normalise_text(" a\u200bb\u00adc \u200e\u202bd\u202c\u2067e\u2069\n\t f\u200d ") == "abc de f"
    assert normalise_text("ﬁle\u3000２") == "file 2"


def test_script_share_counts_letters_only() -> None:
    assert script_share("Привет, мир! 123", "cyrillic") == 1.0
    assert script_share("Привет world", "cyrillic") == pytest.approx(6 / 11)
    assert script_share("123 ...", "latin") == 0.0


def test_a_missing_font_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = dataclasses.replace(scripts._SCRIPTS["latin"], font=Path("/usr/share/fonts/truetype/dejavu/Gone.ttf"))
    monkeypatch.setitem(scripts._SCRIPTS, "latin", missing)
    with pytest.raises(FileNotFoundError, match="fonts-dejavu-core"):
        scripts.script_font("latin")
    with pytest.raises(FileNotFoundError, match="fonts-dejavu-core"):
        make_script_pdf("latin", 1)


def test_the_fonts_are_installed_files_of_the_packages_named_or_built_in() -> None:
    built_in = {"china-s", "china-t", "japan", "Droid Sans Fallback (built into MuPDF)"}
    fonts = {script: scripts.script_font(script) for script in SCRIPTS}
    files = [Path(font) for font in fonts.values() if font not in built_in]
    assert all(font.is_file() for font in files)
    assert {scripts._FONT_PACKAGES[font.parent] for font in files} == set(scripts.SCRIPT_FONT_PACKAGES)
    assert {"han_simplified", "han_traditional", "japanese", "korean"} == {s for s, f in fonts.items() if f in built_in}
