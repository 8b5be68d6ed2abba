"""docstream_chunker.extraction on documents generated with PyMuPDF: formats, failures, reading order, headings."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pymupdf
import pytest

from docstream.errors import DocumentError
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream_chunker.chunking import PAGE_SEPARATOR, ChunkingConfig
from docstream_chunker.extraction import ChunkedDocument, chunk_bytes, detect_format, extract_pages, open_document
from tests.fixtures.documents import (
    GeneratedPdf,
    failure_documents,
    make_corrupt_pdf,
    make_epub,
    make_html_document,
    make_not_a_document,
    make_pdf,
    make_png,
    make_text_document,
    make_truncated_pdf,
    make_xps,
    page_marker,
)

CONFIG = ChunkingConfig(256, 32)


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


def chunk(data: bytes, counter: ModelTokenCounter, **options: object) -> ChunkedDocument:
    limits: dict[str, object] = {"max_pages": 5000, "max_bytes": 50 * 1024 * 1024}
    limits.update(options)
    return chunk_bytes(data, config=CONFIG, counter=counter, **limits)  # type: ignore[arg-type]


def words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


def pages_of(data: bytes) -> list[str]:
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        return [p.text for p in extract_pages(doc)]
    finally:
        doc.close()


@pytest.mark.parametrize(("code", "data"), list(failure_documents().items()))
def test_each_failure_kind_has_its_code(code: str, data: bytes, counter: ModelTokenCounter) -> None:
    with pytest.raises(DocumentError) as err:
        chunk(data, counter, filename="document.pdf", media_type="application/pdf")
    assert err.value.code == code
    assert err.value.message


def test_failure_codes_do_not_depend_on_hints(counter: ModelTokenCounter) -> None:
    for code, data in failure_documents().items():
        with pytest.raises(DocumentError) as err:
            chunk(data, counter)
        assert err.value.code == code


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_pdfs_are_corrupt(keep: float, counter: ModelTokenCounter) -> None:
    with pytest.raises(DocumentError) as err:
        chunk(make_truncated_pdf(pages=8, keep=keep), counter)
    assert err.value.code == "corrupt"


def test_garbage_after_a_pdf_header_is_corrupt(counter: ModelTokenCounter) -> None:
    with pytest.raises(DocumentError) as err:
        chunk(make_corrupt_pdf(), counter)
    assert err.value.code == "corrupt"


def test_random_bytes_are_not_a_document_even_when_called_pdf() -> None:
    with pytest.raises(DocumentError) as err:
        detect_format(make_not_a_document(seed=3), filename="x.pdf", media_type="application/pdf")
    assert err.value.code == "not_a_document"


def test_an_image_opens_but_has_no_text(counter: ModelTokenCounter) -> None:
    with pytest.raises(DocumentError) as err:
        chunk(make_png(), counter)
    assert err.value.code == "no_text"


def test_too_large_and_too_many_pages(counter: ModelTokenCounter) -> None:
    pdf = make_pdf(4).data
    with pytest.raises(DocumentError) as err:
        chunk(pdf, counter, max_bytes=len(pdf) - 1)
    assert err.value.code == "too_large"
    with pytest.raises(DocumentError) as err:
        chunk(pdf, counter, max_pages=3)
    assert err.value.code == "too_many_pages"
    assert chunk(pdf, counter, max_pages=4, max_bytes=len(pdf)).page_count == 4


def test_time_limit_is_checked_between_pages(counter: ModelTokenCounter) -> None:
    ticks: Iterator[float] = iter(float(i) for i in range(10_000))

    def clock() -> float:
        return next(ticks)

    with pytest.raises(DocumentError) as err:
        chunk(make_pdf(20).data, counter, timeout_s=5.0, clock=clock)
    assert err.value.code == "timeout"


@pytest.mark.parametrize(
    ("data", "filename", "media_type", "expected"),
    [
        (b"%PDF-1.7\n...", None, None, "application/pdf"),
        (make_epub(), None, None, "application/epub+zip"),
        (make_xps(), "a.xps", None, "application/vnd.ms-xpsdocument"),
        (make_text_document(), None, None, "text/plain"),
        (make_text_document(), "notes.md", None, "text/plain"),
        (make_html_document(), None, None, "text/html"),
        (b"<p>hi</p>", None, "text/html; charset=utf-8", "text/html"),
        (make_png(), "scan.pdf", "application/pdf", "image/png"),
    ],
)
def test_format_detection(data: bytes, filename: str | None, media_type: str | None, expected: str) -> None:
    assert detect_format(data, filename=filename, media_type=media_type).media_type == expected


@pytest.mark.parametrize(
    ("make", "filename", "media_type"),
    [
        (make_epub, "book.epub", None),
        (make_xps, "sheet.xps", "application/vnd.ms-xpsdocument"),
        (make_text_document, "notes.txt", "text/plain"),
        (make_html_document, "page.html", None),
    ],
)
def test_other_formats_take_the_same_path(
    make: Callable[[], bytes], filename: str, media_type: str | None, counter: ModelTokenCounter
) -> None:
    result = chunk(make(), counter, filename=filename, media_type=media_type)
    assert result.page_count >= 1 and result.chunks
    assert all(0 < c.token_count <= 254 for c in result.chunks)


def test_html_headings_are_text_too(counter: ModelTokenCounter) -> None:
    result = chunk(make_html_document(), counter)
    assert "Part 1" in result.chunks[0].text


def test_every_written_word_comes_back_in_page_order() -> None:
    generated = make_pdf(6, seed=4, non_ascii=True)
    extracted = pages_of(generated.data)
    assert len(extracted) == generated.page_count
    for written, got in zip(generated.page_texts, extracted, strict=True):
        assert words(got) == words(written)


def test_two_column_pages_read_column_by_column() -> None:
    generated = make_pdf(4, seed=9, two_column_every=2)
    extracted = pages_of(generated.data)
    for number in (2, 4):
        assert words(extracted[number - 1]) == words(generated.page_texts[number - 1])
        assert extracted[number - 1].startswith(page_marker(number))


def test_headings_from_font_size_when_there_is_no_outline() -> None:
    generated = make_pdf(12, seed=2, section_every=4)
    doc = pymupdf.open(stream=generated.data, filetype="pdf")
    found = [(p.number, h.title, h.offset) for p in extract_pages(doc) for h in p.headings]
    doc.close()
    assert [(n, t) for n, t, _ in found] == list(generated.headings)
    assert all(offset == 0 for *_, offset in found)


def test_headings_from_the_outline(counter: ModelTokenCounter) -> None:
    generated = make_pdf(12, seed=2, section_every=4, toc=True)
    doc = pymupdf.open(stream=generated.data, filetype="pdf")
    found = [(p.number, h.title) for p in extract_pages(doc) for h in p.headings]
    doc.close()
    assert found == list(generated.headings)
    result = chunk(generated.data, counter)
    for c in result.chunks:
        in_force = [title for page, title in generated.headings if page <= c.page_start]
        assert c.heading == in_force[-1]


def test_chunks_cover_the_document_with_right_pages(counter: ModelTokenCounter) -> None:
    generated: GeneratedPdf = make_pdf(30, seed=5, two_column_every=3, non_ascii=True)
    result = chunk(generated.data, counter)
    text = PAGE_SEPARATOR.join(pages_of(generated.data))
    assert result.page_count == 30 and result.media_type == "application/pdf"
    for c in result.chunks:
        assert c.text == text[c.char_start : c.char_end]
        assert counter.encode_count(c.text) == c.token_count <= 254
        for marker in re.findall(r"pagemark(\d{4})", c.text):
            assert c.page_start <= int(marker) <= c.page_end
    assert {m for c in result.chunks for m in re.findall(r"pagemark\d{4}", c.text)} == {
        page_marker(n) for n in range(1, 31)
    }


def test_same_bytes_same_chunks(counter: ModelTokenCounter) -> None:
    data = make_pdf(5, seed=8).data
    assert chunk(data, counter) == chunk(data, counter)


def test_an_encrypted_document_is_closed_after_refusal() -> None:
    data = failure_documents()["encrypted"]
    fmt = detect_format(data)
    with pytest.raises(DocumentError):
        open_document(data, fmt, max_pages=10)


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16"])
def test_plain_text_in_common_encodings(encoding: str, counter: ModelTokenCounter) -> None:
    text = "Grüße aus Zürich. Déjà vu, naïve café.\n\nA second paragraph here."
    result = chunk(text.encode(encoding), counter)
    assert result.media_type == "text/plain"
    assert [c.text for c in result.chunks] == [text]


def test_full_width_blocks_bound_the_columns_between_them() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    page.insert_textbox(pymupdf.Rect(54, 40, 558, 70), "Title across the page", fontsize=16, fontname="hebo")
    left = " ".join(f"left{i}" for i in range(60))
    right = " ".join(f"right{i}" for i in range(60))
    page.insert_textbox(pymupdf.Rect(54, 90, 290, 400), left, fontsize=10)
    page.insert_textbox(pymupdf.Rect(322, 90, 558, 400), right, fontsize=10)
    footer = "A footer line that runs across the whole width of the page, so it spans both of the columns."
    page.insert_textbox(pymupdf.Rect(54, 420, 558, 460), footer, fontsize=10)
    data = doc.tobytes()
    doc.close()
    [text] = pages_of(data)
    assert words(text) == words(f"Title across the page {left} {right} {footer}")


def test_body_text_alone_has_no_headings() -> None:
    generated = make_pdf(6, seed=12, section_every=0, two_column_every=2)
    doc = pymupdf.open(stream=generated.data, filetype="pdf")
    assert [h for p in extract_pages(doc) for h in p.headings] == []
    doc.close()
