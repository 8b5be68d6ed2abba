"""A NUL in a document's text never reaches a chunk: the text layer's, a table's cells and headings alike come out
with U+FFFD in its place (``text_layout.without_nul``), so no store or sink is handed one (PostgreSQL refuses it).

Real PDFs drawn by PyMuPDF, whose text extraction returns the NUL they were written with; the real tokenizer."""

from __future__ import annotations

from dataclasses import replace

import pymupdf
import pytest

from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.settings import OcrSettings
from docstream.tables import TableCell
from docstream_chunker.chunking import ChunkingConfig, Heading, PageText
from docstream_chunker.extraction import ChunkedDocument, PageOcr, chunk_bytes, extract_pages
from docstream_chunker.text_layout import NUL_STAND_IN, without_nul
from tests.fixtures.documents import make_scanned_copy
from tests.fixtures.tables import TableSpec, make_table_pdf, table_rows
from tests.unit.chunker.test_extraction_ocr import FakeEngine, Opener

CONFIG = ChunkingConfig(256, 32)


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


def _chunk(data: bytes, counter: ModelTokenCounter, ocr: PageOcr | None = None) -> ChunkedDocument:
    return chunk_bytes(data, config=CONFIG, counter=counter, max_pages=10, max_bytes=1 << 24, ocr=ocr)


def _pdf_with_nul() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Quarterly\x00report of the northern region", fontname="helv", fontsize=11)
    page.insert_text((72, 100), "Revenue grew by\x00\x00twelve percent over the year.", fontname="helv", fontsize=11)
    data: bytes = doc.tobytes()
    doc.close()
    return data


def test_pymupdf_returns_the_nul_written_into_a_pdf() -> None:
    with pymupdf.open("pdf", _pdf_with_nul()) as doc:
        assert "\x00" in doc[0].get_text()  # what the chunker would otherwise hand on


def test_a_nul_in_the_text_layer_becomes_u_fffd_in_every_chunk(counter: ModelTokenCounter) -> None:
    result = _chunk(_pdf_with_nul(), counter)
    text = "".join(c.text for c in result.chunks)
    assert result.chunks and "\x00" not in text
    assert f"Quarterly{NUL_STAND_IN}report" in text and f"by{NUL_STAND_IN * 2}twelve" in text


def test_a_nul_in_an_ocr_reading_becomes_u_fffd(counter: ModelTokenCounter) -> None:
    scan = make_scanned_copy(1, dpi=72)
    read = [text.replace(" ", "\x00", 3) for text in scan.page_texts]  # what an engine might hand back
    result = _chunk(scan.data, counter, PageOcr(OcrSettings(mode="auto"), opener=Opener(FakeEngine(read))))
    assert {s.text_source for s in result.chunk_sources} == {"ocr"}
    text = "".join(c.text for c in result.chunks)
    assert "\x00" not in text and text.count(NUL_STAND_IN) == 3


def test_a_nul_in_a_tables_cells_leaves_no_nul_in_the_table_chunk_or_its_cells(counter: ModelTokenCounter) -> None:
    rows = [list(row) for row in table_rows(4, 5, 3)]
    rows[2][1] = "North\x00east"
    pdf = make_table_pdf([TableSpec(tuple(tuple(r) for r in rows), caption="Table 1: Regions", style="grid")])
    with pymupdf.open("pdf", pdf.data) as doc:
        assert "\x00" in doc[0].get_text()
    result = _chunk(pdf.data, counter)
    [table] = [c for c in result.chunks if c.kind == "table"]
    assert table.table is not None
    cells = [cell.text for c in result.chunks if c.table is not None for cell in c.table.cells]
    assert f"North{NUL_STAND_IN}east" in cells and not any("\x00" in cell for cell in cells)
    assert f"North{NUL_STAND_IN}east" in table.text
    assert not any("\x00" in c.text for c in result.chunks)


def test_without_nul_keeps_every_offset_and_leaves_a_clean_page_as_it_is() -> None:
    clean = PageText(1, "Heading\n\nBody text", (Heading(9, "Heading"),))
    assert without_nul(clean) is clean
    dirty = PageText(2, "a\x00b\n\nc\td", (Heading(3, "T\x00"),))
    cleaned = without_nul(dirty)
    assert cleaned.text == f"a{NUL_STAND_IN}b\n\nc\td" and len(cleaned.text) == len(dirty.text)  # a tab stays
    assert cleaned.headings == (Heading(3, f"T{NUL_STAND_IN}"),)


def test_without_nul_cleans_a_tables_cells_and_caption() -> None:
    with pymupdf.open("pdf", make_table_pdf([TableSpec(table_rows(1, 3, 2), style="grid")]).data) as doc:
        [page] = list(extract_pages(doc))
    [table] = page.tables
    extra = TableCell(9, 0, text="x\x00")
    dirty = replace(page, tables=(replace(table, caption="Cap\x00", cells=(*table.cells, extra)),))
    [cleaned] = without_nul(dirty).tables
    assert cleaned.caption == f"Cap{NUL_STAND_IN}" and cleaned.cells[-1].text == f"x{NUL_STAND_IN}"
    assert cleaned.cells[:-1] == table.cells and cleaned.offset == table.offset
