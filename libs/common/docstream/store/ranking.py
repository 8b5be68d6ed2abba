"""Exact cosine ranking for similarity search: score pages of vectors, keep the best k. Pure."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["TopK", "cosine_scores", "search_query", "unit_vector"]

K = TypeVar("K", bound=Hashable)
_Matrix = npt.NDArray[np.float32]


def unit_vector(embedding: Sequence[float]) -> _Matrix:
    """``embedding`` as a float32 unit vector.

    Raises:
        ValueError: it is empty, holds a non-finite value, or has zero length (cosine undefined).
    """
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError("a search embedding must be a non-empty list of floats")
    if not np.all(np.isfinite(vector)):
        raise ValueError("a search embedding must hold finite values")
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        raise ValueError("cosine similarity is undefined for a zero vector")
    return vector / norm


def search_query(embedding: Sequence[float], k: int) -> _Matrix:
    """A similarity search's query as a unit vector, after checking its ``k`` (every store's checks).

    Raises:
        ValueError: k < 1; or the embedding is empty, holds a non-finite value, or is zero.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    return unit_vector(embedding)


def cosine_scores(rows: _Matrix, unit_query: _Matrix) -> npt.NDArray[np.float64]:
    """Cosine similarity of each row of ``rows`` (n x d) to a unit vector; zero rows score -inf."""
    wide = rows.astype(np.float64)
    norms: npt.NDArray[np.float64] = np.sqrt(np.einsum("ij,ij->i", wide, wide))
    dots: npt.NDArray[np.float64] = wide @ unit_query.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores: npt.NDArray[np.float64] = dots / norms
    scores[norms == 0] = -np.inf
    finite = np.isfinite(scores)
    scores[finite] = np.clip(scores[finite], -1.0, 1.0)
    return scores


class TopK(Generic[K]):
    """The k best (score, key) pairs seen so far; memory O(k) however many are offered.

    Raises:
        ValueError: k < 1.
    """

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self._k = k
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()

    def offer(self, scores: Sequence[float] | npt.NDArray[np.float64], keys: Sequence[K]) -> None:
        """Consider ``keys[i]`` with ``scores[i]``; non-finite scores are ignored."""
        for score, key in zip(scores, keys, strict=True):
            value = float(score)
            if not np.isfinite(value):
                continue
            # the sequence number breaks ties: the key seen first wins, keys are never compared
            entry = (value, -next(self._seq), key)
            if len(self._heap) < self._k:
                heapq.heappush(self._heap, entry)
            elif entry > self._heap[0]:
                heapq.heapreplace(self._heap, entry)

    def best(self) -> list[tuple[float, K]]:
        """The kept pairs, best score first."""
        return [(score, key) for score, _, key in sorted(self._heap, reverse=True)]
