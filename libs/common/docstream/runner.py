"""`docstream run`: the whole pipeline in one process on the embedded stack.

tansu (memory broker), SQLite and a local object store live under ``./.docstream/``. The same
service code as the real stack runs here: the chunker's consume loop and the inference
pipeline on threads, the reducer's Faust worker on a thread of its own event loop, and a
progress consumer on the completed and embedded topics.

Resuming: the embedded broker's topics vanish when it stops, so a re-run resumes from the
SQLite store instead. The job id of a run is derived from the inputs, the model and the
chunker settings, so the same command gives the same job and the same doc_ids: documents
with a result row for the model are not submitted again, and the inference service reuses
chunk rows already written (``inference.reuse_stored``), so no chunk is embedded twice.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from docstream.errors import DocstreamError, FatalError, SchemaError
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import consumer_config
from docstream.kafka.embedded import EmbeddedBroker
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics
from docstream.records import ChunkEmbedded, DocumentCompleted
from docstream.settings import Settings
from docstream.store import ResultStore, SqliteStore
from docstream.topics import Topics

__all__ = ["RunOutcome", "embedded_settings", "run_job", "run_job_id"]

_log = get_logger(__name__)
_NAMESPACE = uuid.UUID("2c6f5e0e-3a4b-4f0f-8f4e-5d3b1e0c9a77")
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    chunks: int = 0
    seconds: float = 0.0
    out: Path | None = None

    @property
    def failed(self) -> int:
        """Documents that failed, refused files included."""
        return sum(1 for s in self.statuses.values() if s == "failed") + len(self.refused)


def embedded_settings(base: Settings, state_dir: Path, bootstrap: str) -> Settings:
    """``base`` pointed at the embedded stack under ``state_dir``."""
    state_dir = state_dir.resolve()
    return base.with_overrides(
        kafka={"bootstrap_servers": bootstrap, "partitions": 2, "replication_factor": 1, "transactions": False},
        store={"backend": "sqlite", "sqlite_path": str(state_dir / "docstream.db")},
        object_store={"url": str(state_dir / "objects")},
        reducer={"data_dir": str(state_dir / "reducer")},
        inference={"reuse_stored": True},
    )


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
    """Follows the completed and embedded topics (from the start) for one job."""

    def __init__(self, settings: Settings, serde: AvroSerde, job_id: str, expected: set[str]) -> None:
        topics = Topics(settings.kafka.topic_prefix)
        conf = consumer_config(settings.kafka, group_id=f"{topics.prefix}-run-progress")
        self._consumer = Consumer(conf)
        self._topics = (topics.completed, topics.embedded)
        self._serde = serde
        self._job_id = job_id
        self.expected = expected
        self.done: dict[str, DocumentCompleted] = {}
        self.chunks_embedded = 0
        self.chunks_total = 0
        self._counted: set[str] = set()
        self._seen_chunks: set[tuple[str, int]] = set()
        partitions = [
            TopicPartition(topic, p, 0)
            for topic in self._topics
            for p in range(settings.kafka.partitions)
        ]
        self._consumer.assign(partitions)

    def poll(self, timeout_s: float) -> None:
        for msg in self._consumer.consume(num_messages=500, timeout=timeout_s):
            value, topic = msg.value(), msg.topic()
            if msg.error() is not None or value is None or topic is None:
                continue
            try:
                record = self._serde.deserialize(value, topic)
            except SchemaError:
                continue
            if isinstance(record, DocumentCompleted) and record.doc_id in self.expected:
                self.done[record.doc_id] = record
            elif isinstance(record, ChunkEmbedded) and record.doc_id in self.expected:
                if record.doc_id not in self._counted:
                    self._counted.add(record.doc_id)
                    self.chunks_total += record.chunk_count
                key = (record.doc_id, record.chunk_index)
                if key not in self._seen_chunks:
                    self._seen_chunks.add(key)
                    self.chunks_embedded += 1

    @property
    def finished(self) -> bool:
        return self.expected.issubset(self.done)

    def close(self) -> None:
        self._consumer.close()


class _Services:
    """The chunker, inference and reducer of one run, each on its own thread."""

    def __init__(self, settings: Settings, store: ResultStore, metrics: Metrics, phases: _Phases) -> None:
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._phases = phases
        self._threads: list[threading.Thread] = []
        self._stops: list[Callable[[], None]] = []
        self._cleanups: list[Callable[[], None]] = []
        self.errors: list[BaseException] = []

    def _start(self, name: str, target: Callable[[], None], stop: Callable[[], None]) -> None:
        def _guarded() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - a service thread hands its error to the run
                self.errors.append(exc)
                _log.error("service_failed", service=name, error=str(exc)[:500])

        thread = threading.Thread(target=_guarded, name=f"docstream-{name}", daemon=True)
        self._threads.append(thread)
        self._stops.append(stop)
        thread.start()

    def start(self) -> None:
        from docstream_chunker.main import build_chunker
        from docstream_inference.main import build_inference
        from docstream_reducer.service import build_reducer_service

        self._phases.mark("services_starting")
        chunker = build_chunker(self._settings, store=self._store, metrics=self._metrics, static_assignment=True)
        self._cleanups.append(chunker.close)
        self._start("chunker", chunker.run, chunker.stop)
        self._phases.mark("model_load_started")
        inference = build_inference(self._settings, store=self._store, metrics=self._metrics)
        self._phases.mark("model_loaded")
        self._start("inference", inference.run, inference.stop)
        reducer = build_reducer_service(self._settings, store=self._store, metrics=self._metrics)
        self._cleanups.append(reducer.close)
        self._start("reducer", reducer.run_in_thread, reducer.stop)
        self._phases.mark("services_started")

    def stop(self, timeout_s: float = 60.0) -> None:
        for stop in self._stops:
            stop()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        for cleanup in self._cleanups:
            cleanup()


def run_job(
    paths: Sequence[str],
    *,
    settings: Settings,
    state_dir: Path,
    out: Path | None,
    console: Console,
    timeout_s: float | None = None,
) -> RunOutcome:
    """Run one job over ``paths`` on the embedded stack; returns when every document is terminal.

    Raises:
        InputError: nothing to process.
        FatalError: a service failed, or the run timed out.
    """
    from docstream.export import export_results
    from docstream.kafka.clients import ReliableProducer
    from docstream_ingest.intake import submit_paths

    started = time.monotonic()
    state_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(level=settings.log.level, fmt="json", service="run", file=state_dir / "run.log")
    phases = _Phases()
    phases.mark("run_started")
    with EmbeddedBroker(state_dir / "broker") as broker:
        phases.mark("broker_started")
        settings = embedded_settings(settings, state_dir, broker.bootstrap_servers)
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        phases.mark("topics_created")
        store = SqliteStore(Path(settings.store.sqlite_path))
        store.migrate()
        phases.mark("store_migrated")
        model_id = settings.inference.model_id
        chunking = f"{settings.chunker.max_tokens}/{settings.chunker.overlap_tokens}/{settings.inference.model_path}"
        job_id = run_job_id(paths, model_id, chunking)
        serde = AvroSerde(settings.kafka)

        def _not_done(doc_id: str, _status: str) -> bool:
            return store.get_document_result(doc_id, model_id) is None

        producer = ReliableProducer(settings.kafka, client_id="docstream-run")
        try:
            result = submit_paths(
                paths, settings=settings, store=store, producer=producer, serde=serde, job_id=job_id,
                model_id=model_id, resubmit=_not_done,
            )
        finally:
            producer.close()
        phases.mark("submitted")
        outcome = RunOutcome(job_id=job_id, refused=[(r.path, r.code, r.reason) for r in result.refused])
        expected = {doc.doc_id for doc in result.documents}
        for doc in result.documents:
            outcome.filenames[doc.doc_id] = doc.filename or doc.doc_id
        for dup in result.duplicates:
            row = store.get_document_result(dup.doc_id, model_id)
            if row is not None and dup.doc_id not in outcome.statuses:
                outcome.resumed += 1
                outcome.statuses[dup.doc_id] = row.status
                outcome.filenames[dup.doc_id] = dup.path
                outcome.resumed_chunks += row.chunk_count
        if expected:
            _process(settings, store, serde, outcome, expected, console, timeout_s, phases)
        if out is not None:
            export_results(store, job_id, out, fmt="parquet" if out.suffix == ".parquet" else "jsonl",
                           model_id=model_id)
            outcome.out = out
            phases.mark("exported")
        store.close()
    phases.mark("broker_stopped")
    outcome.seconds = time.monotonic() - started
    phases.mark("run_finished")
    return outcome


def _process(
    settings: Settings,
    store: ResultStore,
    serde: AvroSerde,
    outcome: RunOutcome,
    expected: set[str],
    console: Console,
    timeout_s: float | None,
    phases: _Phases,
) -> None:
    metrics = Metrics()
    services = _Services(settings, store, metrics, phases)
    progress_feed = _Progress(settings, serde, outcome.job_id, expected)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    columns: list[Any] = [
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
    ]
    try:
        services.start()
        with Progress(*columns, console=console, transient=False) as bar:
            docs = bar.add_task("documents", total=len(expected), rate="")
            chunks = bar.add_task("chunks embedded", total=None, rate="")
            first_chunk_at: float | None = None
            while not progress_feed.finished:
                if services.errors:
                    raise FatalError(f"a service failed: {services.errors[0]}") from services.errors[0]
                if deadline is not None and time.monotonic() > deadline:
                    raise FatalError("the run timed out", code="timeout")
                progress_feed.poll(0.5)
                if progress_feed.chunks_embedded and first_chunk_at is None:
                    first_chunk_at = time.monotonic()
                    phases.mark("first_chunk_embedded")
                elapsed = time.monotonic() - (first_chunk_at or time.monotonic())
                rate = progress_feed.chunks_embedded / elapsed if elapsed > 0 else 0.0
                bar.update(docs, completed=len(progress_feed.done))
                bar.update(chunks, completed=progress_feed.chunks_embedded,
                           total=progress_feed.chunks_total or None, rate=f"{rate:.1f} chunks/s")
        phases.mark("documents_completed")
    finally:
        progress_feed.close()
        services.stop()
        phases.mark("services_stopped")
    for doc_id, record in progress_feed.done.items():
        outcome.statuses[doc_id] = record.status
        outcome.chunks += record.chunk_count - record.failed_chunks
        if record.status != "completed":
            outcome.errors[doc_id] = (record.error_code, record.error)


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
    paths: list[str], *, settings: Settings, out: Path | None, state_dir: Path, timeout_s: float | None = None
) -> int:
    """The `docstream run` command: run, show the summary, and the exit status.

    0 when every document completed (or was partial), 1 when any failed, 2 on an error.
    """
    console = Console(stderr=False)
    try:
        outcome = run_job(paths, settings=settings, state_dir=state_dir, out=out, console=console,
                          timeout_s=timeout_s)
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
    if outcome.out is not None:
        console.print(f"results: {outcome.out}")
    return EXIT_FAILED if outcome.failed else EXIT_OK
