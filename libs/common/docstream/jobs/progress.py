"""How far a job is, how fast it goes and when it should end: one pure estimate from a jobs row.

``docstream status``, ``docstream submit --wait`` and the API's job view (and its dashboard)
all show the same numbers, computed here: no I/O, the clock is an argument.

The rate is terminal documents (completed, partial, failed) per second since the job was
created, up to ``now`` while it runs and up to its last update once it ended. The ETA is the
remaining documents at that rate; there is none before the first document ends, after the
job ended, or when the job's size is not known yet (``document_count`` 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from docstream.store.base import JobRow

__all__ = ["JobProgress", "aware", "format_duration", "format_rate", "job_progress"]


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A job's progress at one moment.

    Attributes:
        done: terminal documents (completed + partial + failed).
        total: the job's documents (0: not known yet).
        share: ``done / total`` in [0, 1], or None while ``total`` is 0.
        elapsed_s: seconds since the job was created (to its last update once it ended).
        rate: terminal documents per second over ``elapsed_s``, or None before any time passed.
        eta_s: seconds to the end at ``rate``, or None (ended, nothing done yet, size unknown).
    """

    done: int
    total: int
    share: float | None
    elapsed_s: float
    rate: float | None
    eta_s: float | None


def aware(moment: datetime) -> datetime:
    """``moment`` with its time zone; a naive one read as UTC (what the stores give back)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def job_progress(job: JobRow, now: datetime) -> JobProgress:
    """The progress of ``job`` at ``now`` (naive datetimes are read as UTC)."""
    running = job.status == "running"
    end = now if running or job.updated_at is None else job.updated_at
    elapsed = max((aware(end) - aware(job.created_at)).total_seconds(), 0.0)
    done = job.completed + job.partial + job.failed
    total = job.document_count
    rate = done / elapsed if elapsed > 0 else None
    remaining = max(total - done, 0)
    eta = remaining / rate if running and rate and total else None
    share = min(done / total, 1.0) if total else None
    return JobProgress(done=done, total=total, share=share, elapsed_s=elapsed, rate=rate, eta_s=eta)


def format_duration(seconds: float | None) -> str:
    """A duration for people: ``-`` for None, else ``42s``, ``3m 05s``, ``2h 03m`` or ``1d 04h``.

    Rounded to the shown unit; negative durations read as 0.
    """
    if seconds is None:
        return "-"
    total = max(round(seconds), 0)
    minutes, secs = divmod(total, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if days:
        return f"{days}d {hrs:02d}h"
    if hours:
        return f"{hours}h {mins:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_rate(rate: float | None) -> str:
    """Documents per second for people: ``-`` for None, else two decimals (``2.50``)."""
    return "-" if rate is None else f"{rate:.2f}"
