"""`docstream status JOB_ID`: read a job's rows from the store, print its progress.

Exit status (``docstream results`` shares them): 0 done, 1 failed (store, bad input), 4 no such job.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from docstream.errors import DocstreamError
from docstream.jobs.progress import format_duration, format_rate, job_progress
from docstream.jobs.standing import QueueStanding
from docstream.logging import configure_logging
from docstream.records import JobOptions
from docstream.settings import Settings, load_settings
from docstream.store import DocumentRow, JobRow, ResultStore, open_store
from docstream.tasks.selection import job_task_names
from docstream.tenants.usage import Usage
from docstream_ingest.job_view import standings

__all__ = ["EXIT_FAILED", "EXIT_NOT_FOUND", "EXIT_OK", "in_ocr", "ocr_rows", "queue_rows", "status_command",
           "usage_rows"]

EXIT_OK, EXIT_FAILED, EXIT_NOT_FOUND = 0, 1, 4


_OCR_SHOWN = 5
"""Documents in OCR that ``docstream status`` names one by one; the rest are counted."""


def in_ocr(store: ResultStore, job_id: str) -> list[DocumentRow]:
    """The job's documents that are being chunked with OCR now (documents rows ``chunking``, ``ocr`` pages)."""
    found: list[DocumentRow] = []
    for entry in store.iter_job_documents(job_id):
        if entry.status != "chunking":
            continue
        row = store.get_document(entry.doc_id)
        if row is not None and row.status == "chunking" and row.pages_by_source.get("ocr"):
            found.append(row)
    return found


def ocr_rows(documents: Sequence[DocumentRow]) -> list[tuple[str, str]]:
    """The OCR rows of ``docstream status``: each document in OCR, its pages OCR started on of its pages."""
    rows = [("in OCR", f"{row.filename or row.doc_id}: OCR started on {row.pages_by_source['ocr']} of its "
             f"{row.page_count or '?'} pages") for row in documents[:_OCR_SHOWN]]
    if len(documents) > _OCR_SHOWN:
        rows.append(("in OCR", f"and {len(documents) - _OCR_SHOWN} more documents"))
    return rows


def queue_rows(standing: QueueStanding | None) -> list[tuple[str, str]]:
    """Where a running job stands in its lane (docs/operations.md "Where a job stands"): the tokens ahead of it and
    its estimated start, or that it started."""
    if standing is None:
        return []
    if standing.started:
        return [("queue", "started")]
    ahead = f"{standing.tokens_ahead:,} tokens ahead" if standing.tokens_ahead else "first in its lane"
    if standing.waiting_tokens:
        ahead += f"; {standing.waiting_tokens:,} of its own chunked"
    if standing.estimated_start is None:
        start = "not known yet (inference wrote no rate in the last minute)"
    elif not standing.start_in_s:
        start = "now"
    else:
        start = f"in {format_duration(standing.start_in_s)} ({standing.estimated_start:%H:%M:%S} UTC)"
    return [("queue", ahead), ("starts", start)]


def _status_table(job: JobRow, ocr: Sequence[DocumentRow] = (), standing: QueueStanding | None = None) -> Table:
    progress = job_progress(job, datetime.now(UTC))
    done, rate = progress.done, progress.rate
    table = Table(title=f"job {job.job_id}", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    share = f" ({100 * done / job.document_count:.1f}%)" if job.document_count else ""
    rows: list[tuple[str, Any]] = [
        ("state", job.status),
        ("tenant", job.tenant),
        ("lane", JobOptions.from_mapping(job.options).lane),
        ("tasks", ", ".join(job_task_names(job))),
        ("documents", job.document_count),
        ("terminal", f"{done}{share}"),
        ("completed", job.completed),
        ("partial", job.partial),
        ("failed", job.failed),
        ("remaining", max(job.document_count - done, 0)),
        ("docs/s", format_rate(rate)),
        ("eta", format_duration(progress.eta_s)),
        ("created", job.created_at.isoformat()),
        ("updated", job.updated_at.isoformat() if job.updated_at else "-"),
    ]
    if job.webhook_url:
        rows.append(("webhook", "set"))
    rows[3:3] = queue_rows(standing)
    rows += ocr_rows(ocr)
    rows += usage_rows(job.usage)
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def usage_rows(usage: Usage | None) -> list[tuple[str, str]]:
    """The accounting rows of ``docstream status``: what the job's terminal documents cost (docs/operations.md)."""
    if usage is None:
        return [("usage", "-")]
    model = f"{usage.model_seconds:.3f} s" + (f" on {usage.device}" if usage.device else "")
    stages = ", ".join(f"{stage} {value:.3f} s" for stage, value in usage.stage_seconds.items()) or "-"
    rows = [("pages", str(usage.pages)), ("chunks", str(usage.chunks)), ("tokens", str(usage.tokens)),
            ("model-seconds", model), ("stage seconds", stages)]
    if usage.chat_tokens:  # a chat model's answers (generate): what its server bills by
        rows.append(("chat tokens", f"{usage.prompt_tokens} prompt, {usage.completion_tokens} completion"))
    return rows


def status_command(
    job_id: str, *, config: str | None = None, settings: Settings | None = None, console: Console | None = None
) -> int:
    """Print a job's progress from the jobs row (of ``settings``' store, else of those read from ``config``)."""
    console = console or Console()
    err = Console(stderr=True)
    configure_logging(level="WARNING", fmt="console")
    standing: QueueStanding | None = None
    try:
        settings = settings or load_settings(config)
        store = open_store(settings.store, settings.cassandra)
        try:
            job = store.get_job(job_id)
            ocr = in_ocr(store, job_id) if job is not None and job.status == "running" else []
            if job is not None:
                standing = standings(store, [job], datetime.now(UTC), kafka=settings.kafka,
                                     inference=settings.inference, fairness=settings.fairness).get(job_id)
        finally:
            store.close()
    except DocstreamError as exc:
        err.print(f"error [{exc.code}]: {exc.message}", highlight=False)
        return EXIT_FAILED
    if job is None:
        err.print(f"no job {job_id}", highlight=False)
        return EXIT_NOT_FOUND
    console.print(_status_table(job, ocr, standing))
    return EXIT_OK
