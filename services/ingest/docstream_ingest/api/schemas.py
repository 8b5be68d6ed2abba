"""Request and response bodies of the intake API (the OpenAPI components)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from docstream.lanes import Lane
from docstream.records import CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS, ChunkKind, JobState, TextSource
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobRow
from docstream.store.layout import CHUNK_ROW, DOCUMENT_RESULT_ROW, DOCUMENT_ROW, JOB_ROW, row_docs
from docstream.tasks.base import MAX_DESCRIPTION_CHARS, MAX_LABEL_CHARS, MAX_LABELS, MAX_PROMPT_CHARS, MAX_TASKS
from docstream_ingest.api.row_models import avro_schemas, with_record_fields, with_row_fields
from docstream_ingest.arrow import field_types

__all__ = [
    "CHUNK_HIDDEN",
    "CHUNK_NARROWED",
    "DETAIL_HIDDEN",
    "DOCUMENT_HIDDEN",
    "ID_PATTERN",
    "JOB_HIDDEN",
    "MAX_FORM_FIELD_BYTES",
    "MULTIPART_SCHEMA",
    "RESULT_PICKS",
    "AcceptedDocument",
    "CapacityOut",
    "ChunkOut",
    "ChunkTableOut",
    "DocumentDetail",
    "DocumentErrorOut",
    "DocumentList",
    "DocumentOut",
    "DuplicateOut",
    "ErrorBody",
    "Health",
    "JobAccepted",
    "JobCreateJson",
    "JobDetail",
    "JobList",
    "JobOptionsIn",
    "JobSummary",
    "LabelSpec",
    "LimitsOut",
    "Readiness",
    "RefusalOut",
    "TableCellOut",
    "TaskSpec",
    "TenantUsage",
    "UsageOut",
    "chunk_fields",
]

M = TypeVar("M", bound=BaseModel)

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Job ids and tenants (``docstream.ids.validate_id``)."""

_MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$"
_URL_PATTERN = r"^[hH][tT][tT][pP][sS]?://[^\s]+$"
_TASK_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
MAX_FORM_FIELD_BYTES = 16 * 1024
"""Largest multipart form field (the tasks field is JSON: a job with many labels goes as JSON instead)."""


class LabelSpec(BaseModel):
    """A classification label: a name, and optionally the text it is matched by (zero-shot)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, max_length=MAX_LABEL_CHARS, pattern=r"\S", description="The label.")
    description: str | None = Field(
        None, max_length=MAX_DESCRIPTION_CHARS, description="Text the label is matched by; null: its name."
    )


class PromptSpec(BaseModel):
    """The generate task's prompt (docs/tasks.md "generate")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["summarize", "extract"] = Field(
        ..., description="summarize: a summary per chunk, then of the document; extract: the fields of json_schema "
        "per chunk, merged per document.",
    )
    instruction: str = Field("", max_length=MAX_PROMPT_CHARS,
                             description="The prompt; empty: the kind's built-in instruction.")
    json_schema: dict[str, Any] | None = Field(
        None, description="extract: the JSON Schema every answer must validate against; null for summarize.",
    )


class TaskSpec(BaseModel):
    """A task the job asks for (docs/tasks.md): a built-in or a user task known to the service, by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=_TASK_PATTERN, description="embed, classify, entities, or a user task's name.")
    labels: list[LabelSpec] = Field(
        default_factory=list, max_length=MAX_LABELS,
        description="classify only: the labels (names unique); empty: the service's tasks.classify.labels.",
    )
    prompt: PromptSpec | None = Field(None, description="generate only: the prompt; null: summarize.")


class JobOptionsIn(BaseModel):
    """Per-job options (JSON members, or multipart form fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str | None = Field(
        None, pattern=_MODEL_PATTERN, description="Model for the job (name and revision); default: the service's."
    )
    chunk_max_tokens: int | None = Field(None, ge=CHUNK_MAX_TOKENS.least, le=CHUNK_MAX_TOKENS.most,
                                         description="Most tokens in a chunk for this job.")
    chunk_overlap_tokens: int | None = Field(
        None, ge=CHUNK_OVERLAP_TOKENS.least, le=CHUNK_OVERLAP_TOKENS.most,
        description="Tokens shared by consecutive chunks (below chunk_max_tokens)."
    )
    webhook_url: str | None = Field(
        None, max_length=2048, pattern=_URL_PATTERN, description="http(s) URL called when the job ends."
    )
    tasks: list[TaskSpec] = Field(
        default_factory=list, max_length=MAX_TASKS,
        description="What inference runs on the job's chunks, each task once; empty: embed alone.",
    )
    priority: Lane = Field(
        "batch", description="The job's lane: interactive jobs are served first, batch keeps a guaranteed share "
                             "(docs/operations.md \"Sharing the service\"). A tenant may be capped at batch.")


class JobCreateJson(JobOptionsIn):
    """POST /v1/jobs as JSON: documents that already live in object storage."""

    source_uris: list[str] = Field(
        ...,
        min_length=1,
        description="Documents (or archives) to submit, read where they are. Each must use an allowed scheme "
        "and lie under the object store root or an allowed root (object_store.allowed_roots).",
    )


MULTIPART_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "Documents and .zip/.tar/.tar.gz/.tgz archives (expanded safely, docs/intake.md).",
        },
        "source_keys": {
            "type": "string",
            "description": "JSON object from a file's name to its source key, the identity of the document across "
                           "versions (docs/intake.md \"Versions of a document\"): an upload with a key its tenant "
                           "sent before is that source's next version. A file without one is a document of its own.",
        },
        "model_id": {"type": "string", "pattern": _MODEL_PATTERN, "description": "Model for the job."},
        "chunk_max_tokens": {"type": "integer", "minimum": CHUNK_MAX_TOKENS.least, "maximum": CHUNK_MAX_TOKENS.most,
                             "description": "Chunk size."},
        "chunk_overlap_tokens": {"type": "integer", "minimum": CHUNK_OVERLAP_TOKENS.least,
                                 "maximum": CHUNK_OVERLAP_TOKENS.most, "description": "Chunk overlap."},
        "webhook_url": {
            "type": "string",
            "maxLength": 2048,
            "pattern": _URL_PATTERN,
            "description": "http(s) URL called when the job ends.",
        },
        "tasks": {
            "type": "string",
            "maxLength": MAX_FORM_FIELD_BYTES,
            "description": "The job's tasks as JSON: an array of TaskSpec (see JobCreateJson.tasks).",
        },
    },
    "required": ["files"],
    "additionalProperties": False,
}
"""The multipart/form-data body of POST /v1/jobs (parsed by hand, so described by hand)."""


class RefusalOut(BaseModel):
    """A refused file, archive member or source URI."""

    file: str = Field(..., description="Its name (archive members: archive/member).")
    error_code: str = Field(..., description="Why, as a stable code (docs/intake.md).")
    message: str = Field(..., description="Why, for humans.")


class ErrorBody(BaseModel):
    """Every 4xx and 5xx body."""

    error_code: str = Field(..., description="Stable snake_case identifier of the refusal.")
    message: str = Field(..., description="For humans.")
    refused: list[RefusalOut] | None = Field(None, description="Files refused, when a submission was refused.")
    details: list[dict[str, Any]] | None = Field(None, description="Validation errors, when the request is malformed.")


class AcceptedDocument(BaseModel):
    """A document the submission added to the job."""

    doc_id: str
    filename: str
    size_bytes: int
    content_sha256: str
    media_type: str | None = None


class DuplicateOut(BaseModel):
    """A file whose content is already a document of the job."""

    file: str
    doc_id: str


class JobAccepted(BaseModel):
    """202: the job exists, its documents are on their way through the pipeline."""

    job_id: str
    status: JobState
    document_count: int
    documents: list[AcceptedDocument]
    duplicates: list[DuplicateOut]


class QueueOut(BaseModel):
    """Where a running job stands in its lane (docs/operations.md "Where a job stands")."""

    lane: Lane = Field(..., description="The job's lane.")
    started: bool = Field(..., description="A document of the job has ended: the model is on it.")
    tokens_ahead: int = Field(
        ..., description="Tokens the model serves before the job starts: the waiting tokens of the jobs of its lane "
        "submitted before it, and what the other lane is served meanwhile, rounded up to two significant figures "
        "and at least 1,000 so that no other tenant's job size shows through; 0 once started.")
    waiting_tokens: int = Field(..., description="The job's own tokens chunked and not ended yet.")
    start_in_s: float | None = Field(
        ..., description="Seconds until it should start at the service's recent rate; 0 once started; null while "
        "no rate is known.")
    estimated_start: datetime | None = Field(..., description="When it should start (UTC); null while not known.")


class UsageOut(BaseModel):
    """What a job's terminal documents cost (docs/operations.md "What a job cost")."""

    pages: int = Field(..., description="Pages of the documents.")
    chunks: int = Field(..., description="Chunks of the documents.")
    tokens: int = Field(
        ..., description="Tokens of the embedded chunks by the model's tokenizer; chunk overlaps count in each chunk."
    )
    model_seconds: float = Field(..., description="Forward-pass seconds of the model, over every device.")
    device: str | None = Field(
        ..., description="Device the model ran on (cpu, cuda:0, mps); several joined by '+'; null when it never ran."
    )
    stage_seconds: dict[str, float] = Field(
        ..., description="Busy seconds per stage: chunker (fetch, extraction, chunking), inference (tokenizing, "
        "forward pass, store write)."
    )
    prompt_tokens: int = Field(
        0, description="Prompt tokens a chat model's server counted (the generate task's requests, from its usage)."
    )
    completion_tokens: int = Field(
        0, description="Completion tokens a chat model's server counted (the generate task's answers, from its usage)."
    )


class TenantUsage(BaseModel):
    """What the tenant's jobs cost, added up from their rows."""

    tenant: str
    jobs: int = Field(..., description="Jobs counted (created in [since, until) when given).")
    since: datetime | None
    until: datetime | None
    usage: UsageOut
    model_seconds_by_device: dict[str, float] = Field(..., description="Forward-pass seconds per device.")


class SourceDeleted(BaseModel):
    """A source deleted: every version's chunks, vectors and results left the store."""

    source_key: str
    doc_id: str = Field(..., description="Its current version when it was deleted.")
    versions: int = Field(..., description="The versions retired, the current one included.")
    results: int = Field(..., description="The (version, model) results deleted.")


_SCHEMAS = avro_schemas()

JOB_HIDDEN: dict[str, str] = {"tenant": "the caller's own: a caller sees its tenant's jobs alone"}
"""The ``JobRow`` fields a job does not show, and why; it shows every other one (``usage`` as ``UsageOut``)."""


@with_row_fields(JobRow, row_docs(JOB_ROW, _SCHEMAS), hidden=JOB_HIDDEN, shown_as={"usage": "usage"})
class JobSummary(BaseModel):
    """A job's state and progress."""

    # the jobs row's fields (JobRow less JOB_HIDDEN) come first, added by with_row_fields; these are the API's own
    usage: UsageOut | None = Field(
        None, description="What the job's terminal documents cost so far; null before any was counted."
    )
    pending: int = Field(..., description="Documents not finished yet (document_count minus the finished).")
    elapsed_s: float = Field(..., description="From creation to the last update (finished) or to now (running).")
    rate_docs_per_s: float | None = Field(
        ..., description="Finished documents per second over elapsed_s; null before any time passed."
    )
    eta_s: float | None = Field(
        ..., description="Seconds to the end at that rate; null once ended, before the first document, or size unknown."
    )
    tasks: list[TaskSpec] = Field(..., description="What inference runs on the job's chunks (embed alone by default).")
    priority: Lane = Field("batch", description="The job's lane.")
    queue: QueueOut | None = Field(None, description="Where the job stands in its lane; null once it ended.")


class DocumentErrorOut(BaseModel):
    """A document of the job that failed."""

    doc_id: str
    filename: str | None
    status: str
    error_code: str | None
    error: str | None


class JobDetail(JobSummary):
    """A job with one page of its failed documents."""

    errors: list[DocumentErrorOut]
    next_errors_cursor: str | None = Field(
        ..., description="Pass as errors_after for the next page of errors; null on the last page."
    )


class LimitsOut(BaseModel):
    """A tenant's quotas (null: no limit of that kind)."""

    max_documents_in_flight: int | None
    max_enqueued_tokens: int | None
    max_tokens_per_day: int | None


class CapacityOut(BaseModel):
    """What the caller's tenant may submit now (docs/operations.md "Quotas and admission")."""

    tenant: str
    documents: int | None = Field(..., description="How many more documents a submission may hold now; null: no "
                                                    "limit on documents; 0: none until the figures free.")
    limited_by: str | None = Field(..., description="The limit that holds submissions back now, or null.")
    retry_after_s: int = Field(..., description="When documents is 0: seconds until asking again is worth it.")
    documents_in_flight: int = Field(..., description="The tenant's documents admitted and not ended.")
    enqueued_tokens: int = Field(..., description="Tokens of those documents once chunked.")
    tokens_today: int = Field(..., description="Tokens of the tenant's documents that ended this UTC day.")
    limits: LimitsOut


DOCUMENT_HIDDEN: dict[str, str] = {
    "job_id": "in the path, and in DocumentDetail",
    "source_uri": "where the service keeps the bytes, not the user's",
    "content_sha256": "in DocumentDetail",
    "media_type": "in DocumentDetail",
    "source_key": "in DocumentDetail",
    "previous_doc_id": "in DocumentDetail",
    "generation": "the store's order of a source's versions",
    "deleted_at": "in DocumentDetail",
}
"""The ``DocumentRow`` fields a document of a job's list does not show, and why; it shows every other one."""

DETAIL_HIDDEN: dict[str, str] = {name: why for name, why in DOCUMENT_HIDDEN.items() if "in DocumentDetail" not in why}
"""The ``DocumentRow`` fields a document on its own does not show, and why."""

RESULT_PICKS: tuple[str, ...] = ("chunk_count", "failed_chunks", "token_count")
"""The ``DocumentResultRow`` fields a document shows, of its result for the job's model (null before it)."""

_DOCUMENT_DOCS = row_docs(DOCUMENT_ROW, _SCHEMAS)
_RESULT_DOCS = row_docs(DOCUMENT_RESULT_ROW, _SCHEMAS)


@with_row_fields(DocumentRow, _DOCUMENT_DOCS, hidden=DOCUMENT_HIDDEN)
@with_row_fields(DocumentResultRow, _RESULT_DOCS, picks=RESULT_PICKS,
                 absent="Null before the document has a result for the job's model.")
class DocumentOut(BaseModel):
    """A document of a job: where it is, and its result for the job's model once it has one."""

    # the document row's fields (DocumentRow less DOCUMENT_HIDDEN), then RESULT_PICKS of its result's row, come
    # from with_row_fields; the status, file name, error code and time are its entry's in the job


class DocumentList(BaseModel):
    """One page of a job's documents, by doc_id."""

    items: list[DocumentOut]
    next_cursor: str | None = Field(..., description="Pass as after for the next page; null on the last page.")


_, _NAMED = field_types(_SCHEMAS.values())


@with_record_fields(_NAMED["TableCell"])
class TableCellOut(BaseModel):
    """One cell of a table, in the whole table's rows and columns."""

    # the Avro TableCell record's fields, added by with_record_fields


@with_record_fields(_NAMED["ChunkTable"], nested={"TableCell": TableCellOut})
class ChunkTableOut(BaseModel):
    """The part of a table a table chunk holds (docs/chunking.md "Tables")."""

    # the Avro ChunkTable record's fields (ChunkCreated.table), added by with_record_fields


CHUNK_HIDDEN: dict[str, str] = {
    "doc_id": "in the path",
    "model_id": "the document's: DocumentDetail.model_id",
    "job_id": "in the path",
    "text": "its start and length instead (text_start, text_chars); the whole text is in the results export",
    "char_start": "offsets of the extracted text, which the API does not show",
    "char_end": "offsets of the extracted text, which the API does not show",
    "embedding": "in the results export",
    "task": "the job's model's chunks are embed's",
    "label_scores": "a task's result: in the results export",
    "mentions": "a task's result: in the results export",
    "output": "a task's result: in the results export",
}
"""The ``ChunkRow`` fields a chunk of the API does not show, and why; it shows every other one."""

CHUNK_NARROWED: dict[str, Any] = {"text_source": TextSource, "kind": ChunkKind}
"""The ``ChunkRow`` fields a chunk of the API shows as a value of an enumeration (``docstream.records.limits``):
a stored value outside it shows as the row's default (``routes._chunk_out``)."""


def chunk_fields(row: type[Any], docs: Mapping[str, str]) -> Callable[[type[M]], type[M]]:
    """The decorator that gives ``ChunkOut`` the fields of the chunk row ``row`` (``docstream.store.layout.CHUNK_ROW``),
    described by ``docs``: every one but ``CHUNK_HIDDEN``, ``table_part`` as the API's ``table``, ``text_source`` and
    ``kind`` as the values the API shows (``CHUNK_NARROWED``)."""
    return with_row_fields(row, docs, hidden=CHUNK_HIDDEN, shown_as={"table_part": "table"}, narrowed=CHUNK_NARROWED)


@chunk_fields(ChunkRow, row_docs(CHUNK_ROW, _SCHEMAS))
class ChunkOut(BaseModel):
    """A chunk of a document, with the start of its text (the whole text is in the results export)."""

    # the chunk row's fields (ChunkRow less CHUNK_HIDDEN) come first, added by with_row_fields; these are the API's own
    table: ChunkTableOut | None = Field(None, description="The table part, when kind is table.")
    text_start: str = Field(..., description="The first characters of the chunk's text.")
    text_chars: int = Field(..., description="Characters in the whole text.")


@with_row_fields(DocumentRow, _DOCUMENT_DOCS, hidden=DETAIL_HIDDEN)
class DocumentDetail(DocumentOut):
    """A document of a job with one page of its chunks for the job's model."""

    model_id: str = Field(..., description="Whose chunks: the job's model.")
    chunks: list[ChunkOut]
    next_chunks_cursor: int | None = Field(
        ..., description="Pass as chunks_after for the next page of chunks; null on the last page."
    )


class JobList(BaseModel):
    """One page of the tenant's jobs, by job_id."""

    items: list[JobSummary]
    next_cursor: str | None = Field(..., description="Pass as after for the next page; null on the last page.")


class Health(BaseModel):
    """The process is alive."""

    status: Literal["ok"]


class Readiness(BaseModel):
    """Whether the broker and the store answer."""

    ready: bool
    checks: dict[str, str] = Field(..., description="Per dependency: ok, or why not.")

