"""`docstream results JOB_ID`: export a job's documents (and chunks) from the store.

Exit status: 0 done, 1 failed (store, bad input), 4 no such job (``docstream_cli.ops.status``'s).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from rich.console import Console

from docstream.errors import DocstreamError, InputError
from docstream.logging import configure_logging
from docstream.settings import Settings, load_settings
from docstream.store import open_store
from docstream.tasks.legacy import keeps_pre_task_layout
from docstream_cli.ops.status import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK
from docstream_ingest.export import ExportFormat, export_results

__all__ = ["results_command"]


def results_command(
    job_id: str,
    *,
    fmt: str = "jsonl",
    chunks: bool = False,
    out: str | None = None,
    model_id: str | None = None,
    tasks: Sequence[str] | None = None,
    config: str | None = None,
    settings: Settings | None = None,
    stdout: IO[bytes] | None = None,
) -> int:
    """Export a job's documents (and chunks): JSON Lines to stdout by default, Parquet to ``out``.

    The store is ``settings``' (else that of the settings read from ``config``). ``tasks``: only these
    tasks' results (``docstream_ingest.export``); None: every task of the job.
    """
    err = Console(stderr=True)
    configure_logging(level="WARNING", fmt="console")  # logs on stderr: stdout carries the export
    if fmt not in ("jsonl", "parquet"):
        err.print(f"unknown format {fmt!r}: jsonl or parquet", highlight=False)
        return EXIT_FAILED
    if fmt == "parquet" and out is None:
        err.print("--format parquet needs --out FILE", highlight=False)
        return EXIT_FAILED
    try:
        settings = settings or load_settings(config)
        store = open_store(settings.store, settings.cassandra)
        try:
            summary = export_results(
                store, job_id, Path(out) if out else (stdout or sys.stdout.buffer), fmt=_format(fmt), chunks=chunks,
                model_id=model_id, default_model_id=settings.inference.embed_model_id, tasks=tasks,
            )
        finally:
            store.close()
    except InputError as exc:
        err.print(f"error [{exc.code}]: {exc.message}", highlight=False)
        return EXIT_NOT_FOUND if exc.code == "job_not_found" else EXIT_FAILED
    except DocstreamError as exc:
        err.print(f"error [{exc.code}]: {exc.message}", highlight=False)
        return EXIT_FAILED
    where = ", ".join(summary.paths) or "stdout"
    tasks = "tasks: " + (", ".join(summary.tasks) or "all")
    whose = summary.model_id if keeps_pre_task_layout(summary.tasks) else tasks
    err.print(f"exported {summary.documents} documents, {summary.chunks} chunks ({whose}) to {where}",
              highlight=False)
    return EXIT_OK


def _format(fmt: str) -> ExportFormat:
    return "parquet" if fmt == "parquet" else "jsonl"
