"""JobRequest: its checks (pure), its job options, and the same job from every intake entry point."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from docstream import ids
from docstream.errors import ConfigError, InputError, QuotaExceeded
from docstream.objectstore import ObjectStore
from docstream.records import AnyRecord, DocumentSubmitted
from docstream.settings import Settings
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import Label, TaskFold, TaskRequest
from docstream.tasks.fold_embed import EmbedFold
from docstream.tasks.selection import job_tasks
from docstream.tenants.admission import TenantLoad
from docstream.topics import Topics
from docstream_cli.ops.submit import cli_tasks
from docstream_ingest.intake import (
    Gradually,
    IntakeClients,
    SubmitResult,
    Upload,
    submit_paths,
    submit_uploads,
    submit_uris,
)
from docstream_ingest.request import JobRequest, validate_job_request
from tests.fixtures.contexts import intake_context

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
DEFAULT_MAX_TOKENS = 256


# -- validate_job_request ------------------------------------------------------------------


def _check(request: JobRequest) -> JobRequest:
    return validate_job_request(request, default_max_tokens=DEFAULT_MAX_TOKENS)


@pytest.mark.parametrize(
    "request_",
    [
        JobRequest(),
        JobRequest(job_id=""),  # empty: a new job, as None
        JobRequest(job_id="crawl-2024-09-30", tenant="acme.eu:prod@1"),
        JobRequest(chunk_max_tokens=8, chunk_overlap_tokens=7),
        JobRequest(chunk_max_tokens=8192, chunk_overlap_tokens=0),
        JobRequest(chunk_overlap_tokens=DEFAULT_MAX_TOKENS - 1),
        JobRequest(webhook_url="https://hooks.example.com/done"),
        JobRequest(webhook_url="HTTP://hooks.example.com/done"),
        JobRequest(model_id="intfloat/e5-small@v2", atomic=True),
    ],
    ids=repr,
)
def test_a_valid_request_is_returned_as_it_is(request_: JobRequest) -> None:
    assert _check(request_) is request_


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (JobRequest(job_id="../../etc"), "invalid_job_id"),
        (JobRequest(job_id="-starts-with-a-dash"), "invalid_job_id"),
        (JobRequest(job_id="x" * 129), "invalid_job_id"),
        (JobRequest(tenant="a b"), "invalid_tenant"),
        (JobRequest(tenant=""), "invalid_tenant"),
        (JobRequest(chunk_max_tokens=64, chunk_overlap_tokens=64), "invalid_chunk_options"),
        (JobRequest(chunk_max_tokens=7), "invalid_chunk_options"),
        (JobRequest(chunk_max_tokens=8193), "invalid_chunk_options"),
        (JobRequest(chunk_overlap_tokens=-1), "invalid_chunk_options"),
        (JobRequest(chunk_overlap_tokens=DEFAULT_MAX_TOKENS), "invalid_chunk_options"),  # below the default size
        (JobRequest(webhook_url="file:///etc/passwd"), "invalid_webhook_url"),
        (JobRequest(webhook_url="hooks.example.com/done"), "invalid_webhook_url"),
        (JobRequest(webhook_url="http://[::1/done"), "invalid_webhook_url"),
    ],
    ids=repr,
)
def test_an_invalid_request_is_refused_with_its_code(request_: JobRequest, code: str) -> None:
    with pytest.raises(InputError) as caught:
        _check(request_)
    assert caught.value.code == code


def test_checks_run_job_id_then_tenant_then_chunking_then_webhook() -> None:
    everything_wrong = JobRequest(
        job_id="bad id", tenant="bad tenant", chunk_max_tokens=1, webhook_url="ftp://example.com"
    )
    codes = []
    for fixed in ({"job_id": None}, {"tenant": "acme"}, {"chunk_max_tokens": None}, {"webhook_url": None}):
        with pytest.raises(InputError) as caught:
            _check(everything_wrong)
        codes.append(caught.value.code)
        everything_wrong = dataclasses.replace(everything_wrong, **fixed)
    assert codes == ["invalid_job_id", "invalid_tenant", "invalid_chunk_options", "invalid_webhook_url"]
    assert _check(everything_wrong) is everything_wrong


def test_the_default_chunk_size_is_the_one_given() -> None:
    request = JobRequest(chunk_overlap_tokens=100)
    assert validate_job_request(request, default_max_tokens=101) is request
    with pytest.raises(InputError):
        validate_job_request(request, default_max_tokens=100)


# -- JobRequest ---------------------------------------------------------------------------


def test_job_options_hold_only_the_options_given_as_strings() -> None:
    assert JobRequest(tenant="acme", webhook_url="https://example.com", atomic=True).job_options() == {}
    assert JobRequest(model_id="m-1", chunk_max_tokens=64, chunk_overlap_tokens=0).job_options() == {
        "model_id": "m-1",
        "chunk_max_tokens": "64",
        "chunk_overlap_tokens": "0",
    }


def test_a_request_is_frozen() -> None:
    request = JobRequest(tenant="acme")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.tenant = "other"  # type: ignore[misc]


# -- the three entry points ---------------------------------------------------------------


class FakeProducer:
    """An IntakeProducer that keeps what it was given."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, str | bytes | None]] = []
        self.flushes: list[float] = []

    def produce(self, topic: str, key: str | bytes | None, value: bytes | None) -> None:
        self.produced.append((topic, key))

    def flush(self, timeout: float = 30.0) -> None:
        self.flushes.append(timeout)


class FakeSerde:
    """A RecordSerializer that keeps the records instead of encoding them."""

    def __init__(self) -> None:
        self.records: list[AnyRecord] = []

    def serialize(self, record: AnyRecord, topic: str) -> bytes:
        self.records.append(record)
        return b""


@dataclasses.dataclass
class Intake:
    settings: Settings
    clients: IntakeClients
    producer: FakeProducer
    serde: FakeSerde
    store: SqliteStore
    objects: ObjectStore
    inbox: Path


@pytest.fixture
def intake(tmp_path: Path) -> Iterator[Intake]:
    settings = Settings().with_overrides(
        kafka={"topic_prefix": "unit"},
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
    )
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    objects = ObjectStore(settings.object_store)
    producer, serde = FakeProducer(), FakeSerde()
    clients = IntakeClients(intake_context(settings), store, producer, serde, objects, flush_timeout_s=7.0,
                            clock=lambda: AT)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    try:
        yield Intake(settings, clients, producer, serde, store, objects, inbox)
    finally:
        store.close()


Submit = Callable[[Intake, dict[str, bytes], JobRequest], SubmitResult]


def _overridden(intake: Intake, **sections: dict[str, Any]) -> IntakeClients:
    """``intake``'s clients under its settings with some fields of some sections replaced."""
    return dataclasses.replace(intake.clients, context=intake_context(intake.settings.with_overrides(**sections)))


def _by_paths(intake: Intake, files: dict[str, bytes], request: JobRequest) -> SubmitResult:
    for name, data in files.items():
        (intake.inbox / name).write_bytes(data)
    return submit_paths([intake.inbox / name for name in files], request, intake.clients)


def _by_uploads(intake: Intake, files: dict[str, bytes], request: JobRequest) -> SubmitResult:
    uploads = [Upload(name, io.BytesIO(data)) for name, data in files.items()]
    return submit_uploads(uploads, request, intake.clients)


def _by_uris(intake: Intake, files: dict[str, bytes], request: JobRequest) -> SubmitResult:
    uris = [intake.objects.put(data, ids.content_sha256(data)) for data in files.values()]
    return submit_uris(uris, request, intake.clients)


ENTRY_POINTS = pytest.mark.parametrize("submit", [_by_paths, _by_uploads, _by_uris], ids=["paths", "uploads", "uris"])
REQUEST = JobRequest(
    job_id="job-1",
    tenant="acme",
    model_id="m-1",
    chunk_max_tokens=64,
    chunk_overlap_tokens=8,
    webhook_url="https://hooks.example.com/done",
)


@ENTRY_POINTS
def test_every_entry_point_makes_the_same_job_of_the_same_request(intake: Intake, submit: Submit) -> None:
    files = {"a.txt": b"first document", "b.txt": b"second document"}
    result = submit(intake, files, REQUEST)

    assert (result.job_id, len(result.documents), result.refused, result.document_count) == ("job-1", 2, (), 2)
    job = intake.store.get_job("job-1")
    assert job is not None
    assert (job.tenant, job.status, job.document_count, job.created_at) == ("acme", "running", 2, AT)
    assert job.options == {"model_id": "m-1", "chunk_max_tokens": "64", "chunk_overlap_tokens": "8"}
    assert job.webhook_url == "https://hooks.example.com/done"
    topic = Topics("unit").submitted
    doc_ids = [ids.doc_id("job-1", ids.content_sha256(data)) for data in files.values()]
    assert intake.producer.produced == [(topic, doc_id) for doc_id in doc_ids]
    assert intake.producer.flushes == [7.0]
    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert [(r.doc_id, r.size_bytes) for r in records] == [
        (doc_id, len(data)) for doc_id, data in zip(doc_ids, files.values(), strict=True)
    ]
    assert {(r.job_id, r.tenant, r.model_id, r.chunk_max_tokens, r.chunk_overlap_tokens, r.submitted_at)
            for r in records} == {("job-1", "acme", "m-1", 64, 8, AT)}


@ENTRY_POINTS
def test_an_invalid_request_writes_and_produces_nothing(intake: Intake, submit: Submit) -> None:
    with pytest.raises(InputError) as caught:
        submit(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", webhook_url="file:///etc/passwd"))
    assert caught.value.code == "invalid_webhook_url"
    assert intake.store.get_job("job-1") is None
    assert intake.producer.produced == []


@ENTRY_POINTS
def test_an_atomic_request_with_a_refusal_submits_nothing(intake: Intake, submit: Submit) -> None:
    request = JobRequest(job_id="job-1", atomic=True)
    result = submit(intake, {"a.txt": b"document", "empty.txt": b""}, request)

    assert (result.documents, [r.code for r in result.refused]) == ((), ["empty"])
    assert intake.store.get_job("job-1") is None
    assert intake.producer.produced == []


@ENTRY_POINTS
def test_without_atomic_the_rest_of_a_request_goes(intake: Intake, submit: Submit) -> None:
    result = submit(intake, {"a.txt": b"document", "empty.txt": b""}, JobRequest(job_id="job-1"))

    assert (len(result.documents), [r.code for r in result.refused]) == (1, ["empty"])
    assert len(intake.producer.produced) == 1


# -- the job's tasks ----------------------------------------------------------------------


class EchoTask:
    """A user task class as the registry finds it (its runner is never loaded here)."""

    name: ClassVar[str] = "echo-intake"
    fold: ClassVar[TaskFold] = EmbedFold()

    @classmethod
    def load(cls, settings: Any) -> Any:
        raise AssertionError("intake never loads a task's model")


ECHO_REFERENCE = f"{__name__}:EchoTask"
SPORT = (Label("sport"), Label("biology", "Text about plants"))
TASKS = (TaskRequest("embed"), TaskRequest("classify", SPORT), TaskRequest("entities"))


def test_a_request_asks_for_embed_alone_by_default() -> None:
    assert JobRequest().tasks == (TaskRequest("embed"),)
    assert "tasks" not in JobRequest().job_options()


def test_job_options_keep_the_tasks_as_canonical_json() -> None:
    options = JobRequest(model_id="m-1", tasks=TASKS).job_options()
    assert options["model_id"] == "m-1"
    assert json.loads(options["tasks"]) == [task.to_record() for task in TASKS]
    assert options["tasks"] == json.dumps(json.loads(options["tasks"]), sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize(("tasks", "code"), [
    ((), "task_invalid"),
    ((TaskRequest("embed"), TaskRequest("embed")), "task_invalid"),
    ((TaskRequest("entities", SPORT),), "labels_without_classify"),
    ((TaskRequest("classify"),), "labels_missing"),
], ids=["none", "twice", "labels-on-entities", "classify-without-labels"])
def test_impossible_tasks_are_refused_with_their_code(tasks: tuple[TaskRequest, ...], code: str) -> None:
    with pytest.raises(InputError) as caught:
        _check(JobRequest(tasks=tasks))
    assert caught.value.code == code


def test_tasks_are_checked_after_the_other_options() -> None:
    with pytest.raises(InputError) as caught:
        _check(JobRequest(webhook_url="ftp://example.com", tasks=()))
    assert caught.value.code == "invalid_webhook_url"


def test_classify_without_labels_takes_the_default_labels() -> None:
    request = JobRequest(tasks=(TaskRequest("embed"), TaskRequest("classify")))
    checked = validate_job_request(request, default_max_tokens=DEFAULT_MAX_TOKENS,
                                   default_labels=["sport", "biology=Text about plants"])
    assert checked.tasks == (TaskRequest("embed"), TaskRequest("classify", SPORT))
    assert dataclasses.replace(checked, tasks=request.tasks) == request


@ENTRY_POINTS
def test_every_document_of_the_job_carries_its_tasks_and_the_job_row_keeps_them(
    intake: Intake, submit: Submit
) -> None:
    submit(intake, {"a.txt": b"first document", "b.txt": b"second document"},
           dataclasses.replace(REQUEST, tasks=TASKS))

    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert len(records) == 2
    assert all(r.tasks == [task.to_record() for task in TASKS] for r in records)
    job = intake.store.get_job("job-1")
    assert job is not None and job_tasks(job) == TASKS
    assert {key: value for key, value in job.options.items() if key != "tasks"} == {
        "model_id": "m-1", "chunk_max_tokens": "64", "chunk_overlap_tokens": "8"}


@ENTRY_POINTS
def test_a_default_job_writes_records_and_rows_as_before_tasks(intake: Intake, submit: Submit) -> None:
    submit(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", tasks=(TaskRequest("embed"),)))

    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert [r.tasks for r in records] == [[]]
    job = intake.store.get_job("job-1")
    assert job is not None and job.options == {}


def test_classify_without_labels_records_the_service_labels(intake: Intake) -> None:
    intake.clients = _overridden(intake, tasks={"classify": {"labels": ["sport", "biology=Text about plants"]}})
    _by_paths(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", tasks=(TaskRequest("classify"),)))

    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert [r.tasks for r in records] == [[TaskRequest("classify", SPORT).to_record()]]


@ENTRY_POINTS
def test_a_task_no_registry_knows_is_refused_with_the_known_names(intake: Intake, submit: Submit) -> None:
    with pytest.raises(InputError) as caught:
        submit(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", tasks=(TaskRequest("no-such-task"),)))
    assert caught.value.code == "task_unavailable"
    assert "known tasks: embed, classify, entities" in caught.value.message
    assert intake.store.get_job("job-1") is None
    assert intake.producer.produced == []


def test_a_user_task_of_tasks_custom_is_known(intake: Intake) -> None:
    intake.clients = _overridden(intake, tasks={"custom": {"echo-intake": ECHO_REFERENCE}})
    _by_paths(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", tasks=(TaskRequest("echo-intake"),)))

    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert [r.tasks for r in records] == [[{"name": "echo-intake", "labels": []}]]


def test_a_module_class_task_stands_for_its_name(intake: Intake) -> None:
    tasks = cli_tasks(["embed", ECHO_REFERENCE], None, intake.settings)
    assert tasks == (TaskRequest("embed"), TaskRequest("echo-intake"))
    _by_paths(intake, {"a.txt": b"document"}, JobRequest(job_id="job-1", tasks=tasks))  # resolved: known
    assert len(intake.producer.produced) == 1


@pytest.mark.parametrize("spec", ["nowhere.at.all:Task", f"{__name__}:AT", f"{__name__}:Missing", "a:"])
def test_a_module_class_that_is_no_task_is_refused(intake: Intake, spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cli_tasks([spec], None, intake.settings)
    assert caught.value.code == "task_unavailable"


def test_command_line_labels_go_to_classify(intake: Intake) -> None:
    settings = intake.settings
    assert cli_tasks(["classify", "embed"], "sport,biology=Text about plants", settings) == (
        TaskRequest("classify", SPORT), TaskRequest("embed"))
    assert cli_tasks([], None, settings) == (TaskRequest("embed"),)
    with pytest.raises(InputError) as caught:
        cli_tasks(["embed"], "sport", settings)
    assert caught.value.code == "labels_without_classify"


def test_submitting_to_a_job_with_other_tasks_is_refused(intake: Intake) -> None:
    _by_paths(intake, {"a.txt": b"first"}, JobRequest(job_id="job-1", tasks=TASKS))
    _by_paths(intake, {"b.txt": b"second"}, JobRequest(job_id="job-1", tasks=TASKS))  # the same tasks: fine
    for other in ((TaskRequest("embed"),), (TaskRequest("classify", SPORT[:1]),)):
        with pytest.raises(InputError) as caught:
            _by_paths(intake, {"c.txt": b"third"}, JobRequest(job_id="job-1", tasks=other))
        assert caught.value.code == "job_tasks_mismatch"
    job = intake.store.get_job("job-1")
    assert job is not None and job.document_count == 2 and job_tasks(job) == TASKS


# -- priority lanes ------------------------------------------------------------------------


def test_a_priority_is_a_lane_and_a_tenant_capped_at_batch_may_not_ask_for_interactive() -> None:
    assert _check(JobRequest(priority="interactive")).priority == "interactive"
    with pytest.raises(InputError) as caught:
        _check(JobRequest(priority="urgent"))
    assert caught.value.code == "invalid_priority"
    with pytest.raises(InputError) as caught:
        validate_job_request(JobRequest(tenant="bulk", priority="interactive"), default_max_tokens=DEFAULT_MAX_TOKENS,
                             max_priority="batch")
    assert caught.value.code == "priority_not_allowed"
    batch = validate_job_request(JobRequest(tenant="bulk"), default_max_tokens=DEFAULT_MAX_TOKENS,
                                 max_priority="batch")
    assert batch.priority == "batch" and "priority" not in batch.job_options()
    assert JobRequest(priority="interactive").job_options() == {"priority": "interactive"}


@ENTRY_POINTS
def test_an_interactive_job_marks_its_records_and_its_row(intake: Intake, submit: Submit) -> None:
    submit(intake, {"a.txt": b"urgent"}, dataclasses.replace(REQUEST, priority="interactive"))
    records = [r for r in intake.serde.records if isinstance(r, DocumentSubmitted)]
    assert [(r.priority, r.tenant) for r in records] == [("interactive", "acme")]
    job = intake.store.get_job("job-1")
    assert job is not None and job.options["priority"] == "interactive"


def test_a_tenants_cap_and_a_jobs_priority_hold_at_intake(intake: Intake) -> None:
    capped = _overridden(intake, fairness={"tenants": {"bulk": {"max_priority": "batch"}}})
    with pytest.raises(InputError) as caught:
        submit_paths([], JobRequest(job_id="job-2", tenant="bulk", priority="interactive"), capped)
    assert caught.value.code == "priority_not_allowed"
    _by_paths(intake, {"a.txt": b"first"}, JobRequest(job_id="job-1", priority="interactive"))
    with pytest.raises(InputError) as caught:
        _by_paths(intake, {"b.txt": b"second"}, JobRequest(job_id="job-1"))  # the job is interactive
    assert caught.value.code == "job_priority_mismatch"
    assert intake.store.get_job("job-2") is None and len(intake.producer.produced) == 1


# -- quotas and admission ------------------------------------------------------------------


def _limited(intake: Intake, **limits: int) -> IntakeClients:
    return _overridden(intake, fairness={"tenants": {"acme": limits}})


@ENTRY_POINTS
def test_a_submission_past_a_quota_is_refused_whole_and_enqueues_nothing(intake: Intake, submit: Submit) -> None:
    clients = _limited(intake, max_documents_in_flight=2)
    limited = dataclasses.replace(intake, clients=clients)
    submit(limited, {"a.txt": b"first"}, dataclasses.replace(REQUEST, job_id="job-1"))
    assert intake.store.tenant_load("acme", "2024-05-17").documents_in_flight == 1
    with pytest.raises(QuotaExceeded) as caught:
        submit(limited, {"b.txt": b"second", "c.txt": b"third"}, dataclasses.replace(REQUEST, job_id="job-2"))
    assert (caught.value.code, caught.value.limit, caught.value.retry_after_s) == (
        "quota_exceeded", "max_documents_in_flight", 5)
    assert intake.store.get_job("job-2") is None and len(intake.producer.produced) == 1  # no half-admitted job
    assert intake.store.tenant_load("acme", "2024-05-17").documents_in_flight == 1
    submit(limited, {"b.txt": b"second"}, dataclasses.replace(REQUEST, job_id="job-2"))  # one fits
    intake.store.end_document("acme", intake.producer.produced[0][1], "2024-05-17", 100)  # type: ignore[arg-type]
    assert intake.store.tenant_load("acme", "2024-05-17") == TenantLoad(1, 0, 100)


def test_a_token_quota_reached_refuses_until_the_day_or_the_documents_end(intake: Intake) -> None:
    clients = _limited(intake, max_tokens_per_day=1000, max_enqueued_tokens=500)
    intake.store.admit_documents("acme", "job-0", ["earlier"], AT)
    intake.store.set_document_tokens("acme", "earlier", 600)
    with pytest.raises(QuotaExceeded) as caught:
        _by_paths(dataclasses.replace(intake, clients=clients), {"a.txt": b"a"}, dataclasses.replace(REQUEST))
    assert caught.value.limit == "max_enqueued_tokens"
    intake.store.end_document("acme", "earlier", "2024-05-17", 1000)
    with pytest.raises(QuotaExceeded) as caught:
        _by_paths(dataclasses.replace(intake, clients=clients), {"a.txt": b"a"}, dataclasses.replace(REQUEST))
    assert caught.value.limit == "max_tokens_per_day" and caught.value.retry_after_s == 12 * 3600 + 1
    assert intake.producer.produced == []


def test_a_gradual_admission_completes_a_job_larger_than_the_quota_as_documents_end(intake: Intake) -> None:
    clients = _limited(intake, max_documents_in_flight=2)
    files = {f"d{i}.txt": f"document {i}".encode() for i in range(5)}
    progress: list[tuple[int, int]] = []
    in_flight_seen: list[int] = []

    def documents_end(_seconds: float) -> None:  # the pipeline, between two rounds: what is in flight ends
        in_flight_seen.append(intake.store.tenant_load("acme", "2024-05-17").documents_in_flight)
        for _topic, doc_id in intake.producer.produced:
            intake.store.end_document("acme", str(doc_id), "2024-05-17", 10)

    gradually = Gradually(on_progress=lambda done, total, _cap: progress.append((done, total)), sleep=documents_end)
    for name, data in files.items():
        (intake.inbox / name).write_bytes(data)
    result = submit_paths([intake.inbox / name for name in files], REQUEST, clients, gradually=gradually)

    assert len(result.documents) == 5 and len(intake.producer.produced) == 5
    assert progress == [(2, 5), (4, 5), (5, 5)] and max(in_flight_seen) == 2
    job = intake.store.get_job("job-1")
    assert job is not None and job.document_count == 5  # every row first: the job never looks complete early
    assert intake.store.tenant_load("acme", "2024-05-17") == TenantLoad(1, 0, 40)


def test_a_tenant_without_quotas_writes_no_admission_rows(intake: Intake) -> None:
    _by_paths(intake, {"a.txt": b"a"}, REQUEST)
    assert intake.store.tenant_load("acme", "2024-05-17") == TenantLoad(0, 0, 0)
