"""The classify fold: token-weighted label scores, top label and chunks, order-independent (pure)."""

from __future__ import annotations

import itertools
import json
import math
import random
from typing import Any

import pytest

from docstream.tasks.base import MAX_LABELS, DocumentOutput, FoldInput, TaskOutputError
from docstream.tasks.fold_classify import TOP_CHUNKS, ClassifyFold

FOLD = ClassifyFold()


def _chunk(index: int, tokens: int, **scores: float) -> FoldInput:
    return FoldInput(index=index, token_count=tokens, page_start=1, page_end=1, label_scores=scores)


def _fold(chunks: list[FoldInput], *, via_json: bool = False) -> DocumentOutput:
    state: Any = FOLD.empty()
    for chunk in chunks:
        state = FOLD.add(state, chunk)
        if via_json:
            state = json.loads(json.dumps(state))
    return FOLD.finish(state, chunk_count=len(chunks))


def test_a_long_chunk_outweighs_a_short_one() -> None:
    out = _fold([_chunk(0, 300, sport=0.9, finance=0.1), _chunk(1, 30, sport=0.1, finance=0.9)])

    assert out.top_label == "sport"
    assert out.label_scores["sport"] == pytest.approx((300 * 0.9 + 30 * 0.1) / 330)
    assert out.label_scores["finance"] == pytest.approx((300 * 0.1 + 30 * 0.9) / 330)


def test_a_chunk_of_no_tokens_weighs_one() -> None:
    out = _fold([_chunk(0, 0, a=1.0, b=0.0), _chunk(1, 1, a=0.0, b=1.0)])

    assert out.label_scores == pytest.approx({"a": 0.5, "b": 0.5})
    assert out.top_label == "a"  # a tie goes to the name that sorts first


def test_scores_sum_to_one() -> None:
    rng = random.Random(7)
    chunks = []
    for i in range(40):
        raw = [rng.random() for _ in range(5)]
        chunks.append(_chunk(i, rng.randint(1, 256), **{f"l{j}": x / sum(raw) for j, x in enumerate(raw)}))

    out = _fold(chunks)

    assert math.isclose(math.fsum(out.label_scores.values()), 1.0, abs_tol=1e-12)
    assert list(out.label_scores) == sorted(out.label_scores)


def test_top_label_and_its_best_chunks_best_first() -> None:
    chunks = [_chunk(0, 100, sport=0.6, biology=0.4), _chunk(1, 100, sport=0.95, biology=0.05),
              _chunk(2, 100, sport=0.2, biology=0.8), _chunk(3, 100, sport=0.7, biology=0.3),
              _chunk(4, 100, sport=0.95, biology=0.05)]

    out = _fold(chunks)

    assert out.top_label == "sport"
    assert out.top_chunks == (1, 4, 3)  # equal scores: the lower index first
    assert len(out.top_chunks) == TOP_CHUNKS


def test_a_one_chunk_document() -> None:
    out = _fold([_chunk(0, 12, finance=0.7, sport=0.2, biology=0.1)])

    assert out.label_scores == pytest.approx({"biology": 0.1, "finance": 0.7, "sport": 0.2})
    assert out.top_label == "finance"
    assert out.top_chunks == (0,)


def test_no_chunk_gives_an_empty_result() -> None:
    assert FOLD.finish(FOLD.empty(), chunk_count=3) == DocumentOutput()


def test_permuted_folds_are_equal_bit_for_bit() -> None:
    rng = random.Random(3)
    chunks = []
    for i in range(7):
        a = rng.random()
        chunks.append(_chunk(i, rng.randint(1, 300), x=a, y=(1 - a) * 0.3, z=(1 - a) * 0.7))
    expected = _fold(chunks)

    for order in itertools.islice(itertools.permutations(chunks), 0, None, 97):
        assert _fold(list(order)) == expected
    for _ in range(20):
        rng.shuffle(chunks)
        assert _fold(chunks) == expected


def test_state_survives_a_json_round_trip_between_adds() -> None:
    chunks = [_chunk(i, 10 * i + 1, a=0.1 * i, b=1 - 0.1 * i) for i in range(8)]

    assert _fold(chunks, via_json=True) == _fold(chunks)


def test_add_does_not_change_the_state_it_is_given() -> None:
    state = FOLD.add(FOLD.empty(), _chunk(0, 5, a=0.5, b=0.5))
    before = json.dumps(state, sort_keys=True)

    FOLD.add(state, _chunk(1, 5, a=0.9, b=0.1))

    assert json.dumps(state, sort_keys=True) == before


def test_a_label_in_some_chunks_only_counts_zero_in_the_others() -> None:
    out = _fold([_chunk(0, 100, a=0.5, b=0.5), _chunk(1, 100, a=0.5, c=0.5)])

    assert out.label_scores == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    assert math.isclose(sum(out.label_scores.values()), 1.0)


def test_chunk_scores_not_summing_to_one_are_scaled() -> None:
    out = _fold([_chunk(0, 10, a=2.0, b=2.0), _chunk(1, 10, a=0.25, b=0.75)])

    assert out.label_scores == pytest.approx({"a": 0.375, "b": 0.625})


def test_the_state_stays_bounded_whatever_the_length() -> None:
    state: Any = FOLD.empty()
    for i in range(2000):
        state = FOLD.add(state, _chunk(i, 50 + i % 7, a=(i % 10) / 10, b=1 - (i % 10) / 10))

    assert all(len(entries) <= TOP_CHUNKS for entries in state["top"].values())
    assert all(len(partials) <= 40 for partials in state["sum"].values())
    assert len(json.dumps(state)) < 2000


@pytest.mark.parametrize("scores", [
    {},
    {"a": -0.1, "b": 1.1},
    {"a": math.nan, "b": 0.5},
    {"a": math.inf},
    {"a": 0.0, "b": 0.0},
    {"": 1.0},
    {f"l{i}": 1 / (MAX_LABELS + 1) for i in range(MAX_LABELS + 1)},
])
def test_bad_chunk_outputs_raise(scores: dict[str, float]) -> None:
    with pytest.raises(TaskOutputError) as caught:
        FOLD.add(FOLD.empty(), _chunk(0, 10, **scores))
    assert caught.value.code == "task_output_invalid"


def test_more_labels_than_allowed_across_chunks_raise() -> None:
    half = MAX_LABELS // 2 + 1
    state = FOLD.add(FOLD.empty(), _chunk(0, 10, **{f"a{i}": 1.0 for i in range(half)}))

    with pytest.raises(TaskOutputError):
        FOLD.add(state, _chunk(1, 10, **{f"b{i}": 1.0 for i in range(half)}))
