"""The fuzz's byte mutations (tests.fixtures.mutation): deterministic by seed, bounded, each one doing its job."""

from __future__ import annotations

import random

import pytest

from tests.fixtures.documents import make_pdf, make_zero_page_pdf
from tests.fixtures.mutation import MUTATIONS, mutate, mutated_input

PDF = make_zero_page_pdf()


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_changes_the_bytes_and_is_deterministic(name: str) -> None:
    changed = 0
    for seed in range(20):
        first = MUTATIONS[name](random.Random(seed), PDF, b"other bytes")
        assert first == MUTATIONS[name](random.Random(seed), PDF, b"other bytes")
        changed += first != PDF
    assert changed >= 15  # a mutation may land on an equal value now and then, not usually


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_copes_with_empty_and_one_byte_inputs(name: str) -> None:
    for data in (b"", b"x"):
        assert isinstance(MUTATIONS[name](random.Random(1), data, b""), bytes)


def test_pdf_mutations_hit_their_structures() -> None:
    rng = random.Random(3)
    offsets = [line for line in PDF.split(b"\n") if line.endswith(b" n ")]
    xref = MUTATIONS["pdf_xref_offset"](rng, PDF, b"")
    assert [line for line in xref.split(b"\n") if line.endswith((b" n ", b" f "))] != offsets
    assert MUTATIONS["pdf_startxref"](rng, PDF, b"").split(b"startxref")[1] != PDF.split(b"startxref")[1]
    length = MUTATIONS["pdf_stream_length"](rng, make_pdf(1).data, b"")
    assert length != make_pdf(1).data and b"/Length" in length


def test_mutate_stacks_named_mutations_within_the_size_bound() -> None:
    for seed in range(50):
        names, data = mutate(random.Random(seed), PDF, PDF * 3, max_bytes=300)
        assert 1 <= len(names) <= 4 and set(names) <= set(MUTATIONS)
        assert len(data) <= 300


def test_an_input_is_rebuilt_from_seed_and_index_alone() -> None:
    corpus = [PDF, b"%PDF-1.7 tiny", b"plain text"]
    assert mutated_input(7, 123, corpus, max_bytes=1000) == mutated_input(7, 123, corpus, max_bytes=1000)
    assert mutated_input(7, 123, corpus, max_bytes=1000) != mutated_input(7, 124, corpus, max_bytes=1000)
