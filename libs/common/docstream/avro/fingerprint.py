"""CRC-64-AVRO (Rabin) fingerprints of Avro schemas, from the Avro specification. Pure.

The single-object encoding (Avro spec, "Single-object encoding") prefixes every body with
the 64-bit Rabin fingerprint of the writer schema's Parsing Canonical Form, written
little-endian. The fingerprint uses the polynomial whose "empty" value is
``0xc15d213aa4d7a795``.
"""

from __future__ import annotations

__all__ = ["EMPTY_FINGERPRINT", "crc64_avro", "fingerprint_bytes"]

EMPTY_FINGERPRINT = 0xC15D213AA4D7A795
_MASK64 = (1 << 64) - 1


def _build_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        fp = byte
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY_FINGERPRINT & (-(fp & 1) & _MASK64))
        table.append(fp)
    return tuple(table)


_TABLE = _build_table()


def crc64_avro(data: bytes) -> int:
    """The CRC-64-AVRO fingerprint of ``data`` as an unsigned 64-bit integer.

    Java's ``SchemaNormalization.fingerprint64`` returns the same bits as a signed long.
    """
    fp = EMPTY_FINGERPRINT
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def fingerprint_bytes(canonical_form: str) -> bytes:
    """The 8 bytes (little-endian) that follow ``C3 01`` in a single-object encoded record."""
    return crc64_avro(canonical_form.encode("utf-8")).to_bytes(8, "little")
