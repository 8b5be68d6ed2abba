"""docstream_ingest.apikeys: keys are generated from injected randomness, stored hashed, verified in constant time."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from docstream_ingest.apikeys import KEY_PREFIX, generate_api_key, hash_api_key, key_id_of, verify_api_key


def _fake_random(seed: int = 1) -> Callable[[int], bytes]:
    """Deterministic bytes: a different run per call, the same sequence per seed."""
    counter = itertools.count(seed)
    return lambda n: bytes((next(counter) + i) % 256 for i in range(n))


def test_a_generated_key_has_its_id_inside_and_verifies_against_its_hash() -> None:
    new = generate_api_key(_fake_random())
    assert new.key.startswith(KEY_PREFIX)
    assert key_id_of(new.key) == new.key_id
    assert len(new.key_id) == 16
    assert new.key_hash == hash_api_key(new.key)
    assert new.key not in new.key_hash
    assert verify_api_key(new.key, new.key_hash)


def test_generation_is_deterministic_given_the_randomness_and_differs_otherwise() -> None:
    assert generate_api_key(_fake_random(1)) == generate_api_key(_fake_random(1))
    assert generate_api_key().key != generate_api_key().key


def test_a_different_secret_with_the_same_id_does_not_verify() -> None:
    new = generate_api_key(_fake_random())
    forged = new.key[:-1] + ("A" if new.key[-1] != "A" else "B")
    assert key_id_of(forged) == new.key_id
    assert not verify_api_key(forged, new.key_hash)


@pytest.mark.parametrize(
    "key", ["", "ds_", "Bearer x", "ds_0123456789abcdef_short", "xx_0123456789abcdef_" + "a" * 43, "ds_" + "g" * 16]
)
def test_malformed_keys_have_no_id_and_never_verify(key: str) -> None:
    assert key_id_of(key) is None
    assert not verify_api_key(key, hash_api_key(key))


def test_an_unknown_hash_scheme_never_verifies() -> None:
    new = generate_api_key(_fake_random())
    assert not verify_api_key(new.key, new.key_hash.replace("sha256:", "md5:"))


def test_the_repr_never_shows_the_key() -> None:
    new = generate_api_key(_fake_random())
    assert new.key not in repr(new)
    assert new.key_id in repr(new)


def test_short_randomness_is_refused() -> None:
    with pytest.raises(ValueError, match="wrong number of bytes"):
        generate_api_key(lambda n: b"\x00")
