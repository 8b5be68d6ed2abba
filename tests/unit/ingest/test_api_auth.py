"""ApiKeyAuthenticator: bearer keys → tenant; store reads cached for auth_cache_s (fake store, fake clock)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from docstream.store.base import ApiKeyRow
from docstream_ingest.api.auth import ApiKeyAuthenticator, Principal
from docstream_ingest.api.errors import ApiError
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.clock import FakeClock

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


class FakeKeyStore:
    """The one ResultStore method the authenticator uses, counting its reads."""

    def __init__(self) -> None:
        self.rows: dict[str, ApiKeyRow] = {}
        self.reads = 0

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        self.reads += 1
        return self.rows.get(key_id)


@pytest.fixture
def keys() -> FakeKeyStore:
    return FakeKeyStore()


def _issue(store: FakeKeyStore, tenant: str = "acme") -> str:
    new = generate_api_key()
    store.rows[new.key_id] = ApiKeyRow(new.key_id, tenant, new.key_hash, AT)
    return new.key


def _auth(store: FakeKeyStore, clock: FakeClock | None = None, cache_s: float = 30.0) -> ApiKeyAuthenticator:
    return ApiKeyAuthenticator(store, cache_s=cache_s, monotonic=clock or FakeClock(100.0))  # type: ignore[arg-type]


def test_a_valid_key_gives_its_tenant(keys: FakeKeyStore) -> None:
    key = _issue(keys, "acme")
    principal = _auth(keys).authenticate(key)
    assert principal == Principal(tenant="acme", key_id=key.split("_")[1])


@pytest.mark.parametrize("token", [None, "", "not-a-key", "ds_0123456789abcdef_" + "x" * 43])
def test_missing_malformed_and_unknown_keys_are_401_with_a_bearer_challenge(
    keys: FakeKeyStore, token: str | None
) -> None:
    with pytest.raises(ApiError) as caught:
        _auth(keys).authenticate(token)
    assert caught.value.status == 401
    assert caught.value.error_code == "unauthorized"
    assert caught.value.headers is not None and caught.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_secret_for_a_known_id_is_401(keys: FakeKeyStore) -> None:
    key = _issue(keys)
    forged = key[:-2] + ("AA" if not key.endswith("AA") else "BB")
    with pytest.raises(ApiError) as caught:
        _auth(keys).authenticate(forged)
    assert caught.value.status == 401


def test_a_malformed_key_never_reaches_the_store(keys: FakeKeyStore) -> None:
    with pytest.raises(ApiError):
        _auth(keys).authenticate("garbage")
    assert keys.reads == 0


def test_rows_are_cached_for_cache_s_then_read_again(keys: FakeKeyStore) -> None:
    key = _issue(keys)
    clock = FakeClock(100.0)
    auth = _auth(keys, clock, cache_s=30.0)
    for _ in range(5):
        auth.authenticate(key)
    assert keys.reads == 1
    clock.now += 31.0
    auth.authenticate(key)
    assert keys.reads == 2


def test_a_revoked_key_stops_working_once_the_cache_expires(keys: FakeKeyStore) -> None:
    key = _issue(keys)
    key_id = key.split("_")[1]
    clock = FakeClock(100.0)
    auth = _auth(keys, clock, cache_s=10.0)
    auth.authenticate(key)
    keys.rows[key_id] = replace(keys.rows[key_id], revoked_at=AT)
    auth.authenticate(key)  # still cached
    clock.now += 11.0
    with pytest.raises(ApiError) as caught:
        auth.authenticate(key)
    assert caught.value.status == 401
