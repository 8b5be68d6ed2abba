"""The records of ``schemas/*.avsc``, one frozen dataclass each (its fields' types, defaults and docstrings the Avro
fields'), and the Avro enums as ``Literal`` types. Written by ``python -m tools.gen_records``: do not edit; change
the schema and run it again (docs/architecture.md "Adding a field")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from docstream.records.base import Record

__all__ = [
    "RECORD_TYPES",
    "AnyRecord",
    "ChunkCreated",
    "ChunkResult",
    "ChunkStatus",
    "DocumentChunked",
    "DocumentCompleted",
    "DocumentStatus",
    "DocumentSubmitted",
    "JobState",
    "JobStatus",
]

ChunkStatus = Literal["ok", "failed"]
"""ok: embedding present; failed: see error_code."""


DocumentStatus = Literal["completed", "partial", "failed"]
"""completed: every chunk embedded; partial: some chunks failed; failed: the document could not be processed."""


JobState = Literal["running", "completed", "cancelled"]
"""running until every document is terminal."""


@dataclass(frozen=True, slots=True)
class ChunkCreated(Record):
    """One token-bounded chunk of a document's text. Key: doc_id. Topic: docstream.chunks."""

    schema_name: ClassVar[str] = "ChunkCreated"

    job_id: str
    """Job of the document."""
    doc_id: str
    """Document this chunk belongs to; the record key."""
    chunk_id: str
    """Deterministic id from (content_sha256, chunker settings, chunk_index)."""
    chunk_index: int
    """0-based position of the chunk in the document."""
    chunk_count: int
    """Total number of chunks of the document, so any one record tells when the document is whole."""
    content_sha256: str
    """Hex SHA-256 of the document bytes."""
    text: str
    """The chunk text."""
    page_start: int
    """1-based page where the chunk starts."""
    page_end: int
    """1-based page where the chunk ends (inclusive)."""
    char_start: int
    """Offset of the first character in the document's extracted text."""
    char_end: int
    """Offset one past the last character in the document's extracted text."""
    token_count: int
    """Tokens in the chunk by the model tokenizer (without special tokens)."""
    chunker_settings: str
    """Canonical string of the chunker settings that produced the chunk (part of chunk_id)."""
    created_at: datetime
    """When the chunk was made (UTC)."""
    heading: str | None = None
    """Section heading in force at the chunk start, when the document reveals one."""
    model_id: str | None = None
    """Model requested for this job; null means the inference service default."""
    stage_us: dict[str, int] = field(default_factory=dict)
    """This chunk's share (by tokens) of the chunker's busy microseconds on its document, per stage (chunker: fetch,
    extraction, chunking); empty in records written before v2."""
    text_source: str = "text_layer"
    """Where the chunk's text came from: text_layer (the document's own text) or ocr (any of its pages was read by
    OCR); text_layer in records written before v3."""
    ocr_engine: str | None = None
    """The OCR engine that read the chunk's OCR pages (tesseract, rapidocr) when text_source is ocr; else null."""
    page_verdicts: list[str] = field(default_factory=list)
    """Quality verdict of each of the chunk's pages, page_start to page_end (ok, no_text_layer, unmapped, mojibake,
    ok_with_ocr_layer: docs/chunking.md); empty in records written before v3."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """The tasks the document's job asks for (from DocumentSubmitted); empty: embed only (and records written before
    v4). Each a ``TaskRequest`` record, as a dict."""
    page_breaks: list[int] = field(default_factory=list)
    """Offsets in the document's extracted text where the chunk's pages after page_start begin (page_start + 1, ...:
    one per page break inside the chunk); empty for a one-page chunk and in records written before v4."""
    page_reasons: list[str] = field(default_factory=list)
    """Why each of the chunk's pages kept the text it kept, page_start to page_end (text_layer, layer_redecoded,
    ocr_reads_better, ocr_forced, ocr_not_better, ocr_unavailable_for_script, ocr_unavailable, ocr_failed,
    ocr_off: docs/chunking.md "Provenance"); empty in records written before v5."""
    kind: str = "text"
    """What the chunk holds: text, or table (one part of a table found on a born-digital page, its text the part's
    Markdown: docs/chunking.md "Tables"); text in records written before v6."""
    table: dict[str, Any] | None = None
    """The table part when kind is table; else null (and in records written before v6). A ``ChunkTable`` record, as a
    dict."""
    previous_doc_id: str | None = None
    """From DocumentSubmitted: the doc_id of the source's earlier version, whose stored result of this chunk's text
    the inference service reuses. Null: no earlier version (and in records written before v8)."""
    tenant: str = "default"
    """From DocumentSubmitted: the tenant owning the job, whose fair share inference serves the chunk from; default
    in records written before v9."""
    priority: str = "batch"
    """From DocumentSubmitted: the job's lane (interactive or batch); the chunk travels on that lane's topic. batch
    in records written before v9."""
    page_furniture: list[str] = field(default_factory=list)
    """Running heads, page numbers and footers of the chunk's pages that left its text (chunker.furniture auto: short
    text repeated at the same place on the pages around; docs/chunking.md "Page furniture"), each once, in page
    order; empty with furniture off and in records written before v10."""
    resent: bool = False
    """Sent again: the pass of the chunker that sent it found the document's rows written by an earlier pass (a
    redelivery, a replay), so its chunk may have a stored result, which inference reuses instead of running the
    model again (docs/reliability.md "Invariants"). false in records written before v12."""
    token_ids: bytes = b''
    """The chunk's text as the tokenizer named by tokenizer reads it (stripped, lower-cased where the model says so):
    its token ids without special tokens, little-endian uint32, not truncated (chunker.token_ids). The inference
    service builds its model's inputs from them instead of tokenizing the text, under a model of the same
    tokenizer (docs/inference.md "Token ids from the chunker"). Empty: not carried, and in records written before
    v12."""
    tokenizer: str | None = None
    """The fingerprint of the tokenizer that made token_ids (docstream.models.tokenization.tokenizer_fingerprint);
    null when none are carried."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``doc_id``."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class ChunkResult(Record):
    """The result of one task for one chunk, or its failure. Key: doc_id. Topic: docstream.chunks.results. Called
    ChunkEmbedded (on docstream.chunks.embedded) before; the alias resolves records written under that name."""

    schema_name: ClassVar[str] = "ChunkResult"

    job_id: str
    """Job of the document."""
    doc_id: str
    """Document of the chunk; the record key."""
    chunk_id: str
    """Id of the chunk (see ChunkCreated)."""
    chunk_index: int
    """0-based position of the chunk in the document."""
    chunk_count: int
    """Total number of chunks of the document."""
    model_id: str
    """Model (and revision) that produced the embedding."""
    status: ChunkStatus
    """Outcome for this chunk."""
    token_count: int
    """Tokens in the chunk."""
    page_start: int
    """1-based first page of the chunk."""
    page_end: int
    """1-based last page of the chunk."""
    embedded_at: datetime
    """When the result was made (UTC)."""
    embedding: Sequence[float] = field(default_factory=list)
    """The embedding vector; empty when status is failed."""
    error_code: str | None = None
    """Machine-readable failure code when status is failed."""
    error: str | None = None
    """Human-readable failure message when status is failed."""
    chunker_settings: str = ""
    """Canonical chunker settings of the chunk (see ChunkCreated); empty in records written before v2."""
    runtime: str | None = None
    """Runtime the embedding was made with: <backend>/<device>/<precision>[/<threads>t], e.g. torch/cpu/fp32/2t or
    torch/cuda/fp16; null for failed or reused chunks and in records written before v3."""
    model_us: int = 0
    """This chunk's share (by tokens) of its micro-batch's forward-pass microseconds, failed attempts included (a
    chunk the model failed on carries its share too); 0 for reused chunks, a model not loaded here and in records
    written before v4."""
    device: str | None = None
    """Device the forward pass ran on: cpu, cuda:0, mps; null when no model ran for this chunk (reused, model not
    loaded, before v4)."""
    stage_us: dict[str, int] = field(default_factory=dict)
    """This chunk's share of busy microseconds per stage: the chunker's (from ChunkCreated) and the inference
    service's (tokenizing, forward pass, store write); empty before v4."""
    task: str = "embed"
    """The task that made the result: embed, classify, entities or a user task; embed in records written before v5."""
    tasks: list[str] = field(default_factory=list)
    """Names of every task the document's job asks for (the reducer completes a job's document when each is
    terminal); empty: embed only."""
    label_scores: dict[str, float] = field(default_factory=dict)
    """classify: the chunk's score per label (they sum to 1); empty for other tasks."""
    mentions: list[dict[str, Any]] = field(default_factory=list)
    """entities: the chunk's mentions, in document offsets; empty for other tasks. Each a ``ChunkMention`` record, as
    a dict."""
    output: str | None = None
    """A user task's output for the chunk, as JSON; null for the built-in tasks."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``doc_id``."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class DocumentChunked(Record):
    """A document was chunked: its chunks are on its lane's chunks topic and wait for the model. Key: doc_id. Topic:
    docstream.documents.chunked. The reducer counts each job's chunked tokens from it, to say where the job stands
    in its lane (docs/operations.md "Where a job stands"). At least once: a redelivered document is chunked again
    and its record repeats."""

    schema_name: ClassVar[str] = "DocumentChunked"

    job_id: str
    """Job this document belongs to."""
    doc_id: str
    """The document; the record key."""
    chunk_count: int
    """Chunks the document was split into."""
    token_count: int
    """Tokens of those chunks (overlaps counted in each chunk)."""
    chunked_at: datetime
    """When the chunker made the chunks (UTC)."""
    tenant: str = "default"
    """Tenant owning the job."""
    priority: str = "batch"
    """The job's lane: interactive or batch."""
    page_count: int | None = None
    """Pages, when the document has pages."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``doc_id``."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class DocumentCompleted(Record):
    """A document reached a terminal state for one task. Key: doc_id. Topic: docstream.documents.completed. Delivery
    is at-least-once: deduplicate on (doc_id, model_id)."""

    schema_name: ClassVar[str] = "DocumentCompleted"

    job_id: str
    """Job of the document."""
    doc_id: str
    """The document; the record key."""
    status: DocumentStatus
    """Terminal status."""
    completed_at: datetime
    """When the document became terminal (UTC)."""
    model_id: str | None = None
    """Model of the results; null when the document failed before inference."""
    source_uri: str | None = None
    """Where the document bytes live."""
    filename: str | None = None
    """Original file name, when known."""
    content_sha256: str | None = None
    """Hex SHA-256 of the document bytes, when known."""
    page_count: int | None = None
    """Pages in the document, when known."""
    chunk_count: int = 0
    """Chunks in the document."""
    failed_chunks: int = 0
    """Chunks whose inference failed."""
    token_count: int = 0
    """Tokens over all embedded chunks."""
    embedding: Sequence[float] = field(default_factory=list)
    """Document embedding: mean of chunk embeddings weighted by token_count; empty when failed."""
    error_code: str | None = None
    """Machine-readable reason when status is failed (encrypted, corrupt, empty, not_a_document, no_text, too_large,
    too_many_pages, timeout, fetch_failed)."""
    error: str | None = None
    """Human-readable reason when status is failed or partial."""
    chunker_settings: str | None = None
    """Canonical chunker settings the document was chunked with (see ChunkCreated); null when it failed before
    chunking or the results predate v2."""
    runtime: str | None = None
    """Runtime the chunk embeddings were made with (see ChunkResult.runtime; the first one a chunk result carried);
    null when none carried one (failed before inference, results before v3)."""
    model_us: dict[str, int] = field(default_factory=dict)
    """Forward-pass microseconds spent on the document's chunks, per device (each chunk counted once, however often
    it was redelivered); empty when no model ran and in records written before v4."""
    stage_us: dict[str, int] = field(default_factory=dict)
    """Busy microseconds spent on the document per stage (chunker, inference); empty in records written before v4."""
    pages_by_verdict: dict[str, int] = field(default_factory=dict)
    """The document's pages counted by quality verdict (ok, no_text_layer, unmapped, mojibake, ok_with_ocr_layer:
    docs/chunking.md); empty when it failed before extraction and in records written before v5."""
    pages_by_source: dict[str, int] = field(default_factory=dict)
    """The document's pages counted by where their text came from (text_layer, ocr); empty when it failed before
    extraction and in records written before v5."""
    task: str | None = None
    """The task of the results (embed, classify, entities, a user task); null when the document failed before
    inference (for every task) and in records written before v6 (embed)."""
    tasks: list[str] = field(default_factory=list)
    """Names of every task the document's job asks for; empty: embed only."""
    label_scores: dict[str, float] = field(default_factory=dict)
    """classify: score per label, the token-weighted mean of the chunks' scores (sums to 1); empty for other tasks."""
    top_label: str | None = None
    """classify: the label with the highest score; null for other tasks."""
    top_chunks: list[int] = field(default_factory=list)
    """classify: indices of the chunks that scored highest for top_label, best first (at most 3)."""
    mentions: list[dict[str, Any]] = field(default_factory=list)
    """entities: every mention once, in document order, after the duplicates of the chunk overlap are merged; empty
    for other tasks. Each a ``EntityMention`` record, as a dict."""
    entities: list[dict[str, Any]] = field(default_factory=list)
    """entities: the distinct entities (label, normalised text) with counts and pages; empty for other tasks. Each a
    ``EntitySummary`` record, as a dict."""
    mentions_truncated: bool = False
    """entities: the document had more mentions than the reducer keeps (tasks.entities.max_document_mentions); the
    ones with the lowest offsets are kept."""
    output: str | None = None
    """A user task's document result, as JSON; null for the built-in tasks."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``doc_id``."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class DocumentSubmitted(Record):
    """A document handed to docstream for processing. Key: doc_id. Topic: docstream.documents.submitted."""

    schema_name: ClassVar[str] = "DocumentSubmitted"

    job_id: str
    """Job this document belongs to."""
    doc_id: str
    """Deterministic id derived from (job_id, content_sha256); the record key."""
    source_uri: str
    """Where the bytes live: an fsspec URL (file://, s3://, gs://) the chunker can read."""
    content_sha256: str
    """Hex SHA-256 of the document bytes."""
    size_bytes: int
    """Size of the document in bytes."""
    submitted_at: datetime
    """When the document was submitted (UTC)."""
    tenant: str = "default"
    """Tenant owning the job."""
    filename: str | None = None
    """Original file name, for humans; never used as a path."""
    media_type: str | None = None
    """MIME type if known (application/pdf, text/plain, ...); null lets the chunker sniff it."""
    model_id: str | None = None
    """Model requested for this job; null means the service default."""
    chunk_max_tokens: int | None = None
    """Per-job override of the chunk size in tokens; null means the service default."""
    chunk_overlap_tokens: int | None = None
    """Per-job override of the chunk overlap in tokens; null means the service default."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """The tasks the job asks for, each once; empty: embed only (and records written before v2). Each a
    ``TaskRequest`` record, as a dict."""
    source_key: str | None = None
    """The document's identity across versions: the key the user gave, else the absolute path or URI it was submitted
    from; null in records written before v4."""
    previous_doc_id: str | None = None
    """The doc_id of the version of the same source that was current when this one was submitted: its chunks' stored
    results are reused for the chunks whose text is unchanged. Null: no earlier version (and in records written
    before v4)."""
    priority: str = "batch"
    """The job's lane: interactive (served first) or batch (keeps a guaranteed share); batch in records written
    before v5 (docs/operations.md "Sharing the service")."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``doc_id``."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class JobStatus(Record):
    """Progress of a job. Key: job_id. Topic: docstream.jobs. Emitted when counts change (throttled) and once more,
    with final=true, when every document is terminal."""

    schema_name: ClassVar[str] = "JobStatus"

    job_id: str
    """The job; the record key."""
    state: JobState
    """Job state."""
    document_count: int
    """Documents in the job (0 when not yet known)."""
    updated_at: datetime
    """When this status was computed (UTC)."""
    tenant: str = "default"
    """Tenant owning the job."""
    completed: int = 0
    """Documents completed."""
    partial: int = 0
    """Documents completed with some failed chunks."""
    failed: int = 0
    """Documents failed."""
    final: bool = False
    """True on the last status of the job."""
    pages: int = 0
    """Pages of the job's terminal documents (those whose page count is known)."""
    chunks: int = 0
    """Chunks of the job's terminal documents."""
    tokens: int = 0
    """Tokens of the embedded chunks of the job's terminal documents (chunk overlaps counted in each chunk)."""
    model_us: dict[str, int] = field(default_factory=dict)
    """Forward-pass microseconds of the job, per device; empty in records written before v2."""
    stage_us: dict[str, int] = field(default_factory=dict)
    """Busy microseconds of the job per stage (chunker, inference); empty in records written before v2."""
    chat_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens the chat server counted in its usage for the job's documents (the generate task), by kind: prompt,
    completion; empty for other tasks and in records written before v3."""

    @property
    def key(self) -> str:
        """The Kafka record key: ``job_id``."""
        return self.job_id


AnyRecord = ChunkCreated | ChunkResult | DocumentChunked | DocumentCompleted | DocumentSubmitted | JobStatus
"""Any record of ``schemas/``."""


RECORD_TYPES: dict[str, type[Record]] = {
    cls.schema_name: cls for cls in (
        ChunkCreated, ChunkResult, DocumentChunked, DocumentCompleted, DocumentSubmitted, JobStatus,
    )
}
"""Each record dataclass by its schema's name."""
