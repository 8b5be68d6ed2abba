"""Deterministic identities (docs/architecture.md "Identity and idempotency"). Pure."""

from __future__ import annotations

import hashlib
import re
import uuid

from docstream.errors import InputError

__all__ = ["MAX_SOURCE_KEY_CHARS", "MAX_VERSIONS", "chunk_id", "content_sha256", "doc_id", "new_job_id", "validate_id"]

MAX_SOURCE_KEY_CHARS = 4096
"""Longest source key (a document's identity across versions: docs/intake.md "Versions of a document")."""
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
