"""docstream_chunker.chunking with fake token counters: bounds, boundaries, overlap, pages, headings, ids."""

from __future__ import annotations

import bisect
import itertools
import math
import random
import re
from collections.abc import Sequence

import pytest

from docstream.errors import InputError
from docstream_chunker.chunking import (
    PAGE_SEPARATOR,
    Chunk,
    ChunkingConfig,
    Heading,
    PageText,
    TokenCounter,
    chunk_document,
    chunker_settings,
    effective_budget,
)


class FakeCounter:
    """One token per started 4 characters of each whitespace-separated word: additive, like WordPiece."""

    name = "fake-4"
    additive = True

    def __init__(self, max_text_tokens: int | None = None) -> None:
        self.max_text_tokens = max_text_tokens
        self.calls = 0

    def count(self, texts: Sequence[str]) -> list[int]:
        self.calls += 1
        return [sum(math.ceil(len(w) / 4) for w in t.split()) for t in texts]

    def cut_points(self, text: str, max_tokens: int) -> list[int]:
        return list(range(4 * max_tokens, len(text), 4 * max_tokens))


class JoinTaxCounter(FakeCounter):
    """Not additive: every tenth word of a text costs one extra token (like merges across words)."""

    name = "fake-tax"
    additive = False

    def count(self, texts: Sequence[str]) -> list[int]:
        return [n + len(t.split()) // 10 for n, t in zip(super().count(texts), texts, strict=True)]


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def paragraph(rng: random.Random, sentences: int, words: tuple[int, int] = (4, 14)) -> str:
    return " ".join(sentence(rng, rng.randint(*words)) for _ in range(sentences))


def make_pages(seed: int, pages: int, paragraphs: tuple[int, int] = (1, 6)) -> list[PageText]:
    rng = random.Random(seed)
    return [
        PageText(n, "\n\n".join(paragraph(rng, rng.randint(1, 8)) for _ in range(rng.randint(*paragraphs))))
        for n in range(1, pages + 1)
    ]


def document_text(pages: Sequence[PageText]) -> str:
    return PAGE_SEPARATOR.join(p.text for p in pages)


def words_with_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


def page_starts_inside(pages: Sequence[PageText], chunk: Chunk) -> tuple[int, ...]:
    """Where each page after the chunk's first begins in the document text, for pages numbered 1, 2, 3..."""
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page.text) + len(PAGE_SEPARATOR)
    return tuple(starts[n - 1] for n in range(chunk.page_start + 1, chunk.page_end + 1))


def check_invariants(chunks: list[Chunk], pages: Sequence[PageText], counter: TokenCounter, budget: int) -> None:
    text = document_text(pages)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text == text[chunk.char_start : chunk.char_end]
        assert chunk.text == chunk.text.strip() and chunk.text
        assert 0 < chunk.token_count <= budget
        assert counter.count([chunk.text]) == [chunk.token_count]
        assert chunk.page_start <= chunk.page_end
        assert chunk.page_breaks == page_starts_inside(pages, chunk)
    starts = [c.char_start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    # every word is in some chunk, and chunks cover the text without gaps between them
    covered_to = 0
    for chunk in chunks:
        assert chunk.char_start <= max(covered_to, 0) or not text[covered_to : chunk.char_start].strip()
        covered_to = max(covered_to, chunk.char_end)
    assert not text[covered_to:].strip()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("max_tokens", "overlap"), [(16, 0), (32, 8), (64, 16), (256, 32)])
def test_random_documents_keep_every_invariant(seed: int, max_tokens: int, overlap: int) -> None:
    pages = make_pages(seed, pages=random.Random(seed).randint(1, 6))
    counter = FakeCounter()
    chunks = chunk_document(pages, ChunkingConfig(max_tokens, overlap), counter)
    check_invariants(chunks, pages, counter, max_tokens)


def test_no_words_give_no_chunks() -> None:
    pages = [PageText(1, ""), PageText(2, "  \n\n \t "), PageText(3, "")]
    assert chunk_document(pages, ChunkingConfig(), FakeCounter()) == []


def test_small_document_is_one_chunk_with_every_page() -> None:
    pages = [PageText(1, "Hello there."), PageText(2, ""), PageText(3, "General Kenobi.")]
    [chunk] = chunk_document(pages, ChunkingConfig(64, 8), FakeCounter())
    assert chunk.text == "Hello there.\n\n\n\nGeneral Kenobi."
    assert (chunk.page_start, chunk.page_end, chunk.char_start, chunk.char_end) == (1, 3, 0, len(chunk.text))
    assert chunk.token_count == 8  # hell|o ther|e. gene|ral keno|bi.


def test_chunk_ends_at_paragraph_end_when_it_keeps_the_chunk_half_full() -> None:
    # paragraphs of 10 tokens: two sentences of five 1-token words
    para = "Abcd abcd abcd abcd abc. Efgh efgh efgh efgh efg."
    pages = [PageText(1, "\n\n".join([para] * 5))]
    chunks = chunk_document(pages, ChunkingConfig(25, 0), FakeCounter())
    assert [c.token_count for c in chunks] == [20, 20, 10]
    assert all(c.text.endswith("efg.") for c in chunks)


def test_chunk_ends_at_sentence_end_inside_a_long_paragraph() -> None:
    para = " ".join(f"Wd{i:02d} abcd abcd abc." for i in range(20))  # sentences of 4 tokens
    chunks = chunk_document([PageText(1, para)], ChunkingConfig(10, 0), FakeCounter())
    assert all(c.text.endswith(".") for c in chunks)
    assert [c.token_count for c in chunks] == [8] * 10


def test_a_sentence_longer_than_the_budget_is_cut_between_words() -> None:
    text = " ".join(f"w{i:03d}" for i in range(100)) + "."
    chunks = chunk_document([PageText(1, text)], ChunkingConfig(16, 0), FakeCounter())
    assert [c.token_count for c in chunks] == [16] * 6 + [5]  # the last word "w099." is 2 tokens
    words = {m.group() for m in re.finditer(r"\S+", text)}
    for chunk in chunks:
        assert set(chunk.text.split()) <= words  # never a piece of a word


def test_cut_prefers_sentence_end_only_when_the_chunk_stays_half_full() -> None:
    short = "Abcd abcd."  # 2 tokens
    long = " ".join(["abcd"] * 40) + "."  # 40 tokens
    chunks = chunk_document([PageText(1, f"{short} {long}")], ChunkingConfig(20, 0), FakeCounter())
    assert chunks[0].token_count == 20  # cutting after the 2-token sentence would leave it nearly empty


def test_overlap_repeats_trailing_words_and_stays_within_overlap_tokens() -> None:
    text = " ".join(f"w{i:03d}" for i in range(200))
    chunks = chunk_document([PageText(1, text)], ChunkingConfig(20, 5), FakeCounter())
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.char_start < prev.char_end
        shared = text[nxt.char_start : prev.char_end]
        assert 1 <= len(shared.split()) <= 5
        assert prev.text.endswith(shared)


def test_overlap_prefers_whole_trailing_sentences() -> None:
    sentences = [f"S{i:02d} abcd abcd." for i in range(30)]  # 3 tokens each
    chunks = chunk_document([PageText(1, " ".join(sentences))], ChunkingConfig(15, 6), FakeCounter())
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.text.startswith("S") and nxt.char_start < prev.char_end


def test_zero_overlap_tiles_the_text() -> None:
    pages = make_pages(7, 3)
    chunks = chunk_document(pages, ChunkingConfig(24, 0), FakeCounter())
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.char_start > prev.char_end
    assert sum(c.token_count for c in chunks) == FakeCounter().count([document_text(pages)])[0]


def test_a_word_longer_than_the_budget_is_cut_at_token_boundaries() -> None:
    url = "https://example.org/" + "x" * 200  # 55 tokens of 4 characters
    text = f"See {url} now."
    chunks = chunk_document([PageText(1, text)], ChunkingConfig(16, 4), FakeCounter())
    assert [c.text for c in chunks[:1]] == ["See"]
    pieces = [c.text for c in chunks if c.text not in ("See", "now.")]
    assert "".join(pieces) == url
    assert all(0 < c.token_count <= 16 for c in chunks)
    assert chunks[-1].text == "now."


def test_pages_of_a_chunk() -> None:
    pages = [PageText(n, f"pg{n} " + " ".join(["abcd"] * 10) + ".") for n in range(1, 7)]
    chunks = chunk_document(pages, ChunkingConfig(25, 0), FakeCounter())
    for chunk in chunks:
        markers = [int(m) for m in re.findall(r"pg(\d+)", chunk.text)]
        assert all(chunk.page_start <= m <= chunk.page_end for m in markers)
        assert chunk.page_start == min([*markers, chunk.page_start])
    assert (chunks[0].page_start, chunks[-1].page_end) == (1, 6)


def test_page_numbers_are_taken_from_the_pages() -> None:
    pages = [PageText(7, "Seven abcd."), PageText(9, "Nine abcd.")]
    [chunk] = chunk_document(pages, ChunkingConfig(), FakeCounter())
    assert (chunk.page_start, chunk.page_end) == (7, 9)
    nine = len("Seven abcd." + PAGE_SEPARATOR)
    assert chunk.page_breaks == (nine, nine)  # page 8, missing, begins (empty) where page 9 does


def _page_of(chunk: Chunk, offset: int) -> int:
    return chunk.page_start + bisect.bisect_right(chunk.page_breaks, offset)


def test_page_breaks_are_where_the_later_pages_of_a_chunk_begin() -> None:
    pages = [PageText(n, f"pg{n} " + " ".join(["abcd"] * 10) + ".") for n in range(1, 5)]
    text = document_text(pages)
    [whole] = chunk_document(pages, ChunkingConfig(64, 0), FakeCounter())  # pages 1-4 in one chunk
    assert whole.page_breaks == tuple(text.index(f"pg{n}") for n in (2, 3, 4))
    for n in range(1, 5):
        assert _page_of(whole, text.index(f"pg{n}")) == n
        assert _page_of(whole, text.index(f"pg{n}") - 1) == max(n - 1, 1)  # the separator: the page before

    spans = {(c.page_start, c.page_end): c for c in chunk_document(pages, ChunkingConfig(30, 0), FakeCounter())}
    two = next(c for (first, last), c in spans.items() if last == first + 1)
    assert two.page_breaks == (text.index(f"pg{two.page_end}"),)
    assert two.char_start < two.page_breaks[0] < two.char_end


def test_a_chunk_spanning_three_pages_has_two_breaks() -> None:
    pages = [PageText(n, f"pg{n} abcd abcd.") for n in (1, 2, 3)] + [PageText(4, " ".join(["abcd"] * 30) + ".")]
    text = document_text(pages)
    first, *rest = chunk_document(pages, ChunkingConfig(16, 0), FakeCounter())
    assert (first.page_start, first.page_end) == (1, 3)  # cut where page 4's paragraph starts
    assert first.page_breaks == (text.index("pg2"), text.index("pg3"))
    assert all(c.page_breaks == () for c in rest)


def test_a_one_page_chunk_has_no_breaks() -> None:
    pages = [PageText(1, " ".join(["Abcd abcd abcd."] * 20)), PageText(2, "pg2 abcd.")]
    chunks = chunk_document(pages, ChunkingConfig(16, 0), FakeCounter())
    assert chunks[0].page_end == chunks[0].page_start == 1
    assert all(c.page_breaks == () for c in chunks if c.page_start == c.page_end)


def test_heading_in_force_at_the_chunk_start() -> None:
    intro = "Intro\n\n" + " ".join(["Abcd abcd abcd."] * 10)
    methods = "Methods\n\n" + " ".join(["Efgh efgh efgh."] * 10)
    pages = [
        PageText(1, "Preface abcd."),
        PageText(2, intro, (Heading(0, "Intro"),)),
        PageText(3, methods, (Heading(0, "Methods"),)),
    ]
    chunks = chunk_document(pages, ChunkingConfig(12, 0), FakeCounter())
    assert chunks[0].heading is None
    for chunk in chunks[1:]:
        expected = "Methods" if chunk.page_start == 3 else "Intro"
        assert chunk.heading == expected


def test_same_input_same_chunks() -> None:
    pages = make_pages(3, 5)
    first = chunk_document(pages, ChunkingConfig(40, 8), FakeCounter())
    second = chunk_document(iter(pages), ChunkingConfig(40, 8), FakeCounter())
    assert first == second


def test_counts_once_per_page() -> None:
    counter = FakeCounter()
    pages = make_pages(5, 9)
    chunk_document(pages, ChunkingConfig(40, 8), counter)
    assert counter.calls == len(pages)


@pytest.mark.parametrize("seed", range(6))
def test_non_additive_counter_still_keeps_the_bound_exactly(seed: int) -> None:
    pages = make_pages(seed, 4)
    counter = JoinTaxCounter()
    chunks = chunk_document(pages, ChunkingConfig(30, 6), counter)
    check_invariants(chunks, pages, counter, 30)


def test_the_model_caps_the_budget() -> None:
    counter = FakeCounter(max_text_tokens=20)
    config = ChunkingConfig(256, 4)
    assert effective_budget(config, counter) == 20
    chunks = chunk_document(make_pages(1, 3), config, counter)
    assert max(c.token_count for c in chunks) <= 20
    assert chunker_settings(config, counter) == "chunker=v1;max_tokens=256;overlap=4;budget=20;tokenizer=fake-4"


def test_settings_string_changes_with_every_setting() -> None:
    counter = FakeCounter()
    strings = {
        chunker_settings(ChunkingConfig(256, 32), counter),
        chunker_settings(ChunkingConfig(128, 32), counter),
        chunker_settings(ChunkingConfig(256, 16), counter),
        chunker_settings(ChunkingConfig(256, 32), JoinTaxCounter()),
    }
    assert len(strings) == 4


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1), (8, 20)])
def test_impossible_configs_are_refused(max_tokens: int, overlap: int) -> None:
    with pytest.raises(InputError) as err:
        ChunkingConfig(max_tokens, overlap)
    assert err.value.code == "invalid_options"


def test_overlap_above_the_model_capped_budget_is_refused() -> None:
    with pytest.raises(InputError) as err:
        chunk_document(make_pages(1, 1), ChunkingConfig(512, 300), FakeCounter(max_text_tokens=254))
    assert err.value.code == "invalid_options"


def test_odd_whitespace_becomes_spaces_with_offsets_kept() -> None:
    text = "Alpha\u2028beta\x0cgamma.\u2029Delta."
    [chunk] = chunk_document([PageText(1, text)], ChunkingConfig(), FakeCounter())
    assert chunk.text == "Alpha beta gamma. Delta."
    assert (chunk.char_start, chunk.char_end) == (0, len(text))


def test_fake_counters_satisfy_the_protocol() -> None:
    assert isinstance(FakeCounter(), TokenCounter)
    assert isinstance(JoinTaxCounter(), TokenCounter)
