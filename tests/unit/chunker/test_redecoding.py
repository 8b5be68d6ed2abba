"""docstream_chunker.redecoding: layers that are a legacy encoding's bytes read as Latin-1, found and read back (pure).

Ground truth no one typed: each source text is encoded in the legacy code page a producer wrote
it in and decoded as Windows-1252, as MuPDF reads a font whose encoding claims Latin-1; the
re-decoding must give the source back exactly. Latin-language pages with accents, which the
same bytes could have been, must never be "repaired".
"""

from __future__ import annotations

import pytest

from docstream_chunker.page_quality import PageFacts, assess_page
from docstream_chunker.redecoding import DETECTED_BYTES, SINGLE_BYTE, redecode, redecoded_text
from tests.fixtures.scripts import script_paragraphs

RUSSIAN = " ".join(script_paragraphs("cyrillic", 7, 2))
GREEK = " ".join(script_paragraphs("greek", 7, 2))
UKRAINIAN = "Все людські істоти народжуються вільними і рівними у своїй гідності та правах. Вони наділені розумом"
LATIN = {
    "fra": "L'été dernier, à Paris, nous avons mangé une crème brûlée ; c'était délicieux, déjà ! Où êtes-vous ?",
    "deu": "Die Größe der Straße in Zürich ist über 40 Meter, sagte der Bürgermeister gestern früh. Ärger über Öl.",
    "spa": "El niño comió piñas en el año pasado; ¿dónde está la canción? Mañana iré a la montaña con mi señora.",
    "por": "A educação não é só a transmissão de informações; é a formação da consciência e da razão crítica.",
    "isl": "Öll erum við fædd frjáls og jöfn að virðingu og réttindum. Þau eru gædd skynsemi og samvisku.",
    "dan": "Alle mennesker er født frie og lige i værdighed og rettigheder. De er udstyret med fornuft.",
    "fin": "Kaikki ihmiset syntyvät vapaina ja tasavertaisina arvoltaan ja oikeuksiltaan. Heille on annettu järki.",
}
"""Latin-language text in Windows-1252's letters (Polish, Czech or Turkish letters are not in it: no Latin-1 bytes)."""


def _as_latin1(text: str, encoding: str) -> str:
    data = text.encode(encoding)
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


@pytest.mark.parametrize(
    ("source", "encoding"),
    [(RUSSIAN, "cp1251"), (RUSSIAN, "koi8_r"), (UKRAINIAN, "cp1251"), (GREEK, "cp1253"), (LATIN["fra"], "utf-8")],
)
def test_a_legacy_encoding_read_as_latin1_is_found_and_read_back_exactly(source: str, encoding: str) -> None:
    found = redecode(_as_latin1(source, encoding))
    assert found is not None
    assert found.text == source
    assert found.encoding in (*SINGLE_BYTE, "utf_8")


@pytest.mark.parametrize("language", sorted(LATIN))
def test_a_latin_page_with_accents_is_no_misdecoding(language: str) -> None:
    text = LATIN[language]
    assert redecode(text) is None
    verdict = assess_page(PageFacts(text, glyphs=len(text)), languages=["eng"])
    assert verdict.verdict == "ok" and verdict.redecoded is None


def test_a_page_of_english_beside_cp1251_russian_is_mojibake_in_russian_not_ok() -> None:
    english = "The TeX Users Group, pdfTeX version 1.40, Computer Modern fonts by Donald Knuth and Leslie Lamport. "
    layer = english * 2 + _as_latin1(RUSSIAN, "cp1251")
    verdict = assess_page(PageFacts(layer, glyphs=len(layer)), languages=["eng"])
    assert verdict.verdict == "mojibake" and verdict.language == "rus"
    assert verdict.redecoded is not None and verdict.redecoded.text == english * 2 + RUSSIAN
    assert "cp1251" in verdict.reason


def test_text_that_latin1_cannot_have_come_from_is_left_alone() -> None:
    assert redecode(RUSSIAN) is None, "real Cyrillic is not a mis-decoding"
    assert redecode("plain ASCII text, nothing to read back") is None
    assert redecode(_as_latin1(RUSSIAN, "cp1251") + " \u2192 \u4e2d") is None


def test_a_hostile_layer_is_detected_on_a_bounded_sample_and_read_back_whole() -> None:
    source = RUSSIAN * (4 * DETECTED_BYTES // len(RUSSIAN) + 1)
    found = redecode(_as_latin1(source, "cp1251"))
    assert found is not None and found.text == source


def test_each_byte_maps_to_one_character() -> None:
    assert redecoded_text("Æèçíü, ASCII stays", "cp1251") == "Жизнь, ASCII stays"
