"""submit_paths and `docstream submit` on the real Kafka, with a SQLite store and a local object store."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog
from confluent_kafka import Consumer
from rich.console import Console

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.errors import InputError
from docstream.ids import check_source_key
from docstream.kafka.clients import ReliableProducer
from docstream.objectstore import ObjectStore
from docstream.records import DocumentSubmitted
from docstream.settings import Settings
from docstream.store.base import DocumentRow, JobDocumentRow, JobRow
from docstream.store.rows import Table
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import Label, TaskRequest
from docstream.tasks.selection import job_tasks
from docstream.topics import Topics
from docstream_cli.ops.submit import wait_for_job
from docstream_cli.ops.submit_outcome import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_SOURCE_UNREADABLE, EXIT_TIMEOUT
from docstream_ingest.intake import IntakeClients, SubmitResult, submit_paths
from docstream_ingest.main import main as ingest_main
from docstream_ingest.request import JobRequest
from tests.fixtures.contexts import intake_context
from tests.fixtures.documents import make_pdf, make_text_document
from tests.fixtures.kafka import kafka_settings, read_topic

pytestmark = pytest.mark.integration


@dataclass
class Intake:
    settings: Settings
    store: SqliteStore
    objects: ObjectStore
    producer: ReliableProducer
    serde: AvroSerde
    topic: str

    def submit(self, *paths: Path, **options: object) -> SubmitResult:
        clients = IntakeClients(intake_context(self.settings), self.store, self.producer, self.serde, self.objects)
        return submit_paths(list(paths), JobRequest(**options), clients)  # type: ignore[arg-type]

    def read(self) -> list[tuple[str, DocumentSubmitted]]:
        """Every record on the intake topic now (to its end), with its key."""
        found = []
        for received in read_topic(self.settings.kafka.bootstrap_servers, self.topic, serde=self.serde).received:
            assert isinstance(received.record, DocumentSubmitted)
            found.append(((received.message.key() or b"").decode(), received.record))
        return found

    def records(self) -> dict[str, DocumentSubmitted]:
        """Every record on the intake topic, by key; fails on a key seen twice."""
        found: dict[str, DocumentSubmitted] = {}
        for key, record in self.read():
            assert key not in found, f"doc_id {key} produced twice"
            found[key] = record
        return found


@pytest.fixture
def make_intake(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> Iterator[Callable[..., Intake]]:
    stores: list[SqliteStore] = []

    def make(**ingest: object) -> Intake:
        prefix = unique_name("submit")
        settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix).with_overrides(
            object_store={"url": str(tmp_path / "objects")},
            store={"backend": "sqlite", "sqlite_path": str(tmp_path / f"{prefix}.db")},
            ingest=dict(ingest),
        )
        topic = Topics(prefix).submitted
        create_topics(kafka_bootstrap, topic, partitions=3)
        store = SqliteStore(settings.store.sqlite_path)
        store.migrate()
        stores.append(store)
        return Intake(
            settings,
            store,
            ObjectStore(settings.object_store),
            ReliableProducer(settings.kafka),
            AvroSerde(settings.kafka),
            topic,
        )

    yield make
    for store in stores:
        store.close()


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _tar_gz(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _write(path: Path, data: bytes) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def test_submit_folder_with_archives_and_duplicates(
    make_intake: Callable[..., Intake], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    intake = make_intake()
    root = tmp_path / "inbox"
    expected = {
        "inbox/a.txt": _write(root / "a.txt", make_text_document(1)),
        "inbox/sub/b.txt": _write(root / "sub" / "b.txt", make_text_document(2)),
        "inbox/sub/deeper/c.pdf": _write(root / "sub" / "deeper" / "c.pdf", make_pdf(2, seed=3).data),
        "inbox/bundle.zip/z1.txt": make_text_document(4),
        "inbox/bundle.zip/dir/z2.txt": make_text_document(5),
        "inbox/bundle.tar.gz/t1.txt": make_text_document(6),
        "inbox/bundle.tar.gz/nested/t2.txt": make_text_document(7),
    }
    _write(root / "sub" / "copy-of-b.txt", expected["inbox/sub/b.txt"])
    _write(root / ".hidden.txt", b"hidden")
    _write(root / ".git" / "config", b"hidden folder")
    _write(root / "empty.txt", b"")
    zipped = {"z1.txt": expected["inbox/bundle.zip/z1.txt"], "dir/z2.txt": expected["inbox/bundle.zip/dir/z2.txt"]}
    _write(root / "bundle.zip", _zip({**zipped, "copy-of-a.txt": expected["inbox/a.txt"]}))
    _write(
        root / "bundle.tar.gz",
        _tar_gz(
            {
                "t1.txt": expected["inbox/bundle.tar.gz/t1.txt"],
                "nested/t2.txt": expected["inbox/bundle.tar.gz/nested/t2.txt"],
            }
        ),
    )
    _write(root / "evil.zip", _zip({"fine.txt": b"would be fine", "../../evil.txt": b"zip slip"}))

    monkeypatch.chdir(tmp_path)  # display names are the paths as given
    result = intake.submit(Path("inbox"), tenant="acme", model_id="m-1")

    by_name = {doc.filename: doc for doc in result.documents}
    assert set(by_name) == set(expected)
    assert result.document_count == len(expected)
    assert {(r.path, r.code) for r in result.refused} == {
        ("inbox/evil.zip", "archive_path_traversal"),
        ("inbox/empty.txt", "empty"),
    }
    assert "leaves the archive root" in next(r.reason for r in result.refused if r.code == "archive_path_traversal")
    assert sorted(d.path for d in result.duplicates) == ["inbox/bundle.zip/copy-of-a.txt", "inbox/sub/copy-of-b.txt"]

    records = intake.records()
    assert set(records) == {doc.doc_id for doc in result.documents}
    for name, data in expected.items():
        doc = by_name[name]
        record = records[doc.doc_id]
        sha = ids.content_sha256(data)
        assert record.doc_id == ids.doc_id(result.job_id, sha)
        assert (record.job_id, record.content_sha256, record.size_bytes) == (result.job_id, sha, len(data))
        assert (record.filename, record.tenant, record.model_id) == (name, "acme", "m-1")
        assert intake.objects.open_bounded(record.source_uri, len(data)) == data
        assert record.source_uri.startswith(intake.objects.root_uri + "/")
    assert records[by_name["inbox/sub/deeper/c.pdf"].doc_id].media_type == "application/pdf"
    assert records[by_name["inbox/a.txt"].doc_id].media_type == "text/plain"

    job = intake.store.get_job(result.job_id)
    assert job is not None
    assert (job.status, job.tenant, job.document_count) == ("running", "acme", len(expected))
    assert job.options == {"model_id": "m-1"}
    rows = list(intake.store.iter_job_documents(result.job_id))
    assert {row.doc_id for row in rows} == set(records)
    assert {row.status for row in rows} == {"submitted"}
    document = intake.store.get_document(by_name["inbox/a.txt"].doc_id)
    assert document is not None and document.source_uri == records[document.doc_id].source_uri


def test_limits_refuse_files_with_reasons_and_the_rest_goes(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake(max_document_bytes=5000, max_files_per_job=2, max_archive_members=2)
    small = [_write(tmp_path / f"in/{name}.txt", f"small document {name}".encode()) for name in ("a", "b", "c")]
    _write(tmp_path / "in/big.txt", b"x" * 5001)
    _write(tmp_path / "in/many.zip", _zip({f"m{i}.txt": b"member" for i in range(3)}))

    result = intake.submit(tmp_path / "in")

    assert [doc.size_bytes for doc in result.documents] == [len(small[0]), len(small[1])]
    codes = {Path(r.path).name: r.code for r in result.refused}
    assert codes == {"big.txt": "too_large", "c.txt": "too_many_files", "many.zip": "archive_too_many_files"}
    assert len(intake.records()) == 2
    job = intake.store.get_job(result.job_id)
    assert job is not None and job.document_count == 2


def test_links_out_of_the_folder_are_refused(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake()
    _write(tmp_path / "outside" / "secret.txt", b"not for submission")
    inbox = tmp_path / "inbox"
    inside = _write(inbox / "doc.txt", b"a document")
    (inbox / "secret-link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (inbox / "outside-dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (inbox / "alias.txt").symlink_to(inbox / "doc.txt")

    result = intake.submit(inbox)

    assert [doc.size_bytes for doc in result.documents] == [len(inside)]
    assert {(Path(r.path).name, r.code) for r in result.refused} == {
        ("secret-link.txt", "symlink_outside_root"),
        ("outside-dir", "symlink_outside_root"),
    }
    assert [Path(d.path).name for d in result.duplicates] == ["doc.txt"]  # alias.txt sorts first
    assert len(intake.records()) == 1


def test_resubmitting_to_a_job_adds_only_new_documents(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake()
    first = _write(tmp_path / "one.txt", b"first document")
    second = _write(tmp_path / "two.txt", b"second document")
    third = _write(tmp_path / "three.txt", b"third document")
    job_id = f"job-{uuid.uuid4().hex}"
    initial = intake.submit(tmp_path / "one.txt", tmp_path / "two.txt", job_id=job_id)
    assert initial.document_count == 2
    created = intake.store.get_job(job_id).created_at  # type: ignore[union-attr]
    done = ids.doc_id(job_id, ids.content_sha256(first))
    intake.store.upsert_job_document(JobDocumentRow(job_id, done, "completed", datetime.now(UTC)))

    # one.txt was processed (duplicate), two.txt is still "submitted" (produced again), three.txt is new
    again = intake.submit(tmp_path / "one.txt", tmp_path / "two.txt", tmp_path / "three.txt", job_id=job_id)

    assert [d.doc_id for d in again.duplicates] == [done]
    assert {doc.size_bytes for doc in again.documents} == {len(second), len(third)}
    assert again.document_count == 3
    job = intake.store.get_job(job_id)
    assert job is not None and (job.document_count, job.created_at, job.status) == (3, created, "running")
    keys = sorted(key for key, _ in intake.read())
    two = ids.doc_id(job_id, ids.content_sha256(second))
    three = ids.doc_id(job_id, ids.content_sha256(third))
    assert keys == sorted([done, two, two, three])  # two.txt again: its rows said "submitted", never processed


def test_a_document_produced_again_keeps_the_rows_the_pipeline_moved_on_since_they_were_read(
    make_intake: Callable[..., Intake], tmp_path: Path,
) -> None:
    intake = make_intake()
    data = _write(tmp_path / "one.txt", b"a document the pipeline completes while it is submitted again")
    job_id = f"job-{uuid.uuid4().hex}"
    intake.submit(tmp_path / "one.txt", job_id=job_id)
    doc_id = ids.doc_id(job_id, ids.content_sha256(data))
    row = intake.store.get_document(doc_id)
    assert row is not None and row.status == "submitted"

    def completes_meanwhile(asked: str, status: str) -> bool:
        # read "submitted", so produced again; before the intake writes, the reducer completes the document
        assert (asked, status) == (doc_id, "submitted")
        intake.store.upsert_document(replace(row, status="completed", updated_at=datetime.now(UTC)))
        intake.store.upsert_job_document(JobDocumentRow(job_id, doc_id, "completed", datetime.now(UTC), "one.txt"))
        return True

    clients = IntakeClients(intake_context(intake.settings), intake.store, intake.producer, intake.serde,
                            intake.objects)
    again = submit_paths([tmp_path / "one.txt"], JobRequest(job_id=job_id), clients, resubmit=completes_meanwhile)

    assert [d.doc_id for d in again.documents] == [doc_id]
    assert [key for key, _ in intake.read()] == [doc_id, doc_id]  # produced again
    document = intake.store.get_document(doc_id)
    assert document is not None and document.status == "completed"  # not taken back to "submitted"
    assert [r.status for r in intake.store.iter_job_documents(job_id)] == ["completed"]


def test_a_document_the_pipeline_moved_on_between_the_intakes_read_and_its_write_keeps_its_rows(
    make_intake: Callable[..., Intake], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # two submissions of one job at once: both found the job new; the other one's record went through the
    # pipeline between this one's read and its write of the rows
    intake = make_intake()
    data = _write(tmp_path / "one.txt", b"a document two submissions of its job send at the same time")
    job_id = f"job-{uuid.uuid4().hex}"
    sha = ids.content_sha256(data)
    doc_id = ids.doc_id(job_id, sha)
    store = intake.store
    read = store._get
    raced: list[str] = []

    def read_then_complete(table: Table, key: tuple[str, ...], operation: str) -> object:
        found = read(table, key, operation)
        if operation == "get_job" and key == (job_id,) and not raced:
            raced.append(operation)
            now = datetime.now(UTC)
            store.upsert_document(DocumentRow(doc_id, job_id, "file:///elsewhere/one.txt", sha, "completed", now))
            store.upsert_job_document(JobDocumentRow(job_id, doc_id, "completed", now, "one.txt"))
        return found

    monkeypatch.setattr(store, "_get", read_then_complete)

    intake.submit(tmp_path / "one.txt", job_id=job_id)

    assert raced, "the intake never read the job"
    document = store.get_document(doc_id)
    assert document is not None and document.status == "completed"
    assert [r.status for r in store.iter_job_documents(job_id)] == ["completed"]


def test_bad_requests_are_refused_before_anything_is_written(
    make_intake: Callable[..., Intake], tmp_path: Path
) -> None:
    intake = make_intake()
    doc = tmp_path / "a.txt"
    _write(doc, b"document")
    for options, code in [
        ({"job_id": "../../etc"}, "invalid_job_id"),
        ({"tenant": "a b"}, "invalid_tenant"),
        ({"chunk_max_tokens": 64, "chunk_overlap_tokens": 64}, "invalid_chunk_options"),
        ({"webhook_url": "file:///etc/passwd"}, "invalid_webhook_url"),
    ]:
        with pytest.raises(InputError) as caught:
            intake.submit(doc, **options)
        assert caught.value.code == code
    job_id = f"job-{uuid.uuid4().hex}"
    intake.store.upsert_job(JobRow(job_id, "other", datetime.now(UTC), "running", 0))
    with pytest.raises(InputError) as other:
        intake.submit(doc, job_id=job_id)
    assert other.value.code == "job_tenant_mismatch"
    assert intake.records() == {}


def _cli(args: list[str], intake: Intake, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": intake.settings.kafka.bootstrap_servers,
        "DOCSTREAM_KAFKA__TOPIC_PREFIX": intake.settings.kafka.topic_prefix,
        "DOCSTREAM_KAFKA__PARTITIONS": "1",
        "DOCSTREAM_STORE__BACKEND": "sqlite",
        "DOCSTREAM_STORE__SQLITE_PATH": str(intake.settings.store.sqlite_path),
        "DOCSTREAM_OBJECT_STORE__URL": intake.settings.object_store.url,
        "DOCSTREAM_LOG__LEVEL": "WARNING",
        "COLUMNS": "200",
    }
    command = [str(Path(sys.executable).parent / "docstream"), "submit", *args]
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_cli_prints_the_job_id_first_and_submits(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake()
    _write(tmp_path / "docs" / "a.txt", b"cli document")
    _write(tmp_path / "docs" / "bad.zip", b"not a zip")

    done = _cli(["docs", "--tenant", "cli"], intake, tmp_path)

    assert done.returncode == 0, done.stderr
    job_id = done.stdout.splitlines()[0]
    assert str(uuid.UUID(job_id)) == job_id
    assert "archive_corrupt" in done.stdout
    job = intake.store.get_job(job_id)
    assert job is not None and (job.document_count, job.tenant) == (1, "cli")
    assert [r.job_id for r in intake.records().values()] == [job_id]


def test_cli_tasks_and_labels_reach_the_records_and_the_job_row(
    make_intake: Callable[..., Intake], tmp_path: Path
) -> None:
    intake = make_intake()
    _write(tmp_path / "docs" / "a.txt", b"first task document")
    _write(tmp_path / "docs" / "b.txt", b"second task document")

    done = _cli(["docs", "--task", "embed", "--task", "classify", "--labels", "sport,biology=Text about plants"],
                intake, tmp_path)

    assert done.returncode == 0, done.stderr
    job_id = done.stdout.splitlines()[0]
    tasks = (TaskRequest("embed"), TaskRequest("classify", (Label("sport"), Label("biology", "Text about plants"))))
    records = intake.records()
    assert len(records) == 2
    assert all(r.job_id == job_id and [TaskRequest.from_record(x) for x in r.tasks] == list(tasks)
               for r in records.values())
    job = intake.store.get_job(job_id)
    assert job is not None and job_tasks(job) == tasks


def test_cli_fails_when_nothing_was_submitted(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake()
    _write(tmp_path / "empty.txt", b"")

    done = _cli(["empty.txt", "missing.pdf", "--job-id", "my-job"], intake, tmp_path)

    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "my-job"
    assert "not_found" in done.stdout and "empty" in done.stdout
    assert intake.store.get_job("my-job") is None


def test_wait_returns_when_the_job_is_terminal(make_intake: Callable[..., Intake]) -> None:
    intake = make_intake()
    now = datetime.now(UTC)
    intake.store.upsert_job(JobRow("done-job", "default", now, "completed", 2, completed=2))
    intake.store.upsert_job(JobRow("bad-job", "default", now, "completed", 2, completed=1, failed=1))
    intake.store.upsert_job_document(JobDocumentRow("bad-job", "d1", "failed", now, error_code="corrupt"))
    intake.store.upsert_job(JobRow("busy-job", "default", now, "running", 2, completed=1))
    console, errors = Console(file=io.StringIO(), width=200), Console(file=io.StringIO(), width=200)

    assert wait_for_job(intake.store, "done-job", timeout_s=30, console=console) == EXIT_OK
    assert wait_for_job(intake.store, "bad-job", timeout_s=30, console=console) == EXIT_DOCUMENTS_FAILED
    assert wait_for_job(intake.store, "busy-job", timeout_s=0.2, console=console) == EXIT_TIMEOUT
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1 completed, 0 partial, 1 failed" in shown
    assert "docs/s" in shown and "ETA" in shown  # job_progress's rate and ETA on the bar
    assert errors.file.getvalue() == ""  # type: ignore[attr-defined]


def test_wait_names_the_settings_when_the_chunker_could_not_read_a_source(make_intake: Callable[..., Intake]) -> None:
    intake = make_intake()
    now = datetime.now(UTC)
    intake.store.upsert_job(JobRow("lost-job", "default", now, "completed", 2, completed=1, failed=1))
    intake.store.upsert_job_document(JobDocumentRow("lost-job", "d1", "failed", now, error_code="fetch_failed"))
    console, errors = Console(file=io.StringIO(), width=400), Console(file=io.StringIO(), width=400)

    code = wait_for_job(intake.store, "lost-job", timeout_s=30, console=console, errors=errors,
                        object_store_url=intake.settings.object_store.url)
    assert code == EXIT_SOURCE_UNREADABLE
    hint = errors.file.getvalue()  # type: ignore[attr-defined]
    assert "DOCSTREAM_OBJECT_STORE__URL" in hint and intake.settings.object_store.url in hint


def test_ingest_main_prepares_topics_and_store(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    prefix = unique_name("ingest")
    settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix, partitions=1).with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "ingest.db")},
        log={"format": "json"},
    )

    try:
        assert ingest_main(settings) == 0
    finally:
        structlog.contextvars.unbind_contextvars("service")  # main() binds it for its process

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("probe")})
    try:
        topics = consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    assert set(Topics(prefix).all()) <= set(topics)
    store = SqliteStore(tmp_path / "ingest.db")
    try:
        assert store.pending_migrations() == []
    finally:
        store.close()


def test_nested_archives_and_linked_members(make_intake: Callable[..., Intake], tmp_path: Path) -> None:
    intake = make_intake()
    inner = _zip({"deep.txt": b"never expanded"})
    _write(tmp_path / "in" / "outer.zip", _zip({"inner.zip": inner, "ok.txt": b"sibling of a nested archive"}))
    linked = io.BytesIO()
    with tarfile.open(fileobj=linked, mode="w") as archive:
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    _write(tmp_path / "in" / "links.tar", linked.getvalue())

    result = intake.submit(tmp_path / "in")

    assert [Path(doc.filename).name for doc in result.documents] == ["ok.txt"]
    assert {(r.path.removeprefix(str(tmp_path / "in") + "/"), r.code) for r in result.refused} == {
        ("links.tar", "archive_link"),
        ("outer.zip/inner.zip", "archive_nested"),
    }
    assert len(intake.records()) == 1


def test_a_file_submitted_again_with_other_content_is_the_next_version_of_its_source(
    make_intake: Callable[..., Intake], tmp_path: Path
) -> None:
    intake = make_intake()
    report = tmp_path / "in" / "report.pdf"
    _write(report, make_pdf(2, seed=1).data)
    _write(tmp_path / "in" / "bundle.zip", _zip({"inner/notes.txt": make_text_document(3)}))
    key = report.resolve().as_uri()

    first = intake.submit(report, tmp_path / "in" / "bundle.zip")
    [v1] = [d for d in first.documents if d.filename.endswith("report.pdf")]
    [member] = [d for d in first.documents if d.filename.endswith("notes.txt")]
    assert (v1.source_key, v1.previous_doc_id) == (key, None)  # the first version of its source
    assert member.source_key == f"{(tmp_path / 'in' / 'bundle.zip').resolve().as_uri()}!/inner/notes.txt"

    _write(report, make_pdf(2, seed=2).data)  # edited in place: the next version, in a job of its own
    [v2] = intake.submit(report).documents
    assert (v2.source_key, v2.previous_doc_id) == (key, v1.doc_id) and v2.doc_id != v1.doc_id
    [v2_again] = intake.submit(report).documents  # the same content again, in a third job: reuses v2 whole
    assert v2_again.previous_doc_id == v2.doc_id

    source = intake.store.get_source("default", key)
    assert source is not None and (source.doc_id, source.content_sha256) == (v2_again.doc_id, v2.content_sha256)
    row = intake.store.get_document(v2.doc_id)
    assert row is not None and (row.source_key, row.previous_doc_id) == (key, v1.doc_id)
    records = intake.records()
    assert (records[v2.doc_id].source_key, records[v2.doc_id].previous_doc_id) == (key, v1.doc_id)
    assert records[v1.doc_id].previous_doc_id is None
    # sources are a tenant's own: another tenant's file of the same path starts its own history
    [other] = intake.submit(report, tenant="acme").documents
    assert other.previous_doc_id is None


def test_an_archive_members_name_becomes_a_key_every_sink_holds(make_intake: Callable[..., Intake],
                                                                tmp_path: Path) -> None:
    intake = make_intake()
    name = "lines\u2028and\tnew\nline é.txt"
    _write(tmp_path / "in" / "odd.zip", _zip({name: make_text_document(2)}))
    [member] = intake.submit(tmp_path / "in" / "odd.zip").documents
    archive = (tmp_path / "in" / "odd.zip").resolve().as_uri()
    assert member.source_key == f"{archive}!/lines%E2%80%A8and%09new%0Aline é.txt"
    assert check_source_key(member.source_key)
