"""JobRequest: the job-level options of one submission, whichever entry point it came through.

`docstream submit`, POST /v1/jobs and `docstream run` each build one ``JobRequest`` and hand
it to ``docstream_ingest.intake``, whose entry points differ only in where the documents come
from (paths, uploads, URIs). ``validate_job_request`` holds the checks every entry point shares;
it is pure (no I/O, no clock), so its rules are tested on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from docstream.errors import InputError
from docstream.ids import validate_id
from docstream.lanes import BATCH, INTERACTIVE, LANES, Lane
from docstream.records import CHUNK_MAX_TOKENS, JobOptions
from docstream.tasks.base import TaskRequest
from docstream.tasks.selection import DEFAULT_TASKS, check_job_tasks, tasks_option

__all__ = ["JobRequest", "validate_job_request"]

_WEBHOOK_SCHEMES = ("http", "https")


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a submission asks of its job; the documents travel beside it.

    Attributes:
        job_id: the job to submit to (new or existing); None or empty: a new one.
        tenant: the job's tenant.
        model_id: model requested for the job (None: the service default).
        chunk_max_tokens: per-job chunk size (None: the service default).
        chunk_overlap_tokens: per-job chunk overlap (None: the service default).
        webhook_url: called by the reducer when the job ends.
        atomic: when anything is refused, submit nothing (no rows, no records).
        tasks: what inference runs on the job's chunks (default: embed alone); checked by
            ``validate_job_request``, which also fills in classify's default labels.
        priority: the job's lane, ``interactive`` or ``batch`` (docs/operations.md "Sharing the service").
    """

    job_id: str | None = None
    tenant: str = "default"
    model_id: str | None = None
    chunk_max_tokens: int | None = None
    chunk_overlap_tokens: int | None = None
    webhook_url: str | None = None
    atomic: bool = False
    tasks: tuple[TaskRequest, ...] = DEFAULT_TASKS
    priority: str = BATCH

    def job_options(self) -> dict[str, str]:
        """The options kept on the jobs row (``JobRow.options``): the ones given, as strings.

        The tasks are kept under ``tasks`` as canonical JSON (``docstream.tasks.selection.job_tasks``
        reads them back), only when they are not the default embed alone.
        """
        return JobOptions(
            model_id=self.model_id, chunk_max_tokens=self.chunk_max_tokens,
            chunk_overlap_tokens=self.chunk_overlap_tokens, tasks=tasks_option(self.tasks),
            priority=self.priority if self.priority != BATCH else None,
        ).to_mapping()


def validate_job_request(
    request: JobRequest, *, default_max_tokens: int, default_labels: Sequence[str] = (),
    max_priority: Lane = INTERACTIVE,
) -> JobRequest:
    """``request`` when every option is valid; checks run in the order of the codes below.

    Args:
        request: the submission's options.
        default_max_tokens: the chunk size when the request names none (``chunker.max_tokens``);
            the overlap must stay below it.
        default_labels: ``tasks.classify.labels``: a classify task without labels gets these
            (``docstream.tasks.selection.check_job_tasks``).
        max_priority: the highest priority the request's tenant may ask for (``fairness.tenants``).

    Returns:
        ``request`` itself, or a copy whose classify task holds the default labels.

    Raises:
        InputError: ``invalid_job_id``, ``invalid_tenant``, ``invalid_chunk_options`` (size
            outside ``CHUNK_MAX_TOKENS``, overlap negative or not below the size), ``invalid_webhook_url``
            (not http or https), ``invalid_priority`` (not a lane), ``priority_not_allowed`` (interactive for a
            tenant capped at batch), then the tasks' ``task_invalid``, ``labels_without_classify``,
            ``labels_missing``, ``labels_invalid``.
    """
    if request.job_id:
        validate_id(request.job_id)
    validate_id(request.tenant, "tenant")
    max_tokens = request.chunk_max_tokens or default_max_tokens
    overlap = request.chunk_overlap_tokens if request.chunk_overlap_tokens is not None else 0
    if max_tokens not in CHUNK_MAX_TOKENS or not 0 <= overlap < max_tokens:
        raise InputError(
            f"chunk_max_tokens must be {CHUNK_MAX_TOKENS} and chunk_overlap_tokens 0 to below it",
            code="invalid_chunk_options",
        )
    if request.webhook_url is not None and _scheme(request.webhook_url) not in _WEBHOOK_SCHEMES:
        raise InputError("webhook_url must be an http(s) URL", code="invalid_webhook_url")
    if request.priority not in LANES:
        raise InputError(f"priority must be one of {', '.join(LANES)}", code="invalid_priority")
    if request.priority != BATCH and max_priority == BATCH:
        raise InputError(f"tenant {request.tenant} may submit batch jobs only", code="priority_not_allowed")
    tasks = check_job_tasks(request.tasks, default_labels=default_labels)
    return request if tasks == request.tasks else replace(request, tasks=tasks)


def _scheme(url: str) -> str | None:
    # urlsplit raises ValueError on a malformed authority ("http://[::1/"): no scheme, so refused
    try:
        return urlsplit(url).scheme
    except ValueError:
        return None
