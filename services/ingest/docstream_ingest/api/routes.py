"""The routes: /v1/jobs (submit, list, status, documents, results, cancel), /v1/usage and /healthz, /readyz,
/metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, fields, replace
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from confluent_kafka import KafkaException
from fastapi import APIRouter, Depends, Path, Query, Request, Security
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from docstream.errors import DocstreamError, InputError
from docstream.ids import MAX_SOURCE_KEY_BYTES, check_source_key
from docstream.jobs.progress import aware, job_progress
from docstream.jobs.standing import QueueStanding, tenant_standing
from docstream.logging import get_logger
from docstream.records import JobOptions
from docstream.store.base import ChunkRow, DocumentRow, JobDocumentRow, JobRow, JobsStore, ResultsStore
from docstream.store.sources import delete_source
from docstream.tasks.base import Label, Prompt, TaskRequest
from docstream.tasks.selection import DEFAULT_TASKS, job_task_names, job_tasks
from docstream.tenants.usage import Usage, seconds, total_usage
from docstream.topics import Topics
from docstream_ingest.admission import tenant_capacity
from docstream_ingest.api.auth import Principal
from docstream_ingest.api.context import ApiContext
from docstream_ingest.api.delivery import RequestDeliveries
from docstream_ingest.api.errors import ApiError, status_of_input_error
from docstream_ingest.api.results import iter_result_lines
from docstream_ingest.api.schemas import (
    CHUNK_NARROWED,
    ID_PATTERN,
    MULTIPART_SCHEMA,
    RESULT_PICKS,
    AcceptedDocument,
    CapacityOut,
    ChunkOut,
    ChunkTableOut,
    DocumentDetail,
    DocumentErrorOut,
    DocumentList,
    DocumentOut,
    DuplicateOut,
    ErrorBody,
    Health,
    JobAccepted,
    JobCreateJson,
    JobDetail,
    JobList,
    JobOptionsIn,
    JobSummary,
    LabelSpec,
    LimitsOut,
    PromptSpec,
    QueueOut,
    Readiness,
    RefusalOut,
    SourceDeleted,
    TaskSpec,
    TenantUsage,
    UsageOut,
)
from docstream_ingest.api.uploads import read_json, read_multipart
from docstream_ingest.intake import IntakeClients, SubmitResult, submit_uploads, submit_uris
from docstream_ingest.job_view import standings
from docstream_ingest.request import JobRequest
from docstream_ingest.sources import tombstone_announcer

__all__ = ["NdjsonResponse", "health_router", "jobs_router"]

_log = get_logger(__name__)

_MAX_JSON_BYTES = 4 * 1024 * 1024
_ERROR_SCAN_PAGE = 500
_TEXT_START_CHARS = 240
_ERROR_MESSAGES = {
    400: "Malformed request body.",
    401: "Missing, malformed, unknown or revoked API key.",
    404: "No such job (or document of the job) for this tenant.",
    408: "The request body took longer than api.request_timeout_s.",
    409: "The job is already finished.",
    413: "The body, or a document in it, is too large.",
    415: "Neither application/json nor multipart/form-data.",
    422: "Invalid request, or documents refused (see error_code and refused).",
    429: "Past one of the tenant's quotas (error_code quota_exceeded, limit): nothing was enqueued; try again after "
         "Retry-After seconds (docs/operations.md \"Quotas and admission\").",
    503: "The store or the broker is unavailable; retry later.",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _ERROR_MESSAGES[code]} for code in codes}


def _json_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    # for routes whose success body is not JSON: "model" would document errors in that media type
    schema = {"$ref": "#/components/schemas/ErrorBody"}
    return {
        code: {"description": _ERROR_MESSAGES[code], "content": {"application/json": {"schema": schema}}}
        for code in codes
    }


class NdjsonResponse(StreamingResponse):
    """A streamed JSON Lines body."""

    media_type = "application/x-ndjson"


def context(request: Request) -> ApiContext:
    """The app's ApiContext."""
    ctx: ApiContext = request.app.state.context
    return ctx


_bearer = HTTPBearer(auto_error=False, description="An API key from `docstream apikey create --tenant T`.")


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]
) -> Principal:
    """The caller, from its bearer API key (runs in a worker thread: it may read the store)."""
    return context(request).auth.authenticate(credentials.credentials if credentials else None)


Ctx = Annotated[ApiContext, Depends(context)]
Caller = Annotated[Principal, Depends(principal)]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="The job's id.")]
DocId = Annotated[str, Path(pattern=ID_PATTERN, description="The document's id.")]

jobs_router = APIRouter(prefix="/v1", tags=["jobs"])
health_router = APIRouter(tags=["operations"])


# -- job rows as responses -------------------------------------------------------------


def usage_out(usage: Usage) -> UsageOut:
    """A usage as the API shows it (seconds, not the store's microseconds)."""
    return UsageOut(pages=usage.pages, chunks=usage.chunks, tokens=usage.tokens,
                    model_seconds=round(usage.model_seconds, 6), device=usage.device,
                    stage_seconds={stage: round(value, 6) for stage, value in usage.stage_seconds.items()},
                    prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)


def task_spec(task: TaskRequest) -> TaskSpec:
    """A task request as the API shows it."""
    prompt = None if task.prompt is None else PromptSpec(kind=task.prompt.kind, instruction=task.prompt.instruction,
                                                         json_schema=task.prompt.schema)
    return TaskSpec(name=task.name, labels=[LabelSpec(name=label.name, description=label.description)
                                            for label in task.labels], prompt=prompt)


def task_request(spec: TaskSpec) -> TaskRequest:
    """A task of a request body as the intake takes it.

    Raises:
        InputError: ``labels_invalid`` (duplicate label names), ``task_invalid``.
    """
    prompt = None if spec.prompt is None else Prompt.of(spec.prompt.kind, spec.prompt.instruction,
                                                         spec.prompt.json_schema)
    return TaskRequest(spec.name, tuple(Label(label.name, label.description) for label in spec.labels), prompt)


def queue_out(standing: QueueStanding | None) -> QueueOut | None:
    """Where a job stands as the API shows it to the job's tenant (None: it ended): the tokens ahead coarsened
    (``docstream.jobs.standing.tenant_standing``), so that no other tenant's job shows through them."""
    shown = None if standing is None else tenant_standing(standing)
    if shown is None or shown.tokens_ahead is None:
        return None
    return QueueOut(lane=shown.lane, started=shown.started,
                    tokens_ahead=shown.tokens_ahead, waiting_tokens=shown.waiting_tokens,
                    start_in_s=None if shown.start_in_s is None else round(shown.start_in_s, 1),
                    estimated_start=shown.estimated_start)


def job_summary(job: JobRow, now: datetime, standing: QueueStanding | None = None) -> JobSummary:
    """A jobs row as the API shows it; elapsed, rate and ETA are ``docstream.jobs.progress.job_progress``'s, where it
    stands in its lane ``docstream_ingest.job_view``'."""
    progress = job_progress(job, now)
    return JobSummary(**(_row_fields(JobSummary, job) | {
        "usage": None if job.usage is None else usage_out(job.usage),
        "pending": max(job.document_count - progress.done, 0),
        "elapsed_s": round(progress.elapsed_s, 3),
        "rate_docs_per_s": None if progress.rate is None else round(progress.rate, 6),
        "eta_s": None if progress.eta_s is None else round(progress.eta_s, 1),
        "tasks": [task_spec(task) for task in job_tasks(job)],
        "priority": JobOptions.from_mapping(job.options).lane,
        "queue": queue_out(standing),
    }))


def _owned_job(store: JobsStore, caller: Principal, job_id: str) -> JobRow:
    job = store.get_job(job_id)
    if job is None or job.tenant != caller.tenant:
        # another tenant's job is indistinguishable from none at all
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    return job


def _standings(ctx: ApiContext, jobs: Sequence[JobRow], now: datetime) -> dict[str, QueueStanding]:
    sections = ctx.sections
    return standings(ctx.store, jobs, now, kafka=sections.kafka, inference=sections.inference,
                     fairness=sections.fairness)


def _job_model(ctx: ApiContext, job: JobRow) -> str:
    """Whose results a job shows by default: its model_id option, else the service's."""
    return JobOptions.from_mapping(job.options).model_id or ctx.sections.inference.embed_model_id


def _document_out(
    store: ResultsStore, entry: JobDocumentRow, document: DocumentRow | None, model_id: str
) -> DocumentOut:
    """A document as a job's list shows it: its row's fields, its entry's in the job where the entry says more, and
    ``RESULT_PICKS`` of its result for ``model_id`` (null before it has one, and before its row is written)."""
    return DocumentOut(**_document_fields(DocumentOut, store, entry, document, model_id))


_DOCUMENT_DEFAULTS: dict[str, Any] = {
    f.name: f.default_factory() if f.default_factory is not MISSING else f.default
    for f in fields(DocumentRow) if f.default is not MISSING or f.default_factory is not MISSING
}
"""What a document shows of its row before the row is written: the row's defaults."""


def _document_fields(
    model: type[BaseModel], store: ResultsStore, entry: JobDocumentRow, document: DocumentRow | None, model_id: str
) -> dict[str, Any]:
    started = entry.status not in ("submitted", "skipped")
    result = store.get_document_result(entry.doc_id, model_id) if started else None
    held = _row_fields(model, document) if document else {
        name: value for name, value in _DOCUMENT_DEFAULTS.items() if name in model.model_fields}
    return (held
            | {name: getattr(result, name) if result else None for name in RESULT_PICKS}
            | {"doc_id": entry.doc_id, "status": entry.status, "updated_at": entry.updated_at,
               "filename": entry.filename or (document.filename if document else None),
               "error_code": entry.error_code or (document.error_code if document else None)})


def _row_fields(model: type[BaseModel], row: Any) -> dict[str, Any]:
    """The values of ``row``'s fields that the response ``model`` has a field of the same name for."""
    names = {f.name for f in fields(row)}
    return {name: getattr(row, name) for name in model.model_fields if name in names}


_CHUNK_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ChunkRow) if f.name in CHUNK_NARROWED}


def _narrowed(chunk: ChunkRow) -> dict[str, Any]:
    """The row's ``CHUNK_NARROWED`` fields: a value of the enumeration as it is, any other as the row's default."""
    shown = {name: (getattr(chunk, name), get_args(values)) for name, values in CHUNK_NARROWED.items()}
    return {name: value if value in values else _CHUNK_DEFAULTS[name] for name, (value, values) in shown.items()}


def _chunk_out(chunk: ChunkRow) -> ChunkOut:
    """A chunk as the API shows it: its row's fields of ``ChunkOut``'s names, then what the API says its own way."""
    return ChunkOut(**(_row_fields(ChunkOut, chunk) | _narrowed(chunk) | {
        "table": ChunkTableOut.model_validate(chunk.table_part.to_record()) if chunk.table_part is not None else None,
        "text_start": chunk.text[:_TEXT_START_CHARS],
        "text_chars": len(chunk.text),
    }))


def _document_detail(
    ctx: ApiContext, caller: Principal, job_id: str, doc_id: str, after: int, limit: int
) -> DocumentDetail:
    job = _owned_job(ctx.store, caller, job_id)
    document = ctx.store.get_document(doc_id)
    if document is None or document.job_id != job_id:
        raise ApiError(404, "document_not_found", f"no document {doc_id} in job {job_id}")
    model_id = _job_model(ctx, job)
    entry = JobDocumentRow(job_id, doc_id, document.status, document.updated_at, filename=document.filename,
                           error_code=document.error_code)
    chunks = ctx.store.list_chunks(doc_id, model_id, limit=limit, after=after)
    return DocumentDetail(
        **_document_fields(DocumentDetail, ctx.store, entry, document, model_id),
        model_id=model_id,
        chunks=[_chunk_out(chunk) for chunk in chunks],
        next_chunks_cursor=chunks[-1].chunk_index if len(chunks) == limit else None,
    )


def _error_rows(store: JobsStore, job_id: str, after: str | None, limit: int) -> tuple[list[JobDocumentRow], bool]:
    """Up to ``limit`` failed or partial documents after ``after``, and whether more follow."""
    found: list[JobDocumentRow] = []
    cursor = after
    while True:
        page = store.list_job_documents(job_id, limit=_ERROR_SCAN_PAGE, after=cursor)
        for row in page:
            if row.status in ("failed", "partial") or row.error_code:
                if len(found) == limit:
                    return found, True
                found.append(row)
        if len(page) < _ERROR_SCAN_PAGE:
            return found, False
        cursor = page[-1].doc_id


def _job_detail(ctx: ApiContext, caller: Principal, job_id: str, after: str | None, limit: int) -> JobDetail:
    job = _owned_job(ctx.store, caller, job_id)
    rows, more = _error_rows(ctx.store, job_id, after, limit)
    errors = []
    for row in rows:
        document = ctx.store.get_document(row.doc_id)
        errors.append(
            DocumentErrorOut(
                doc_id=row.doc_id,
                filename=row.filename,
                status=row.status,
                error_code=row.error_code or (document.error_code if document else None),
                error=document.error if document else None,
            )
        )
    now = ctx.clock()
    summary = job_summary(job, now, _standings(ctx, [job], now).get(job_id))
    return JobDetail(
        **summary.model_dump(), errors=errors, next_errors_cursor=rows[-1].doc_id if more and rows else None
    )


# -- submission -----------------------------------------------------------------------


def _refusal(result: SubmitResult) -> ApiError:
    codes = sorted({refused.code for refused in result.refused})
    code = codes[0] if len(codes) == 1 else "documents_refused"
    status = max(status_of_input_error(c) for c in codes) if len(codes) == 1 else 422
    first = result.refused[0]
    message = f"{len(result.refused)} refused, nothing submitted; {first.path}: {first.reason}"
    refused = [RefusalOut(file=r.path, error_code=r.code, message=r.reason).model_dump() for r in result.refused]
    return ApiError(status, code, message, extra={"refused": refused})


def _accepted(result: SubmitResult, store: JobsStore) -> JobAccepted:
    job = store.get_job(result.job_id)
    return JobAccepted(
        job_id=result.job_id,
        status=job.status if job is not None else "running",
        document_count=result.document_count,
        documents=[
            AcceptedDocument(
                doc_id=d.doc_id,
                filename=d.filename,
                size_bytes=d.size_bytes,
                content_sha256=d.content_sha256,
                media_type=d.media_type,
            )
            for d in result.documents
        ],
        duplicates=[DuplicateOut(file=d.path, doc_id=d.doc_id) for d in result.duplicates],
    )


def _job_request(caller: Principal, options: JobOptionsIn) -> JobRequest:
    """A new job of the caller's tenant; anything refused refuses the whole request."""
    return JobRequest(
        tenant=caller.tenant,
        model_id=options.model_id,
        chunk_max_tokens=options.chunk_max_tokens,
        chunk_overlap_tokens=options.chunk_overlap_tokens,
        webhook_url=options.webhook_url,
        atomic=True,
        tasks=tuple(task_request(spec) for spec in options.tasks) or DEFAULT_TASKS,
        priority=options.priority,
    )


def _intake_clients(ctx: ApiContext) -> IntakeClients:
    """The shared clients, with this request's own delivery tracking on the shared producer."""
    return IntakeClients(
        ctx.intake,
        ctx.store,
        RequestDeliveries(lambda: ctx.producer.producer),
        ctx.serde,
        ctx.objects,
        flush_timeout_s=ctx.sections.api.flush_timeout_s,
        clock=ctx.clock,
    )


def _submit(
    ctx: ApiContext,
    caller: Principal,
    submit: Callable[[Any, JobRequest, IntakeClients], SubmitResult],
    items: list[Any],
    options: JobOptionsIn,
) -> JobAccepted:
    """Store, record and produce (blocking: runs in a worker thread); a refusal submits nothing."""
    result = submit(items, _job_request(caller, options), _intake_clients(ctx))
    if result.refused or not result.documents:
        raise _refusal(result) if result.refused else ApiError(422, "no_documents", "nothing to submit")
    ctx.metrics.records_out.labels("api", ctx.topics.intake(options.priority)).inc(len(result.documents))
    _log.info("job_accepted", job_id=result.job_id, tenant=caller.tenant, documents=len(result.documents))
    return _accepted(result, ctx.store)


def _check_uris(ctx: ApiContext, uris: list[str]) -> None:
    limit = ctx.intake.ingest.max_files_per_job
    if len(uris) > limit:
        raise ApiError(422, "too_many_files", f"more than {limit} source URIs in one request (api.max_files_per_job)")
    for uri in uris:
        if "://" not in uri:
            raise ApiError(422, "invalid_source_uri", f"source URI {uri[:200]!r} is not a URL (file://, s3://...)")
        check_source_key(uri)  # the URI is the document's source key: InputError invalid_source_key → 422
        ctx.objects.check_uri(uri)  # InputError source_not_allowed → 422


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _read_timeout(ctx: ApiContext) -> ApiError:
    limit = ctx.sections.api.request_timeout_s
    return ApiError(408, "request_timeout", f"the request body took longer than {limit} s (api.request_timeout_s)")


async def _submit_json(request: Request, ctx: ApiContext, caller: Principal) -> JobAccepted:
    limit = min(ctx.sections.api.max_upload_bytes, _MAX_JSON_BYTES)
    try:
        async with asyncio.timeout(ctx.sections.api.request_timeout_s):
            body: JobCreateJson = await read_json(request, limit, JobCreateJson)
    except TimeoutError as exc:
        raise _read_timeout(ctx) from exc
    _check_uris(ctx, body.source_uris)
    return await run_in_threadpool(_submit, ctx, caller, submit_uris, list(body.source_uris), body)


async def _submit_multipart(request: Request, ctx: ApiContext, caller: Principal) -> JobAccepted:
    api = ctx.sections.api
    limit = ctx.intake.ingest.max_files_per_job
    # only receiving the body is timed: once submission starts it runs to its end (a job half
    # recorded behind a 408 would be worse than a slow answer)
    try:
        async with asyncio.timeout(api.request_timeout_s):
            body = await read_multipart(request, max_bytes=api.max_upload_bytes, max_files=limit)
    except TimeoutError as exc:
        raise _read_timeout(ctx) from exc
    try:
        return await run_in_threadpool(_submit, ctx, caller, submit_uploads, body.uploads, body.options)
    finally:
        await body.close()


_SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": JobCreateJson.model_json_schema()},
            "multipart/form-data": {"schema": MULTIPART_SCHEMA},
        },
    }
}


@jobs_router.post(
    "/jobs",
    status_code=202,
    response_model=JobAccepted,
    summary="Submit a job",
    responses=_errors(400, 401, 408, 413, 415, 422, 429, 503),
    openapi_extra=_SUBMIT_BODY,
)
async def create_job(request: Request, ctx: Ctx, caller: Caller) -> JSONResponse:
    """Submit documents as a new job: upload files and archives (multipart/form-data, field `files`),
    or name documents already in object storage (JSON `source_uris`). Answers 202 once the documents
    are stored, recorded and on the intake topic; they are then chunked, embedded and reduced.
    Anything refused refuses the whole request (4xx, nothing submitted)."""
    media = _media_type(request)
    if media == "application/json":
        accepted = await _submit_json(request, ctx, caller)
    elif media == "multipart/form-data":
        accepted = await _submit_multipart(request, ctx, caller)
    else:
        raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data")
    return JSONResponse(
        accepted.model_dump(mode="json"), status_code=202, headers={"Location": f"/v1/jobs/{accepted.job_id}"}
    )


# -- reading jobs -----------------------------------------------------------------------


@jobs_router.get("/capacity", response_model=CapacityOut, summary="What the tenant may submit now",
                 responses=_errors(401, 503))
def get_capacity(ctx: Ctx, caller: Caller) -> CapacityOut:
    """The caller's tenant's quotas, its figures now (from the store, the same for every API process), and how many
    documents a submission may hold now (docs/operations.md "Quotas and admission")."""
    cap = tenant_capacity(ctx.store, ctx.sections.fairness, caller.tenant, ctx.clock())
    limits, load = cap.limits, cap.load
    return CapacityOut(
        tenant=caller.tenant, documents=cap.documents, limited_by=cap.limited_by,
        retry_after_s=cap.retry_after_s if cap.documents == 0 else 0, documents_in_flight=load.documents_in_flight,
        enqueued_tokens=load.enqueued_tokens, tokens_today=load.tokens_today,
        limits=LimitsOut(max_documents_in_flight=limits.max_documents_in_flight,
                         max_enqueued_tokens=limits.max_enqueued_tokens, max_tokens_per_day=limits.max_tokens_per_day),
    )


@jobs_router.get("/jobs", response_model=JobList, summary="List the tenant's jobs", responses=_errors(401, 422, 503))
def list_jobs(
    ctx: Ctx,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=500, description="Jobs per page.")] = 50,
    after: Annotated[str | None, Query(pattern=ID_PATTERN, description="next_cursor of the previous page.")] = None,
) -> JobList:
    """The caller's tenant's jobs, ordered by job_id, one page at a time."""
    rows = ctx.store.list_jobs(caller.tenant, limit=limit, after=after)
    now = ctx.clock()
    stand = _standings(ctx, rows, now)
    return JobList(
        items=[job_summary(row, now, stand.get(row.job_id)) for row in rows],
        next_cursor=rows[-1].job_id if len(rows) == limit else None,
    )


@jobs_router.get(
    "/jobs/{job_id}", response_model=JobDetail, summary="A job's status", responses=_errors(401, 404, 422, 503)
)
def get_job(
    ctx: Ctx,
    caller: Caller,
    job_id: JobId,
    errors_limit: Annotated[int, Query(ge=1, le=1000, description="Failed documents per page.")] = 100,
    errors_after: Annotated[
        str | None, Query(max_length=128, description="next_errors_cursor of the previous page.")
    ] = None,
) -> JobDetail:
    """Status, counts and timings of a job, with one page of its failed (and partial) documents."""
    return _job_detail(ctx, caller, job_id, errors_after, errors_limit)


@jobs_router.get(
    "/jobs/{job_id}/documents",
    response_model=DocumentList,
    summary="A job's documents",
    responses=_errors(401, 404, 422, 503),
)
def list_documents(
    ctx: Ctx,
    caller: Caller,
    job_id: JobId,
    limit: Annotated[int, Query(ge=1, le=200, description="Documents per page.")] = 50,
    after: Annotated[str | None, Query(pattern=ID_PATTERN, description="next_cursor of the previous page.")] = None,
) -> DocumentList:
    """A job's documents by doc_id, one page at a time: status, pages, and chunks and tokens once finished."""
    job = _owned_job(ctx.store, caller, job_id)
    model_id = _job_model(ctx, job)
    rows = ctx.store.list_job_documents(job_id, limit=limit, after=after)
    items = [_document_out(ctx.store, row, ctx.store.get_document(row.doc_id), model_id) for row in rows]
    return DocumentList(items=items, next_cursor=rows[-1].doc_id if len(rows) == limit else None)


@jobs_router.get(
    "/jobs/{job_id}/documents/{doc_id}",
    response_model=DocumentDetail,
    summary="A document of a job, with its chunks",
    responses=_errors(401, 404, 422, 503),
)
def get_document(
    ctx: Ctx,
    caller: Caller,
    job_id: JobId,
    doc_id: DocId,
    chunks_limit: Annotated[int, Query(ge=1, le=500, description="Chunks per page.")] = 100,
    chunks_after: Annotated[
        int, Query(ge=-1, description="next_chunks_cursor of the previous page (a chunk_index).")
    ] = -1,
) -> DocumentDetail:
    """A document of the job, and one page of its chunks (index, pages, tokens, start of text) for the job's model."""
    return _document_detail(ctx, caller, job_id, doc_id, chunks_after, chunks_limit)


@jobs_router.get(
    "/jobs/{job_id}/results",
    response_class=NdjsonResponse,
    summary="A job's results (JSON Lines)",
    responses={
        200: {
            "description": "One JSON object per finished document, in doc_id order (docs/api.md).",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        },
        **_json_errors(401, 404, 422, 503),
    },
)
def get_results(
    ctx: Ctx,
    caller: Caller,
    job_id: JobId,
    include: Annotated[Literal["chunks"] | None, Query(description="chunks: each document's chunks too.")] = None,
    model_id: Annotated[
        str | None, Query(max_length=128, description="Whose results; default: the job's model.")
    ] = None,
) -> NdjsonResponse:
    """Stream the finished documents of a job (and, with include=chunks, their chunks)."""
    job = _owned_job(ctx.store, caller, job_id)
    model = model_id or _job_model(ctx, job)
    lines = iter_result_lines(ctx.store, job_id, model_id=model, include_chunks=include == "chunks",
                              job_tasks=job_task_names(job))
    return NdjsonResponse(lines, headers={"X-Job-Status": job.status})


@jobs_router.post(
    "/jobs/{job_id}/cancel",
    status_code=202,
    response_model=JobSummary,
    summary="Cancel a job",
    responses=_errors(401, 404, 409, 422, 503),
)
def cancel_job(ctx: Ctx, caller: Caller, job_id: JobId) -> JSONResponse:
    """Cancel a job: documents not chunked yet are skipped, work in flight finishes. Repeating it is harmless."""
    job = _owned_job(ctx.store, caller, job_id)
    if job.status == "completed":
        raise ApiError(409, "job_finished", f"job {job_id} is already completed")
    now = ctx.clock()
    if job.status != "cancelled":
        ctx.store.set_job_status(job_id, job.tenant, "cancelled", now)
        _log.info("job_cancelled", job_id=job_id, tenant=caller.tenant)
        job = replace(job, status="cancelled", updated_at=now)
    return JSONResponse(job_summary(job, now).model_dump(mode="json"), status_code=202)


# -- sources -----------------------------------------------------------------------------


@jobs_router.delete(
    "/sources",
    response_model=SourceDeleted,
    summary="Delete a document by its source",
    responses=_errors(401, 404, 422, 503),
)
def delete_source_route(
    ctx: Ctx,
    caller: Caller,
    key: Annotated[str, Query(description=f"The source key: the URI it was submitted from (docs/intake.md); 1 to "
                                          f"{MAX_SOURCE_KEY_BYTES} UTF-8 bytes, no control character.")],
) -> SourceDeleted:
    """Delete every version of one of the tenant's sources, in flight or not, for good: their chunks, vectors
    and results leave the store, and none comes back (docs/reliability.md "Invariants"); the jobs keep their
    counts, a version in flight ends failed with ``source_deleted``. A tombstone on the intake topic then tells
    the sinks to remove it too (503 when it cannot be published: the store's part is done; send the delete
    again). 404 for a source the tenant does not have."""
    check_source_key(key)  # InputError invalid_source_key → 422, before anything is published
    announce = tombstone_announcer(ctx.producer, Topics(ctx.sections.kafka.topic_prefix),
                                   ctx.sections.api.flush_timeout_s)
    try:
        done = delete_source(ctx.store, caller.tenant, key, announce=announce)
    except InputError as exc:
        raise ApiError(404 if exc.code == "source_not_found" else 422, exc.code, exc.message) from exc
    return SourceDeleted(source_key=done.source_key or key, doc_id=done.doc_id, versions=done.versions,
                         results=done.results)


# -- usage -------------------------------------------------------------------------------

_USAGE_PAGE = 500


def _tenant_jobs(store: JobsStore, tenant: str) -> Iterator[JobRow]:
    after: str | None = None
    while True:
        page = store.list_jobs(tenant, limit=_USAGE_PAGE, after=after)
        yield from page
        if len(page) < _USAGE_PAGE:
            return
        after = page[-1].job_id


@jobs_router.get("/usage", response_model=TenantUsage, summary="What the tenant's jobs cost",
                 responses=_errors(401, 422, 503))
def get_usage(
    ctx: Ctx,
    caller: Caller,
    since: Annotated[datetime | None, Query(description="Only jobs created at or after this time (ISO 8601).")] = None,
    until: Annotated[datetime | None, Query(description="Only jobs created before this time (ISO 8601).")] = None,
) -> TenantUsage:
    """The caller's tenant's jobs added up: pages, chunks, tokens, model-seconds per device, stage seconds.

    Computed from the tenant's jobs rows when asked (each row is the reducer's absolute total of its job,
    so the sum is right however often a record was redelivered); one pass over the tenant's jobs.
    """
    jobs = [row for row in _tenant_jobs(ctx.store, caller.tenant) if _created_in(row, since, until)]
    total = total_usage(row.usage for row in jobs)
    return TenantUsage(tenant=caller.tenant, jobs=len(jobs), since=since, until=until, usage=usage_out(total),
                       model_seconds_by_device={d: round(seconds(us), 6) for d, us in sorted(total.model_us.items())})


def _created_in(row: JobRow, since: datetime | None, until: datetime | None) -> bool:
    created = aware(row.created_at)
    return (since is None or created >= aware(since)) and (until is None or created < aware(until))


# -- operations -------------------------------------------------------------------------


@health_router.get("/healthz", response_model=Health, summary="Liveness")
def healthz() -> Health:
    """The process answers."""
    return Health(status="ok")


def _probe_store(ctx: ApiContext) -> None:
    ctx.store.ping()


def _probe_broker(ctx: ApiContext) -> None:
    ctx.producer.producer.list_topics(timeout=ctx.sections.api.ready_timeout_s)


async def _probe(ctx: ApiContext, probe: Callable[[ApiContext], None]) -> str:
    try:
        await asyncio.wait_for(run_in_threadpool(probe, ctx), ctx.sections.api.ready_timeout_s + 1.0)
    except TimeoutError:
        return "timed out"
    except DocstreamError as exc:
        return f"{exc.code}: {exc.message}"[:300]
    except KafkaException as exc:
        return f"kafka: {exc.args[0].str() if exc.args else exc}"[:300]
    return "ok"


@health_router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness",
    responses={503: {"model": Readiness, "description": "The broker or the store does not answer."}},
)
async def readyz(ctx: Ctx) -> JSONResponse:
    """Ready when the broker and the result store answer."""
    broker, store = await asyncio.gather(_probe(ctx, _probe_broker), _probe(ctx, _probe_store))
    body = Readiness(ready=broker == "ok" and store == "ok", checks={"broker": broker, "store": store})
    return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)


@health_router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics",
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Text format."}},
)
def metrics(ctx: Ctx) -> PlainTextResponse:
    """The process's metrics in Prometheus text format."""
    return PlainTextResponse(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)
