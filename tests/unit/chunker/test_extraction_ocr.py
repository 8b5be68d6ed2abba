"""chunk_bytes with OCR: which pages are OCRed under each mode, which text each keeps, what chunks record.

The engine here is a fake that reads back the text the fixture rendered into each page (the
real engines are tested on real scans in tests/integration/test_ocr_pipeline.py); everything
else is real: PyMuPDF documents made by tests/fixtures/documents.py, the verdicts, the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import pymupdf
import pytest

from docstream.errors import ConfigError, DocumentError
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.settings import OcrSettings
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import ChunkedDocument, PageOcr, chunk_bytes
from docstream_chunker.ocr import OcrEngine, OcrResult
from tests.fixtures.documents import make_pdf, make_scanned_copy, russian_paragraphs

CONFIG = ChunkingConfig(max_tokens=128, overlap_tokens=16)


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


class FakeEngine:
    """Reads each page as the fixture wrote it; counts the pages it was asked to read."""

    name = "fake"

    def __init__(self, texts: Sequence[str], *, installed: Sequence[str] = ("eng", "rus", "chi_sim"),
                 script: str | None = None) -> None:
        self.texts = texts
        self.pages: list[int] = []
        self.languages: list[tuple[str, ...]] = []
        self.installed = frozenset(installed)
        self.script = script
        self.detections = 0

    def detect_script(self, page: pymupdf.Page, *, dpi: int) -> str | None:
        self.detections += 1
        return self.script

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        self.pages.append(page.number + 1)
        self.languages.append(tuple(languages))
        return OcrResult(self.texts[page.number], self.name, 0.9)


class Opener:
    def __init__(self, engine: FakeEngine | None) -> None:
        self.engine = engine
        self.calls = 0

    def __call__(self, settings: OcrSettings) -> OcrEngine:
        self.calls += 1
        if self.engine is None:
            raise ConfigError("tesseract is not installed", code="ocr_unavailable")
        return self.engine


def _chunk(data: bytes, counter: ModelTokenCounter, ocr: PageOcr | None) -> ChunkedDocument:
    return chunk_bytes(data, config=CONFIG, counter=counter, max_pages=100, max_bytes=1 << 28, ocr=ocr)


def test_auto_ocrs_a_scan_and_marks_its_chunks(counter: ModelTokenCounter) -> None:
    scan = make_scanned_copy(2, dpi=72)
    opener = Opener(FakeEngine(scan.page_texts))
    ocr = PageOcr(OcrSettings(mode="auto"), opener=opener)

    result = _chunk(scan.data, counter, ocr)

    assert opener.calls == 1 and opener.engine is not None and opener.engine.pages == [1, 2]
    assert result.sources.by_source == {"ocr": 2} and result.sources.ocr_pages == 2
    assert {s.text_source for s in result.chunk_sources} == {"ocr"}
    assert {s.ocr_engine for s in result.chunk_sources} == {"fake"}
    assert "pagemark0001" in result.chunks[0].text
    assert len(result.chunk_sources) == len(result.chunks)


def test_auto_never_opens_the_engine_for_a_document_with_a_text_layer(counter: ModelTokenCounter) -> None:
    opener = Opener(FakeEngine(()))
    result = _chunk(make_pdf(3).data, counter, PageOcr(OcrSettings(mode="auto"), opener=opener))

    assert opener.calls == 0
    assert result.sources.by_source == {"text_layer": 3} and result.sources.by_verdict == {"ok": 3}
    assert all(s.text_source == "text_layer" and s.ocr_engine is None for s in result.chunk_sources)
    assert all(set(s.page_verdicts) == {"ok"} for s in result.chunk_sources)


def test_auto_ocrs_only_the_pages_that_need_it(counter: ModelTokenCounter) -> None:
    mixed = make_scanned_copy(3, dpi=72, text_pages=[1, 3])
    engine = FakeEngine(mixed.page_texts)
    result = _chunk(mixed.data, counter, PageOcr(OcrSettings(mode="auto"), opener=Opener(engine)))

    assert engine.pages == [2]
    assert result.sources.by_source == {"ocr": 1, "text_layer": 2}
    spans = [(c.page_start, c.page_end, s.text_source) for c, s in zip(result.chunks, result.chunk_sources,
                                                                        strict=True)]
    assert all(source == "ocr" for start, end, source in spans if start <= 2 <= end)
    assert all(source == "text_layer" for start, end, source in spans if end < 2 or start > 2)


def test_force_ocrs_every_page_and_off_none(counter: ModelTokenCounter) -> None:
    doc = make_pdf(2)
    forced = FakeEngine(doc.page_texts)
    result = _chunk(doc.data, counter, PageOcr(OcrSettings(mode="force"), opener=Opener(forced)))
    assert forced.pages == [1, 2] and result.sources.by_source == {"ocr": 2}

    off = Opener(FakeEngine(doc.page_texts))
    with pytest.raises(DocumentError) as err:
        _chunk(make_scanned_copy(1, dpi=72).data, counter, PageOcr(OcrSettings(mode="off"), opener=off))
    assert off.calls == 0 and err.value.code == "no_text"


def test_a_scan_without_an_engine_fails_with_no_text_and_says_why(counter: ModelTokenCounter) -> None:
    opener = Opener(None)
    ocr = PageOcr(OcrSettings(mode="auto"), opener=opener)
    for _ in range(2):
        with pytest.raises(DocumentError) as err:
            _chunk(make_scanned_copy(2, dpi=72).data, counter, ocr)
        assert err.value.code == "no_text"
        assert "OCR is unavailable: tesseract is not installed" in err.value.message
    assert opener.calls == 1, "an engine that cannot be opened is not tried again"


def test_ocr_text_that_reads_no_better_than_nothing_is_not_kept(counter: ModelTokenCounter) -> None:
    engine = FakeEngine(("~ ~ ~", "~ ~ ~"))
    with pytest.raises(DocumentError) as err:
        _chunk(make_scanned_copy(2, dpi=72).data, counter, PageOcr(OcrSettings(mode="auto"), opener=Opener(engine)))
    assert engine.pages == [1, 2] and err.value.code == "no_text"
    assert "after OCR of 2" in err.value.message


def test_without_ocr_pages_still_get_verdicts(counter: ModelTokenCounter) -> None:
    result = _chunk(make_pdf(2).data, counter, None)
    assert result.sources.by_verdict == {"ok": 2} and result.sources.ocr_pages == 0


ARABIC = "السنة الدراسية ثانوية المدينة امتحان مادة اللغة العربية للصف الثالث اقرأ النص التالي ثم أجب عن الأسئلة"
LATIN_NOISE = "doeuly all Aduull Bqy seal ygiSall digs rosa bal ladle aio poly smart tue lop"


class ScriptEngine(FakeEngine):
    """Reads a page as ``readings[languages]``: what Tesseract gives in each language."""

    def __init__(self, readings: dict[tuple[str, ...], str], **kw: object) -> None:
        super().__init__((), **kw)  # type: ignore[arg-type]
        self.readings = readings

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        self.pages.append(page.number + 1)
        self.languages.append(tuple(languages))
        return OcrResult(self.readings.get(tuple(languages), ""), self.name)


def test_a_scan_is_read_in_the_script_the_engine_detects_once_per_document(counter: ModelTokenCounter) -> None:
    engine = ScriptEngine({("ara",): ARABIC, ("eng",): LATIN_NOISE}, installed=("eng", "ara"), script="Arabic")
    result = _chunk(make_scanned_copy(2, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))

    assert engine.languages == [("ara",), ("ara",)]
    assert engine.detections == 1, "the document's first OCR page names its script for the others"
    assert result.sources.by_reason == {"ocr_reads_better": 2}
    assert result.sources.by_verdict == {"no_text_layer": 2}, "the verdict is the text layer's"
    assert ARABIC.split()[0] in result.chunks[0].text
    assert {r for s in result.chunk_sources for r in s.page_reasons} == {"ocr_reads_better"}


def test_latin_noise_from_a_page_in_another_script_is_never_kept(counter: ModelTokenCounter) -> None:
    # the engine detects Arabic, but the Arabic data reads nothing: English noise must not stand in for it
    engine = ScriptEngine({("eng",): LATIN_NOISE}, installed=("eng", "ara"), script="Arabic")
    with pytest.raises(DocumentError) as err:
        _chunk(make_scanned_copy(1, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.languages == [("ara",)] and err.value.code == "no_text"


def test_a_script_without_language_data_is_not_read_with_another_scripts(counter: ModelTokenCounter) -> None:
    engine = ScriptEngine({("eng",): LATIN_NOISE}, installed=("eng",), script="Arabic")
    with pytest.raises(DocumentError) as err:
        _chunk(make_scanned_copy(2, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.pages == [], "nothing was read in English"
    assert err.value.code == "ocr_unavailable_for_script"
    assert "ara" in err.value.message


def test_without_a_script_detection_all_the_configured_languages_read_the_scan(counter: ModelTokenCounter) -> None:
    russian = " ".join(russian_paragraphs(3, 2))
    engine = ScriptEngine({("eng", "rus"): russian}, installed=("eng", "rus"), script=None)
    result = _chunk(make_scanned_copy(1, dpi=72).data, counter,
                    PageOcr(OcrSettings(languages=["eng", "rus"]), opener=Opener(engine)))
    assert engine.languages == [("eng", "rus")] and result.sources.by_source == {"ocr": 1}
    assert result.chunks[0].text.startswith(russian[:20])


def test_a_han_page_detected_as_korean_is_read_again_in_the_script_its_reading_claims(
    counter: ModelTokenCounter,
) -> None:
    chinese = "我们今天学习中国历史。孩子们早上去学校，老师教他们历史。我们今天学习中国历史。"
    engine = ScriptEngine({("kor",): chinese[:20] + "가", ("chi_sim",): chinese},
                          installed=("eng", "kor", "chi_sim"), script="Korean")
    result = _chunk(make_scanned_copy(1, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.languages == [("kor",), ("chi_sim",)]
    assert result.chunks[0].text.startswith(chinese[:10])


def test_a_han_scan_of_unknown_variety_is_read_in_both_once_then_in_the_one_it_claims(
    counter: ModelTokenCounter,
) -> None:
    traditional = "我們今天學習中國歷史。孩子們早上去學校，老師教他們歷史，這是我們的國家。"
    engine = ScriptEngine({("chi_sim", "chi_tra"): traditional, ("chi_tra",): traditional},
                          installed=("eng", "chi_sim", "chi_tra"), script="Han")
    result = _chunk(make_scanned_copy(2, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.languages == [("chi_sim", "chi_tra"), ("chi_tra",)]
    assert result.sources.by_source == {"ocr": 2}


class SureEngine(ScriptEngine):
    """Like ScriptEngine, with the confidence Tesseract's command gives each language's reading."""

    def __init__(self, readings: dict[tuple[str, ...], tuple[str, float]], **kw: object) -> None:
        super().__init__({k: v[0] for k, v in readings.items()}, **kw)
        self.confidences = {k: v[1] for k, v in readings.items()}

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int,
                  clip: pymupdf.Rect | None = None) -> OcrResult:
        result = super().recognize(page, languages=languages, dpi=dpi)
        return OcrResult(result.text, self.name, self.confidences.get(tuple(languages), 0.1))


def test_a_cjk_reading_the_engine_is_unsure_of_is_tried_in_the_other_cjk_languages(
    counter: ModelTokenCounter,
) -> None:
    traditional = "我們今天學習中國歷史。孩子們早上去學校，老師教他們歷史，這是我們的國家。"
    noise = "갈갈갈 갈갈 갈갈갈갈 갈갈갈 갈갈 갈갈갈 갈갈"
    engine = SureEngine({("kor",): (noise, 0.27), ("chi_tra",): (traditional, 0.91), ("chi_sim",): (traditional, 0.5),
                         ("jpn",): (traditional, 0.4)},
                        installed=("eng", "kor", "chi_sim", "chi_tra", "jpn"), script="Korean")
    result = _chunk(make_scanned_copy(1, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.languages[0] == ("kor",) and set(engine.languages[1:]) == {("chi_sim",), ("chi_tra",), ("jpn",)}
    assert result.chunks[0].text.startswith(traditional[:10])


def test_a_sure_cjk_reading_is_kept_without_more_reads(counter: ModelTokenCounter) -> None:
    korean = "한국어 설명서입니다 아이들은 아침에 학교에 갑니다 선생님은 역사를 가르칩니다"
    engine = SureEngine({("kor",): (korean, 0.93)}, installed=("eng", "kor", "chi_tra"), script="Korean")
    _chunk(make_scanned_copy(1, dpi=72).data, counter, PageOcr(OcrSettings(), opener=Opener(engine)))
    assert engine.languages == [("kor",)]
