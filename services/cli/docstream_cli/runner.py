"""`docstream run`: the whole pipeline in one process on the embedded stack.

A single-node Apache Kafka (``docstream_cli.embedded_kafka``), SQLite and a local object store live under
``./.docstream/`` (``--state-dir``); the broker keeps its topics there after the run, so ``docstream
dlq|replay`` read them afterwards and a second run finds them. Settings that name a broker
(``DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS``, or ``kafka.bootstrap_servers`` in ``--config``) run the job on that
cluster instead. The same service code as the real stack runs here: the chunker's consume loop and the
inference pipeline on threads, the reducer's Faust worker (exactly-once) on a thread of its own event loop, and
a progress consumer on the completed and result topics.

Start-up runs side by side, so that a run costs little more than its model load and model time
(docs/performance.md, "Fixed cost of docstream run"): the model loads on a thread from the first
moment; meanwhile the broker starts, the topics and the store are made, the reducer and the
chunker start on their threads (the reducer's group join and table recovery, the extraction
child) and the documents are submitted. The inference service starts once the model is there.
The chunker and the inference pipeline take every partition by ``assign()`` (static assignment:
no group join); they commit their offsets after the writes. A run's phases are logged as
``run_phase`` events with monotonic offsets (``t_s``) in ``<state-dir>/run.log``.

Resuming: the job id of a run is derived from the inputs, the model and the chunker settings, so the
same command gives the same job and the same doc_ids. A run that finds its topics resumes every service
from its committed offsets; the intake produces again only documents still ``submitted`` (their record
may never have reached the broker), and documents with a result row for the model are not submitted
again. A run whose topics are new (a removed broker folder, another cluster) submits every document
without a result. The inference service reuses chunk rows already written (``inference.reuse_stored``),
so no chunk is embedded twice.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from confluent_kafka import Consumer, TopicPartition
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, FatalError, InputError, SchemaError
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer, consumer_config
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics
from docstream.records import ChunkResult, DocumentCompleted
from docstream.service import collect_garbage_less_often
from docstream.settings import Settings
from docstream.store import DocumentResultRow, DocumentRow, JobsStore, ResultsStore, ResultStore, SqliteStore
from docstream.store.base import TERMINAL_DOC_STATES
from docstream.tasks.base import EMBED, DocumentStepTask, Task, TaskRequest, close_task, has_document_step
from docstream.tasks.legacy import job_model_id_for, keeps_pre_task_group, keeps_pre_task_layout
from docstream.tasks.selection import DEFAULT_TASKS, check_job_tasks, tasks_option
from docstream.tenants.usage import Usage, across_tasks, total_usage
from docstream.topics import Topics
from docstream_cli.embedded_kafka import EmbeddedKafka
from docstream_cli.runstate import EMBEDDED, LOCAL_STATE_DIR, RunRecord
from docstream_cli.statedir import write_run_record

if TYPE_CHECKING:
    from docstream_cli.ops.replay_plan import ReplayPlan
    from docstream_cli.ops.submit import PromptFlags

__all__ = ["RunOutcome", "embedded_settings", "names_broker", "replay_run", "run_job", "run_job_id", "usage_line"]

_log = get_logger(__name__)
_NAMESPACE = uuid.UUID("2c6f5e0e-3a4b-4f0f-8f4e-5d3b1e0c9a77")
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
_SERVICE_POLL_S = 0.1  # how often the run and its services look for a stop, an error, a record


@dataclass
class RunOutcome:
    """What a run did: per-document statuses and where the results went."""

    job_id: str
    statuses: dict[str, str] = field(default_factory=dict)  # doc_id → completed|partial|failed
    errors: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # doc_id → (code, message)
    filenames: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (file, code, reason)
    resumed: int = 0
    resumed_chunks: int = 0
    reused_chunks: int = 0  # chunk results served from a source's earlier version (docs/intake.md)
    chunks: int = 0
    seconds: float = 0.0
    out: Path | None = None
    exported: tuple[str, ...] = ()  # the files written: documents (JSON Lines with chunks), or both Parquet files
    usage: Usage | None = None  # the job's, resumed documents included (its jobs row)

    @property
    def failed(self) -> int:
        """Documents that failed, refused files included."""
        return sum(1 for s in self.statuses.values() if s == "failed") + len(self.refused)


def names_broker(settings: Settings) -> bool:
    """Whether the settings name a Kafka cluster (``kafka.bootstrap_servers`` set): a run uses it, not its own."""
    return "bootstrap_servers" in settings.kafka.model_fields_set


def embedded_settings(base: Settings, state_dir: Path, bootstrap: str, *, own_broker: bool = True) -> Settings:
    """``base`` pointed at the embedded stack under ``state_dir`` and the broker at ``bootstrap``.

    ``own_broker``: the broker is the state dir's (two partitions per topic, nothing expires: the topics
    stay until the folder is removed). Exactly-once (``kafka.transactions``) is on unless the settings
    turn it off.
    """
    state_dir = state_dir.resolve()
    kafka: dict[str, Any] = {"bootstrap_servers": bootstrap}
    if "transactions" not in base.kafka.model_fields_set:
        kafka["transactions"] = True
    if own_broker:
        kafka.update(partitions=2, replication_factor=1, min_insync_replicas=None, intake_retention_ms=-1,
                     results_retention_ms=-1, dlq_retention_ms=-1)
    return base.with_overrides(
        kafka=kafka,
        store={"backend": "sqlite", "sqlite_path": str(state_dir / "docstream.db")},
        object_store={"url": str(state_dir / "objects")},
        # exactly-once: a completion is seen when its transaction commits, every commit_interval_s
        reducer={"data_dir": str(state_dir / "reducer"), "commit_interval_s": 0.2},
        inference={"reuse_stored": True},
    )


class _RunBroker:
    """The broker of a run: the state dir's ``EmbeddedKafka`` (``<state-dir>/kafka``), or the cluster the
    settings name (``names_broker``), which the run neither starts nor stops."""

    def __init__(self, settings: Settings, state_dir: Path) -> None:
        self.embedded: EmbeddedKafka | None = None if names_broker(settings) else EmbeddedKafka(state_dir / "kafka")
        self._bootstrap = settings.kafka.bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        return self.embedded.bootstrap_servers if self.embedded is not None else self._bootstrap

    def start(self) -> None:
        if self.embedded is not None:
            self.embedded.start()

    def begin_stop(self) -> None:
        if self.embedded is not None:
            self.embedded.begin_stop()

    def stop(self) -> None:
        """SIGTERM to the state dir's broker, not waited for: its next owner waits for it (``release``)."""
        if self.embedded is not None:
            self.embedded.release()


def run_job_id(paths: Sequence[str | Path], model_id: str, settings_key: str) -> str:
    """The job id of a run: the same inputs, model and chunker settings give the same job."""
    inputs = "\n".join(sorted(str(Path(p).resolve()) for p in paths))
    return str(uuid.uuid5(_NAMESPACE, f"run\n{model_id}\n{settings_key}\n{inputs}"))


class _Phases:
    """``run_phase`` log events: where the time of a run goes (benchmarks/fixed_cost.py reads them).

    Each event carries ``phase`` and ``t_s``, monotonic seconds since the run started.
    """

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._marked: set[str] = set()

    def mark(self, phase: str, **fields: Any) -> None:
        """Log ``phase`` (once: a phase marked again is ignored)."""
        if phase in self._marked:
            return
        self._marked.add(phase)
        _log.info("run_phase", phase=phase, t_s=round(time.monotonic() - self._started, 4), **fields)


class _Progress:
    """Follows the completed and result topics (from the start) for one job of ``tasks``.

    A document is done once each task's DocumentCompleted arrived, or one without a model (it failed
    before inference, for every task); its status is then the combination ``DocumentTasks`` gives.
    """

    def __init__(self, settings: Settings, serde: AvroSerde, job_id: str, expected: set[str],
                 tasks: Sequence[str] = (EMBED,), model_id: str | None = None) -> None:
        topics = Topics(settings.kafka.topic_prefix)
        conf = consumer_config(settings.kafka, group_id=f"{topics.prefix}-run-progress")
        self._consumer = Consumer(conf)
        # both result topics for one release: a run resumed from a state dir of the version before has its
        # results so far on the legacy one (the reducer reads both too)
        self._topics = (topics.completed, *topics.result_topics())
        self._serde = serde
        self._job_id = job_id
        self._model_id = model_id  # set: only the results of this model count (a replay under a new model)
        self.expected = expected
        self.tasks = tuple(tasks)
        self.done: dict[str, DocumentCompleted] = {}
        self._results: dict[str, dict[str, DocumentCompleted]] = {}
        self.chunks_embedded = 0
        self.chunks_total = 0
        self._counted: set[str] = set()
        self._seen_chunks: set[tuple[str, str, int]] = set()
        partitions = [
            TopicPartition(topic, p, 0)
            for topic in self._topics
            for p in range(settings.kafka.partitions)
        ]
        self._consumer.assign(partitions)

    def poll(self, timeout_s: float) -> None:
        """Take what arrived; waits at most ``timeout_s`` for the first record, not for a full batch."""
        first = self._consumer.poll(timeout_s)
        if first is None:
            return
        for msg in [first, *self._consumer.consume(num_messages=500, timeout=0)]:
            value, topic = msg.value(), msg.topic()
            if msg.error() is not None or value is None or topic is None:
                continue
            try:
                record = self._serde.deserialize(value, topic)
            except SchemaError:
                continue
            if self._model_id is not None and getattr(record, "model_id", None) != self._model_id:
                continue
            if isinstance(record, DocumentCompleted) and record.doc_id in self.expected:
                self._completed(record)
            elif isinstance(record, ChunkResult) and record.doc_id in self.expected:
                if record.doc_id not in self._counted:
                    self._counted.add(record.doc_id)
                    self.chunks_total += record.chunk_count * len(self.tasks)
                key = (record.doc_id, record.task, record.chunk_index)
                if key not in self._seen_chunks:
                    self._seen_chunks.add(key)
                    self.chunks_embedded += 1

    def _completed(self, record: DocumentCompleted) -> None:
        if record.task is None:  # failed before inference (the chunker's), for every task
            self.done[record.doc_id] = record
            return
        results = self._results.setdefault(record.doc_id, {})
        results[record.task] = record
        if any(task not in results for task in self.tasks):
            return
        if len(self.tasks) == 1:
            self.done[record.doc_id] = record
            return
        statuses = {results[task].status for task in self.tasks}
        status = statuses.pop() if len(statuses) == 1 else "partial"
        failing = [results[task] for task in self.tasks if results[task].status != "completed"]
        first = results[self.tasks[0]]
        self.done[record.doc_id] = replace(
            first, status=status, failed_chunks=max(r.failed_chunks for r in results.values()),
            error_code=failing[0].error_code if failing else None,
            error="; ".join(f"{r.task}: {r.error}" for r in failing if r.error) or None)

    @property
    def finished(self) -> bool:
        return self.expected.issubset(self.done)

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True)
class _Service:
    """A built service: ``run`` blocks until ``stop``; ``close`` releases what it holds afterwards."""

    run: Callable[[], None]
    stop: Callable[[], None]
    close: Callable[[], None] = lambda: None


class _Services:
    """The chunker, inference and reducer of one run, each built and run on a thread of its own.

    Building happens on the service's thread too, so the slow starts (the extraction child, the
    reducer's group join and table recovery) overlap each other and the model load. A service
    that fails, to start or later, or that ends before the run stops it, puts its error in ``errors``:
    the run fails with it.
    """

    def __init__(self, phases: _Phases) -> None:
        self._phases = phases
        self._lock = threading.Lock()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._running: list[_Service] = []
        self.errors: list[tuple[str, BaseException]] = []  # (service, error), first first

    def start(self, name: str, build: Callable[[], _Service]) -> None:
        """Build and run one service on its own thread."""
        thread = threading.Thread(target=self._serve, args=(name, build), name=f"docstream-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _serve(self, name: str, build: Callable[[], _Service]) -> None:
        service: _Service | None = None
        try:
            self._phases.mark(f"{name}_starting")
            service = build()
            with self._lock:
                stopping = self._stopping
                if not stopping:
                    self._running.append(service)
            if stopping:  # the run ended while this service was starting
                return
            self._phases.mark(f"{name}_started")
            service.run()
            with self._lock:
                stopping = self._stopping
            if not stopping:  # a service that ends by itself leaves work no one does: the run would wait forever
                raise FatalError(f"the {name} stopped before the run ended", code="service_stopped")
        except BaseException as exc:  # noqa: BLE001 - a service thread hands its error to the run
            self.errors.append((name, exc))
            _log.error("service_failed", service=name, error_code=getattr(exc, "code", type(exc).__name__),
                       error=str(exc)[:500])
        finally:
            if service is not None:
                service.close()  # here, so that the services close side by side

    def raise_if_failed(self) -> None:
        """Raises: FatalError: a service failed, to start or later (the first error is its cause)."""
        if self.errors:
            name, error = self.errors[0]
            code = error.code if isinstance(error, DocstreamError) else "service_failed"
            raise FatalError(f"the {name} failed: {error}", code=code) from error

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop every service at once and wait (bounded) for their threads, which close them."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for service in running:
            service.stop()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        left = [thread.name for thread in self._threads if thread.is_alive()]
        if left:
            _log.warning("services_stop_timed_out", threads=left, timeout_s=timeout_s)


class _ModelLoad:
    """The tasks' models, loaded (and warmed up) on a thread of its own from the first moment of the run.

    It is the longest part of a run's start: the broker, the store, the intake, the chunker and the
    reducer start meanwhile, and the inference services start as soon as they are there.
    """

    def __init__(self, settings: Settings, phases: _Phases, tasks: Sequence[str] = (EMBED,)) -> None:
        self._settings = settings
        self._phases = phases
        self._tasks = tuple(tasks)
        self._done = threading.Event()
        self._loaded: list[Task] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._load, name="docstream-model-load", daemon=True).start()

    def _load(self) -> None:
        try:
            from docstream_inference.main import load_model

            self._phases.mark("model_load_started")
            self._loaded = [load_model(self._settings, task) for task in self._tasks]
            self._phases.mark("model_loaded")
        except BaseException as exc:  # noqa: BLE001 - handed to the run, which fails with it
            self._error = exc
            _log.error("model_load_failed", error_code=getattr(exc, "code", type(exc).__name__),
                       error=str(exc)[:500])
        finally:
            self._done.set()

    def wait(self, timeout_s: float) -> list[Task] | None:
        """The loaded tasks, or None while they are still loading after ``timeout_s``.

        Raises:
            DocstreamError: the load failed with it (a ConfigError for a folder without a model).
            FatalError: the load failed with another error (``model_load_failed``).
        """
        if not self._done.wait(timeout_s):
            return None
        if self._error is not None:
            if isinstance(self._error, DocstreamError):
                raise self._error
            raise FatalError(f"the model did not load: {self._error}", code="model_load_failed") from self._error
        return self._loaded


def _start_reducer(settings: Settings, store: ResultStore, metrics: Metrics) -> _Service:
    from docstream_reducer.service import ReducerContext, build_reducer_service

    context = ReducerContext(kafka=settings.kafka, reducer=settings.reducer, retry=settings.retry,
                             tasks=settings.tasks, fairness=settings.fairness, log=settings.log)
    reducer = build_reducer_service(context, store=store, metrics=metrics)
    return _Service(reducer.run_in_thread, reducer.stop, reducer.close)


def _start_chunker(settings: Settings, store: ResultStore, metrics: Metrics, producer: ReliableProducer) -> _Service:
    from docstream_chunker.main import build_chunker

    chunker = build_chunker(settings, store=store, metrics=metrics, static_assignment=True,
                            poll_timeout_s=_SERVICE_POLL_S, producer=producer)
    return _Service(chunker.run, chunker.stop, chunker.close)


def _start_inference(
    settings: Settings, store: ResultStore, metrics: Metrics, producer: ReliableProducer, task: Task
) -> _Service:
    from docstream_inference.main import build_inference

    pipeline = build_inference(settings, store=store, metrics=metrics, task=task, static_assignment=True,
                               producer=producer)
    return _Service(pipeline.run, pipeline.stop, lambda: close_task(task))


def _start_document_stage(
    settings: Settings, store: ResultStore, metrics: Metrics, producer: ReliableProducer, task: Task
) -> _Service:
    """The document stage of a task that declares a document step (generate), on the inference service's task (its
    client is shared, and closed by that service)."""
    from docstream_inference.main import build_document_stage

    assert isinstance(task, DocumentStepTask)
    loop = build_document_stage(settings, store=store, metrics=metrics, task=task, static_assignment=True,
                                producer=producer)
    return _Service(loop.run, loop.stop, lambda: None)


class _Producers:
    """The run's own producers, made as soon as the broker is up and closed after the services stopped.

    An idempotent producer's first record waits for its producer id. Made early, none of them waits later.
    """

    def __init__(self, settings: Settings) -> None:
        self.intake = ReliableProducer(settings.kafka, client_id="docstream-run")
        self.chunker = ReliableProducer(settings.kafka, client_id="chunker")
        self.inference = ReliableProducer(settings.kafka, client_id="inference")

    def close(self) -> None:
        for producer in (self.intake, self.chunker, self.inference):
            producer.close(5)


def run_job(
    paths: Sequence[str],
    *,
    settings: Settings,
    state_dir: Path,
    out: Path | None,
    console: Console,
    timeout_s: float | None = None,
    chunks: bool = False,
    tasks: tuple[TaskRequest, ...] = DEFAULT_TASKS,
) -> RunOutcome:
    """Run one job of ``tasks`` over ``paths`` on the embedded stack; returns when every document is terminal
    for every task.

    ``tasks`` are the job's (its records carry them); other tasks than the default embed alone are
    part of the run's job id, so a run asking for other tasks is another job.

    The models load on a thread from the start while the broker, the store, the intake, the chunker
    and the reducer start beside it; an inference service per task (each its own consumer group) starts
    once the models are there.
    ``<state_dir>/run.json`` records the run (when its job starts, and when it finished) so that the
    reading commands find its store; the jobs row ends ``completed`` with the run's counts. With
    ``chunks``, ``out`` also gets every chunk row (``docstream_ingest.export``).

    Raises:
        InputError: nothing to process.
        ConfigError: the model cannot be loaded (no model in the folder).
        FatalError: a service or the model load failed, or the run timed out.
    """
    from docstream_ingest.export import export_results
    from docstream_ingest.intake import IntakeClients, submit_paths
    from docstream_ingest.main import intake_context
    from docstream_ingest.request import JobRequest

    started = time.monotonic()
    deadline = None if timeout_s is None else started + timeout_s
    state_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(level=settings.log.level, fmt="json", service="run", file=state_dir / "run.log")
    collect_garbage_less_often()  # the services run in this process
    phases = _Phases()
    phases.mark("run_started")
    names = [t.name for t in tasks]
    model = _ModelLoad(settings, phases, names)
    broker = _RunBroker(settings, state_dir)
    broker.start()
    try:
        phases.mark("broker_started")
        settings = embedded_settings(settings, state_dir, broker.bootstrap_servers,
                                     own_broker=broker.embedded is not None)
        producers = _Producers(settings)
        services = _Services(phases)
        try:
            topics = Topics(settings.kafka.topic_prefix)
            # topics made now hold nothing to resume from: every document without a result goes again
            fresh = topics.submitted in ensure_topics(settings.kafka, topics)
            phases.mark("topics_created", fresh=fresh)
            store = SqliteStore(Path(settings.store.sqlite_path))
            metrics = Metrics()
            # the reducer's slow start (group join, table recovery) begins first; it touches the store
            # only for records, and there are none before the documents are submitted, after migrate()
            services.start("reducer", lambda: _start_reducer(settings, store, metrics))
            store.migrate()
            phases.mark("store_migrated")
            services.start("chunker", lambda: _start_chunker(settings, store, metrics, producers.chunker))
            model_id = settings.inference.embed_model_id
            chunker, inference = settings.chunker, settings.inference
            chunking = f"{chunker.max_tokens}/{chunker.overlap_tokens}/{inference.model_path}"
            asked = tasks_option(tasks)
            job_id = run_job_id(paths, model_id, chunking if asked is None else f"{chunking}\ntasks={asked}")
            record = RunRecord(
                state_dir=str(state_dir.resolve()), sqlite_path=str(settings.store.sqlite_path), job_id=job_id,
                model_id=model_id, model_path=inference.model_path, started_at=datetime.now(UTC),
                broker=EMBEDDED if broker.embedded is not None else settings.kafka.bootstrap_servers,
                topic_prefix=topics.prefix, reducer_app_id=settings.reducer.app_id,
            )
            write_run_record(state_dir, record)
            serde = AvroSerde(settings.kafka)
            intake = intake_context(settings)

            def _not_done(doc_id: str, _status: str) -> bool:
                return _resumed_result(store, doc_id, names, model_id) is None

            result = submit_paths(
                paths, JobRequest(job_id=job_id, model_id=model_id, tasks=tasks),
                IntakeClients(intake, store, producers.intake, serde), resubmit=_not_done if fresh else None,
            )
            phases.mark("submitted")
            outcome = RunOutcome(job_id=job_id, refused=[(r.path, r.code, r.reason) for r in result.refused])
            expected = {doc.doc_id for doc in result.documents}
            for doc in result.documents:
                outcome.filenames[doc.doc_id] = doc.filename or doc.doc_id
            for dup in result.duplicates:
                row = _resumed_result(store, dup.doc_id, names, model_id)
                if row is not None and dup.doc_id not in outcome.statuses:
                    outcome.resumed += 1
                    outcome.statuses[dup.doc_id] = row.status
                    outcome.filenames[dup.doc_id] = dup.path
                    outcome.resumed_chunks += row.chunk_count
                elif row is None and not fresh and _in_flight(store, dup.doc_id):
                    # on its way in the kept topics: the services resume it from their committed offsets
                    expected.add(dup.doc_id)
                    outcome.filenames[dup.doc_id] = dup.path
            if expected:
                for task in _await_model(model, services, deadline):
                    services.start("inference" if keeps_pre_task_group(task.name) else f"inference-{task.name}",
                                   partial(_start_inference, settings, store, metrics, producers.inference, task))
                    if has_document_step(task):  # its map-reduce's document-level step
                        services.start("document-stage", partial(_start_document_stage, settings, store, metrics,
                                                                 producers.inference, task))
                _follow(settings, serde, outcome, expected, console, deadline, phases, services, names,
                        ocr_pages=partial(ocr_pages_started, metrics))
            outcome.reused_chunks = reused_from_versions(metrics)
        finally:
            services.stop()
            phases.mark("services_stopped")
            producers.close()
            broker.begin_stop()  # nothing uses it any more: it exits while the results are exported
        _close_job(store, outcome)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            # every task the run asked for (the embed model is the default, not a filter: that kept embed alone)
            parquet = out.suffix == ".parquet"
            summary = export_results(store, job_id, out, fmt="parquet" if parquet else "jsonl", chunks=chunks,
                                     default_model_id=model_id, per_task_files=parquet)
            outcome.out, outcome.exported = out, summary.paths
            phases.mark("exported")
        store.close()
        write_run_record(state_dir, replace(record, finished_at=datetime.now(UTC)))
    finally:
        broker.stop()
    phases.mark("broker_stopped")
    outcome.seconds = time.monotonic() - started
    phases.mark("run_finished")
    return outcome


def _close_job(store: JobsStore, outcome: RunOutcome) -> None:
    """Mark the run's job ``completed`` with its counts and its usage: every document of it is terminal now.

    The reducer publishes a job's progress at most every ``job_status_interval_s`` and the run stops it
    as soon as the last document is complete, so its last update of the jobs row can lag behind; a
    resumed run's intake also sets the row back to ``running``. The services are stopped: nothing
    writes the row after this. The usage is that of the job's documents as their job_documents rows
    hold it (the reducer writes each document's with its terminal status): the reducer's own total
    counts only the documents it saw end in this run, not those a resumed run found done.
    """
    row = store.get_job(outcome.job_id)
    if row is None:
        return
    counts = {status: sum(1 for s in outcome.statuses.values() if s == status)
              for status in ("completed", "partial", "failed")}
    now = datetime.now(UTC)
    usages: list[Usage | None] = []
    for document in store.iter_job_documents(outcome.job_id):
        status = outcome.statuses.get(document.doc_id)
        if status is None and document.status not in counts:
            continue
        # a document of several tasks: its tasks' entries (the jobs agent, stopped with the run, may not have
        # written the combination yet); of one task: its row, as the reducer wrote it with its status
        usage = across_tasks(t.usage for t in document.tasks.values()) if len(document.tasks) > 1 else document.usage
        usages.append(usage)
        if status is not None and document.status not in TERMINAL_DOC_STATES:
            code, _ = outcome.errors.get(document.doc_id, (None, None))
            store.update_job_document_status(outcome.job_id, document.doc_id, status, code, usage, now)  # type: ignore[arg-type]
    usage = total_usage(usages)
    outcome.usage = None if usage.is_empty else usage
    store.upsert_job(replace(row, status="completed", completed=counts["completed"], partial=counts["partial"],
                             failed=counts["failed"], updated_at=now, usage=outcome.usage))


def _check(services: _Services, deadline: float | None) -> None:
    services.raise_if_failed()
    if deadline is not None and time.monotonic() > deadline:
        raise FatalError("the run timed out", code="timeout")


def _await_model(model: _ModelLoad, services: _Services, deadline: float | None) -> list[Task]:
    """The tasks once loaded; a service failing or the deadline passing meanwhile ends the wait."""
    while True:
        _check(services, deadline)
        loaded = model.wait(_SERVICE_POLL_S)
        if loaded is not None:
            return loaded


def _in_flight(store: ResultsStore, doc_id: str) -> bool:
    """A document of the job that is neither terminal nor deleted: a run that kept its topics waits for it."""
    row = store.get_document(doc_id)
    return row is not None and row.status not in TERMINAL_DOC_STATES and row.deleted_at is None


def _resumed_result(store: ResultsStore, doc_id: str, names: Sequence[str],
                    model_id: str) -> DocumentResultRow | None:
    """The first task's result of a document done for every task of ``names`` (a resumed run skips it), else None.

    A task's result counts under the model the job's ``model_id`` names for it (``legacy.job_model_id_for``: the
    embedding model), else under any model.
    """
    rows = {row.task: row for row in store.list_document_results(doc_id)
            if job_model_id_for(row.task, model_id) in (None, row.model_id)}
    return rows[names[0]] if set(names) <= set(rows) else None


def reused_from_versions(metrics: Metrics) -> int:
    """Chunk results this process's inference served from the sources' earlier versions
    (``docstream_reused_chunks{by="version"}``, summed over its inference services)."""
    total = 0.0
    for family in metrics.registry.collect():
        if family.name == "docstream_reused_chunks":
            total += sum(sample.value for sample in family.samples
                         if sample.name.endswith("_total") and sample.labels.get("by") == "version")
    return int(total)


def ocr_pages_started(metrics: Metrics) -> int:
    """Pages OCR has started on in this process's chunker (``docstream_ocr_pages_started``)."""
    value = metrics.registry.get_sample_value("docstream_ocr_pages_started_total", {"service": "chunker"})
    return int(value or 0)


def _follow(
    settings: Settings,
    serde: AvroSerde,
    outcome: RunOutcome,
    expected: set[str],
    console: Console,
    deadline: float | None,
    phases: _Phases,
    services: _Services,
    tasks: Sequence[str] = (EMBED,),
    ocr_pages: Callable[[], int] = lambda: 0,
    model_id: str | None = None,
) -> None:
    """Show progress until every expected document is completed for every task; then record their statuses.

    ``ocr_pages``: the pages OCR has started on so far; a row of the bar shows them once there are any.
    ``model_id``: only results of this model count (a replay under a new model).
    """
    progress_feed = _Progress(settings, serde, outcome.job_id, expected, tasks, model_id)
    columns: list[Any] = [
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
    ]
    try:
        with Progress(*columns, console=console, transient=False) as bar:
            docs = bar.add_task("documents", total=len(expected), rate="")
            chunks = bar.add_task("chunks embedded" if keeps_pre_task_layout(tasks) else "chunk results", total=None,
                                  rate="")
            ocr = bar.add_task("pages OCRed", total=None, rate="", visible=False)
            ocr_started_at: float | None = None
            first_chunk_at: float | None = None
            while not progress_feed.finished:
                _check(services, deadline)
                progress_feed.poll(_SERVICE_POLL_S)
                if progress_feed.chunks_embedded and first_chunk_at is None:
                    first_chunk_at = time.monotonic()
                    phases.mark("first_chunk_embedded")
                elapsed = time.monotonic() - (first_chunk_at or time.monotonic())
                rate = progress_feed.chunks_embedded / elapsed if elapsed > 0 else 0.0
                bar.update(docs, completed=len(progress_feed.done))
                bar.update(chunks, completed=progress_feed.chunks_embedded,
                           total=progress_feed.chunks_total or None, rate=f"{rate:.1f} chunks/s")
                read = ocr_pages()
                if read:
                    ocr_started_at = ocr_started_at or time.monotonic()
                    ocr_rate = read / max(time.monotonic() - ocr_started_at, 1.0)
                    bar.update(ocr, completed=read, visible=True, rate=f"{ocr_rate:.2f} pages/s")
        phases.mark("documents_completed")
    finally:
        progress_feed.close()
    for doc_id, record in progress_feed.done.items():
        outcome.statuses[doc_id] = record.status
        outcome.chunks += record.chunk_count - record.failed_chunks
        if record.status != "completed":
            outcome.errors[doc_id] = (record.error_code, record.error)


def replay_run(
    settings: Settings,
    state_dir: Path,
    plan: ReplayPlan,
    *,
    model_path: str | None,
    console: Console,
    own_broker: bool = True,
    timeout_s: float | None = None,
) -> int:
    """Process a replay in a run's state dir, where no service runs, on the run's broker (``settings`` point at
    it): the chunker and the reducer, and an inference service with the replay's model, until every document of
    the replayed records has completed under ``plan.model_id``. Their results sit beside the first ones
    (document results and chunk rows are keyed by model_id). Returns the exit status (0: every document
    completed, 1: some failed).

    ``model_path``: the weights (None: the run's model's). ``own_broker``: the run's broker is its state dir's.

    Raises:
        InputError: no ``plan.model_id``, the run's own (``settings.inference.model_id``), or a service this does
            not process.
        DocstreamError: the model did not load, a service failed, or ``timeout_s`` passed.
    """
    service, model_id = plan.source.service, plan.model_id
    if model_id is None or model_id == settings.inference.model_id or service not in ("chunker", "inference"):
        raise InputError("a replay in a run's state dir is processed for --service chunker or inference with "
                         "--model: under the run's own model it would write the same rows again", code="replay_model")
    started = time.monotonic()
    deadline = None if timeout_s is None else started + timeout_s
    settings = embedded_settings(settings, state_dir, settings.kafka.bootstrap_servers,
                                 own_broker=own_broker).with_overrides(
        inference={"model_id": model_id, "model_path": model_path or settings.inference.model_path},
        chunker={"model_id": model_id} if service == "chunker" else {},
    )
    phases = _Phases()
    model = _ModelLoad(settings, phases)
    store = SqliteStore(Path(settings.store.sqlite_path))
    store.migrate()
    serde = AvroSerde(settings.kafka)
    rows = {doc_id: store.get_document(doc_id) for doc_id in _replayed_documents(settings, plan)}
    live = {doc_id: row for doc_id, row in rows.items() if _live(row)}
    expected = set(live)
    outcome = RunOutcome(job_id=f"replay of {plan.source.topic}")
    outcome.filenames.update({doc_id: row.filename or doc_id for doc_id, row in live.items()})
    producers = _Producers(settings)
    services = _Services(phases)
    metrics = Metrics()
    try:
        if expected:
            services.start("reducer", lambda: _start_reducer(settings, store, metrics))
            if service == "chunker":
                services.start("chunker", lambda: _start_chunker(settings, store, metrics, producers.chunker))
            for task in _await_model(model, services, deadline):
                services.start("inference", partial(_start_inference, settings, store, metrics, producers.inference,
                                                    task))
            _follow(settings, serde, outcome, expected, console, deadline, phases, services, model_id=model_id)
    finally:
        services.stop()
        producers.close()
        store.close()
    outcome.seconds = time.monotonic() - started
    console.print(summary_table(outcome))
    problems = problems_table(outcome)
    if problems is not None:
        console.print(problems)
    console.print(f"replayed {len(expected)} documents under model_id {model_id} in {outcome.seconds:.1f} s; "
                  f"their results sit beside the first ones: docstream results <job> --model {model_id}",
                  highlight=False, soft_wrap=True)
    return EXIT_FAILED if outcome.failed else EXIT_OK


def _live(row: DocumentRow | None) -> TypeGuard[DocumentRow]:
    """A document a replay completes again: known, not deleted, not skipped (those produce no completion)."""
    return row is not None and row.status != "skipped" and row.deleted_at is None


def _replayed_documents(settings: Settings, plan: ReplayPlan) -> set[str]:
    """The doc_ids (record keys) of the records a replay reads: each partition from its target to its end."""
    moves = [move for move in plan.partitions if move.records_to_replay]
    if not moves:
        return set()
    consumer = Consumer(consumer_config(settings.kafka, group_id=f"{settings.kafka.topic_prefix}-replay-scan"))
    ends = {move.partition: move.high for move in moves}
    doc_ids: set[str] = set()
    try:
        consumer.assign([TopicPartition(plan.source.topic, move.partition, move.target) for move in moves])
        deadline = time.monotonic() + 60.0
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    continue
                partition, offset, key = msg.partition(), msg.offset(), msg.key()
                if key and msg.value() is not None:
                    doc_ids.add(key.decode("utf-8", "replace"))
                if partition is not None and offset is not None and offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
            for partition in list(ends):  # read_committed: the last offsets may be transaction markers
                position = consumer.position([TopicPartition(plan.source.topic, partition)])[0].offset
                if position >= ends[partition]:
                    ends.pop(partition)
    finally:
        consumer.close()
    return doc_ids


def summary_table(outcome: RunOutcome) -> Table:
    """Completed / partial / failed counts, then each document that did not complete."""
    table = Table(title="summary")
    table.add_column("status")
    table.add_column("documents", justify="right")
    for status in ("completed", "partial", "failed"):
        count = sum(1 for s in outcome.statuses.values() if s == status)
        if status == "failed":
            count += len(outcome.refused)
        table.add_row(status, str(count))
    return table


def usage_line(usage: Usage) -> str:
    """What the job cost, in one line of the run's summary (docs/operations.md "What a job cost")."""
    device = f" on {usage.device}" if usage.device else ""
    stages = ", ".join(f"{stage} {value:.1f} s" for stage, value in usage.stage_seconds.items())
    chat = (f", chat tokens {usage.prompt_tokens} prompt + {usage.completion_tokens} completion"
            if usage.chat_tokens else "")
    return (f"usage: {usage.pages} pages, {usage.chunks} chunks, {usage.tokens} tokens, "
            f"{usage.model_seconds:.2f} model-seconds{device}{chat}" + (f" (stages: {stages})" if stages else ""))


def _display(path: str) -> str:
    """A file name as the user gave it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def problems_table(outcome: RunOutcome) -> Table | None:
    """One row per document that did not complete: file, status, error code, message."""
    rows = [
        (_display(outcome.filenames.get(doc_id, doc_id)), outcome.statuses[doc_id], code or "", (message or "")[:100])
        for doc_id, (code, message) in sorted(outcome.errors.items(), key=lambda kv: outcome.filenames.get(kv[0], ""))
    ]
    rows += [(_display(path), "failed", code, reason[:100]) for path, code, reason in outcome.refused]
    if not rows:
        return None
    table = Table(title="documents that did not complete")
    for column in ("file", "status", "error_code", "message"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def run_command(
    paths: list[str],
    *,
    settings: Settings,
    out: Path | None,
    state_dir: Path,
    timeout_s: float | None = None,
    chunks: bool = False,
    tasks: Sequence[str] = (),
    labels: str | None = None,
    prompt: PromptFlags | None = None,
) -> int:
    """The `docstream run` command: run, show the summary, and the exit status.

    ``tasks``, ``labels`` and ``prompt`` are ``--task``, ``--labels`` and the generate options
    (``docstream_cli.ops.submit.cli_tasks``).
    0 when every document completed (or was partial), 1 when any failed, 2 on an error.
    """
    from docstream_cli.ops.submit import cli_tasks

    console = Console(stderr=False)
    try:
        # checked before anything starts; the classify defaults filled in are part of the run's job id
        requested = check_job_tasks(cli_tasks(tasks, labels, settings, prompt),
                                    default_labels=settings.tasks.classify.labels)
        outcome = run_job(paths, settings=settings, state_dir=state_dir, out=out, console=console,
                          timeout_s=timeout_s, chunks=chunks, tasks=requested)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: run the same command again to resume")
        return EXIT_INTERRUPTED
    except DocstreamError as exc:
        console.print(f"[red]error[/] {exc.code}: {exc.message}")
        return EXIT_ERROR
    console.print(summary_table(outcome))
    problems = problems_table(outcome)
    if problems is not None:
        console.print(problems)
    rate = outcome.chunks / outcome.seconds if outcome.seconds else 0.0
    console.print(f"job {outcome.job_id}: {len(outcome.statuses)} documents, {outcome.chunks} chunks embedded "
                  f"in {outcome.seconds:.1f} s ({rate:.1f} chunks/s)")
    if outcome.resumed:
        console.print(f"resumed: {outcome.resumed} documents ({outcome.resumed_chunks} chunks) were already done")
    if outcome.reused_chunks:
        console.print(f"reused: {outcome.reused_chunks} chunk results of the documents' earlier versions (their "
                      "text unchanged)")
    if outcome.usage is not None:
        console.print(usage_line(outcome.usage))
    if outcome.out is not None:
        console.print(f"results: {', '.join(outcome.exported) or outcome.out}", highlight=False, soft_wrap=True)
    here = state_dir.resolve() == (Path.cwd() / LOCAL_STATE_DIR).resolve()
    where = "" if here else f" --state-dir {state_dir}"
    console.print(f"next: docstream status {outcome.job_id}{where}; docstream results {outcome.job_id} --chunks"
                  f'{where}; docstream search "..."{where}', highlight=False, soft_wrap=True)
    return EXIT_FAILED if outcome.failed else EXIT_OK
