"""API keys: generation, parsing, hashing and verification. Pure: no I/O, randomness injected.

A key reads ``ds_<key_id>_<secret>``: ``key_id`` is 16 lowercase hex digits, public, and
names the key's row in the store (so a lookup needs no scan); ``secret`` is 32 random bytes,
base64url without padding (43 characters). Only ``hash_api_key(key)`` is stored: the SHA-256
of the whole key. A fast hash is enough because the key holds 256 random bits (nothing to
guess a dictionary from); comparisons are constant-time. The plain key is shown once, when
it is created, and never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "KEY_PREFIX",
    "NewApiKey",
    "generate_api_key",
    "hash_api_key",
    "key_id_of",
    "verify_api_key",
]

KEY_PREFIX = "ds_"
_KEY = re.compile(r"ds_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_HASH_SCHEME = "sha256:"
_ID_BYTES = 8
_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """A freshly generated key.

    Attributes:
        key_id: the public id (the store row's key).
        key: the full key; hand it to its owner once and forget it.
        key_hash: what the store keeps.
    """

    key_id: str
    key: str
    key_hash: str

    def __repr__(self) -> str:
        return f"NewApiKey(key_id={self.key_id!r}, key='***', key_hash={self.key_hash!r})"


def generate_api_key(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> NewApiKey:
    """A new key from ``random_bytes`` (a CSPRNG; ``secrets.token_bytes`` by default).

    Raises:
        ValueError: ``random_bytes`` returned the wrong number of bytes.
    """
    id_bytes = random_bytes(_ID_BYTES)
    secret_bytes = random_bytes(_SECRET_BYTES)
    if len(id_bytes) != _ID_BYTES or len(secret_bytes) != _SECRET_BYTES:
        raise ValueError("random_bytes returned the wrong number of bytes")
    key_id = id_bytes.hex()
    secret = base64.urlsafe_b64encode(secret_bytes).rstrip(b"=").decode("ascii")
    key = f"{KEY_PREFIX}{key_id}_{secret}"
    return NewApiKey(key_id=key_id, key=key, key_hash=hash_api_key(key))


def key_id_of(key: str) -> str | None:
    """The key_id of a well-formed key, or None for anything else."""
    match = _KEY.fullmatch(key)
    return match.group(1) if match else None


def hash_api_key(key: str) -> str:
    """What the store keeps for ``key``: ``sha256:<hex>``."""
    return _HASH_SCHEME + hashlib.sha256(key.encode("utf-8")).hexdigest()


def verify_api_key(key: str, stored_hash: str) -> bool:
    """Whether ``key`` is well-formed and hashes to ``stored_hash`` (constant-time comparison)."""
    if key_id_of(key) is None or not stored_hash.startswith(_HASH_SCHEME):
        return False
    return hmac.compare_digest(hash_api_key(key).encode("ascii"), stored_hash.encode("ascii", "replace"))
