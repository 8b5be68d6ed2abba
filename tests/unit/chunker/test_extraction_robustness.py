"""Damaged inputs the extraction fuzz found (docs/chunking.md "Robustness"), minimised and made by code.

Before the fix each ended in ``extraction_failed`` (the extraction child's catch-all, logged as an
error with a traceback): MuPDF's typed errors (``pymupdf.mupdf.FzErrorFormat``, ...) are no
``RuntimeError``, so the "one damaged page" handler let them through, and a page count that MuPDF
cannot establish escaped ``open_document``.
"""

from __future__ import annotations

import re

import pymupdf
import pytest

from docstream.errors import DocumentError
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes, mupdf_errors
from tests.fixtures.documents import make_pdf, make_png, make_zero_page_pdf, page_marker


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


def _chunk(data: bytes, counter: ModelTokenCounter, filename: str = "doc.pdf") -> list[str]:
    result = chunk_bytes(data, config=ChunkingConfig(256, 32), counter=counter, max_pages=100, max_bytes=1 << 24,
                         filename=filename)
    return [chunk.text for chunk in result.chunks]


def _second_page_in_a_cycle(data: bytes) -> bytes:
    """The page tree's second kid referenced as ``N -3 R``: MuPDF loads page 1, page 2 raises ``cycle in page tree``."""
    damaged, count = re.subn(rb"(/Kids\[\d+ 0 R \d+) 0 R", rb"\1 -3 R", data)
    assert count == 1
    return damaged


def test_mupdf_typed_errors_are_caught_with_the_others() -> None:
    caught = mupdf_errors()
    assert issubclass(pymupdf.mupdf.FzErrorFormat, caught)
    assert issubclass(pymupdf.FileDataError, caught)
    assert not issubclass(pymupdf.mupdf.FzErrorFormat, RuntimeError)  # why the tuple exists


def test_a_page_mupdf_cannot_load_is_empty_and_the_other_pages_still_count(counter: ModelTokenCounter) -> None:
    data = _second_page_in_a_cycle(make_pdf(2, seed=3).data)
    with pytest.raises(pymupdf.mupdf.FzErrorFormat):
        pymupdf.open(stream=data, filetype="pdf").load_page(1)
    text = " ".join(_chunk(data, counter))
    assert page_marker(1) in text and page_marker(2) not in text


def test_a_pdf_whose_page_count_mupdf_cannot_establish_is_corrupt(counter: ModelTokenCounter) -> None:
    data = make_zero_page_pdf().replace(b"/Count 0", b"/Count -18")
    with pytest.raises(DocumentError) as caught:
        _chunk(data, counter)
    assert caught.value.code == "corrupt"


def test_a_truncated_image_has_no_text_rather_than_failing_extraction(counter: ModelTokenCounter) -> None:
    data = make_png()[:-20]
    with pytest.raises(DocumentError) as caught:
        _chunk(data, counter, "picture.png")
    assert caught.value.code == "no_text"
