"""Stored value encodings and exact cosine ranking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from docstream.store.codec import decode_embedding, encode_embedding, float32_values, none_if_empty, utc_millis
from docstream.store.ranking import TopK, cosine_scores, search_query, unit_vector


def test_embedding_round_trips_as_float32() -> None:
    values = [0.1, -1 / 3, 2.5e-8, 1e30]
    blob = encode_embedding(values)
    assert len(blob) == 16
    assert blob[:4] == np.float32(0.1).tobytes()  # little-endian float32
    assert decode_embedding(blob) == float32_values(values)
    assert decode_embedding(encode_embedding(decode_embedding(blob))) == decode_embedding(blob)


def test_empty_embedding_and_bad_blob() -> None:
    assert encode_embedding([]) == b""
    assert decode_embedding(b"") == []
    assert decode_embedding(None) == []
    with pytest.raises(ValueError, match="float32"):
        decode_embedding(b"\x00\x01\x02")


def test_utc_millis_truncates_and_converts() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert utc_millis(datetime(2024, 1, 1, 14, 0, 0, 999999, tzinfo=plus_two)) == datetime(
        2024, 1, 1, 12, 0, 0, 999000, tzinfo=UTC
    )
    assert utc_millis(datetime(2024, 1, 1, 12, 0, 0, 1500)) == datetime(2024, 1, 1, 12, 0, 0, 1000, tzinfo=UTC)


def test_none_if_empty() -> None:
    assert none_if_empty("") is None
    assert none_if_empty(None) is None
    assert none_if_empty("x") == "x"


def test_unit_vector_refuses_undefined_queries() -> None:
    assert np.allclose(unit_vector([3.0, 4.0]), [0.6, 0.8])
    for bad, message in (([], "non-empty"), ([0.0, 0.0], "zero"), ([1.0, float("nan")], "finite")):
        with pytest.raises(ValueError, match=message):
            unit_vector(bad)


def test_cosine_scores_exact_and_zero_rows_last() -> None:
    rows = np.array([[1, 0], [0, 2], [-3, 0], [0, 0], [1, 1]], dtype=np.float32)
    scores = cosine_scores(rows, unit_vector([1.0, 0.0]))
    assert scores[:3].tolist() == [1.0, 0.0, -1.0]
    assert scores[3] == -np.inf
    assert scores[4] == pytest.approx(2**-0.5)


def test_top_k_keeps_the_best_across_pages() -> None:
    best: TopK[str] = TopK(3)
    best.offer([0.1, 0.9, 0.5], ["a", "b", "c"])
    best.offer([0.95, -np.inf, 0.2], ["d", "e", "f"])
    best.offer([float("nan")], ["g"])
    assert best.best() == [(0.95, "d"), (0.9, "b"), (0.5, "c")]


def test_top_k_ties_keep_the_first_seen_and_never_compare_keys() -> None:
    best: TopK[object] = TopK(2)
    first, second, third = object(), object(), object()
    best.offer([0.5, 0.5, 0.5], [first, second, third])
    assert [key for _, key in best.best()] == [first, second]
    with pytest.raises(ValueError, match="k must be"):
        TopK(0)


def test_search_query_checks_k_then_the_embedding() -> None:
    assert np.allclose(search_query([3.0, 4.0], 1), [0.6, 0.8])
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        search_query([0.0, 0.0], 0)
    with pytest.raises(ValueError, match="zero"):
        search_query([0.0, 0.0], 3)
