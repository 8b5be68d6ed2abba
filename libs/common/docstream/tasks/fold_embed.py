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

from docstream.tasks.base import DocumentOutput, FoldInput, TaskOutputError

__all__ = ["EmbedFold", "EmbeddingDimensionError", "pack_floats", "unpack_floats"]


class EmbeddingDimensionError(TaskOutputError):
    """A chunk embedding whose length differs from the other chunks of its document, or is empty."""

    code = "embedding_dimension_mismatch"


def pack_floats(values: Sequence[float]) -> str:
    """``values`` as base64 of little-endian float64."""
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")


def unpack_floats(data: str | Sequence[float]) -> tuple[float, ...]:
    """The inverse of ``pack_floats``; a JSON list of numbers (states written before it) is read too.

    Raises:
        ValueError: not a whole number of float64 values (binascii.Error for bad base64).
    """
    if not isinstance(data, str):
        return tuple(float(x) for x in data)
    raw = base64.b64decode(data, validate=True)
    if len(raw) % 8:
        raise ValueError("embedding_sum is not a whole number of float64 values")
    return struct.unpack(f"<{len(raw) // 8}d", raw)


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
        total = unpack_floats(state["sum"])
        vector = chunk.embedding
        if not vector or (total and len(vector) != len(total)):
            raise EmbeddingDimensionError(
                f"chunk {chunk.index} has {len(vector)} dimensions, expected {len(total) or 'at least 1'}")
        weight = float(max(chunk.token_count, 1))
        base = total or (0.0,) * len(vector)
        summed = [s + weight * float(x) for s, x in zip(base, vector, strict=True)]
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
