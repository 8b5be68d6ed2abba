"""Framing of both wire formats."""

from __future__ import annotations

import pytest

from docstream.avro import frame_confluent, frame_single_object, parse_frame
from docstream.errors import PoisonRecord, SchemaError


def test_single_object_frame_round_trip() -> None:
    data = frame_single_object(b"\x01\x02\x03\x04\x05\x06\x07\x08", b"body")
    assert data == b"\xc3\x01\x01\x02\x03\x04\x05\x06\x07\x08body"
    frame = parse_frame(data)
    assert (frame.format, frame.fingerprint, frame.schema_id, frame.body) == (
        "single_object", b"\x01\x02\x03\x04\x05\x06\x07\x08", None, b"body")


def test_confluent_frame_round_trip() -> None:
    data = frame_confluent(258, b"xyz")
    assert data == b"\x00\x00\x00\x01\x02xyz"
    frame = parse_frame(data)
    assert (frame.format, frame.fingerprint, frame.schema_id, frame.body) == ("confluent", None, 258, b"xyz")


@pytest.mark.parametrize("data", [b"", b"garbage", b"\xc3", b"\xc3\x01\x00", b"\x00\x00\x01", b"\xc3\x02abcdefgh"])
def test_unframed_or_truncated_bytes_are_schema_errors_that_keep_the_bytes(data: bytes) -> None:
    with pytest.raises(SchemaError) as info:
        parse_frame(data)
    assert isinstance(info.value, PoisonRecord)
    assert info.value.raw == data


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        frame_single_object(b"short", b"")
    with pytest.raises(ValueError, match="out of range"):
        frame_confluent(-1, b"")
