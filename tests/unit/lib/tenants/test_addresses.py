"""Which addresses a tenant's webhook may reach (issue 43, point 4): the pure verdict, and the refusal at
submission through the API (SQLite store, no broker: a refused request produces nothing). The refusal at call
time, against real listeners on 127.0.0.1, is in tests/integration/test_webhook_calls.py. No test here sends
anything anywhere: the addresses below are judged, never connected to, and no name is looked up."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from docstream.errors import InputError
from docstream.settings import Settings
from docstream.store.base import ApiKeyRow
from docstream.store.sqlite import SqliteStore
from docstream.tenants.addresses import address_refusal, check_addresses, is_loopback_name, refused_address
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.contexts import api_sections

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("address", "reason"), [
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("169.254.169.254", "link_local"),  # cloud metadata
    ("169.254.0.1", "link_local"),
    ("fe80::1", "link_local"),
    ("fe80::1%eth0", "link_local"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("100.64.0.1", "shared"),  # carrier-grade NAT
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("192.0.2.10", "private"),  # documentation range (Python calls it private)
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged by the IPv4 address
    ("::ffff:169.254.169.254", "link_local"),
    ("::ffff:10.1.2.3", "private"),
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
    ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
    ("not an address", "invalid"),
])
def test_addresses_a_webhook_may_not_reach_are_refused_with_the_reason(address: str, reason: str) -> None:
    assert address_refusal(address) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2001:4860:4860::8888", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])
def test_global_addresses_are_let_through(address: str) -> None:
    assert address_refusal(address) is None


def test_a_name_is_refused_when_any_one_of_its_addresses_is() -> None:
    assert refused_address(["8.8.8.8", "10.0.0.1", "127.0.0.1"]) == ("10.0.0.1", "private")
    assert refused_address(["8.8.8.8", "2001:4860:4860::8888"]) is None
    assert refused_address([]) is None
    with pytest.raises(InputError) as caught:
        check_addresses("hooks.example.com", ["8.8.8.8", "169.254.169.254"])
    assert caught.value.code == "webhook_address_refused"
    assert "169.254.169.254 (link_local)" in caught.value.message
    check_addresses("hooks.example.com", ["8.8.8.8"])


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("LOCALHOST.", True), ("api.localhost", True), ("localhost.example.com", False),
    ("notlocalhost", False),
])
def test_localhost_names_are_loopback_without_asking_a_resolver(host: str, loopback: bool) -> None:
    assert is_loopback_name(host) is loopback


# -- at submission ----------------------------------------------------------------------------


def _api(tmp_path: Path, *, allow_private: bool) -> tuple[TestClient, SqliteStore, dict[str, str]]:
    settings = Settings().with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
        kafka={"bootstrap_servers": "127.0.0.1:1"},  # never contacted: nothing here is produced
        reducer={"webhook_allow_private": allow_private},
    )
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    new = generate_api_key()
    store.upsert_api_key(ApiKeyRow(new.key_id, "acme", new.key_hash, AT))
    app = create_app(api_sections(settings), store=store, clock=lambda: AT)
    return TestClient(app, raise_server_exceptions=False), store, {"Authorization": f"Bearer {new.key}"}


@pytest.fixture
def refusing(tmp_path: Path) -> Iterator[tuple[TestClient, SqliteStore, dict[str, str]]]:
    client, store, headers = _api(tmp_path, allow_private=False)
    with client:
        yield client, store, headers
    store.close()


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080/hook",
    "http://127.1/hook",  # the C library's short form
    "http://0x7f000001/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.5/hook?token=secret",
    "https://192.168.0.10/hook",
    "http://[::1]:9000/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://0.0.0.0:8080/hook",
    "http://localhost:8080/hook",
    "http://hooks.localhost/hook",
])
def test_a_webhook_to_a_local_or_private_address_is_refused_at_submission(
    refusing: tuple[TestClient, SqliteStore, dict[str, str]], url: str,
) -> None:
    client, store, headers = refusing
    response = client.post("/v1/jobs", headers=headers, data={"webhook_url": url},
                           files=[("files", ("a.pdf", b"%PDF-1.7 doc", "application/pdf"))])
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error_code"] == "webhook_address_refused"
    assert "secret" not in body["message"] and "/hook" not in body["message"]
    assert store.list_jobs("acme") == []


def test_the_setting_lets_a_local_webhook_through_submission(tmp_path: Path) -> None:
    """With the setting on, the refusal is gone: the request goes on to the broker (unreachable here, so it fails
    later, with another code)."""
    client, store, headers = _api(tmp_path, allow_private=True)
    with client:
        response = client.post("/v1/jobs", headers=headers, data={"webhook_url": "http://127.0.0.1:8080/hook"},
                               files=[("files", ("a.txt", b"", "text/plain"))])
    store.close()
    assert response.json()["error_code"] != "webhook_address_refused"
