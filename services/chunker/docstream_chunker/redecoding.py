"""Text layers that are a known mis-decoding, and the text they were meant to be. Pure.

Old PDF producers wrote non-Latin text in 8-bit fonts whose encoding claims Latin-1: a pdfTeX
manual typeset in T2A (Cyrillic) bitmap fonts, a Word export of Greek through a code page. The
glyphs on the page are Cyrillic or Greek, but the characters the layer gives are each byte read
as Windows-1252: ``âñå îøèáêè`` for ``все ошибки`` (Windows-1251), ``Ðñþôï`` for Greek. Such a
layer reads as accented Latin letters, and a page that mixes it with English names or commands
could pass for a usable Latin layer.

``redecode(text)`` finds these: it reads the layer back into the bytes it came from and asks
charset-normalizer (a well-kept detector of legacy encodings by their languages' letter
frequencies) which encoding those bytes were. When the answer is one of ``SINGLE_BYTE`` or
UTF-8, and the re-decoded text reads as words of a script (``docstream_chunker.page_quality``'s
measure), the layer is a mis-decoding: the page's verdict is ``mojibake`` whatever else it
reads, the re-decoded text names the page's script for OCR, and it is kept where OCR agrees
with it (``docstream_chunker.provenance``). Only pages with words made of non-ASCII Latin
letters alone, which no Latin language writes (``page_quality.REDECODE_MIN_LETTERS``), pay for
the detection.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from charset_normalizer import from_bytes

__all__ = [
    "DETECTED_BYTES",
    "SINGLE_BYTE",
    "Redecoding",
    "redecode",
    "redecoded_text",
]

SINGLE_BYTE: tuple[str, ...] = ("cp1251", "koi8_r", "koi8_u", "cp866", "iso8859_5", "mac_cyrillic", "cp1253",
                                "iso8859_7", "cp1255", "cp1256")
"""The legacy 8-bit encodings of non-Latin scripts whose bytes a layer may hold as Latin-1
(Cyrillic, Greek, Hebrew, Arabic). Each maps a byte to one character, so the repair is a
character table."""
_LATIN_1 = ("cp1252", "latin_1")
"""What the layer's bytes were read as (a font's WinAnsiEncoding; PDFDocEncoding is Latin-1 above 0xA0)."""
DETECTED_BYTES = 8192
"""Most bytes of a layer the detection reads: a page's text is a few thousand; a hostile one is bounded."""


@dataclass(frozen=True, slots=True)
class Redecoding:
    """A layer read again in the encoding it was written in.

    Attributes:
        text: the re-decoded text.
        encoding: the encoding its bytes were (Python's codec name: ``cp1251``, ``koi8_r``, ``utf_8``).
    """

    text: str
    encoding: str


def _to_bytes(text: str) -> bytes | None:
    """The bytes a Latin-1 reading of a layer came from, or None when the text holds other characters."""
    for codec in _LATIN_1:
        try:
            return text.encode(codec)
        except UnicodeEncodeError:
            continue
    return None


@cache
def _table(encoding: str) -> dict[int, str]:
    """Latin-1 character (as Windows-1252 and as ISO-8859-1 read it) → what the byte is in ``encoding``."""
    table: dict[int, str] = {}
    for byte in range(0x80, 0x100):
        meant = bytes([byte]).decode(encoding, errors="replace")
        for codec in reversed(_LATIN_1):
            read = bytes([byte]).decode(codec, errors="ignore")
            if read:
                table[ord(read)] = meant
    return table


def redecoded_text(text: str, encoding: str) -> str:
    """``text`` with each character read back to its byte and that byte decoded in ``encoding`` (one of
    ``SINGLE_BYTE``); characters that are not Latin-1's stay as they are."""
    return text.translate(_table(encoding))


def redecode(text: str) -> Redecoding | None:
    """``text`` in the encoding its bytes were written in, when it is a known mis-decoding; else None.

    None when the text holds characters Latin-1 cannot have come from, when charset-normalizer
    finds its bytes to be Latin-1 indeed (a French or German page), or finds no encoding. The
    caller judges whether the re-decoded text reads (``docstream_chunker.page_quality``).
    """
    data = _to_bytes(text)
    if data is None or data.isascii():
        return None
    best = from_bytes(data[:DETECTED_BYTES], cp_isolation=[*SINGLE_BYTE, "utf_8", *_LATIN_1]).best()
    if best is None or best.encoding in _LATIN_1:
        return None
    if best.encoding == "utf_8":
        try:
            return Redecoding(data.decode("utf-8"), "utf_8")
        except UnicodeDecodeError:
            return None
    if best.encoding not in SINGLE_BYTE:
        return None
    return Redecoding(redecoded_text(text, best.encoding), best.encoding)
