"""The embed task's fold: the document embedding is the token-weighted mean of its chunks' vectors. Pure.

State: ``{"w": total weight, "sum": the weighted sum as base64 of little-endian float64}`` (exact, and
far cheaper to encode than a JSON list). A chunk weighs ``max(token_count, 1)``.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from docstream.avro.segments import Float32Vector
from docstream.tasks.base import DocumentOutput, FoldInput, TaskOutputError

__all__ = ["EmbedFold", "EmbeddingDimensionError", "pack_floats", "unpack_floats"]


class EmbeddingDimensionError(TaskOutputError):
    """A chunk embedding whose length differs from the other chunks of its document, or is empty."""

    code = "embedding_dimension_mismatch"


_FLOAT64 = np.dtype("<f8")
_FLOAT32 = np.dtype("<f4")


def pack_floats(values: Sequence[float] | np.ndarray[Any, Any]) -> str:
    """``values`` as base64 of little-endian float64."""
    if isinstance(values, np.ndarray):
        return base64.b64encode(np.asarray(values, dtype=_FLOAT64).tobytes()).decode("ascii")
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")


def unpack_floats(data: str | Sequence[float]) -> tuple[float, ...]:
    """The inverse of ``pack_floats``; a JSON list of numbers (states written before it) is read too.

    Raises:
        ValueError: not a whole number of float64 values (binascii.Error for bad base64).
    """
    return tuple(_unpacked(data).tolist())


def _unpacked(data: str | Sequence[float]) -> np.ndarray[Any, Any]:
    """``unpack_floats`` as a float64 array."""
    if not isinstance(data, str):
        return np.array([float(x) for x in data], dtype=_FLOAT64)
    raw = base64.b64decode(data, validate=True)
    if len(raw) % 8:
        raise ValueError("embedding_sum is not a whole number of float64 values")
    return np.frombuffer(raw, dtype=_FLOAT64)


def _float64(vector: Sequence[float]) -> np.ndarray[Any, Any]:
    """``vector`` as float64: a ``Float32Vector`` (a record's, as decoded) from its bytes, exactly its values."""
    if type(vector) is Float32Vector:
        return np.frombuffer(vector.packed, dtype=_FLOAT32).astype(_FLOAT64)
    return np.asarray(vector, dtype=_FLOAT64)


class EmbedFold:
    """Token-weighted mean of the chunk vectors (``DocumentOutput.embedding``)."""

    def empty(self) -> dict[str, Any]:
        """No chunk yet."""
        return {"w": 0.0, "sum": ""}

    def add(self, state: dict[str, Any], chunk: FoldInput) -> dict[str, Any]:
        """Add one chunk's vector, weighted by its tokens.

        Raises:
            EmbeddingDimensionError: an empty vector, or one of another length than the earlier chunks'.
        """
        total = _unpacked(state["sum"])
        vector = chunk.embedding
        if not len(vector) or (total.size and len(vector) != total.size):
            raise EmbeddingDimensionError(
                f"chunk {chunk.index} has {len(vector)} dimensions, expected {total.size or 'at least 1'}")
        weight = float(max(chunk.token_count, 1))
        base = total if total.size else np.zeros(len(vector), dtype=_FLOAT64)
        # element by element as float64: the product rounded, then the sum (0.0 + -0.0 is 0.0, as in Python);
        # an overflow is an infinity, as in Python, which finish refuses (EmbeddingDimensionError)
        with np.errstate(over="ignore", invalid="ignore"):
            summed = base + weight * _float64(vector)
        return {"w": float(state["w"]) + weight, "sum": pack_floats(summed)}

    def finish(self, state: dict[str, Any], *, chunk_count: int) -> DocumentOutput:
        """The weighted mean; empty when no chunk was embedded.

        Raises:
            EmbeddingDimensionError: the mean is not finite.
        """
        weight = float(state["w"])
        if weight <= 0:
            return DocumentOutput()
        mean = [s / weight for s in unpack_floats(state["sum"])]
        if any(not math.isfinite(x) for x in mean):
            raise EmbeddingDimensionError("non-finite document embedding")
        return DocumentOutput(embedding=mean)
