"""CRC-64-AVRO against the Avro project's published vectors (share/test/data/schema-tests.txt)."""

from __future__ import annotations

import json

import pytest
from fastavro import parse_schema
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from docstream.avro import crc64_avro, fingerprint_bytes
from docstream.avro.schemas import SchemaSet

# (canonical form, Java SchemaNormalization.parsingFingerprint64 as a signed long)
_VECTORS = [
    ('"null"', 7195948357588979594),
    ('"boolean"', -6970731678124411036),
    ('"int"', 8247732601305521295),
    ('"long"', -3434872931120570953),
    ('"float"', 5583340709985441680),
    ('"double"', -8181574048448539266),
    ('"bytes"', 5746618253357095269),
    ('"string"', -8142146995180207161),
    ("[]", -1241056759729112623),
    ('["int"]', -5232228896498058493),
    ('["int","boolean"]', 5392556393470105090),
    ('{"name":"foo","type":"fixed","size":15}', 1756455273707447556),
    ('{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}', 7843277075252814651),
    (
        '{"name":"PigValue","type":"record","fields":[{"name":"value","type":["null","int","long","PigValue"]}]}',
        -1759257747318642341,
    ),
]


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@pytest.mark.parametrize(("canonical", "expected"), _VECTORS)
def test_crc64_avro_matches_the_spec_vectors(canonical: str, expected: int) -> None:
    assert _signed(crc64_avro(canonical.encode())) == expected


def test_fingerprint_bytes_are_little_endian() -> None:
    assert fingerprint_bytes('"null"') == (7195948357588979594).to_bytes(8, "little")
    assert fingerprint_bytes('"null"').hex() == "8a8f25cce724dd63"


def test_canonical_form_of_a_spec_example() -> None:
    raw = {"type": "record", "name": "foo", "doc": "x", "fields": [{"name": "f1", "type": "boolean", "doc": "y"}]}
    assert to_parsing_canonical_form(parse_schema(raw)) == _VECTORS[12][0]


def test_our_fingerprints_agree_with_fastavro_for_every_schema() -> None:
    schemas = SchemaSet.load()
    assert len(schemas) >= 5
    for schema in schemas:
        assert schema.fingerprint.hex() == fastavro_fingerprint(schema.canonical_form, "CRC-64-AVRO")
        assert "logicalType" not in schema.canonical_form and '"doc"' not in schema.canonical_form
        assert json.loads(schema.canonical_form)["name"] == f"io.docstream.v1.{schema.name}"
