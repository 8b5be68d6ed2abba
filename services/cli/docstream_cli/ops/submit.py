"""`docstream submit`: build the clients, submit, report; typer parsing stays in docstream_cli.app.

Output contract (scripts rely on it): the job id alone on the first line of stdout, written
before any work starts; then a summary of submitted, duplicate and refused files. Exit
status: 0 submitted (and, with --wait, every document completed), 1 nothing submitted or an
error, 2 --wait timed out, 3 the job was cancelled while waiting, 4 the job ended with failed
or partial documents, 5 documents failed because the chunker could not read their source (the
hint on stderr names the settings); docstream_cli.ops.submit_outcome decides.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, InputError, QuotaExceeded, StoreError
from docstream.ids import new_job_id, validate_id
from docstream.jobs.progress import format_duration, format_rate, job_progress
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer
from docstream.lanes import BATCH
from docstream.logging import configure_logging
from docstream.objectstore import ObjectStore
from docstream.settings import Settings, load_settings
from docstream.store import JobRow, JobsStore, open_store
from docstream.tasks.base import MAX_PROMPT_CHARS, MAX_SCHEMA_CHARS, Prompt, TaskRequest
from docstream.tasks.registry import resolve_task
from docstream.tasks.selection import command_line_prompt, command_line_tasks, parse_labels
from docstream.tenants.admission import Capacity
from docstream.topics import Topics
from docstream_cli.ops.submit_outcome import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, wait_outcome
from docstream_ingest.intake import Gradually, IntakeClients, SubmitResult, submit_paths
from docstream_ingest.main import intake_context
from docstream_ingest.request import JobRequest

__all__ = ["PromptFlags", "cli_tasks", "intake_clients", "submit_command", "wait_for_job"]

_SHOWN_ROWS = 50
_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class PromptFlags:
    """The generate options: ``--prompt`` (``summarize``, or the instruction), ``--prompt-file`` (the instruction
    in a file) and ``--schema`` (a JSON Schema file: extract)."""

    prompt: str | None = None
    prompt_file: str | None = None
    schema_file: str | None = None

    def resolve(self) -> Prompt | None:
        """The prompt the flags give (None: none given).

        Raises:
            InputError: ``prompt_invalid``: both --prompt and --prompt-file, an unreadable or over-long file, a
                schema that is not a JSON object.
        """
        if self.prompt is not None and self.prompt_file is not None:
            raise InputError("give --prompt or --prompt-file, not both", code="prompt_invalid")
        text = _read_flag_file(self.prompt_file, "--prompt-file", MAX_PROMPT_CHARS) if self.prompt_file else \
            self.prompt
        schema = _read_flag_file(self.schema_file, "--schema", MAX_SCHEMA_CHARS * 4) if self.schema_file else None
        return command_line_prompt(text, schema)


def _read_flag_file(path: str, flag: str, limit: int) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit * 4 + 1)
    except OSError as exc:
        raise InputError(f"{flag} {path}: {exc.strerror or exc}", code="prompt_invalid") from exc
    if len(data) > limit * 4:
        raise InputError(f"{flag} {path} is larger than {limit * 4} bytes", code="prompt_invalid")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{flag} {path} is not UTF-8 text", code="prompt_invalid") from exc


def cli_tasks(specs: Sequence[str], labels: str | None, settings: Settings,
              prompt: PromptFlags | None = None) -> tuple[TaskRequest, ...]:
    """The job's tasks from ``--task`` (repeated: a name, or ``module:Class``), ``--labels`` (for classify) and the
    generate prompt's flags.

    A ``module:Class`` is imported (no model loaded) and stands for its class's name; the records carry
    the name. Whether a registry knows each name is checked by the intake, with the rest of the request.

    Raises:
        InputError: ``task_invalid``, ``labels_invalid``, ``labels_without_classify``, ``prompt_invalid``,
            ``prompt_without_generate``.
        ConfigError: ``task_unavailable``: a ``module:Class`` that does not import or is no task class.
    """
    custom = dict(settings.tasks.custom)
    names = [resolve_task(spec, custom) if ":" in spec else spec for spec in specs]
    return command_line_tasks(names, parse_labels(labels) if labels is not None else (),
                              prompt.resolve() if prompt is not None else None)


@contextmanager
def intake_clients(settings: Settings, *, client_id: str = "docstream-submit") -> Iterator[IntakeClients]:
    """Clients for a submission: migrated store, topics ensured, producer, serde, object store."""
    objects = ObjectStore(settings.object_store)
    store = open_store(settings.store, settings.cassandra)
    try:
        store.migrate()
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        producer = ReliableProducer(settings.kafka, client_id=client_id)
        yield IntakeClients(intake_context(settings), store, producer, AvroSerde(settings.kafka), objects)
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


def wait_for_job(
    store: JobsStore, job_id: str, *, timeout_s: float | None, console: Console, errors: Console | None = None,
    object_store_url: str = "",
) -> int:
    """Poll the jobs row until the job is completed or cancelled, with a progress bar (docs/s, ETA).

    Returns:
        The exit status of ``docstream_cli.ops.submit_outcome.wait_outcome`` once the job ended (its hint,
        if any, goes to ``errors``), or EXIT_TIMEOUT past ``timeout_s``.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]} docs/s"), TextColumn("ETA {task.fields[eta]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"job {job_id}", total=None, rate="-", eta="-")
        while (job := _poll_job(store, job_id)) is None or job.status not in ("completed", "cancelled"):
            if job is not None:
                _show(progress, task, job)
            if deadline is not None and time.monotonic() >= deadline:
                console.print(f"timed out after {timeout_s} s; the job goes on", highlight=False)
                return EXIT_TIMEOUT
            time.sleep(_POLL_S)
        _show(progress, task, job)
    outcome = wait_outcome(job, _failure_codes(store, job), object_store_url=object_store_url)
    console.print(outcome.summary, highlight=False)
    if outcome.hint:
        (errors or console).print(f"hint: {outcome.hint}", highlight=False, markup=False)
    return outcome.exit_code


def _show(progress: Progress, task: TaskID, job: JobRow) -> None:
    now = job_progress(job, datetime.now(UTC))
    progress.update(task, total=job.document_count or None, completed=now.done, rate=format_rate(now.rate),
                    eta=format_duration(now.eta_s))


def _failure_codes(store: JobsStore, job: JobRow) -> Counter[str]:
    """How many failed documents of the job carry each error_code (read only when some failed)."""
    if not job.failed:
        return Counter()
    return Counter(row.error_code or "unknown" for row in store.iter_job_documents(job.job_id)
                   if row.status == "failed")


def _poll_job(store: JobsStore, job_id: str) -> JobRow | None:
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
    priority: str = BATCH,
    admit: str = "refuse",
    tasks: Sequence[str] = (),
    labels: str | None = None,
    prompt: PromptFlags | None = None,
) -> int:
    """Run `docstream submit`; returns the exit status (see the module docstring).

    ``tasks``, ``labels`` and ``prompt`` are the ``--task``, ``--labels`` and generate options (``cli_tasks``).
    ``admit`` is ``refuse`` (a submission past its tenant's quotas submits nothing: exit 1, quota_exceeded) or
    ``gradually`` (the documents are admitted as the quotas free; the command waits, and says how far it is).
    """
    errors = Console(stderr=True)
    try:
        settings = load_settings(config)
        configure_logging(level=settings.log.level, fmt=settings.log.format, service="submit")
        # the job id is checked (and printed) before any work; the other options, by submit_paths
        job_id = validate_id(job_id or new_job_id())
        requested = cli_tasks(tasks, labels, settings, prompt)
        if admit not in ("refuse", "gradually"):
            raise InputError("--admit is refuse or gradually", code="invalid_admit")
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    request = JobRequest(job_id=job_id, tenant=tenant, model_id=model_id, chunk_max_tokens=chunk_max_tokens,
                         chunk_overlap_tokens=chunk_overlap_tokens, webhook_url=webhook_url, tasks=requested,
                         priority=priority)
    sys.stdout.write(job_id + "\n")
    sys.stdout.flush()
    console = Console()
    try:
        with intake_clients(settings) as clients:
            gradually = Gradually(on_progress=_admission_progress(errors)) if admit == "gradually" else None
            result = submit_paths(paths, request, clients, gradually=gradually)
            _print_summary(console, result)
            if not result.documents:
                errors.print("nothing was submitted", highlight=False)
                return EXIT_FAILED
            if wait:
                return wait_for_job(clients.store, job_id, timeout_s=timeout_s, console=console, errors=errors,
                                    object_store_url=settings.object_store.url)
    except QuotaExceeded as exc:
        errors.print(f"error [{exc.code}]: {exc.message} (limit {exc.limit}; try again in {exc.retry_after_s} s, "
                     "or submit with --admit gradually)", highlight=False, markup=False)
        return EXIT_FAILED
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    return EXIT_OK


def _admission_progress(errors: Console) -> Callable[[int, int, Capacity], None]:
    """Says how far a gradual admission is, at most once per change."""
    said: list[int] = [-1]

    def progress(done: int, total: int, cap: Capacity) -> None:
        if done == said[0]:
            return
        said[0] = done
        waiting = f"; waiting on {cap.limited_by or 'max_documents_in_flight'}" if done < total else ""
        errors.print(f"admitted {done} of {total} documents{waiting}", highlight=False, markup=False)

    return progress
