"""The intake API in process (TestClient) on a SQLite store, without a broker.

Everything here either reads rows written straight into the store or is refused before a
record would be produced (a refused request produces nothing, so no producer is ever built).
Submission with real Kafka and Cassandra is in tests/integration/test_api.py.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from docstream.settings import Settings
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    QueuedJobRow,
    SourceRow,
)
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import Mention, TaskRequest
from docstream.tasks.selection import tasks_option
from docstream.tenants.usage import Usage
from docstream_ingest.api import create_app
from docstream_ingest.api.dashboard import load_assets
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.contexts import api_sections

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
NOW = AT + timedelta(seconds=90)
MODEL = "all-MiniLM-L6-v2"


@dataclass
class Api:
    client: TestClient
    store: SqliteStore
    keys: dict[str, str]

    def as_(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    settings = Settings().with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
        api={"max_upload_bytes": 64 * 1024, "max_files_per_job": 3},
        kafka={"bootstrap_servers": "127.0.0.1:1"},  # never contacted: nothing here is produced
    )
    store = SqliteStore(tmp_path / "store.db", page_size=3)
    store.migrate()
    keys = {}
    for tenant in ("acme", "globex"):
        new = generate_api_key()
        store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, AT))
        keys[tenant] = new.key
    app = create_app(api_sections(settings), store=store, clock=lambda: NOW)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, store, keys)
    store.close()


def _job(store: SqliteStore, job_id: str, tenant: str = "acme", **fields: object) -> JobRow:
    row = JobRow(
        **{"job_id": job_id, "tenant": tenant, "created_at": AT, "status": "running", "document_count": 0,
           "updated_at": AT, **fields}  # type: ignore[arg-type]
    )
    store.upsert_job(row)
    return row


def _document(store: SqliteStore, job_id: str, doc_id: str, status: str, **fields: object) -> None:
    error_code = fields.pop("error_code", None)
    store.upsert_document(DocumentRow(
        doc_id=doc_id, job_id=job_id, source_uri=f"file:///objects/{doc_id}", content_sha256="ab" * 32,
        status=status, updated_at=AT, filename=f"{doc_id}.pdf", error_code=error_code,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    ))
    store.upsert_job_document(JobDocumentRow(
        job_id, doc_id, status, AT, filename=f"{doc_id}.pdf", error_code=error_code  # type: ignore[arg-type]
    ))


def _result(store: SqliteStore, job_id: str, doc_id: str, chunks: int) -> None:
    store.upsert_document_result(DocumentResultRow(
        doc_id=doc_id, model_id=MODEL, job_id=job_id, status="completed", chunk_count=chunks, failed_chunks=0,
        token_count=10 * chunks, embedding=[0.5, 0.25], chunker_settings="max=256", completed_at=AT,
    ))
    store.upsert_chunks([
        ChunkRow(doc_id=doc_id, model_id=MODEL, chunk_index=i, chunk_id=f"{doc_id}-c{i}", job_id=job_id,
                 text=f"chunk {i} of {doc_id} — ü", page_start=1, page_end=1, char_start=i, char_end=i + 1,
                 token_count=10, embedding=[float(i), 1.0])
        for i in range(chunks)
    ])


# -- auth and tenants -------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/jobs"), ("GET", "/v1/jobs/j1"), ("GET", "/v1/jobs/j1/results"), ("POST", "/v1/jobs/j1/cancel"),
    ("POST", "/v1/jobs"), ("GET", "/v1/jobs/j1/documents"), ("GET", "/v1/jobs/j1/documents/d1"),
    ("GET", "/v1/usage"),
])
@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Basic abc", "Bearer ds_0123456789abcdef_" + "A" * 43])
def test_every_v1_route_needs_a_valid_key(api: Api, method: str, path: str, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = api.client.request(method, path, headers=headers)
    assert response.status_code == 401
    assert response.json()["error_code"] == "unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_tenant_sees_only_its_jobs(api: Api) -> None:
    _job(api.store, "a-1", "acme")
    _job(api.store, "g-1", "globex")
    assert [j["job_id"] for j in api.client.get("/v1/jobs", headers=api.as_("acme")).json()["items"]] == ["a-1"]
    _document(api.store, "g-1", "gd", "completed")
    for method, path in [("GET", "/v1/jobs/g-1"), ("GET", "/v1/jobs/g-1/results"), ("POST", "/v1/jobs/g-1/cancel"),
                         ("GET", "/v1/jobs/g-1/documents"), ("GET", "/v1/jobs/g-1/documents/gd")]:
        response = api.client.request(method, path, headers=api.as_("acme"))
        assert response.status_code == 404, path
        assert response.json() == {"error_code": "job_not_found", "message": "no job g-1"}
    assert api.store.get_job("g-1").status == "running"  # type: ignore[union-attr]


# -- reading jobs ---------------------------------------------------------------------------


def test_job_status_shows_counts_timings_and_pages_of_errors(api: Api) -> None:
    _job(api.store, "j1", document_count=7, completed=2, failed=3, partial=1)
    for i in range(7):
        failed = i in (1, 3, 5)
        _document(api.store, "j1", f"d{i}", "failed" if failed else "completed",
                  **({"error_code": "encrypted", "error": f"doc {i} is encrypted"} if failed else {}))
    first = api.client.get("/v1/jobs/j1", params={"errors_limit": 2}, headers=api.as_("acme")).json()
    assert (first["status"], first["document_count"], first["completed"], first["failed"]) == ("running", 7, 2, 3)
    assert first["pending"] == 1
    assert first["elapsed_s"] == 90.0  # running: from created_at to the app's clock
    assert [e["doc_id"] for e in first["errors"]] == ["d1", "d3"]
    assert first["errors"][0] == {"doc_id": "d1", "filename": "d1.pdf", "status": "failed",
                                  "error_code": "encrypted", "error": "doc 1 is encrypted"}
    second = api.client.get("/v1/jobs/j1", params={"errors_limit": 2, "errors_after": first["next_errors_cursor"]},
                            headers=api.as_("acme")).json()
    assert [e["doc_id"] for e in second["errors"]] == ["d5"]
    assert second["next_errors_cursor"] is None


def test_job_rate_and_eta_are_those_of_job_progress(api: Api) -> None:
    _job(api.store, "j1", document_count=10, completed=2, partial=1)  # 3 done in 90 s, 7 to go
    _job(api.store, "j2", document_count=4, completed=4, status="completed", updated_at=AT + timedelta(seconds=8))
    _job(api.store, "j3", document_count=5)
    jobs = {j["job_id"]: j for j in api.client.get("/v1/jobs", headers=api.as_("acme")).json()["items"]}
    running = jobs["j1"]
    assert (running["elapsed_s"], running["rate_docs_per_s"], running["eta_s"]) == (90.0, round(3 / 90, 6), 210.0)
    finished = jobs["j2"]  # up to its last update; no ETA once ended
    assert (finished["elapsed_s"], finished["rate_docs_per_s"], finished["eta_s"]) == (8.0, 0.5, None)
    assert (jobs["j3"]["rate_docs_per_s"], jobs["j3"]["eta_s"]) == (0.0, None)  # nothing done yet
    assert api.client.get("/v1/jobs/j1", headers=api.as_("acme")).json()["eta_s"] == 210.0


def test_a_job_shows_what_it_cost_and_null_before_anything_was_counted(api: Api) -> None:
    _job(api.store, "j0")
    assert api.client.get("/v1/jobs/j0", headers=api.as_("acme")).json()["usage"] is None
    _job(api.store, "j1", usage=Usage(pages=5, chunks=9, tokens=2_000, model_us={"cpu": 1_250_000},
                                      stage_us={"chunker": 300_000, "inference": 1_400_000},
                                      chat_tokens={"prompt": 700, "completion": 80}))
    usage = {"pages": 5, "chunks": 9, "tokens": 2_000, "model_seconds": 1.25, "device": "cpu",
             "stage_seconds": {"chunker": 0.3, "inference": 1.4}, "prompt_tokens": 700, "completion_tokens": 80}
    assert api.client.get("/v1/jobs/j1", headers=api.as_("acme")).json()["usage"] == usage
    listed = api.client.get("/v1/jobs", headers=api.as_("acme")).json()["items"]
    assert [j["usage"] for j in listed] == [None, usage]


def test_a_running_job_shows_where_it_stands_in_its_lane_and_an_ended_one_null(api: Api) -> None:
    # another tenant's backfill ahead in the batch lane counts as tokens, and nothing of it is shown but the sum
    api.store.upsert_queued_job(QueuedJobRow("docstream.chunks", "their-backfill", "globex", AT - timedelta(hours=1),
                                             60_000, 2, AT))
    api.store.upsert_queued_job(QueuedJobRow("docstream.chunks", "j1", "acme", AT, 300, 0, AT))
    api.store.record_throughput("docstream-inference", "inference-1", 500.0, NOW, 60)  # the embed group's rate
    _job(api.store, "j1", document_count=2)
    _job(api.store, "j2", document_count=1, status="completed")
    queue = api.client.get("/v1/jobs/j1", headers=api.as_("acme")).json()["queue"]
    assert queue == {"lane": "batch", "started": False, "tokens_ahead": 60_000, "waiting_tokens": 300,
                     "start_in_s": 120.0, "estimated_start": (NOW + timedelta(seconds=120)).isoformat().replace(
                         "+00:00", "Z")}
    listed = {j["job_id"]: j["queue"] for j in api.client.get("/v1/jobs", headers=api.as_("acme")).json()["items"]}
    assert listed == {"j1": queue, "j2": None}


def test_the_tenant_usage_adds_up_its_jobs_and_only_its_own(api: Api) -> None:
    one = Usage(pages=2, chunks=3, tokens=100, model_us={"cpu": 500_000}, stage_us={"inference": 600_000})
    for i in range(7):  # more than a store page (3 here)
        _job(api.store, f"a-{i}", created_at=AT + timedelta(days=i), usage=one if i else None)
    _job(api.store, "a-gpu", created_at=AT, usage=Usage(tokens=50, model_us={"cuda:0": 250_000}))
    _job(api.store, "g-1", "globex", usage=one)
    body = api.client.get("/v1/usage", headers=api.as_("acme")).json()
    assert (body["tenant"], body["jobs"]) == ("acme", 8)
    assert body["usage"] == {"pages": 12, "chunks": 18, "tokens": 650, "model_seconds": 3.25, "device": "cpu+cuda:0",
                             "stage_seconds": {"inference": 3.6}, "prompt_tokens": 0, "completion_tokens": 0}
    assert body["model_seconds_by_device"] == {"cpu": 3.0, "cuda:0": 0.25}
    window = api.client.get("/v1/usage", params={"since": (AT + timedelta(days=5)).isoformat()},
                            headers=api.as_("acme")).json()
    assert (window["jobs"], window["usage"]["tokens"]) == (2, 200)
    assert api.client.get("/v1/usage", params={"until": "yesterday"}, headers=api.as_("acme")).status_code == 422


def test_jobs_are_listed_in_pages(api: Api) -> None:
    for i in range(5):
        _job(api.store, f"job-{i}")
    seen, after = [], None
    while True:
        page = api.client.get("/v1/jobs", params={"limit": 2, **({"after": after} if after else {})},
                              headers=api.as_("acme")).json()
        seen += [j["job_id"] for j in page["items"]]
        after = page["next_cursor"]
        if after is None:
            break
    assert seen == [f"job-{i}" for i in range(5)]


def test_an_unknown_job_is_404_and_a_malformed_id_422(api: Api) -> None:
    assert api.client.get("/v1/jobs/nope", headers=api.as_("acme")).status_code == 404
    bad = api.client.get("/v1/jobs/-bad-", headers=api.as_("acme"))
    assert bad.status_code == 422
    assert bad.json()["error_code"] == "invalid_request"


# -- documents and chunks ---------------------------------------------------------------------


def test_a_jobs_documents_are_listed_in_pages_with_pages_chunks_and_errors(api: Api) -> None:
    _job(api.store, "j1", document_count=5)
    _document(api.store, "j1", "d1", "completed", page_count=4)
    _result(api.store, "j1", "d1", chunks=2)
    _document(api.store, "j1", "d2", "failed", error_code="encrypted", error="<b>locked</b>")
    _document(api.store, "j1", "d3", "chunked", page_count=2)
    _document(api.store, "j1", "d4", "submitted")
    _document(api.store, "j1", "d5", "completed", page_count=1)
    _result(api.store, "j1", "d5", chunks=1)
    seen: list[dict[str, object]] = []
    after = None
    while True:
        page = api.client.get("/v1/jobs/j1/documents", params={"limit": 2, **({"after": after} if after else {})},
                              headers=api.as_("acme")).json()
        seen += page["items"]
        after = page["next_cursor"]
        if after is None:
            break
    assert [d["doc_id"] for d in seen] == ["d1", "d2", "d3", "d4", "d5"]
    first = seen[0]
    assert (first["filename"], first["status"], first["page_count"], first["chunk_count"], first["token_count"]) == (
        "d1.pdf", "completed", 4, 2, 20)
    assert (seen[1]["error_code"], seen[1]["error"], seen[1]["chunk_count"]) == ("encrypted", "<b>locked</b>", None)
    assert (seen[2]["page_count"], seen[2]["chunk_count"]) == (2, None)  # chunked, no result yet


def test_a_document_in_its_job_before_its_row_is_written_shows_the_rows_defaults(api: Api) -> None:
    _job(api.store, "j1", document_count=1)
    api.store.upsert_job_document(JobDocumentRow("j1", "d9", "submitted", AT, filename="late.pdf"))
    (item,) = api.client.get("/v1/jobs/j1/documents", headers=api.as_("acme")).json()["items"]
    assert (item["doc_id"], item["status"], item["filename"]) == ("d9", "submitted", "late.pdf")
    shown = (item["page_count"], item["pages_by_verdict"], item["pages_by_source"], item["error"])
    assert shown == (None, {}, {}, None)
    assert (item["chunk_count"], item["failed_chunks"], item["token_count"]) == (None, None, None)
    assert "source_uri" not in item and "job_id" not in item


def test_a_document_on_its_own_shows_its_source_key_and_versions_but_not_where_the_bytes_are(api: Api) -> None:
    _job(api.store, "j1", document_count=1)
    _document(api.store, "j1", "d2", "completed", source_key="contracts/a.pdf", previous_doc_id="d1")
    shown = api.client.get("/v1/jobs/j1/documents/d2", headers=api.as_("acme")).json()
    assert (shown["source_key"], shown["previous_doc_id"], shown["deleted_at"]) == ("contracts/a.pdf", "d1", None)
    assert (shown["content_sha256"], shown["chunk_count"]) == ("ab" * 32, None)
    assert "source_uri" not in shown and "generation" not in shown


def test_a_document_shows_its_chunks_in_pages_with_the_start_of_their_text(api: Api) -> None:
    _job(api.store, "j1", document_count=1)
    _document(api.store, "j1", "d1", "completed", page_count=3, media_type="application/pdf")
    _result(api.store, "j1", "d1", chunks=5)
    long_text = "x" * 1000
    api.store.upsert_chunks([ChunkRow(
        doc_id="d1", model_id=MODEL, chunk_index=4, chunk_id="d1-c4", job_id="j1", text=long_text, page_start=2,
        page_end=3, char_start=0, char_end=1000, token_count=250, embedding=[1.0, 0.0])])
    first = api.client.get("/v1/jobs/j1/documents/d1", params={"chunks_limit": 3}, headers=api.as_("acme")).json()
    assert (first["doc_id"], first["job_id"], first["status"], first["page_count"], first["chunk_count"]) == (
        "d1", "j1", "completed", 3, 5)
    assert (first["model_id"], first["media_type"]) == (MODEL, "application/pdf")
    assert [c["chunk_index"] for c in first["chunks"]] == [0, 1, 2]
    assert first["chunks"][0]["text_start"] == "chunk 0 of d1 — ü"
    assert first["next_chunks_cursor"] == 2
    rest = api.client.get("/v1/jobs/j1/documents/d1", params={"chunks_limit": 3, "chunks_after": 2},
                          headers=api.as_("acme")).json()
    assert [c["chunk_index"] for c in rest["chunks"]] == [3, 4]
    assert rest["next_chunks_cursor"] is None
    last = rest["chunks"][1]
    assert (last["page_start"], last["page_end"], last["token_count"], last["text_chars"]) == (2, 3, 250, 1000)
    assert len(last["text_start"]) < 1000 and long_text.startswith(last["text_start"])


def test_a_document_of_another_job_or_none_is_404(api: Api) -> None:
    _job(api.store, "j1")
    _job(api.store, "j2")
    _document(api.store, "j2", "d2", "completed")
    for path in ("/v1/jobs/j1/documents/d2", "/v1/jobs/j1/documents/nope"):
        response = api.client.get(path, headers=api.as_("acme"))
        assert response.status_code == 404, path
        assert response.json()["error_code"] == "document_not_found"
    assert api.client.get("/v1/jobs/j2/documents/d2", headers=api.as_("acme")).status_code == 200


# -- the dashboard --------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "media"), [
    ("/ui", "text/html"), ("/ui/", "text/html"), ("/ui/dashboard.js", "text/javascript"),
    ("/ui/dashboard.css", "text/css"),
])
def test_the_dashboard_files_need_no_key_and_carry_a_strict_csp(api: Api, path: str, media: str) -> None:
    response = api.client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media)
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"


def test_the_dashboard_page_loads_only_its_own_files_and_no_inline_script() -> None:
    assets = load_assets()
    assert set(assets) == {"index.html", "dashboard.js", "dashboard.css", "favicon.svg"}
    page = assets["index.html"].decode()
    assert re.findall(r'<script[^>]*src="([^"]+)"', page) == ["/ui/dashboard.js"]
    assert not re.search(r"<script(?![^>]*src=)", page) and "style=" not in page
    script = assets["dashboard.js"].decode()
    assert not re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|\beval\(|new Function", script)


@pytest.mark.parametrize("path", [
    "/ui/../api/app.py", "/ui/%2e%2e/app.py", "/ui/..%2fapp.py", "/ui/..%2F..%2Fpyproject.toml", "/ui/app.py",
    "/ui/static/index.html", "/ui/%2fetc%2fpasswd", "/ui/....//dashboard.py", "/ui/__init__.py", "/ui/dashboard.py",
    "/ui/.%2e/routes.py", "/ui/index.html%00.py",
])
def test_no_path_under_ui_escapes_the_shipped_files(api: Api, path: str) -> None:
    response = api.client.get(path)
    assert response.status_code == 404, path
    assert "import" not in response.text and "root:" not in response.text


def test_the_dashboards_data_calls_need_the_key(api: Api) -> None:
    _job(api.store, "j1")
    script = api.client.get("/ui/dashboard.js").text
    assert "Authorization: `Bearer ${" in script  # every call sends the key; the page itself holds no data
    assert "j1" not in api.client.get("/ui").text
    assert api.client.get("/v1/jobs").status_code == 401


# -- results --------------------------------------------------------------------------------


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_results_stream_finished_documents_as_jsonl(api: Api) -> None:
    _job(api.store, "j1", document_count=4)
    _document(api.store, "j1", "d1", "completed")
    _result(api.store, "j1", "d1", chunks=2)
    _document(api.store, "j1", "d2", "chunked")  # not finished: left out
    _document(api.store, "j1", "d3", "failed", error_code="corrupt", error="bad xref")
    _document(api.store, "j1", "d4", "chunked")
    _result(api.store, "j1", "d4", chunks=7)  # reducer wrote the result, job_documents not moved on yet
    response = api.client.get("/v1/jobs/j1/results", headers=api.as_("acme"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = _lines(response.text)
    assert [(d["record"], d["doc_id"], d["status"]) for d in lines] == [
        ("document", "d1", "completed"), ("document", "d3", "failed"), ("document", "d4", "completed")]
    assert (lines[0]["chunk_count"], lines[0]["embedding"], lines[0]["model_id"]) == (2, [0.5, 0.25], MODEL)
    assert (lines[1]["error_code"], lines[1]["error"]) == ("corrupt", "bad xref")


def test_results_with_chunks_follow_each_document_by_its_chunks_in_order(api: Api) -> None:
    _job(api.store, "j1", document_count=2)
    for doc_id in ("d1", "d2"):
        _document(api.store, "j1", doc_id, "completed")
        _result(api.store, "j1", doc_id, chunks=7)  # more than one store page (page_size 3)
    response = api.client.get("/v1/jobs/j1/results", params={"include": "chunks"}, headers=api.as_("acme"))
    lines = _lines(response.text)
    assert [(line["record"], line["doc_id"], line.get("chunk_index")) for line in lines] == [
        ("document", doc_id, None) if i == 0 else ("chunk", doc_id, i - 1)
        for doc_id in ("d1", "d2") for i in range(8)
    ]
    assert (lines[4]["text"], lines[4]["embedding"]) == ("chunk 3 of d1 — ü", [3.0, 1.0])


def test_results_of_another_model_are_asked_for_by_model_id(api: Api) -> None:
    _job(api.store, "j1", document_count=1)
    _document(api.store, "j1", "d1", "completed")
    _result(api.store, "j1", "d1", chunks=1)
    other = api.client.get("/v1/jobs/j1/results", params={"model_id": "other-model", "include": "chunks"},
                           headers=api.as_("acme"))
    # completed in job_documents, but nothing of that model: the document line says so, without chunks
    assert [(d["record"], d["model_id"], d["embedding"]) for d in _lines(other.text)] == [
        ("document", "other-model", None)]


def test_results_of_a_job_of_two_tasks_have_a_line_per_document_and_task(api: Api) -> None:
    tasks = tasks_option([TaskRequest("embed"), TaskRequest("entities")]) or ""
    _job(api.store, "j1", document_count=2, options={"tasks": tasks})
    for doc_id in ("d1", "d2"):
        _document(api.store, "j1", doc_id, "completed")
        _result(api.store, "j1", doc_id, chunks=1)
    mention = Mention("Ada Lovelace", "PERSON", 0, 12, 1, 1.0)
    api.store.upsert_document_result(DocumentResultRow(
        doc_id="d1", model_id="entities/x", job_id="j1", status="completed", chunk_count=1, failed_chunks=0,
        token_count=10, embedding=[], chunker_settings="max=256", completed_at=AT, task="entities",
        mentions=(mention,)))
    api.store.upsert_chunks([ChunkRow(doc_id="d1", model_id="entities/x", chunk_index=0, chunk_id="d1-c0", job_id="j1",
                                      text="Ada Lovelace", page_start=1, page_end=1, char_start=0, char_end=12,
                                      token_count=3, embedding=[], task="entities", mentions=(mention,))])
    response = api.client.get("/v1/jobs/j1/results", params={"include": "chunks"}, headers=api.as_("acme"))
    lines = _lines(response.text)
    assert [(d["record"], d["doc_id"], d["task"], d["model_id"]) for d in lines] == [
        ("document", "d1", "embed", MODEL), ("chunk", "d1", "embed", MODEL),
        ("document", "d1", "entities", "entities/x"), ("chunk", "d1", "entities", "entities/x"),
        ("document", "d2", "embed", MODEL), ("chunk", "d2", "embed", MODEL),
        ("document", "d2", "entities", None)]  # not in yet: the line says so, without fields
    assert lines[2]["mentions"] == [mention.to_record(chunk=False)] and lines[6]["mentions"] is None


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_sets_the_status_and_repeating_it_is_harmless(api: Api) -> None:
    _job(api.store, "j1", document_count=3, completed=1)
    first = api.client.post("/v1/jobs/j1/cancel", headers=api.as_("acme"))
    assert first.status_code == 202
    assert first.json()["status"] == "cancelled"
    row = api.store.get_job("j1")
    assert row is not None and (row.status, row.completed, row.updated_at) == ("cancelled", 1, NOW)
    again = api.client.post("/v1/jobs/j1/cancel", headers=api.as_("acme"))
    assert again.status_code == 202 and again.json()["status"] == "cancelled"


def test_a_completed_job_cannot_be_cancelled(api: Api) -> None:
    _job(api.store, "j1", status="completed", document_count=1, completed=1)
    response = api.client.post("/v1/jobs/j1/cancel", headers=api.as_("acme"))
    assert response.status_code == 409
    assert response.json()["error_code"] == "job_finished"
    assert api.store.get_job("j1").status == "completed"  # type: ignore[union-attr]


# -- refusals (nothing is submitted, nothing produced) -----------------------------------------


def _files(*named: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (name, data, "application/octet-stream")) for name, data in named]


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize(("kwargs", "status", "code"), [
    ({"files": _files(("big.pdf", b"x" * 70_000))}, 413, "upload_too_large"),
    ({"content": (b"x" * 8192 for _ in range(10)), "headers": {"content-type": "multipart/form-data; boundary=b"}},
     413, "upload_too_large"),
    ({"files": _files(*[(f"{i}.pdf", bytes([i]) * 10) for i in range(4)])}, 422, "too_many_files"),
    ({"files": _files(("many.zip", _zip({f"{i}.pdf": bytes([i]) * 10 for i in range(4)})))}, 422, "too_many_files"),
    ({"files": _files(("evil.zip", _zip({"../../etc/cron.d/evil": b"x"})))}, 422, "archive_path_traversal"),
    ({"files": _files(("bomb.zip", _zip({"zeros.pdf": bytes(2 * 1024 * 1024)})))}, 422, "archive_bomb"),
    ({"files": _files(("empty.pdf", b""))}, 422, "empty"),
    ({"files": _files(("a.pdf", b"%PDF")), "data": {"chunk_max_tokens": "4"}}, 422, "invalid_request"),
    ({"files": _files(("a.pdf", b"%PDF")), "data": {"colour": "red"}}, 422, "invalid_request"),
    ({"content": b'--b\r\nContent-Disposition: form-data; name="model_id"\r\n\r\nm\r\n--b--\r\n',
      "headers": {"content-type": "multipart/form-data; boundary=b"}}, 422, "no_documents"),
    ({"content": b"garbage", "headers": {"content-type": "multipart/form-data"}}, 400, "invalid_multipart"),
    ({"content": b"hello", "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type"),
    ({"json": {"source_uris": ["file:///etc/passwd"]}}, 422, "source_not_allowed"),
    ({"json": {"source_uris": ["s3://someone-elses-bucket/a.pdf"]}}, 422, "source_not_allowed"),
    ({"json": {"source_uris": ["relative/a.pdf"]}}, 422, "invalid_source_uri"),
    ({"json": {"source_uris": []}}, 422, "invalid_request"),
    ({"json": {"source_uris": ["file:///a"] * 4}}, 422, "too_many_files"),
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 422, "invalid_request"),
])
def test_refusals_are_4xx_json_and_submit_nothing(api: Api, kwargs: dict[str, object], status: int, code: str) -> None:
    response = api.client.post("/v1/jobs", headers={**api.as_("acme"), **kwargs.pop("headers", {})},  # type: ignore[dict-item]
                               **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == code
    assert body["message"]
    assert api.store.list_jobs("acme") == []


# -- the job's tasks ----------------------------------------------------------------------------


def _tasks_form(tasks: object) -> dict[str, object]:
    return {"files": _files(("a.pdf", b"%PDF-1.7 a document")), "data": {"tasks": json.dumps(tasks)}}


@pytest.mark.parametrize(("kwargs", "code"), [
    (_tasks_form([{"name": "Embed"}]), "invalid_request"),
    (_tasks_form([{"name": "tests.unit:Task"}]), "invalid_request"),  # no module:Class over HTTP
    (_tasks_form([{"name": f"task{i}"} for i in range(9)]), "invalid_request"),
    (_tasks_form([{"name": "classify", "labels": [{"name": "a", "colour": "red"}]}]), "invalid_request"),
    (_tasks_form([{"name": "classify", "labels": [{"name": " "}]}]), "invalid_request"),
    (_tasks_form([{"name": "classify", "labels": [{"name": "x" * 101}]}]), "invalid_request"),
    (_tasks_form({"name": "embed"}), "invalid_request"),
    ({"files": _files(("a.pdf", b"%PDF")), "data": {"tasks": "[not json"}}, "invalid_request"),
    (_tasks_form([{"name": "classify"}]), "labels_missing"),
    (_tasks_form([{"name": "entities", "labels": [{"name": "person"}]}]), "labels_without_classify"),
    (_tasks_form([{"name": "embed"}, {"name": "embed"}]), "task_invalid"),
    (_tasks_form([{"name": "classify", "labels": [{"name": "a"}, {"name": "a"}]}]), "labels_invalid"),
    (_tasks_form([{"name": "no-such-task"}]), "task_unavailable"),
    ({"json": {"source_uris": ["file:///etc/passwd"], "tasks": [{"name": "embed", "labels": "x"}]}},
     "invalid_request"),
], ids=["name", "module-class", "too-many", "label-field", "blank-label", "long-label", "not-a-list", "not-json",
        "labels-missing", "labels-on-entities", "twice", "label-twice", "unknown", "json-body"])
def test_impossible_tasks_are_refused_and_submit_nothing(api: Api, kwargs: dict[str, object], code: str) -> None:
    response = api.client.post("/v1/jobs", headers=api.as_("acme"), **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == code
    assert api.store.list_jobs("acme") == []


def test_a_job_shows_its_tasks_and_embed_alone_by_default(api: Api) -> None:
    tasks = [{"name": "embed", "labels": []},
             {"name": "classify", "labels": [{"name": "sport", "description": None},
                                             {"name": "biology", "description": "Text about plants"}]}]
    _job(api.store, "j1", options={"tasks": json.dumps(tasks)})
    _job(api.store, "j2")
    shown = [{**task, "prompt": None} for task in tasks]  # a prompt is generate's only
    assert api.client.get("/v1/jobs/j1", headers=api.as_("acme")).json()["tasks"] == shown
    jobs = {j["job_id"]: j for j in api.client.get("/v1/jobs", headers=api.as_("acme")).json()["items"]}
    assert jobs["j1"]["tasks"] == shown
    assert jobs["j2"]["tasks"] == [{"name": "embed", "labels": [], "prompt": None}]


def test_a_source_of_another_tenant_is_refused_before_anything_is_published(api: Api) -> None:
    key = "s3://bucket/report.pdf"
    _job(api.store, "j1")
    _document(api.store, "j1", "v1", "completed", source_key=key)
    _document(api.store, "j1", "v2", "chunked", source_key=key, previous_doc_id="v1")
    _result(api.store, "j1", "v1", 2)
    api.store.swap_source(None, SourceRow("acme", key, "v2", "ab" * 32, "j1", AT, generation=2))
    other = api.client.delete("/v1/sources", params={"key": key}, headers=api.as_("globex"))
    assert other.status_code == 404 and other.json()["error_code"] == "source_not_found"
    assert api.store.get_source("acme", key) is not None and api.store.count_chunks("v1", MODEL) == 2
    assert api.client.delete("/v1/sources", params={"key": key}).status_code == 401
    assert api.client.delete("/v1/sources", headers=api.as_("acme")).status_code == 422  # no key
    # the delete itself, of a version in flight too, and its tombstone: tests/integration/test_api.py, on a real
    # broker




def test_a_submission_past_the_tenants_quota_is_429_with_retry_after_and_capacity_says_why(tmp_path: Path) -> None:
    settings = Settings().with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
        kafka={"bootstrap_servers": "127.0.0.1:1"},  # never contacted: the refusal comes before any record
        fairness={"tenants": {"acme": {"max_documents_in_flight": 2, "max_tokens_per_day": 10_000}}},
    )
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    keys = {}
    for tenant in ("acme", "globex"):
        new = generate_api_key()
        store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, AT))
        keys[tenant] = f"Bearer {new.key}"
    store.admit_documents("acme", "job-0", ["d1", "d2"], NOW)
    store.set_document_tokens("acme", "d1", 700)
    store.end_document("acme", "d0", NOW.strftime("%Y-%m-%d"), 300)
    app = create_app(api_sections(settings), store=store, clock=lambda: NOW)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/jobs", headers={"Authorization": keys["acme"]},
                               files=_files(("a.pdf", b"%PDF-1.4 a")))
        assert response.status_code == 429, response.text
        assert response.headers["retry-after"] == "5"
        body = response.json()
        assert (body["error_code"], body["limit"]) == ("quota_exceeded", "max_documents_in_flight")
        assert store.list_jobs("acme") == []  # nothing enqueued, no job
        capacity = client.get("/v1/capacity", headers={"Authorization": keys["acme"]}).json()
        assert capacity == {
            "tenant": "acme", "documents": 0, "limited_by": "max_documents_in_flight", "retry_after_s": 5,
            "documents_in_flight": 2, "enqueued_tokens": 700, "tokens_today": 300,
            "limits": {"max_documents_in_flight": 2, "max_enqueued_tokens": None, "max_tokens_per_day": 10_000}}
        free = client.get("/v1/capacity", headers={"Authorization": keys["globex"]}).json()
        assert (free["documents"], free["limited_by"], free["limits"]["max_documents_in_flight"]) == (None, None, None)
        assert client.get("/v1/capacity").status_code == 401
    store.close()


def _running(store: SqliteStore, job_id: str, tenant: str, created_at: datetime, waiting: int) -> None:
    store.upsert_job(JobRow(job_id=job_id, tenant=tenant, created_at=created_at, status="running", document_count=2,
                            updated_at=created_at))
    store.upsert_queued_job(QueuedJobRow("docstream.chunks", job_id, tenant, created_at, waiting, 0, created_at))


def test_a_tenant_sees_its_position_but_not_the_size_or_name_of_another_tenants_job_ahead(api: Api) -> None:
    _running(api.store, "globex-secret-backfill", "globex", AT - timedelta(hours=1), 12_345)
    _running(api.store, "acme-job", "acme", AT, 300)
    api.store.record_throughput("docstream-inference", "inference-1", 500.0, NOW, 60)
    detail = api.client.get("/v1/jobs/acme-job", headers=api.as_("acme"))
    listed = api.client.get("/v1/jobs", headers=api.as_("acme"))
    queue = detail.json()["queue"]
    assert queue["tokens_ahead"] == 13_000  # was 12,345: the other tenant's job, exactly
    assert queue["waiting_tokens"] == 300  # its own, exact
    assert queue["start_in_s"] == 26.0  # from the figure shown, at 500 tokens/s
    assert [j["queue"] for j in listed.json()["items"]] == [queue]
    for response in (detail, listed):
        assert "globex" not in response.text and "12345" not in response.text and "12,345" not in response.text
    # the other tenant sees its own job first in the lane, and nothing of acme's
    theirs = api.client.get("/v1/jobs/globex-secret-backfill", headers=api.as_("globex"))
    assert theirs.json()["queue"]["tokens_ahead"] == 0 and theirs.json()["queue"]["waiting_tokens"] == 12_345
    assert "acme" not in theirs.text
    assert api.client.get("/v1/jobs/globex-secret-backfill", headers=api.as_("acme")).status_code == 404
