"""Framing of the two Avro wire formats. Pure: bytes in, bytes out.

* Avro single-object encoding: ``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint of
  the writer schema + Avro binary body.
* Confluent wire format: magic byte ``0`` + 4-byte big-endian schema id + Avro binary body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from docstream.errors import SchemaError

__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "Frame",
    "WireFormat",
    "frame_confluent",
    "frame_single_object",
    "parse_frame",
]

WireFormat = Literal["single_object", "confluent"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"
_SINGLE_HEADER = len(SINGLE_OBJECT_MAGIC) + 8
_CONFLUENT_HEADER = len(CONFLUENT_MAGIC) + 4
_MAX_SCHEMA_ID = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Frame:
    """A parsed frame: which format, which writer schema, and the Avro body.

    Attributes:
        format: "single_object" or "confluent".
        fingerprint: the 8 fingerprint bytes (single-object) or None.
        schema_id: the registry schema id (Confluent) or None.
        body: the Avro binary body.
    """

    format: WireFormat
    fingerprint: bytes | None
    schema_id: int | None
    body: bytes


def frame_single_object(fingerprint: bytes, body: bytes) -> bytes:
    """Single-object encoding of ``body`` written with the schema of ``fingerprint``.

    Raises:
        ValueError: the fingerprint is not 8 bytes.
    """
    if len(fingerprint) != 8:
        raise ValueError("a CRC-64-AVRO fingerprint is 8 bytes")
    return SINGLE_OBJECT_MAGIC + fingerprint + body


def frame_confluent(schema_id: int, body: bytes) -> bytes:
    """Confluent wire format of ``body`` written with registry schema ``schema_id``.

    Raises:
        ValueError: the id does not fit the 4-byte field.
    """
    if not 0 <= schema_id <= _MAX_SCHEMA_ID:
        raise ValueError(f"schema id out of range: {schema_id}")
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big") + body


def parse_frame(data: bytes) -> Frame:
    """Split ``data`` into its wire format, writer-schema reference and body.

    Raises:
        SchemaError: the bytes start with neither magic, or are too short (keeps ``raw``).
    """
    if data.startswith(SINGLE_OBJECT_MAGIC):
        if len(data) < _SINGLE_HEADER:
            raise SchemaError("single-object frame shorter than its header", code="schema_truncated", raw=data)
        return Frame("single_object", data[2:_SINGLE_HEADER], None, data[_SINGLE_HEADER:])
    if data.startswith(CONFLUENT_MAGIC):
        if len(data) < _CONFLUENT_HEADER:
            raise SchemaError("Confluent frame shorter than its header", code="schema_truncated", raw=data)
        return Frame("confluent", None, int.from_bytes(data[1:_CONFLUENT_HEADER], "big"), data[_CONFLUENT_HEADER:])
    raise SchemaError("bytes are in neither Avro wire format", code="schema_unknown_format", raw=data)
