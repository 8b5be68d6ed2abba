"""The intake API as a running server (uvicorn on 127.0.0.1) on the real Kafka and the real Cassandra.

One server for the module, with small limits so that each can be crossed cheaply; each test
makes its own jobs (and its own tenants), and finds its records on the module's intake topic
by job_id.
"""

from __future__ import annotations

import io
import json
import socket
import tarfile
import threading
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.kafka.admin import ensure_topics
from docstream.objectstore import ObjectStore
from docstream.records import DocumentSubmitted
from docstream.settings import CassandraSettings, Settings
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    ResultStore,
)
from docstream.tasks.selection import job_tasks
from docstream.topics import Topics
from docstream_chunker.handler import ChunkerHandler
from docstream_chunker.worker import InlineExtractor
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.contexts import api_sections, extractor_settings
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import TopicReader, kafka_settings, read_topic, wait_until

pytestmark = pytest.mark.integration

MAX_UPLOAD = 512 * 1024
MAX_FILES = 4
MAX_DOCUMENT = 256 * 1024
MODEL = "all-MiniLM-L6-v2"


class ServerThread:
    """uvicorn serving an app on a free loopback port, in a thread."""

    def __init__(self, app: object) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        wait_until(lambda: self._server.started, 30, "the API server to start")
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._socket.close()


@dataclass
class Stack:
    settings: Settings
    store: ResultStore
    url: str
    topic: str
    shared: Path
    serde: AvroSerde

    def key_for(self, tenant: str) -> dict[str, str]:
        new = generate_api_key()
        self.store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, datetime.now(UTC)))
        return {"Authorization": f"Bearer {new.key}"}

    def client(self, headers: dict[str, str] | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=headers or {}, timeout=60)

    def records(self, job_id: str, count: int, timeout_s: float = 30.0) -> list[DocumentSubmitted]:
        """The job's DocumentSubmitted records on the intake topic (waits for ``count``, then reads to the end)."""

        def mine(reader: TopicReader) -> dict[str, DocumentSubmitted]:
            found: dict[str, DocumentSubmitted] = {}
            for received in reader.received:
                record = received.record
                if record is None:
                    continue  # a tombstone: a deleted source
                assert isinstance(record, DocumentSubmitted)
                if record.job_id == job_id:
                    key = (received.message.key() or b"").decode()
                    assert key == record.doc_id
                    found[key] = record
            return found

        with TopicReader(self.settings.kafka.bootstrap_servers, self.topic, serde=self.serde) as reader:
            reader.read(until=lambda r: len(mine(r)) >= count, timeout_s=timeout_s,
                        what=f"{count} records of job {job_id}")
            reader.read()  # and whatever else the topic holds now
        return sorted(mine(reader).values(), key=lambda r: r.doc_id)


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("api")
    shared = root / "shared"
    shared.mkdir()
    prefix = f"api-{uuid.uuid4().hex}"
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix, partitions=3).with_overrides(
        object_store={"url": str(root / "objects"), "allowed_roots": [str(shared)]},
        store={"backend": "cassandra"},
        cassandra=cassandra_settings.model_dump(),
        ingest={"max_document_bytes": MAX_DOCUMENT},
        api={"max_upload_bytes": MAX_UPLOAD, "max_files_per_job": MAX_FILES, "auth_cache_s": 0},
    )
    ensure_topics(settings.kafka, Topics(prefix), include_dlq=False)
    app = create_app(api_sections(settings), store=cassandra_store)
    with ServerThread(app) as server:
        yield Stack(settings, cassandra_store, server.url, Topics(prefix).submitted, shared, AvroSerde(settings.kafka))


def _tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _pdf(seed: int) -> bytes:
    return make_pdf(1, seed=seed).data


def _zip(members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _tar(members: dict[str, bytes], *, gz: bool = False, symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if symlink is not None:
            link = tarfile.TarInfo("link.pdf")
            link.type = tarfile.SYMTYPE
            link.linkname = symlink
            archive.addfile(link)
    return buf.getvalue()


def _files(*named: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (name, data, "application/octet-stream")) for name, data in named]


# -- submit -------------------------------------------------------------------------------


def test_an_upload_is_accepted_at_once_and_flows_like_docstream_submit(stack: Stack) -> None:
    tenant = _tenant()
    one, two, three = _pdf(1), _pdf(2), _pdf(3)
    files = _files(("one.pdf", one), ("two.pdf", two), ("more.zip", _zip({"docs/three.pdf": three, "again.pdf": one})))
    with stack.client(stack.key_for(tenant)) as client:
        response = client.post("/v1/jobs", files=files, data={"chunk_max_tokens": "128", "model_id": MODEL})
        assert response.status_code == 202, response.text
        accepted = response.json()
        job_id = accepted["job_id"]
        assert response.headers["location"] == f"/v1/jobs/{job_id}"
        assert accepted["document_count"] == 3
        assert sorted(d["filename"] for d in accepted["documents"]) == ["more.zip/docs/three.pdf", "one.pdf", "two.pdf"]
        assert [d["file"] for d in accepted["duplicates"]] == ["more.zip/again.pdf"]

        records = stack.records(job_id, 3)
        assert {r.doc_id for r in records} == {ids.doc_id(job_id, ids.content_sha256(d)) for d in (one, two, three)}
        assert {(r.tenant, r.chunk_max_tokens, r.model_id) for r in records} == {(tenant, 128, MODEL)}
        objects = ObjectStore(stack.settings.object_store)
        assert all(objects.exists(r.content_sha256) for r in records)

        job = stack.store.get_job(job_id)
        assert job is not None and (job.tenant, job.status, job.document_count) == (tenant, "running", 3)
        assert {row.status for row in stack.store.iter_job_documents(job_id)} == {"submitted"}

        status = client.get(f"/v1/jobs/{job_id}").json()
        assert (status["status"], status["document_count"], status["pending"]) == ("running", 3, 3)
        assert status["options"] == {"chunk_max_tokens": "128", "model_id": MODEL}
        assert [j["job_id"] for j in client.get("/v1/jobs").json()["items"]] == [job_id]


def test_an_upload_with_a_source_key_is_the_next_version_of_that_source(stack: Stack) -> None:
    tenant, key = _tenant(), "crm://contracts/4711"
    with stack.client(stack.key_for(tenant)) as client:
        first = client.post("/v1/jobs", files=_files(("contract.pdf", _pdf(40)), ("other.pdf", _pdf(41))),
                            data={"source_keys": json.dumps({"contract.pdf": key})})
        assert first.status_code == 202, first.text
        v1 = next(d["doc_id"] for d in first.json()["documents"] if d["filename"] == "contract.pdf")
        second = client.post("/v1/jobs", files=_files(("contract-v2.pdf", _pdf(42))),
                             data={"source_keys": json.dumps({"contract-v2.pdf": key})})
        assert second.status_code == 202, second.text
        v2 = second.json()["documents"][0]["doc_id"]
    source = stack.store.get_source(tenant, key)
    assert source is not None and source.doc_id == v2
    row = stack.store.get_document(v2)
    assert row is not None and (row.source_key, row.previous_doc_id) == (key, v1)
    record = stack.records(second.json()["job_id"], 1)[0]
    assert (record.source_key, record.previous_doc_id) == (key, v1)
    other = next(d["doc_id"] for d in first.json()["documents"] if d["filename"] == "other.pdf")
    assert stack.store.get_document(other).source_key is None  # type: ignore[union-attr]  # an upload without one


def test_a_source_deleted_in_flight_leaves_the_store_and_then_its_tombstone_is_on_the_intake_topic(
        stack: Stack) -> None:
    tenant, key = _tenant(), "crm://contracts/4712"
    with stack.client(stack.key_for(tenant)) as client:
        accepted = client.post("/v1/jobs", files=_files(("c.pdf", _pdf(43))),
                               data={"source_keys": json.dumps({"c.pdf": key})})
        assert accepted.status_code == 202, accepted.text
        doc_id = accepted.json()["documents"][0]["doc_id"]
        done = client.delete("/v1/sources", params={"key": key})  # submitted, not processed yet: deleted all the same
        assert done.status_code == 200, done.text
        assert done.json()["doc_id"] == doc_id
        assert client.delete("/v1/sources", params={"key": key}).status_code == 200  # again: done again
        assert client.delete("/v1/sources", params={"key": key + "x"}).status_code == 404
    source = stack.store.get_source(tenant, key)
    assert source is not None and not source.live  # the durable record of the delete
    assert stack.store.get_document(doc_id).deleted_at is not None  # type: ignore[union-attr]
    found = read_topic(stack.settings.kafka.bootstrap_servers, stack.topic, timeout_s=30, what="the tombstone",
                       until=lambda r: any(m.value() is None and m.key() == doc_id.encode() for m in r.messages))
    assert [m for m in found.messages if m.key() == doc_id.encode() and m.value() is None]


def test_source_uris_are_read_in_place_and_confined(stack: Stack) -> None:
    folder = stack.shared / uuid.uuid4().hex
    folder.mkdir()
    data = {name: _pdf(10 + i) for i, name in enumerate(("a.pdf", "b.pdf"))}
    uris = []
    for name, content in data.items():
        (folder / name).write_bytes(content)
        uris.append((folder / name).as_uri())
    with stack.client(stack.key_for(_tenant())) as client:
        response = client.post("/v1/jobs", json={"source_uris": uris, "webhook_url": "https://example.test/hook"})
        assert response.status_code == 202, response.text
        job_id = response.json()["job_id"]
        records = stack.records(job_id, 2)
        assert sorted(r.source_uri for r in records) == sorted(uris)
        assert not ObjectStore(stack.settings.object_store).exists(records[0].content_sha256)  # not copied
        assert stack.store.get_job(job_id).webhook_url == "https://example.test/hook"  # type: ignore[union-attr]

        outside = f"file://{folder}/../../secret.pdf"  # `..` out of the allowed root
        for refused in ("file:///etc/passwd", outside, "s3://elsewhere/x.pdf"):
            answer = client.post("/v1/jobs", json={"source_uris": [uris[0], refused]})
            assert answer.status_code == 422, refused
            assert answer.json()["error_code"] == "source_not_allowed"
        missing = client.post("/v1/jobs", json={"source_uris": [(folder / "missing.pdf").as_uri()]})
        assert (missing.status_code, missing.json()["error_code"]) == (422, "not_found")


def test_a_jobs_tasks_reach_its_records_its_row_and_its_summary(stack: Stack) -> None:
    tasks = [{"name": "embed", "labels": []}, {"name": "entities", "labels": []},
             {"name": "classify", "labels": [{"name": "sport", "description": None},
                                             {"name": "biology", "description": "Text about plants, animals"}]}]
    sent = [{"name": "embed"}, {"name": "entities"},
            {"name": "classify", "labels": [{"name": "sport"},
                                            {"name": "biology", "description": "Text about plants, animals"}]}]
    with stack.client(stack.key_for(_tenant())) as client:
        response = client.post("/v1/jobs", files=_files(("one.pdf", _pdf(30)), ("two.pdf", _pdf(31))),
                               data={"tasks": json.dumps(sent)})
        assert response.status_code == 202, response.text
        job_id = response.json()["job_id"]
        shown = [{**t, "prompt": None} for t in tasks]  # as decoded and shown: a prompt (generate's) null
        assert [r.tasks for r in stack.records(job_id, 2)] == [shown, shown]
        job = stack.store.get_job(job_id)
        assert job is not None and [t.to_record() for t in job_tasks(job)] == tasks
        assert client.get(f"/v1/jobs/{job_id}").json()["tasks"] == shown

        default = client.post("/v1/jobs", files=_files(("three.pdf", _pdf(32))))
        assert default.status_code == 202, default.text
        [record] = stack.records(default.json()["job_id"], 1)
        assert record.tasks == []  # embed alone, written as before tasks
        assert client.get(f"/v1/jobs/{default.json()['job_id']}").json()["tasks"] == [
            {"name": "embed", "labels": [], "prompt": None}]


# -- tenants ------------------------------------------------------------------------------


def test_a_key_sees_only_its_tenants_jobs(stack: Stack) -> None:
    mine, theirs = stack.key_for(_tenant()), stack.key_for(_tenant())
    with stack.client(mine) as me, stack.client(theirs) as them:
        job_id = me.post("/v1/jobs", files=_files(("a.pdf", _pdf(20)))).json()["job_id"]
        assert me.get(f"/v1/jobs/{job_id}").status_code == 200
        for method, path in [("GET", f"/v1/jobs/{job_id}"), ("GET", f"/v1/jobs/{job_id}/results"),
                             ("POST", f"/v1/jobs/{job_id}/cancel")]:
            response = them.request(method, path)
            assert response.status_code == 404, path
            assert response.json()["error_code"] == "job_not_found"
        assert them.get("/v1/jobs").json()["items"] == []
        assert [j["job_id"] for j in me.get("/v1/jobs").json()["items"]] == [job_id]
        assert stack.store.get_job(job_id).status == "running"  # type: ignore[union-attr]
    with stack.client() as anonymous:
        assert anonymous.get(f"/v1/jobs/{job_id}").status_code == 401


# -- limits and archive rules ---------------------------------------------------------------

BOMB = bytes(8 * 1024 * 1024)  # 8 MiB of zeros: deflates ~1000:1, past max_compression_ratio (200)

REFUSALS = {
    "upload_too_large": ({"files": _files(("big.pdf", b"%PDF" + bytes(MAX_UPLOAD)))}, 413, "upload_too_large"),
    "too_many_files": ({"files": _files(*[(f"{i}.pdf", bytes([i]) * 100) for i in range(MAX_FILES + 1)])},
                       422, "too_many_files"),
    "archive_too_many_files": ({"files": _files(("m.zip", _zip({f"{i}.pdf": bytes([i]) * 9 for i in range(9)})))},
                               422, "too_many_files"),
    "document_too_large": ({"files": _files(("huge.pdf", bytes(range(256)) * (MAX_DOCUMENT // 256 + 1)))},
                           413, "too_large"),
    "empty_document": ({"files": _files(("empty.pdf", b""))}, 422, "empty"),
    "zip_slip": ({"files": _files(("slip.zip", _zip({"../../../etc/cron.d/x.pdf": b"%PDF-1.7"})))},
                 422, "archive_path_traversal"),
    "tar_absolute_path": ({"files": _files(("abs.tar", _tar({"/etc/passwd": b"root"})))},
                          422, "archive_path_traversal"),
    "tar_symlink": ({"files": _files(("link.tar", _tar({"a.pdf": b"%PDF"}, symlink="/etc/passwd")))},
                    422, "archive_link"),
    "zip_bomb": ({"files": _files(("bomb.zip", _zip({"zeros.pdf": BOMB})))}, 422, "archive_bomb"),
    "tar_gz_bomb": ({"files": _files(("bomb.tar.gz", _tar({"zeros.pdf": BOMB}, gz=True)))}, 422, "archive_bomb"),
    "nested_archive": ({"files": _files(("outer.zip", _zip({"inner.zip": _zip({"a.pdf": b"%PDF"})})))},
                       422, "archive_nested"),
    "unsupported_media_type": ({"content": b"%PDF-1.7", "headers": {"content-type": "application/pdf"}},
                               415, "unsupported_media_type"),
    "invalid_options": ({"files": _files(("a.pdf", b"%PDF")), "data": {"chunk_max_tokens": "100000"}},
                        422, "invalid_request"),
    "source_keys_not_json": ({"files": _files(("a.pdf", b"%PDF")), "data": {"source_keys": "a.pdf=k"}},
                             422, "invalid_request"),
    "source_keys_unknown_file": ({"files": _files(("a.pdf", b"%PDF")),
                                  "data": {"source_keys": json.dumps({"b.pdf": "k"})}}, 422, "invalid_request"),
    "source_key_blank": ({"files": _files(("a.pdf", b"%PDF")), "data": {"source_keys": json.dumps({"a.pdf": " "})}},
                         422, "invalid_source_key"),
    "invalid_webhook": ({"json": {"source_uris": ["file:///x"], "webhook_url": "ftp://x"}}, 422, "invalid_request"),
    "file_etc_passwd": ({"json": {"source_uris": ["file:///etc/passwd"]}}, 422, "source_not_allowed"),
    "too_many_source_uris": ({"json": {"source_uris": ["file:///x"] * (MAX_FILES + 1)}}, 422, "too_many_files"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_limit_refuses_with_a_json_4xx_and_submits_nothing(stack: Stack, case: str) -> None:
    request, status, code = REFUSALS[case]
    tenant = _tenant()
    headers = {**stack.key_for(tenant), **request.get("headers", {})}  # type: ignore[dict-item]
    body = {k: v for k, v in request.items() if k != "headers"}
    with stack.client(headers) as client:
        response = client.post("/v1/jobs", **body)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error_code"] == code
    assert response.json()["message"]
    assert stack.store.list_jobs(tenant) == []


def test_an_oversized_upload_is_refused_while_it_streams(stack: Stack) -> None:
    sent = 0

    def body() -> Iterator[bytes]:  # no Content-Length: the server can only count
        nonlocal sent
        yield b'--b\r\nContent-Disposition: form-data; name="files"; filename="big.pdf"\r\n\r\n'
        for _ in range(64):
            sent += 64 * 1024
            yield bytes(64 * 1024)
        yield b"\r\n--b--\r\n"

    tenant = _tenant()
    headers = {**stack.key_for(tenant), "content-type": "multipart/form-data; boundary=b"}
    with stack.client(headers) as client:
        try:
            response = client.post("/v1/jobs", content=body())
        except httpx.HTTPError:
            response = None  # the server may close the connection before the whole body is sent
    if response is not None:
        assert (response.status_code, response.json()["error_code"]) == (413, "upload_too_large")
    assert stack.store.list_jobs(tenant) == []


# -- results --------------------------------------------------------------------------------


def _write_finished_job(store: ResultStore, tenant: str, chunks: int) -> str:
    job_id = f"job-{uuid.uuid4().hex}"
    at = datetime.now(UTC)
    store.upsert_job(JobRow(job_id, tenant, at, "completed", 3, {"model_id": MODEL}, completed=2, failed=1,
                            updated_at=at))
    for n, status in enumerate(("completed", "completed", "failed")):
        doc_id = f"{job_id}-d{n}"
        error = ("corrupt", "bad xref") if status == "failed" else (None, None)
        store.upsert_document(DocumentRow(doc_id, job_id, f"file:///o/{doc_id}", "ab" * 32, status, at,  # type: ignore[arg-type]
                                          filename=f"d{n}.pdf", error_code=error[0], error=error[1]))
        store.upsert_job_document(JobDocumentRow(job_id, doc_id, status, at, f"d{n}.pdf", error[0]))  # type: ignore[arg-type]
        if status == "completed":
            store.upsert_document_result(DocumentResultRow(doc_id, MODEL, job_id, "completed", chunks, 0, 5 * chunks,
                                                           [0.1] * 384, "max=256", at))
            store.upsert_chunks([
                ChunkRow(doc_id, MODEL, i, f"{doc_id}-{i}", job_id, f"text {i}", 1, 1, 0, 6, 5, [0.01 * (i + 1)] * 384)
                for i in range(chunks)
            ])
    return job_id


def test_results_stream_jsonl_from_cassandra_with_chunks_in_order(stack: Stack) -> None:
    tenant = _tenant()
    job_id = _write_finished_job(stack.store, tenant, chunks=7)  # > the store's page size (3)
    with stack.client(stack.key_for(tenant)) as client:
        with client.stream("GET", f"/v1/jobs/{job_id}/results", params={"include": "chunks"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            assert response.headers["x-job-status"] == "completed"
            lines = [json.loads(line) for line in response.iter_lines() if line]
        plain = [json.loads(line) for line in client.get(f"/v1/jobs/{job_id}/results").text.splitlines()]
        failed = client.get(f"/v1/jobs/{job_id}").json()["errors"]
    documents = [line for line in lines if line["record"] == "document"]
    assert [(d["doc_id"][-2:], d["status"]) for d in documents] == [("d0", "completed"), ("d1", "completed"),
                                                                     ("d2", "failed")]
    first_chunks = [line["chunk_index"] for line in lines[1:8]]
    assert first_chunks == list(range(7)) and {line["record"] for line in lines[1:8]} == {"chunk"}
    assert len(lines) == 3 + 2 * 7
    assert len(documents[0]["embedding"]) == 384
    assert plain == documents
    assert [(e["doc_id"][-2:], e["error_code"], e["error"]) for e in failed] == [("d2", "corrupt", "bad xref")]


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_ends_the_job_cancelled_and_the_chunker_skips_its_documents(stack: Stack) -> None:
    tenant = _tenant()
    with stack.client(stack.key_for(tenant)) as client:
        job_id = client.post("/v1/jobs", files=_files(("a.pdf", _pdf(30)), ("b.pdf", _pdf(31)))).json()["job_id"]
        records = stack.records(job_id, 2)
        response = client.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code == 202
        assert response.json()["status"] == "cancelled"
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert stack.store.get_job(job_id).status == "cancelled"  # type: ignore[union-attr]

    # the chunker, meeting the job's records after the cancel, skips them: no chunks, rows skipped
    handler = ChunkerHandler(stack.settings.chunker, Topics(stack.settings.kafka.topic_prefix), stack.store,
                             InlineExtractor(extractor_settings(stack.settings)))
    assert [handler.handle(record) for record in records] == [[], []]
    rows = list(stack.store.iter_job_documents(job_id))
    assert {(row.status, row.error_code) for row in rows} == {("skipped", "job_cancelled")}


def test_a_completed_job_cannot_be_cancelled(stack: Stack) -> None:
    tenant = _tenant()
    job_id = _write_finished_job(stack.store, tenant, chunks=1)
    with stack.client(stack.key_for(tenant)) as client:
        response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert (response.status_code, response.json()["error_code"]) == (409, "job_finished")
    assert stack.store.get_job(job_id).status == "completed"  # type: ignore[union-attr]


# -- operations -----------------------------------------------------------------------------


def test_health_readiness_and_metrics(stack: Stack) -> None:
    with stack.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "checks": {"broker": "ok", "store": "ok"}}
        client.get("/v1/jobs")  # a 401, counted like any answer
        metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert 'docstream_http_requests_total{method="GET",route="/v1/jobs",status="401"}' in metrics.text
    assert "docstream_records_in" in metrics.text  # the shared registry's metrics are served too
