"""Avro bodies of records with float arrays, written and read a segment at a time. Pure.

An Avro record's binary encoding is its fields' encodings one after the other (Avro
specification, "Binary Encoding"). fastavro writes and reads an ``array<float>`` one element
at a time: ~30 µs for a 384-float embedding, most of the cost of a ChunkResult. A
``SegmentPlan`` cuts a record schema at its top-level ``array<float>`` fields: the runs of
other fields stay records that fastavro encodes, and each float array is written as one
block (count, then the little-endian float32 values, then the 0 that ends the array) with one
numpy call. The bytes are the bytes fastavro writes; the reader also accepts any block layout
the specification allows (several blocks, negative counts with byte sizes), so bodies from
any Avro writer decode. Only a reader whose schema is the writer's uses a plan; schema
resolution stays with fastavro.
"""

from __future__ import annotations

import io
import struct
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from fastavro import parse_schema, schemaless_reader, schemaless_writer

__all__ = ["Float32Vector", "SegmentPlan", "float32_bytes", "read_body", "segment_plan", "write_body"]

_FLOAT32 = np.dtype("<f4")
_PACKERS: dict[int, struct.Struct] = {}
_MAX_PACKERS = 64


class Float32Vector(Sequence[float]):
    """A vector as its little-endian float32 bytes, read as a sequence of floats: a model's output, or an Avro float
    array as decoded. Nothing unpacks it on the way to a row or a record: writing it (an Avro float array, a stored
    embedding) copies its bytes, and a reader unpacks only what it reads.

    A vector of 384 floats as a list costs ~17 µs to make and 384 objects for the garbage collector to walk at every
    collection; as bytes, a slice of its batch's array. Read-only. Equal to any sequence of the same values;
    ``numpy.asarray`` reads its bytes as a float32 array without a copy.

    Raises:
        TypeError: on item assignment or deletion (it has no method that changes it).
    """

    __slots__ = ("_view", "packed")

    def __init__(self, row: np.ndarray[Any, Any] | Sequence[float]) -> None:
        """The floats of ``row``: a one-dimensional array or a flat sequence of numbers, cast to float32.

        Raises:
            ValueError: ``row`` is not one-dimensional.
        """
        array = np.ascontiguousarray(row, dtype=_FLOAT32)
        if array.ndim != 1:
            raise ValueError("a Float32Vector is made of a one-dimensional array")
        self.packed = array.tobytes()
        self._view: Sequence[float] | None = None

    @classmethod
    def rows(cls, matrix: np.ndarray[Any, Any]) -> list[Float32Vector]:
        """One ``Float32Vector`` per row of the two-dimensional array ``matrix`` (a model's batch), converted and
        packed once for the whole batch.

        Raises:
            ValueError: ``matrix`` is not two-dimensional.
        """
        array = np.ascontiguousarray(matrix, dtype=_FLOAT32)
        if array.ndim != 2:
            raise ValueError("Float32Vector.rows takes a two-dimensional array")
        data, width = array.tobytes(), array.shape[1] * _FLOAT32.itemsize
        return [_holding(data[at * width:(at + 1) * width]) for at in range(array.shape[0])]

    @property
    def _values(self) -> Sequence[float]:
        view = self._view
        if view is None:
            view = self._view = _floats_of(self.packed)
        return view

    def __len__(self) -> int:
        return len(self.packed) // 4

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> list[float]: ...

    def __getitem__(self, index: int | slice) -> float | list[float]:
        """A value, or a slice's values as a list."""
        if isinstance(index, slice):
            return list(self._values[index])
        return self._values[index]

    def __iter__(self) -> Iterator[float]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Float32Vector):
            return self.packed == other.packed
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self._values, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash

    def __repr__(self) -> str:
        """As the list of its values: a record's repr reads as before vectors kept their bytes."""
        return repr(self.tolist())

    def tolist(self) -> list[float]:
        """The values as a list of Python floats (what JSON and the like take)."""
        return list(self._values)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """The values as a read-only float32 array over the bytes; a copy of its own when ``copy`` or ``dtype``
        (another type) asks for one."""
        array = np.frombuffer(self.packed, dtype=_FLOAT32)
        if dtype is not None:
            return array.astype(dtype)
        return array.copy() if copy else array

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as its bytes."""
        return _holding, (self.packed,)


def _floats_of(packed: bytes) -> Sequence[float]:
    """A read-only view of little-endian float32 ``packed`` as Python floats (a cast of its memory where this machine
    is little-endian, which every docstream platform is)."""
    if sys.byteorder == "little":
        return memoryview(packed).cast("f")
    floats: list[float] = np.frombuffer(packed, dtype=_FLOAT32).tolist()
    return floats


def _holding(packed: bytes) -> Float32Vector:
    """A ``Float32Vector`` of the float32 bytes ``packed`` (their length is a multiple of 4; not checked)."""
    vector = Float32Vector.__new__(Float32Vector)
    vector.packed = packed
    vector._view = None
    return vector


def float32_bytes(values: Sequence[float] | np.ndarray[Any, Any]) -> bytes:
    """``values`` as little-endian float32 bytes (an Avro ``array<float>``'s values, a stored embedding).

    A ``Float32Vector`` gives the bytes it holds; a list of Python floats (what a record holds) is packed by a
    ``struct`` made once per length, at about a third of numpy's cost for such a list; an array goes through numpy
    as it is. A value beyond float32's range becomes infinity either way, as numpy casts it.

    Raises:
        ValueError: ``values`` is not a flat sequence of numbers.
    """
    if type(values) is Float32Vector:
        return values.packed
    if isinstance(values, np.ndarray):
        return _float32_array(values).tobytes()
    count = len(values)
    packer = _PACKERS.get(count)
    if packer is None:
        packer = struct.Struct(f"<{count}f")
        if len(_PACKERS) < _MAX_PACKERS:
            _PACKERS[count] = packer
    try:
        return packer.pack(*values)
    except OverflowError:  # a value beyond float32: numpy casts it to infinity
        return _float32_array(values).tobytes()
    except struct.error as exc:  # not a number: say it as numpy does
        raise ValueError(f"not a flat sequence of floats: {exc}") from None


def _float32_array(values: Any) -> np.ndarray[Any, Any]:
    array = np.asarray(values, dtype=_FLOAT32)
    if array.ndim != 1:
        raise ValueError("not a flat sequence of floats")
    return array


@dataclass(frozen=True, slots=True)
class _Fields:
    """Consecutive fields that are not float arrays, as a record schema fastavro parsed."""

    parsed: Any
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """A record schema as segments: runs of other fields, and float-array fields by name.

    Attributes:
        segments: in field order; a ``str`` is the name of an ``array<float>`` field.
        names: every field of the record.
    """

    segments: tuple[_Fields | str, ...]
    names: frozenset[str]


def _is_float_array(field_type: Any) -> bool:
    return isinstance(field_type, dict) and field_type.get("type") == "array" and field_type.get("items") == "float"


def segment_plan(raw: Mapping[str, Any]) -> SegmentPlan | None:
    """The plan of record schema ``raw`` (its JSON form); None when it has no top-level float array.

    Raises:
        fastavro.schema.SchemaParseException: ``raw`` is not a valid record schema.
    """
    fields = list(raw.get("fields", []))
    if not any(_is_float_array(f["type"]) for f in fields):
        return None
    named: dict[str, Any] = {}
    namespace = raw.get("namespace")
    name = str(raw["name"]).rsplit(".", 1)[-1]
    segments: list[_Fields | str] = []
    run: list[Any] = []

    def close_run() -> None:
        if run:
            part = {"type": "record", "name": f"{name}__segment{len(segments)}", "fields": list(run)}
            if namespace:
                part["namespace"] = namespace
            segments.append(_Fields(parse_schema(part, named_schemas=named), tuple(str(f["name"]) for f in run)))
            run.clear()

    for field in fields:
        if _is_float_array(field["type"]):
            close_run()
            segments.append(str(field["name"]))
        else:
            run.append(field)
    close_run()
    return SegmentPlan(tuple(segments), frozenset(str(f["name"]) for f in fields))


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_body(plan: SegmentPlan, record: Mapping[str, Any], out: io.BytesIO) -> None:
    """Write ``record``'s Avro body under ``plan``: the bytes fastavro's ``schemaless_writer`` writes.

    Raises:
        ValueError, TypeError, KeyError, OverflowError: the record does not fit the schema
            (as fastavro's ``strict_allow_default``: no unknown fields, a missing one needs a default).
    """
    unknown = record.keys() - plan.names
    if unknown:
        raise ValueError(f"record contains more fields than the schema specifies: {', '.join(sorted(unknown))}")
    for segment in plan.segments:
        if isinstance(segment, str):
            try:
                packed = float32_bytes(record[segment])
            except ValueError as exc:
                raise ValueError(f"{segment}: {exc}") from None
            if packed:
                out.write(_zigzag_varint(len(packed) // 4))
                out.write(packed)
            out.write(b"\x00")
        else:
            part = {k: record[k] for k in segment.names if k in record}
            schemaless_writer(out, segment.parsed, part, strict_allow_default=True)


def _read_long(stream: io.BytesIO) -> int:
    shift, n = 0, 0
    while True:
        byte = stream.read(1)
        if not byte:
            raise EOFError("truncated Avro long")
        b = byte[0]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1)
        shift += 7
        if shift > 63:
            raise ValueError("Avro long longer than 10 bytes")


def _read_floats(stream: io.BytesIO) -> Sequence[float]:
    parts: list[bytes] = []
    while True:
        count = _read_long(stream)
        if count == 0:
            break
        if count < 0:
            count = -count
            _read_long(stream)  # the block's size in bytes: 4 * count for floats
        data = stream.read(4 * count)
        if len(data) != 4 * count:
            raise EOFError("truncated Avro float array")
        parts.append(data)
    if not parts:
        return []
    # the bytes they came in, for whoever writes or sums them next
    return _holding(b"".join(parts))


def read_body(plan: SegmentPlan, stream: io.BytesIO) -> dict[str, Any]:
    """Read one Avro body written with ``plan``'s schema (by any Avro writer) from ``stream``.

    Raises:
        EOFError, ValueError: the body is truncated or corrupt.
    """
    values: dict[str, Any] = {}
    for segment in plan.segments:
        if isinstance(segment, str):
            values[segment] = _read_floats(stream)
        else:
            part: Any = schemaless_reader(stream, segment.parsed, None)
            values.update(part)
    return values
