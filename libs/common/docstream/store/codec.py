"""How row values are stored, the same way by every backend (docs/storage.md). Pure.

* Embeddings: little-endian float32 bytes; read back as the float32 values (so a row
  written twice, or read from either backend, compares equal).
* Timestamps: timezone-aware UTC truncated to milliseconds (Cassandra's precision); a
  naive datetime is taken as UTC.
* Optional text columns: ``""`` and ``None`` both read back as ``None`` (Cassandra writes
  ``""`` to keep rows free of null-cell tombstones; SQLite stores NULL).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from docstream.avro.segments import float32_bytes

__all__ = ["decode_embedding", "encode_embedding", "float32_values", "none_if_empty", "utc_millis"]

_FLOAT32 = np.dtype("<f4")


def encode_embedding(values: Sequence[float]) -> bytes:
    """An embedding as little-endian float32 bytes (empty for no embedding).

    Raises:
        ValueError: ``values`` is not a flat sequence of numbers.
    """
    return float32_bytes(values)


def decode_embedding(blob: bytes | None) -> list[float]:
    """The float32 values of bytes written by :func:`encode_embedding` (``[]`` for none).

    Raises:
        ValueError: the byte count is not a multiple of 4.
    """
    if not blob:
        return []
    if len(blob) % _FLOAT32.itemsize:
        raise ValueError(f"embedding blob of {len(blob)} bytes is not float32")
    values: list[float] = np.frombuffer(blob, dtype=_FLOAT32).tolist()
    return values


def float32_values(values: Sequence[float]) -> list[float]:
    """``values`` rounded to float32, as a backend reads them back."""
    return [float(x) for x in np.asarray(values, dtype=_FLOAT32)]


def utc_millis(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime truncated to milliseconds (naive means UTC)."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.replace(microsecond=aware.microsecond // 1000 * 1000)


def none_if_empty(value: str | None) -> str | None:
    """``None`` for ``None`` or ``""``, else ``value``."""
    return value or None
