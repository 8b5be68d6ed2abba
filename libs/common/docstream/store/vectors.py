"""Float vectors bound to Cassandra prepared statements by numpy, not float by float.

The driver's ``VectorType.serialize`` packs each element with its own Python call: about
0.3 µs a float, so ~120 µs for one 384-float row, more than everything else docstream does
per chunk. ``fast_float_vectors`` gives a prepared statement's ``vector<float, N>`` columns a
serializer that writes the same bytes (big-endian IEEE float32, N of them) with one numpy
call. It replaces the column's type in ``PreparedStatement.column_metadata``, the list the
driver's ``BoundStatement.bind`` reads each column's serializer from; nothing else of the
driver is touched. The driver release it was written for is checked: on any other release
the statement is left as it is (the driver's own serializer, slower, same bytes).
"""

from __future__ import annotations

from typing import Any

import cassandra
import numpy as np
from cassandra.cqltypes import FloatType, VectorType
from cassandra.query import PreparedStatement

from docstream.logging import get_logger

__all__ = ["DRIVER_VERSIONS", "fast_float_vectors", "float32_vector_type"]

DRIVER_VERSIONS: frozenset[str] = frozenset({"3.30.1"})
"""cassandra-driver releases whose ``bind`` reads ``column_metadata[i].type.serialize`` (checked)."""

_BIG_ENDIAN_F4 = np.dtype(">f4")
_log = get_logger(__name__)
_warned: list[bool] = []


def float32_vector_type(driver_type: type[Any]) -> type[Any]:
    """A subclass of the driver's ``vector<float, N>`` type whose ``serialize`` is one numpy call.

    Raises:
        ValueError: ``driver_type`` is not a float vector type.
    """
    if not _is_float_vector(driver_type):
        raise ValueError(f"{driver_type!r} is not a vector<float, N> type")
    size = int(driver_type.vector_size)

    def serialize(cls: type[Any], value: Any, protocol_version: int) -> bytes:
        array = np.asarray(value, dtype=_BIG_ENDIAN_F4)
        if array.shape != (size,):
            raise ValueError(f"Expected sequence of size {size} for vector of type float and dimension {size}, "
                             f"observed sequence of shape {array.shape}")
        return array.tobytes()

    return type(f"Float32Vector{size}", (driver_type,), {"serialize": classmethod(serialize)})


def fast_float_vectors(statement: PreparedStatement) -> PreparedStatement:
    """``statement`` with its ``vector<float, N>`` bind columns serialized by numpy (same bytes).

    Other columns, and every statement on a driver release not in ``DRIVER_VERSIONS``, are left as they are.
    """
    if cassandra.__version__ not in DRIVER_VERSIONS:
        if not _warned:
            _warned.append(True)
            _log.warning("cassandra_driver_unchecked", version=cassandra.__version__,
                         checked=sorted(DRIVER_VERSIONS), effect="vectors bound by the driver's own serializer")
        return statement
    statement.column_metadata = [
        column._replace(type=float32_vector_type(column.type)) if _is_float_vector(column.type) else column
        for column in statement.column_metadata or []
    ]
    return statement


def _is_float_vector(driver_type: Any) -> bool:
    if not (isinstance(driver_type, type) and issubclass(driver_type, VectorType)):
        return False
    return getattr(driver_type, "subtype", None) is FloatType
