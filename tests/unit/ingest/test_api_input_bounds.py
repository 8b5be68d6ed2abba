"""Issue 43, point 3: what a tenant writes is bounded at the API (deep JSON, source keys): a 422 with a code, never a
500. The real app in process (TestClient) on a SQLite store; everything here is refused before a record would be
produced, so no broker is needed (tests/unit/ingest/test_api_app.py's fixture)."""

from __future__ import annotations

import json

import pytest

from docstream.store.base import SourceRow
from docstream.store.sources import delete_source
from docstream.tenants.json_input import MAX_JSON_DEPTH
from tests.unit.ingest.test_api_app import AT, Api, _document, _job, api  # noqa: F401 - the fixture

DEEP = "[" * 3000 + "]" * 3000
PDF = ("a.pdf", b"%PDF-1.7 a document", "application/pdf")


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _post(api: Api, **kwargs: object) -> tuple[int, dict[str, object]]:  # noqa: F811 - api is the fixture
    response = api.client.post("/v1/jobs", headers={**api.as_("acme"), **kwargs.pop("headers", {})},  # type: ignore[dict-item]
                               **kwargs)  # type: ignore[arg-type]
    return response.status_code, response.json()


@pytest.mark.parametrize("field", ["tasks", "source_keys"])
@pytest.mark.parametrize("text", [DEEP, _nested(2000)], ids=["arrays", "objects"])
def test_deeply_nested_json_in_a_multipart_field_is_a_422_not_a_500(api: Api, field: str, text: str) -> None:  # noqa: F811
    status, body = _post(api, files=[("files", PDF)], data={field: text})
    assert (status, body["error_code"]) == (422, "invalid_request"), body
    assert "levels deep" in str(body["message"]) and field in str(body["message"])
    assert api.store.list_jobs("acme") == []


def test_deeply_nested_json_in_a_json_body_is_a_422_not_a_500(api: Api) -> None:  # noqa: F811
    schema = json.loads(_nested(MAX_JSON_DEPTH - 8))
    for text in (DEEP, json.dumps({"source_uris": ["s3://b/a.pdf"], "tasks": [
            {"name": "generate", "prompt": {"kind": "extract", "json_schema": json.loads(_nested(900))}}]})):
        status, body = _post(api, content=text.encode(), headers={"content-type": "application/json"})
        assert (status, body["error_code"]) == (422, "invalid_request"), body
    status, body = _post(api, json={"source_uris": ["s3://b/a.pdf"], "tasks": [
        {"name": "generate", "prompt": {"kind": "extract", "json_schema": schema}}]})
    assert status == 422 and "levels deep" not in str(body["message"]), body  # within the bound: judged as before
    assert api.store.list_jobs("acme") == []


BAD_KEYS = {"nul": "s3://b/a\x00.pdf", "newline": "s3://b/a\n.pdf", "separator": "s3://b/a\u2028.pdf",
            "4100-bytes-in-1025-chars": "😀" * 1025, "4097-bytes": "x" * 4097, "blank": " "}


@pytest.mark.parametrize("key", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_a_source_key_a_sink_would_refuse_is_refused_at_intake_with_its_code(api: Api, key: str) -> None:  # noqa: F811
    keys = json.dumps({"a.pdf": key}, ensure_ascii=False)
    status, body = _post(api, files=[("files", PDF)], data={"source_keys": keys})
    assert (status, body["error_code"]) == (422, "invalid_source_key"), body
    assert str(body["message"]).startswith("source_keys['a.pdf']: ")
    assert api.store.list_jobs("acme") == []


@pytest.mark.parametrize("key", ["😀" * 1024, "s3://b/Zürich 東京.pdf"])
def test_a_source_key_within_the_bound_passes_the_check(api: Api, key: str) -> None:  # noqa: F811
    # 1,024 four-byte characters: 4,096 bytes, the most; the request is then refused on an option read after the
    # keys, before anything would be produced
    status, body = _post(api, files=[("files", PDF)],
                         data={"source_keys": json.dumps({"a.pdf": key}, ensure_ascii=False), "chunk_max_tokens": "4"})
    assert (status, body["error_code"]) == (422, "invalid_request"), body
    assert "chunk_max_tokens" in str(body["message"])


@pytest.mark.parametrize("uri", ["s3://b/a\x00.pdf", "s3://b/a\r\n.pdf", "s3://b/" + "é" * 2100])
def test_a_source_uri_is_its_documents_source_key_and_checked_as_one(api: Api, uri: str) -> None:  # noqa: F811
    status, body = _post(api, json={"source_uris": [uri]})
    assert (status, body["error_code"]) == (422, "invalid_source_key"), body


@pytest.mark.parametrize("key", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_deleting_by_a_key_no_source_can_have_is_a_422_with_the_code(api: Api, key: str) -> None:  # noqa: F811
    response = api.client.delete("/v1/sources", params={"key": key}, headers=api.as_("acme"))
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == "invalid_source_key"


def test_a_source_whose_key_is_4096_bytes_of_4_byte_characters_can_be_deleted(api: Api) -> None:  # noqa: F811
    key = "😀" * 1024
    _job(api.store, "j1")
    _document(api.store, "j1", "v1", "chunked", source_key=key)
    api.store.swap_source(None, SourceRow("acme", key, "v1", "ab" * 32, "j1", AT, generation=1))
    response = api.client.delete("/v1/sources", params={"key": key}, headers=api.as_("globex"))
    # a valid key (not 422), looked up under the caller's tenant: another tenant's source is not found
    assert (response.status_code, response.json()["error_code"]) == (404, "source_not_found"), response.text
    # the route's delete (the fixture has no broker for its tombstone: tests/integration/test_api.py has)
    assert delete_source(api.store, "acme", key).versions == 1
    source = api.store.get_source("acme", key)
    assert source is not None and not source.live


def test_two_uploads_that_would_be_two_versions_of_one_source_in_one_request_are_refused(api: Api) -> None:  # noqa: F811
    other = ("in/a.pdf", b"%PDF-1.7 another document", "application/pdf")  # its name is a.pdf once sanitised
    status, body = _post(api, files=[("files", PDF), ("files", other)],
                         data={"source_keys": json.dumps({"a.pdf": "s3://b/a.pdf"})})
    assert (status, body["error_code"]) == (422, "duplicate_source_key"), body
    renamed = ("b.pdf", b"%PDF-1.7 another document", "application/pdf")
    status, body = _post(api, files=[("files", PDF), ("files", renamed)],
                         data={"source_keys": json.dumps({"a.pdf": "s3://b/a.pdf", "b.pdf": "s3://b/a.pdf"})})
    assert (status, body["error_code"]) == (422, "duplicate_source_key"), body
    assert api.store.list_jobs("acme") == []
