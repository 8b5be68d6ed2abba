"""chunk_bytes with OCR: which pages are OCRed under each mode, which text each keeps, what chunks record.

The engine here is a fake that reads back the text the fixture rendered into each page (the
real engines are tested on real scans in tests/integration/test_ocr_pipeline.py); everything
else is real: PyMuPDF documents made by tests/fixtures/documents.py, the verdicts, the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import pymupdf
import pytest

from docstream.chunking import ChunkingConfig
from docstream.errors import ConfigError, DocumentError
from docstream.extraction import ChunkedDocument, PageOcr, chunk_bytes
from docstream.ocr import OcrEngine, OcrResult
from docstream.settings import OcrSettings
from docstream.tokenization import ModelTokenCounter, load_token_counter
from tests.fixtures.documents import make_pdf, make_scanned_copy

CONFIG = ChunkingConfig(max_tokens=128, overlap_tokens=16)


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


class FakeEngine:
    """Reads each page as the fixture wrote it; counts the pages it was asked to read."""

    name = "fake"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.pages: list[int] = []

    def recognize(self, page: pymupdf.Page, *, languages: Sequence[str], dpi: int) -> OcrResult:
        self.pages.append(page.number + 1)
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
