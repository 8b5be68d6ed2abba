"""chunk_bytes with page furniture: running heads and page numbers of a real PyMuPDF document leave the chunks'
text and ride on their records; the body, repeated paragraphs included, stays word for word.

Ground truth no one typed: the fixture draws the body paragraphs (``page_texts``) and, apart from them, a
running head and a page number on each page (tests/fixtures/documents.py ``make_pdf_of_paragraphs``).
"""

from __future__ import annotations

import pytest

from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream_chunker.chunking import PAGE_SEPARATOR, ChunkingConfig
from docstream_chunker.extraction import ChunkedDocument, chunk_bytes
from tests.fixtures.documents import make_pdf_of_paragraphs, paragraphs

CONFIG = ChunkingConfig(128, 16)
PAGES = 8
REFRAIN = "This notice is printed on every page on purpose, and it is body text that must stay in the chunks."


def _head(number: int) -> str:
    return f"Chapter {1 + number // 5}: Streams, partitions and offsets {number}"


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def manual() -> tuple[bytes, tuple[str, ...]]:
    pages = [[REFRAIN, *paragraphs(n, 2), REFRAIN] for n in range(PAGES)]
    pdf = make_pdf_of_paragraphs(pages, running_head=_head, page_numbers=True)
    return pdf.data, pdf.page_texts


def _chunk(data: bytes, counter: ModelTokenCounter, furniture: str) -> ChunkedDocument:
    return chunk_bytes(data, config=CONFIG, counter=counter, max_pages=100, max_bytes=1 << 26,
                       furniture=furniture)  # type: ignore[arg-type]


def _text(result: ChunkedDocument) -> str:
    """The document's text as the chunks hold it (overlaps once)."""
    text = ""
    for chunk in result.chunks:
        text = text[: chunk.char_start] + chunk.text
    return text


def test_running_heads_and_page_numbers_leave_the_chunks_and_the_body_stays_exact(
    manual: tuple[bytes, tuple[str, ...]], counter: ModelTokenCounter,
) -> None:
    data, page_texts = manual
    result = _chunk(data, counter, "auto")
    assert _text(result) == PAGE_SEPARATOR.join(page_texts)
    assert not any("Chapter" in c.text or "offsets" in c.text for c in result.chunks)
    assert sum(c.text.count(REFRAIN) for c in result.chunks) >= 2 * PAGES, "the repeated body paragraph stays"
    first = result.chunk_sources[0]
    assert first.page_furniture[:2] == (_head(1), "1")
    for chunk, source in zip(result.chunks, result.chunk_sources, strict=True):
        pages = range(chunk.page_start, chunk.page_end + 1)
        assert set(source.page_furniture) == {text for n in pages for text in (_head(n), str(n))}, chunk.page_start
    assert result.chunker_settings.endswith(";furniture=v1")


def test_with_furniture_off_the_text_keeps_them_and_the_chunk_ids_of_before(
    manual: tuple[bytes, tuple[str, ...]], counter: ModelTokenCounter,
) -> None:
    data, _ = manual
    result = _chunk(data, counter, "off")
    assert any(_head(3) in c.text for c in result.chunks)
    assert all(s.page_furniture == () for s in result.chunk_sources)
    assert "furniture" not in result.chunker_settings


def test_a_document_without_furniture_keeps_its_chunk_ids(counter: ModelTokenCounter) -> None:
    data = make_pdf_of_paragraphs([paragraphs(n, 2) for n in range(4)]).data
    auto, off = _chunk(data, counter, "auto"), _chunk(data, counter, "off")
    assert auto.chunker_settings == off.chunker_settings and auto.chunks == off.chunks
