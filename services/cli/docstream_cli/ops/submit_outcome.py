"""How `docstream submit --wait` ends: from the finished job's rows to an exit status and a hint.

Pure (no I/O, no clock): the command reads the jobs row and, when documents failed, counts the
``error_code`` of its failed documents; ``wait_outcome`` decides the rest, so its rules are tested
on their own.

Exit statuses of `docstream submit` (all of them are defined here):

| status | meaning |
|---|---|
| 0 | submitted; with --wait: every document of the job completed |
| 1 | nothing submitted, or an error |
| 2 | --wait timed out (the job goes on) |
| 3 | the job was cancelled while waiting |
| 4 | the job ended with failed or partial documents |
| 5 | documents failed because the chunker could not read their source: settings, named in the hint |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from docstream.store.base import JobRow

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_DOCUMENTS_FAILED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_SOURCE_UNREADABLE",
    "EXIT_TIMEOUT",
    "SOURCE_ERROR_CODES",
    "WaitOutcome",
    "wait_outcome",
]

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT, EXIT_CANCELLED = 0, 1, 2, 3
EXIT_DOCUMENTS_FAILED, EXIT_SOURCE_UNREADABLE = 4, 5

SOURCE_ERROR_CODES: frozenset[str] = frozenset(
    {"fetch_failed", "source_not_found", "source_unreadable", "source_not_allowed"}
)
"""error_codes of a document whose bytes the chunker could not read (docs/chunking.md): the chunker
reports ``fetch_failed``; the others are what it wraps, as an external producer may see them."""


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """How a waited-for job ended.

    Attributes:
        exit_code: the exit status of `docstream submit --wait`.
        summary: one line: the job's state and its document counts.
        hint: what to fix when documents failed because their source was unreadable, else None.
    """

    exit_code: int
    summary: str
    hint: str | None


def wait_outcome(job: JobRow, failure_codes: Mapping[str, int], *, object_store_url: str) -> WaitOutcome:
    """The exit status, summary and hint of a job that ``--wait`` saw end.

    Args:
        job: the jobs row, status completed or cancelled.
        failure_codes: how many of the job's failed documents carry each ``error_code``.
        object_store_url: where this submit wrote the documents (``object_store.url``).
    """
    summary = (f"job {job.job_id} {job.status}: {job.completed} completed, {job.partial} partial, "
               f"{job.failed} failed")
    unreadable = sum(n for code, n in failure_codes.items() if code in SOURCE_ERROR_CODES)
    hint = _source_hint(unreadable, failure_codes, object_store_url) if unreadable else None
    if job.status == "cancelled":
        return WaitOutcome(EXIT_CANCELLED, summary, hint)
    if unreadable:
        return WaitOutcome(EXIT_SOURCE_UNREADABLE, summary, hint)
    if job.failed or job.partial:
        return WaitOutcome(EXIT_DOCUMENTS_FAILED, summary, None)
    return WaitOutcome(EXIT_OK, summary, None)


def _source_hint(unreadable: int, failure_codes: Mapping[str, int], object_store_url: str) -> str:
    codes = ", ".join(sorted(code for code in failure_codes if code in SOURCE_ERROR_CODES))
    return (
        f"{unreadable} documents failed ({codes}): the chunker could not read their source. It reads documents "
        "only under its own object_store.url (DOCSTREAM_OBJECT_STORE__URL) or object_store.allowed_roots "
        f"(DOCSTREAM_OBJECT_STORE__ALLOWED_ROOTS); this submit wrote them under {_without_userinfo(object_store_url)}. "
        "Give the services and submit the same object_store.url (or add this folder to the chunker's "
        "allowed_roots), then submit again."
    )


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
