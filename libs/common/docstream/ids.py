"""Deterministic identities (docs/architecture.md "Identity and idempotency"). Pure."""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid

from docstream.errors import InputError

__all__ = ["MAX_SOURCE_KEY_BYTES", "MAX_VERSIONS", "check_source_key", "chunk_id", "content_sha256", "doc_id",
           "key_part", "new_job_id", "validate_id"]

MAX_SOURCE_KEY_BYTES = 4096
"""Longest source key in UTF-8 bytes (a document's identity across versions: docs/intake.md "Versions of a
document"). Every sink's field holds one (Milvus ``VARCHAR``, PostgreSQL ``text``)."""
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn", "Zl", "Zp"})
MAX_VERSIONS = 10_000
"""Most versions of a source a walk back through ``previous_doc_id`` takes (retiring, deleting)."""

_NAMESPACE = uuid.UUID("5b0f3e1c-6a43-4c57-9a55-0d1f2c3b4a59")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def content_sha256(data: bytes) -> str:
    """Hex SHA-256 of document bytes."""
    return hashlib.sha256(data).hexdigest()


def doc_id(job_id: str, sha256_hex: str) -> str:
    """Document id: the same file re-submitted to the same job is the same document."""
    return str(uuid.uuid5(_NAMESPACE, f"doc:{job_id}:{sha256_hex}"))


def chunk_id(sha256_hex: str, chunker_settings: str, index: int) -> str:
    """Chunk id from the document content, the chunker settings and the chunk's index."""
    return str(uuid.uuid5(_NAMESPACE, f"chunk:{sha256_hex}:{chunker_settings}:{index}"))


def new_job_id() -> str:
    """A fresh random job id."""
    return str(uuid.uuid4())


def validate_id(value: str, what: str = "job_id") -> str:
    """``value`` when it is a valid job id or tenant: 1-128 of ``A-Z a-z 0-9 . _ : @ -``, starting alphanumeric.

    Raises:
        InputError: ``invalid_<what>`` (``invalid_job_id``, ``invalid_tenant``).
    """
    if not _ID.fullmatch(value):
        raise InputError(
            f"{what} must be 1-128 letters, digits or . _ : @ -, starting alphanumeric", code=f"invalid_{what}"
        )
    return value


def key_part(text: str) -> str:
    """``text`` with every character ``check_source_key`` refuses percent-encoded (UTF-8, as in a URI), so a name
    someone else chose (an archive member's) can become part of a source key; the rest is kept as it is."""
    return "".join(
        ch if unicodedata.category(ch) not in _REFUSED_CATEGORIES
        else "".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
        for ch in text)


def check_source_key(key: str) -> str:
    """``key`` when it is a source key every store and sink keeps as it is: 1 to ``MAX_SOURCE_KEY_BYTES`` UTF-8
    bytes, not blank, with no control character (NUL included), surrogate, private-use or unassigned code point,
    and no line or paragraph separator.

    Raises:
        InputError: ``invalid_source_key``, saying which rule the key breaks (never echoing the key).
    """
    if not key.strip():
        raise InputError("a source key must not be blank", code="invalid_source_key")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InputError("a source key must be valid Unicode (no lone surrogate)", code="invalid_source_key") from None
    if size > MAX_SOURCE_KEY_BYTES:
        raise InputError(f"a source key is at most {MAX_SOURCE_KEY_BYTES} UTF-8 bytes, got {size}",
                         code="invalid_source_key")
    for position, ch in enumerate(key):
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise InputError(f"a source key holds a control or unassigned character (U+{ord(ch):04X} at "
                             f"{position})", code="invalid_source_key")
    return key
