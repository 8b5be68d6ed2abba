"""The added-task test: a scratch task carried through every mapping, with the list of files it touched.

``WordCountTask`` below is a complete user task (docs/tasks.md "The contract"; examples/custom_task/sentiment.py is
the worked one): its runner counts a chunk's words, ``{"words": n}``, and its fold sums them into the document's
``{"words": total, "chunks": counted}``. It is registered as a user registers one, in the settings:
``DOCSTREAM_TASKS__CUSTOM='{"wordcount": "tests.unit.project.test_added_task:WordCountTask"}'`` (``tasks.custom``), and
nowhere else. One document of three chunks, in a job of ``embed`` and ``wordcount``, is then carried with the real
components, no mock of docstream code, on a SQLite store and without a broker:

1. the registry loads the task by its name (``docstream.tasks.registry.load_task``) and it runs on the chunks;
2. the inference service's handler makes each output the chunk's result record (``result_of``,
   ``embedded_record``), which goes through Avro (``AvroSerde``, single-object wire format, schemas/);
3. the inference service's chunk row (``chunk_row``) is written (``upsert_chunks``) and read back;
4. the reducer's agents (``DocumentReducer``, with the fold the registry finds through ``tasks.custom``;
   ``CompletedRelay``; ``JobReducer``) fold the results into the DocumentCompleted (Avro again) and write the
   document_results row (``store.completion.record_completion``);
5. the export (``docstream_ingest.export.export_results``) writes the task's output, JSON Lines and Parquet;
6. the API (``GET /v1/jobs/{id}/results``, ``docstream_ingest.api``, in process), whose settings name no user task,
   streams it;
7. the sink (``SinkHandler``/``SinkWriter``, ``points.points_of``) puts it in the payload of the chunks' points.

Files a new task touches:

* a user task: its module (here: this file) and the settings that name it: ``tasks.custom``
  (``DOCSTREAM_TASKS__CUSTOM``), or an entry point in group ``docstream.tasks`` in its own package's
  pyproject.toml, or ``--task module:Class`` (docs/tasks.md, examples/custom_task/README.md);
* a built-in task: its module(s) under libs/common/docstream/tasks/ (runner and fold) and its entry in
  ``_BUILTIN`` in libs/common/docstream/tasks/registry.py (and, to be known at intake without importing its
  module, its name in ``BUILTIN_TASKS`` in libs/common/docstream/tasks/base.py).

Not the schemas (schemas/), the store's rows and migrations (libs/common/docstream/store/), the records, the
inference service, the reducer, the export, the API or the sink: ``test_nothing_outside_the_task_module_names_it``
checks that none of them spells the task's name.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from docstream.avro import SINGLE_OBJECT_MAGIC, AvroSerde
from docstream.errors import ConfigError
from docstream.kafka.loop import Envelope
from docstream.metrics import Metrics
from docstream.records import ChunkCreated, ChunkResult, DocumentCompleted
from docstream.settings import Settings
from docstream.store import open_store
from docstream.store.base import ApiKeyRow, ChunkRow, DocumentRow, JobDocumentRow, JobRow, ResultStore
from docstream.tasks.base import (
    EMBED,
    ChunkOutput,
    DocumentOutput,
    FoldInput,
    PreparedTexts,
    Task,
    TaskContext,
    TaskOutputError,
    TaskRequest,
)
from docstream.tasks.registry import load_task, task_class, task_fold
from docstream.tasks.selection import task_records, tasks_option
from docstream.topics import Topics
from docstream_inference.handler import chunk_row, request_for, requested_model, result_of, result_record
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key
from docstream_ingest.export import export_results
from docstream_reducer.agents import CompletedRelay, DocumentReducer, Incoming, JobReducer, StoreCalls
from docstream_sink.handler import SinkHandler, SinkWriter
from docstream_sink.points import SinkPoint
from tests.fixtures.contexts import api_sections

NAME = "wordcount"
REFERENCE = f"{__name__}:WordCountTask"
"""What the user's settings name:
``tasks.custom = {"wordcount": "tests.unit.project.test_added_task:WordCountTask"}``."""
MODEL_ID = "wordcount@1"


ROOT = Path(__file__).resolve().parents[3]
AT = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
TENANT, JOB, DOC = "acme", "j-added", "d-added"
EMBED_MODEL = "all-MiniLM-L6-v2"
TOPICS = Topics("t")
RESULTS_TOPIC = TOPICS.results
BY_JOB = "t-by-job"
TEXTS = ("A new task is its own module", "and one line of settings.", "Nothing else changes.")
WORDS = (7, 5, 3)
DOCUMENT_OUTPUT = {"words": 15, "chunks": 3}
VECTORS = ([1.0, 0.0], [0.0, 1.0], [0.5, 0.75])  # embed's outputs, standing in for its model: the sink's vectors
_WORD = re.compile(r"\S+")


# -- the scratch task: all a new task is --------------------------------------------------------------


class WordCountFold:
    """Sums the words of a document's chunks. State: ``{"words": int, "chunks": int}`` (JSON, two integers)."""

    def empty(self) -> dict[str, int]:
        return {"words": 0, "chunks": 0}

    def add(self, state: dict[str, int], chunk: FoldInput) -> dict[str, int]:
        out = chunk.output
        if not isinstance(out, Mapping) or type(out.get("words")) is not int or out["words"] < 0:
            raise TaskOutputError(f"chunk {chunk.index}: a wordcount output is {{words: n}}, got {out!r:.100}")
        return {"words": state["words"] + out["words"], "chunks": state["chunks"] + 1}

    def finish(self, state: dict[str, int], *, chunk_count: int) -> DocumentOutput:
        if state["chunks"] == 0:
            return DocumentOutput()
        return DocumentOutput(output={"words": state["words"], "chunks": state["chunks"]})


class WordCountTask:
    """The task class and its runner: the words of each chunk (``ChunkOutput.output``)."""

    name: ClassVar[str] = NAME
    fold: ClassVar[WordCountFold] = WordCountFold()
    model_id: ClassVar[str] = MODEL_ID
    max_tokens: ClassVar[int] = 100_000
    runtime: ClassVar[str] = "python/cpu"
    device: ClassVar[str] = "cpu"

    @classmethod
    def load(cls, context: TaskContext) -> WordCountTask:
        return cls()

    def model_id_for(self, request: TaskRequest) -> str:
        return self.model_id

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        return PreparedTexts(tuple(texts), tuple(requests), tuple(len(_WORD.findall(text)) for text in texts))

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        return [ChunkOutput(output={"words": words}) for words in batch.features]

    def warm_up(self) -> None:
        return None


# -- the components' surroundings: a Faust table, a producer, a sink's engine ------------------------------


class _JsonTable(dict[str, Any]):
    """A reducer table as Faust keeps it: every value goes through JSON."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, json.loads(json.dumps(value)))


@dataclass
class _Producer:
    """The reducer's ``Sink``: what it produced, by topic."""

    sent: list[tuple[str, bytes | None]] = field(default_factory=list)

    async def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None, transactional: bool = False) -> None:
        self.sent.append((topic, value))

    def values(self, topic: str) -> list[bytes]:
        return [value for sent_to, value in self.sent if sent_to == topic and value is not None]


@dataclass
class _HeldPoints:
    """A sink's engine that holds its points in a dict (``docstream_sink.engine.SinkEngine``)."""

    points: dict[str, SinkPoint] = field(default_factory=dict)
    overlaps_reads: bool = False

    def ensure(self, dimensions: int) -> None:
        return None

    def upsert(self, points: Sequence[SinkPoint]) -> None:
        self.points.update((point.id, point) for point in points)

    def delete_other_versions(self, tenant: str, source: str, doc_id: str) -> int:
        return 0

    def delete_source(self, tenant: str, source: str) -> int:
        return 0

    def delete_ids(self, ids: Sequence[str]) -> None:
        return None

    def delete_if_held(self, points: Sequence[tuple[str, str]]) -> None:
        return None

    def scan(self, tenant: str) -> Iterator[tuple[str, str, list[float]]]:
        return iter([(p.id, p.doc_id, p.vector) for p in self.points.values() if p.tenant == tenant])

    def close(self) -> None:
        return None


# -- the journey -----------------------------------------------------------------------------------------


@dataclass
class Journey:
    """What each mapping made of the document, for the tests to read."""

    settings: Settings
    store: ResultStore
    task: Task
    outputs: list[ChunkOutput]
    result_bytes: list[bytes]
    """The wordcount chunk result records as inference produces them (Avro), by chunk index."""
    results: list[Any]
    """The same, decoded by the serde the reducer reads them with."""
    completed: dict[str, DocumentCompleted]
    """By task: the DocumentCompleted records the reducer produced, decoded from their Avro bytes."""
    export_jsonl: list[dict[str, Any]]
    export_parquet: list[dict[str, Any]]
    export_parquet_chunks: list[dict[str, Any]]
    api_status: int
    api_job_status: str
    api_lines: list[dict[str, Any]]
    points: list[SinkPoint]
    dead_letters: list[str]
    """The DLQ topics the reducer sent a record to."""


def _chunks() -> list[ChunkCreated]:
    tasks = task_records([TaskRequest(EMBED), TaskRequest(NAME)])
    starts = [0, len(TEXTS[0]) + 1, len(TEXTS[0]) + len(TEXTS[1]) + 2]
    return [ChunkCreated(job_id=JOB, doc_id=DOC, chunk_id=f"{DOC}-c{i}", chunk_index=i, chunk_count=len(TEXTS),
                         content_sha256="ab" * 32, text=text, page_start=1, page_end=1, char_start=starts[i],
                         char_end=starts[i] + len(text), token_count=10 + i, chunker_settings="max=256", created_at=AT,
                         tasks=tasks, tenant=TENANT)
            for i, text in enumerate(TEXTS)]


def _submitted(store: ResultStore) -> None:
    """The rows the intake writes for the job (``docstream_ingest.intake._write_rows``)."""
    store.upsert_document(DocumentRow(doc_id=DOC, job_id=JOB, source_uri=f"file:///in/{DOC}.txt",
                                      content_sha256="ab" * 32, status="submitted", updated_at=AT,
                                      filename=f"{DOC}.txt"))
    store.upsert_job_document(JobDocumentRow(JOB, DOC, "submitted", AT, filename=f"{DOC}.txt"))
    option = tasks_option([TaskRequest(EMBED), TaskRequest(NAME)])
    assert option is not None
    store.upsert_job(JobRow(job_id=JOB, tenant=TENANT, created_at=AT, status="running", document_count=1,
                            options={"tasks": option}, updated_at=AT))


def _inference(store: ResultStore, serde: AvroSerde, chunks: Sequence[ChunkCreated], task: Task | None,
               outputs: Sequence[ChunkOutput], name: str, model_id: str) -> list[bytes]:
    """What the inference service's stages do with a batch's outputs (``stages.ModelStage`` then
    ``stages.WriteStage.write``): results, rows written, then the records' Avro bytes."""
    requests = [request_for(chunk, name) for chunk in chunks]
    assert all(request == TaskRequest(name) for request in requests)
    assert all(requested_model(chunk, name, model_id) == model_id for chunk in chunks)
    runtime = task.runtime if task is not None else "fixed/cpu"
    results = [result_of(chunk, model_id, name, output, runtime, device="cpu")
               for chunk, output in zip(chunks, outputs, strict=True)]
    assert all(result.ok for result in results)
    store.upsert_chunks([chunk_row(result) for result in results])
    return [serde.serialize(result_record(result, AT + timedelta(seconds=result.chunk.chunk_index)),
                            RESULTS_TOPIC) for result in results]


async def _reduce(store: ResultStore, serde: AvroSerde, settings: Settings, values: Sequence[bytes]) -> _Producer:
    """The reducer's three agents, as its app wires them (``docstream_reducer.app``), over JSON tables."""
    producer = _Producer()
    calls = StoreCalls(store, settings.retry)
    documents = DocumentReducer(_JsonTable(), serde, calls, producer, TOPICS.completed,
                                document_step_topic=TOPICS.mapped, custom_tasks=settings.tasks.custom)
    relay = CompletedRelay(serde, producer, BY_JOB)
    jobs = JobReducer(_JsonTable(), _JsonTable(), serde, calls, producer, TOPICS.jobs, by_job_topic=BY_JOB,
                      throttle_s=0.0, clock=lambda: 0.0)
    at_ms = int(AT.timestamp() * 1000)
    for offset, value in enumerate(values):
        await documents.handle(Incoming(RESULTS_TOPIC, 0, offset, at_ms + offset, DOC.encode(), value))
    for offset, value in enumerate(producer.values(TOPICS.completed)):
        await relay.handle(Incoming(TOPICS.completed, 0, offset, at_ms, DOC.encode(), value))
    for offset, value in enumerate(producer.values(BY_JOB)):
        await jobs.handle(Incoming(BY_JOB, 0, offset, at_ms, JOB.encode(), value))
    return producer


def _export(store: ResultStore, folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
    stream = io.BytesIO()
    export_results(store, JOB, stream, fmt="jsonl", chunks=True)
    jsonl = [json.loads(line) for line in stream.getvalue().decode("utf-8").splitlines()]
    summary = export_results(store, JOB, folder / "results.parquet", fmt="parquet", chunks=True)
    documents, chunk_file = (pq.read_table(path).to_pylist() for path in summary.paths)
    return jsonl, documents, chunk_file


def _api(store: ResultStore, settings: Settings) -> tuple[int, str, list[dict[str, Any]]]:
    key = generate_api_key(lambda n: b"\x07" * n)
    store.upsert_api_key(ApiKeyRow(key.key_id, TENANT, key.key_hash, AT))
    app = create_app(api_sections(settings), store=store, clock=lambda: AT + timedelta(minutes=1))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get(f"/v1/jobs/{JOB}/results", params={"include": "chunks"},
                              headers={"Authorization": f"Bearer {key.key}"})
    lines = [json.loads(line) for line in response.text.splitlines()]
    return response.status_code, response.headers.get("X-Job-Status", ""), lines


def _sink(store: ResultStore, serde: AvroSerde, producer: _Producer, settings: Settings) -> list[SinkPoint]:
    """``docstream sink run``'s handler over the DocumentCompleted records the reducer produced."""
    engine = _HeldPoints()
    metrics = Metrics()
    writer = SinkWriter("scratch", store, engine, model_id=settings.inference.model_id, batch_size=64, metrics=metrics)
    try:
        envelopes = [Envelope(TOPICS.completed, 0, offset, DOC, serde.deserialize(value, TOPICS.completed))
                     for offset, value in enumerate(producer.values(TOPICS.completed))]
        SinkHandler(writer, metrics).handle_batch(envelopes)
    finally:
        writer.close()
    return sorted(engine.points.values(), key=lambda p: int(p.payload["chunk_index"]))


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journey]:
    folder = tmp_path_factory.mktemp("added-task")
    with pytest.MonkeyPatch.context() as env:
        # the user's registration, and nothing else: the inference process runs it by name, the reducer finds its fold
        env.setenv("DOCSTREAM_TASKS__CUSTOM", json.dumps({NAME: REFERENCE}))
        env.setenv("DOCSTREAM_TASKS__TASK", NAME)
        settings = Settings().with_overrides(  # type: ignore[call-arg]  # pydantic-settings: every field has a default
            store={"backend": "sqlite", "sqlite_path": str(folder / "store.db")},
            object_store={"url": str(folder / "objects")},
            kafka={"bootstrap_servers": "127.0.0.1:1"},  # never contacted: no broker here
            inference={"model_id": EMBED_MODEL},
        )
    store = open_store(settings.store, settings.cassandra)
    store.migrate()
    try:
        serde = AvroSerde(settings.kafka)
        _submitted(store)
        chunks = _chunks()
        # 1. the registry loads the task the inference process is told to run, by name
        task = load_task(settings.tasks.task, TaskContext(settings.inference, settings.tasks))
        outputs = list(task.run(task.prepare([c.text for c in chunks], [TaskRequest(NAME)] * len(chunks))))
        # 2. + 3. the inference handler: rows, then records; embed's too (the sink's vectors)
        values = _inference(store, serde, chunks, task, outputs, NAME, task.model_id)
        embed = _inference(store, serde, chunks, None, [ChunkOutput(embedding=v) for v in VECTORS], EMBED,
                           EMBED_MODEL)
        # 4. the reducer: chunk results in any order, the two tasks interleaved
        producer = asyncio.run(_reduce(store, serde, settings, [*reversed(values[1:]), *embed, values[0]]))
        completed = {c.task: c for c in (serde.deserialize(v, TOPICS.completed)
                                         for v in producer.values(TOPICS.completed))
                     if isinstance(c, DocumentCompleted) and c.task is not None}
        decoded = [serde.deserialize(value, RESULTS_TOPIC) for value in values]
        # 5. - 7.
        jsonl, parquet, parquet_chunks = _export(store, folder)
        readers = settings.with_overrides(tasks={"custom": {}})
        assert readers.tasks.custom == {}  # the readers need no registration: the API runs without the setting
        api_status, api_job_status, api_lines = _api(store, readers)
        points = _sink(store, serde, producer, settings)
        dead_letters = [topic for topic, _ in producer.sent if topic.endswith(".dlq")]
        yield Journey(settings, store, task, outputs, values, decoded, completed, jsonl, parquet, parquet_chunks,
                      api_status, api_job_status, api_lines, points, dead_letters)
    finally:
        store.close()


def _output(text: str | None) -> Any:
    assert text is not None
    return json.loads(text)


def _of_task(lines: Sequence[dict[str, Any]], record: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("record", record) == record and line["task"] == NAME]


# -- 1. the registry ----------------------------------------------------------------------------------------


def test_1_the_registry_loads_the_task_by_the_name_its_setting_gives_and_it_counts_words(journey: Journey) -> None:
    assert journey.settings.tasks.custom == {NAME: REFERENCE}
    assert isinstance(journey.task, WordCountTask) and isinstance(journey.task, Task)
    assert task_fold(NAME, journey.settings.tasks.custom) is WordCountTask.fold
    assert [o.output for o in journey.outputs] == [{"words": n} for n in WORDS]
    with pytest.raises(ConfigError) as unregistered:
        task_class(NAME)  # without the setting no component finds it: the registration is the setting
    assert unregistered.value.code == "task_unavailable"


# -- 2. the result record, through Avro ------------------------------------------------------------------------


def test_2_each_output_is_its_chunks_result_record_through_avro(journey: Journey) -> None:
    assert all(value.startswith(SINGLE_OBJECT_MAGIC) for value in journey.result_bytes)  # no registry needed
    assert all(isinstance(r, ChunkResult) for r in journey.results)
    assert [(r.chunk_index, r.task, r.model_id, r.status, _output(r.output)) for r in journey.results] == [
        (i, NAME, MODEL_ID, "ok", {"words": n}) for i, n in enumerate(WORDS)]
    assert all(r.tasks == [EMBED, NAME] and r.runtime == "python/cpu" for r in journey.results)


# -- 3. the chunk rows --------------------------------------------------------------------------------------------


def test_3_each_result_is_its_chunk_row_in_the_store(journey: Journey) -> None:
    rows: list[ChunkRow] = list(journey.store.iter_chunks(DOC, MODEL_ID))
    assert [(r.chunk_index, r.task, r.status, r.text, _output(r.output)) for r in rows] == [
        (i, NAME, "ok", TEXTS[i], {"words": n}) for i, n in enumerate(WORDS)]
    assert all(r.embedding == [] and r.label_scores == {} and r.mentions == () for r in rows)


# -- 4. the reducer: DocumentCompleted and the document_results row ------------------------------------------------


def test_4_the_reducer_folds_the_chunks_into_the_document_result_and_its_row(journey: Journey) -> None:
    assert journey.dead_letters == []
    completed = journey.completed[NAME]
    assert (completed.doc_id, completed.model_id, completed.status, completed.chunk_count,
            completed.failed_chunks) == (DOC, MODEL_ID, "completed", 3, 0)
    assert _output(completed.output) == DOCUMENT_OUTPUT
    assert completed.tasks == [EMBED, NAME] and completed.embedding == []
    row = journey.store.get_document_result(DOC, MODEL_ID)
    assert row is not None and (row.task, row.status, row.chunk_count) == (NAME, "completed", 3)
    assert _output(row.output) == DOCUMENT_OUTPUT
    assert journey.completed[EMBED].model_id == EMBED_MODEL  # the other task of the job, beside it
    job = journey.store.get_job(JOB)
    assert job is not None and (job.status, job.completed) == ("completed", 1)
    entry = next(iter(journey.store.iter_job_documents(JOB)))
    assert entry.status == "completed" and set(entry.tasks) == {EMBED, NAME}


# -- 5. the export --------------------------------------------------------------------------------------------------


def test_5_the_export_writes_the_tasks_output_in_json_lines_and_parquet(journey: Journey) -> None:
    for documents, chunks in ((_of_task(journey.export_jsonl, "document"), _of_task(journey.export_jsonl, "chunk")),
                              (_of_task(journey.export_parquet, "document"), _of_task(journey.export_parquet_chunks,
                                                                                      "chunk"))):
        assert [(d["doc_id"], d["model_id"], d["status"], _output(d["output"])) for d in documents] == [
            (DOC, MODEL_ID, "completed", DOCUMENT_OUTPUT)]
        assert [(c["chunk_index"], _output(c["output"])) for c in chunks] == [
            (i, {"words": n}) for i, n in enumerate(WORDS)]


# -- 6. the API -------------------------------------------------------------------------------------------------------


def test_6_the_api_streams_the_tasks_output_in_the_jobs_results(journey: Journey) -> None:
    assert (journey.api_status, journey.api_job_status) == (200, "completed")
    assert [(d["doc_id"], d["model_id"], d["status"], _output(d["output"]))
            for d in _of_task(journey.api_lines, "document")] == [(DOC, MODEL_ID, "completed", DOCUMENT_OUTPUT)]
    assert [(c["chunk_index"], _output(c["output"])) for c in _of_task(journey.api_lines, "chunk")] == [
        (i, {"words": n}) for i, n in enumerate(WORDS)]


# -- 7. the sink ------------------------------------------------------------------------------------------------------


def test_7_the_sinks_points_carry_the_tasks_output_on_each_chunk(journey: Journey) -> None:
    assert [(p.payload["chunk_index"], p.vector) for p in journey.points] == [
        (i, v) for i, v in enumerate(VECTORS)]
    assert [p.payload["tasks"][NAME] for p in journey.points] == [
        {"model_id": MODEL_ID, "status": "ok", "output": json.dumps({"words": n}, separators=(",", ":"))}
        for n in WORDS]
    assert [_output(p.payload["tasks"][NAME]["output"]) for p in journey.points] == [{"words": n} for n in WORDS]


# -- the files it touched ----------------------------------------------------------------------------------------------


_PRODUCTION = ("schemas", "libs/common/docstream", "services", "pyproject.toml")
"""Everything a deployment runs: the records' schemas, the shared library (records, Avro, the store's rows and
migrations, the registry), every service (inference, reducer, ingest: export and API, sink, CLI) and the
package's entry points."""
_TEXT = {".py", ".avsc", ".sql", ".cql", ".toml", ".json", ".md", ".txt", ".yaml", ".yml"}


def _production_files() -> Iterator[Path]:
    for name in _PRODUCTION:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        yield from (p for p in sorted(path.rglob("*"))
                    if p.is_file() and p.suffix in _TEXT and "__pycache__" not in p.parts)


def test_nothing_outside_the_task_module_names_it() -> None:
    files = list(_production_files())
    where = {str(p.relative_to(ROOT)) for p in files}
    assert {"services/ingest/docstream_ingest/export.py", "services/ingest/docstream_ingest/api/results.py",
            "libs/common/docstream/tasks/registry.py"} <= where
    assert any(w.startswith("schemas/") and w.endswith(".avsc") for w in where)
    assert any(w.startswith("libs/common/docstream/store/migrations/") for w in where)
    names = (NAME, WordCountTask.__name__, WordCountFold.__name__, __name__.rsplit(".", 1)[-1])
    naming = sorted(f"{p.relative_to(ROOT)}: {n}" for p in files for n in names
                    if n.lower() in p.read_text(encoding="utf-8", errors="replace").lower())
    assert naming == []
