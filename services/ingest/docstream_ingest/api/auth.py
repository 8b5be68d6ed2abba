"""Bearer API keys → the caller's tenant. Keys are stored hashed (``docstream_ingest.apikeys``).

A verified key is trusted for ``api.auth_cache_s`` before its row is read again, which keeps
the store off every request; revoking a key therefore takes effect within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from docstream.store.base import ApiKeyRow, ApiKeysStore
from docstream_ingest.api.errors import ApiError
from docstream_ingest.apikeys import key_id_of, verify_api_key

__all__ = ["ApiKeyAuthenticator", "Principal"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="docstream"'}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's tenant and public id."""

    tenant: str
    key_id: str


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers=_CHALLENGE)


class ApiKeyAuthenticator:
    """Checks ``Authorization: Bearer <key>`` against the store's api_keys rows.

    Args:
        store: where the api_keys rows are.
        cache_s: how long a row read from the store is reused.
        monotonic: the clock of the cache.
    """

    def __init__(
        self, store: ApiKeysStore, *, cache_s: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._cache_s = cache_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[float, ApiKeyRow | None]] = {}

    def authenticate(self, token: str | None) -> Principal:
        """The principal of a bearer token (blocking: may read the store).

        Raises:
            ApiError: 401 ``unauthorized`` for a missing, malformed, unknown, wrong or revoked key.
            StoreError: the store is unavailable.
        """
        if not token:
            raise _unauthorized("an API key is required: Authorization: Bearer <key>")
        key_id = key_id_of(token)
        if key_id is None:
            raise _unauthorized("malformed API key")
        row = self._row(key_id)
        if row is None or row.revoked_at is not None or not verify_api_key(token, row.key_hash):
            raise _unauthorized("unknown or revoked API key")
        return Principal(tenant=row.tenant, key_id=key_id)

    def _row(self, key_id: str) -> ApiKeyRow | None:
        now = self._monotonic()
        with self._lock:
            cached = self._rows.get(key_id)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        row = self._store.get_api_key(key_id)
        with self._lock:
            if len(self._rows) > 10_000:  # unknown ids are cached too: bound the map
                self._rows.clear()
            self._rows[key_id] = (now, row)
        return row
