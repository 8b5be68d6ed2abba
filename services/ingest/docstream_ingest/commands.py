"""`docstream submit`: build the clients, submit, report; typer parsing stays in docstream_cli.app.

Output contract (scripts rely on it): the job id alone on the first line of stdout, written
before any work starts; then a summary of submitted, duplicate and refused files. Exit
status: 0 submitted (and, with --wait, the job completed), 1 nothing submitted or an error,
2 --wait timed out, 3 the job was cancelled while waiting.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, StoreError
from docstream.ids import new_job_id, validate_id
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer
from docstream.logging import configure_logging
from docstream.objectstore import ObjectStore
from docstream.settings import Settings, load_settings
from docstream.store import JobRow, ResultStore, open_store
from docstream.topics import Topics
from docstream_ingest.intake import IntakeClients, SubmitResult, submit_paths
from docstream_ingest.request import JobRequest

__all__ = ["intake_clients", "prepare_intake", "submit_command", "wait_for_job"]

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT, EXIT_CANCELLED = 0, 1, 2, 3
_SHOWN_ROWS = 50
_POLL_S = 0.5


def prepare_intake(settings: Settings) -> None:
    """Create the store schema and the topics where missing (idempotent)."""
    store = open_store(settings)
    try:
        store.migrate()
    finally:
        store.close()
    ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))


@contextmanager
def intake_clients(settings: Settings, *, client_id: str = "docstream-submit") -> Iterator[IntakeClients]:
    """Clients for a submission: migrated store, topics ensured, producer, serde, object store."""
    objects = ObjectStore(settings.object_store)
    store = open_store(settings)
    try:
        store.migrate()
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        producer = ReliableProducer(settings.kafka, client_id=client_id)
        yield IntakeClients(settings, store, producer, AvroSerde(settings.kafka), objects)
    finally:
        store.close()


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    scaled = size / 1024
    for unit in ("KiB", "MiB"):
        if scaled < 1024:
            return f"{scaled:.1f} {unit}"
        scaled /= 1024
    return f"{scaled:.1f} GiB"


def _print_summary(console: Console, result: SubmitResult) -> None:
    if result.documents:
        table = Table(title=f"{len(result.documents)} documents submitted", title_justify="left")
        for column in ("file", "size", "doc_id"):
            table.add_column(column)
        for doc in result.documents[:_SHOWN_ROWS]:
            table.add_row(doc.filename, _size(doc.size_bytes), doc.doc_id)
        console.print(table)
        if len(result.documents) > _SHOWN_ROWS:
            console.print(f"... and {len(result.documents) - _SHOWN_ROWS} more")
    if result.duplicates:
        console.print(f"{len(result.duplicates)} duplicates (same content as a document of the job):")
        for dup in result.duplicates[:_SHOWN_ROWS]:
            console.print(f"  {dup.path} = {dup.doc_id}", highlight=False)
    if result.refused:
        table = Table(title=f"{len(result.refused)} refused", title_justify="left", style="red")
        for column in ("file", "code", "reason"):
            table.add_column(column)
        for refused in result.refused:
            table.add_row(refused.path, refused.code, refused.reason)
        console.print(table)
    console.print(f"job {result.job_id}: {result.document_count} documents in total", highlight=False)


def wait_for_job(store: ResultStore, job_id: str, *, timeout_s: float | None, console: Console) -> int:
    """Poll the jobs row until the job is completed or cancelled, with a progress bar.

    Returns:
        EXIT_OK when completed, EXIT_CANCELLED when cancelled, EXIT_TIMEOUT past ``timeout_s``.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"job {job_id}", total=None)
        while (job := _poll_job(store, job_id)) is None or job.status not in ("completed", "cancelled"):
            if job is not None:
                progress.update(task, total=job.document_count or None, completed=_done(job))
            if deadline is not None and time.monotonic() >= deadline:
                console.print(f"timed out after {timeout_s} s; the job goes on", highlight=False)
                return EXIT_TIMEOUT
            time.sleep(_POLL_S)
        progress.update(task, total=job.document_count or None, completed=_done(job))
    console.print(
        f"job {job_id} {job.status}: {job.completed} completed, {job.partial} partial, {job.failed} failed",
        highlight=False,
    )
    return EXIT_OK if job.status == "completed" else EXIT_CANCELLED


def _done(job: JobRow) -> int:
    return job.completed + job.partial + job.failed


def _poll_job(store: ResultStore, job_id: str) -> JobRow | None:
    try:
        return store.get_job(job_id)
    except StoreError:
        return None  # transient: the next poll tries again


def submit_command(
    paths: Sequence[str],
    *,
    config: str | None = None,
    job_id: str | None = None,
    tenant: str = "default",
    model_id: str | None = None,
    chunk_max_tokens: int | None = None,
    chunk_overlap_tokens: int | None = None,
    webhook_url: str | None = None,
    wait: bool = False,
    timeout_s: float | None = None,
) -> int:
    """Run `docstream submit`; returns the exit status (see the module docstring)."""
    errors = Console(stderr=True)
    try:
        settings = load_settings(config)
        configure_logging(level=settings.log.level, fmt=settings.log.format, service="submit")
        # the job id is checked (and printed) before any work; the other options, by submit_paths
        job_id = validate_id(job_id or new_job_id())
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    request = JobRequest(job_id=job_id, tenant=tenant, model_id=model_id, chunk_max_tokens=chunk_max_tokens,
                         chunk_overlap_tokens=chunk_overlap_tokens, webhook_url=webhook_url)
    sys.stdout.write(job_id + "\n")
    sys.stdout.flush()
    console = Console()
    try:
        with intake_clients(settings) as clients:
            result = submit_paths(paths, request, clients)
            _print_summary(console, result)
            if not result.documents:
                errors.print("nothing was submitted", highlight=False)
                return EXIT_FAILED
            if wait:
                return wait_for_job(clients.store, job_id, timeout_s=timeout_s, console=console)
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    return EXIT_OK
