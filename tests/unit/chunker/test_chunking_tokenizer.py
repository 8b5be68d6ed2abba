"""The chunker with the real all-MiniLM-L6-v2 tokenizer: counts are exact and the model never truncates."""

from __future__ import annotations

import random

import pytest

from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream_chunker.chunking import ChunkingConfig, PageText, TokenCounter, chunk_document, effective_budget
from tests.fixtures.documents import paragraphs

MODEL_ID = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, MODEL_ID)


def test_loads_the_bundled_tokenizer(counter: ModelTokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    assert counter.name == MODEL_ID
    assert counter.additive
    assert counter.special_tokens == 2
    assert counter.max_text_tokens == 254  # max_seq_length 256 less [CLS] and [SEP]


def test_counts_match_a_plain_encode_with_and_without_the_cache(counter: ModelTokenCounter) -> None:
    texts = ["hello", "Grüße", "日本語", "https://example.org/a/b?c=d", "hello", "x" * 300, ""]
    expected = [counter.encode_count(t) for t in texts]
    assert counter.count(texts) == expected
    assert counter.count(texts) == expected  # now from the cache


def test_per_word_counts_add_up_for_this_tokenizer(counter: ModelTokenCounter) -> None:
    text = " ".join(paragraphs(11, 20, non_ascii=True)) + " don't e.g. 3.14 (x) naïve—dash \uff21\uff22\uff23"
    assert sum(counter.count(text.split())) == counter.encode_count(text)


def test_cut_points_fall_on_token_boundaries(counter: ModelTokenCounter) -> None:
    text = "東京" * 150
    cuts = counter.cut_points(text, 100)
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert "".join(pieces) == text
    assert all(counter.encode_count(p) <= 100 for p in pieces)


@pytest.mark.parametrize(("max_tokens", "overlap"), [(256, 32), (64, 8), (512, 64)])
def test_every_chunk_fits_the_model_by_the_real_tokenizer(
    counter: ModelTokenCounter, max_tokens: int, overlap: int
) -> None:
    rng = random.Random(max_tokens)
    pages = []
    for number in range(1, 9):
        paras = paragraphs(rng.randrange(1 << 30), rng.randint(2, 9), non_ascii=number % 2 == 0)
        if number == 5:
            paras.append("https://example.org/" + "segment/" * 120)  # one "word" of ~250 tokens
            paras.append("漢字東京中文" * 80)  # CJK without spaces: one long "word"
        pages.append(PageText(number, "\n\n".join(paras)))
    config = ChunkingConfig(max_tokens, overlap)
    budget = effective_budget(config, counter)
    chunks = chunk_document(pages, config, counter)
    assert chunks
    for chunk in chunks:
        exact = counter.encode_count(chunk.text)
        assert exact == chunk.token_count
        assert exact <= budget <= max_tokens
        assert exact + counter.special_tokens <= 256  # what sentence-transformers keeps untruncated
