"""docstream_chunker.chunking with tables: table chunks of their own, in order, spans that hold, no overlap."""

from __future__ import annotations

import random

import pytest

from docstream.tables import PageTable, TableCell
from docstream_chunker.chunking import (
    ChunkingConfig,
    Heading,
    PageText,
    chunk_document,
    chunker_settings,
)
from tests.unit.chunker.test_chunking import FakeCounter, JoinTaxCounter, paragraph

CONFIG = ChunkingConfig(max_tokens=60, overlap_tokens=8)


def _table(page: int, offset: int, rows: int = 4, caption: str | None = "Table 1: Figures") -> PageTable:
    cells = tuple(TableCell(r, c, 1, 1, f"h{c}" if r == 0 else f"r{r}c{c} value")
                  for r in range(rows) for c in range(3))
    return PageTable(page, (50.0, 100.0, 300.0, 200.0), rows, 3, cells, caption, offset)


def _paragraphs(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [paragraph(rng, rng.randint(2, 6)) for _ in range(count)]


def _page_with_table(number: int, seed: int, before: int, after: int, **table: int | str | None) -> PageText:
    first, second = _paragraphs(seed, before), _paragraphs(seed + 1, after)
    text = "\n\n".join(first + second)
    offset = len("\n\n".join(first)) + 2 if first and second else (0 if not first else len(text))
    return PageText(number, text, (), (_table(number, offset, **table),))  # type: ignore[arg-type]


def test_a_table_is_a_chunk_of_its_own_between_the_text_before_and_after_it() -> None:
    page = _page_with_table(1, 3, 2, 2)
    chunks = chunk_document([page], CONFIG, FakeCounter())
    kinds = [c.kind for c in chunks]
    assert kinds.count("table") == 1
    t = kinds.index("table")
    assert 0 < t < len(chunks) - 1, kinds
    table = chunks[t]
    assert table.text.startswith("Table 1: Figures\n\n| h0 | h1 | h2 |\n|---|---|---|\n| r1c0 value |")
    assert table.table is not None and table.table.caption == "Table 1: Figures" and table.table.page == 1
    assert (table.page_start, table.page_end, table.page_breaks) == (1, 1, ())
    texts = [c.text for c in chunks if c.kind == "text"]
    assert all("|" not in text and "Table 1" not in text for text in texts)
    before, after = page.text[: page.tables[0].offset], page.text[page.tables[0].offset :]
    assert chunks[t - 1].text.strip() in before and after.startswith(chunks[t + 1].text[:40])


def test_every_chunk_is_its_slice_of_the_document_text_and_in_order() -> None:
    pages = [_page_with_table(1, 5, 3, 4, rows=30), PageText(2, "\n\n".join(_paragraphs(9, 5))),
             _page_with_table(3, 7, 0, 2, rows=3, caption=None)]
    chunks = chunk_document(pages, CONFIG, FakeCounter())
    document = _document_text(chunks)
    for chunk in chunks:
        assert document[chunk.char_start : chunk.char_end] == chunk.text
    assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    parts = [c for c in chunks if c.kind == "table" and c.page_start == 1]
    assert len(parts) > 2 and all(c.token_count <= 60 for c in parts)
    assert [p.table.part for p in parts if p.table] == list(range(len(parts)))
    last_page = [c for c in chunks if c.page_start == 3]
    assert [c.kind for c in last_page][:2] == ["table", "text"], "a table at the top of its page comes first"


def _document_text(chunks: list) -> str:  # type: ignore[type-arg]
    """The document text as far as the chunks show it (each chunk's text at its offsets; overlaps agree)."""
    size = max(c.char_end for c in chunks)
    text = [" "] * size
    for chunk in chunks:
        for i, ch in enumerate(chunk.text):
            position = chunk.char_start + i
            assert text[position] in (" ", ch), "two chunks disagree on the document's text"
            text[position] = ch
    return "".join(text)


def test_no_overlap_crosses_a_table() -> None:
    page = _page_with_table(1, 11, 4, 4)
    chunks = chunk_document([page], CONFIG, FakeCounter())
    t = [c.kind for c in chunks].index("table")
    after = chunks[t + 1]
    assert after.char_start > chunks[t].char_end
    assert after.text.startswith(page.text[page.tables[0].offset :][:30]), "the text after a table starts fresh"
    assert chunks[t - 1].char_end < chunks[t].char_start


def test_a_page_that_is_only_a_table_and_tables_at_the_page_end() -> None:
    pages = [PageText(1, "", (), (_table(1, 0),)), PageText(2, "Some words here.", (), (_table(2, 16, caption=None),))]
    chunks = chunk_document(pages, CONFIG, FakeCounter())
    assert [(c.kind, c.page_start) for c in chunks] == [("table", 1), ("text", 2), ("table", 2)]


def test_two_tables_at_one_place_keep_their_order() -> None:
    text = "First paragraph here.\n\nSecond paragraph here."
    one, two = _table(1, 23), _table(1, 23, caption="Table 2: More")
    chunks = chunk_document([PageText(1, text, (), (one, two))], CONFIG, FakeCounter())
    assert [c.kind for c in chunks] == ["text", "table", "table", "text"]
    assert chunks[1].text.startswith("Table 1") and chunks[2].text.startswith("Table 2")


def test_headings_move_with_the_text_and_cover_the_table_after_them() -> None:
    page = _page_with_table(1, 13, 2, 2)
    offset = page.tables[0].offset
    page = PageText(1, page.text, (Heading(0, "Intro"), Heading(offset, "After")), page.tables)
    chunks = chunk_document([page], CONFIG, FakeCounter())
    t = [c.kind for c in chunks].index("table")
    assert chunks[t].heading == "Intro"
    assert chunks[t + 1].heading == "After"


def test_a_tokenizer_that_does_not_add_up_keeps_text_and_tables_within_the_budget() -> None:
    counter = JoinTaxCounter()
    chunks = chunk_document([_page_with_table(1, 17, 4, 4, rows=40)], CONFIG, counter)
    assert all(counter.count([c.text])[0] == c.token_count <= 60 for c in chunks)


def test_documents_without_tables_are_chunked_as_before() -> None:
    pages = [PageText(n, "\n\n".join(_paragraphs(n, 6))) for n in range(1, 4)]
    chunks = chunk_document(pages, CONFIG, FakeCounter())
    assert {c.kind for c in chunks} == {"text"} and all(c.table is None for c in chunks)


@pytest.mark.parametrize("tables", [False, True])
def test_the_settings_string_says_when_a_document_has_tables(tables: bool) -> None:
    settings = chunker_settings(CONFIG, FakeCounter(), tables=tables)
    assert settings.startswith("chunker=v1;max_tokens=60;overlap=8;budget=60;tokenizer=fake-4")
    assert settings.endswith(";tables=v3") is tables
