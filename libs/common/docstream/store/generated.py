"""The store's rows that hold records' fields, as ``docstream.store.layout`` declares them: the fields each holds
have their record field's type, default and doc unless the declaration says otherwise. Written by ``python -m
tools.gen_records``: do not edit; change the declaration or the schema and run it again (docs/architecture.md
"Adding a field")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from docstream.records import ChunkStatus, DocumentStatus, JobState
from docstream.store.layout import FLOAT32, TEXTS, DocState
from docstream.tables import TablePart
from docstream.tasks.base import EntitySummary, Mention
from docstream.tenants.usage import Usage

__all__ = [
    "ChunkRow",
    "DocumentResultRow",
    "DocumentRow",
    "JobRow",
]


@dataclass(frozen=True, slots=True)
class DocumentRow:
    """documents: ((doc_id)). A document (DocumentSubmitted) and where it is."""

    doc_id: str
    """Deterministic id derived from (job_id, content_sha256); the record key."""
    job_id: str
    """Job this document belongs to."""
    source_uri: str
    """Where the bytes live: an fsspec URL (file://, s3://, gs://) the chunker can read."""
    content_sha256: str
    """Hex SHA-256 of the document bytes."""
    status: DocState
    """Where the document is."""
    updated_at: datetime
    """When the row was last written (UTC)."""
    media_type: str | None = None
    """MIME type if known (application/pdf, text/plain, ...); null lets the chunker sniff it."""
    filename: str | None = None
    """Original file name, for humans; never used as a path."""
    page_count: int | None = None
    """Pages, once the chunker opened the document."""
    error_code: str | None = None
    """Machine-readable reason when status is failed (encrypted, corrupt, empty, not_a_document, no_text, too_large,
    too_many_pages, timeout, fetch_failed)."""
    error: str | None = None
    """Human-readable reason when status is failed or partial."""
    pages_by_verdict: dict[str, int] = field(default_factory=dict)
    """Pages by quality verdict, once chunked (docs/chunking.md "Provenance"); empty before."""
    pages_by_source: dict[str, int] = field(default_factory=dict)
    """Pages by where their text came from (text_layer, ocr), once chunked; empty before."""
    source_key: str | None = None
    """The document's identity across versions: the key the user gave, else the absolute path or URI it was submitted
    from; null in records written before v4."""
    previous_doc_id: str | None = None
    """The doc_id of the version of the same source that was current when this one was submitted: its chunks' stored
    results are reused for the chunks whose text is unchanged. Null: no earlier version (and in records written
    before v4)."""
    generation: int | None = None
    """Its place among its source's versions (``SourceRow.generation`` when it became current); None: a document
    without a source, or written before generations (it reads as 0). Written by ``set_document_generation`` alone,
    never by the row's upsert."""
    deleted_at: datetime | None = None
    """When it was deleted (``docstream.store.sources``); written by ``mark_document_deleted`` alone, never by the
    row's upsert, so a writer that read the row before the delete cannot bring it back."""


@dataclass(frozen=True, slots=True)
class DocumentResultRow:
    """document_results: ((doc_id), model_id). A document's result of one task's model (DocumentCompleted)."""

    doc_id: str
    """The document; the record key."""
    model_id: str
    """Model of the results (a task's: docs/tasks.md)."""
    job_id: str
    """Job of the document."""
    status: DocumentStatus
    """Terminal status."""
    chunk_count: int
    """Chunks in the document."""
    failed_chunks: int
    """Chunks whose inference failed."""
    token_count: int
    """Tokens over all embedded chunks."""
    embedding: Sequence[float]
    """Document embedding: mean of chunk embeddings weighted by token_count; empty when failed."""
    chunker_settings: str
    """Canonical chunker settings the document was chunked with (see ChunkCreated); empty for results that predate
    v2."""
    completed_at: datetime
    """When the document became terminal (UTC)."""
    content_sha256: str | None = None
    """Hex SHA-256 of the document bytes, when known."""
    runtime: str | None = None
    """Runtime the chunk embeddings were made with (see ChunkResult.runtime; the first one a chunk result carried);
    null when none carried one (failed before inference, results before v3)."""
    task: str = "embed"
    """The task of the results (docs/tasks.md); the fields below are that task's, the others empty."""
    label_scores: dict[str, float] = field(default_factory=dict)
    """classify: score per label, the token-weighted mean of the chunks' scores (sums to 1); empty for other tasks."""
    top_label: str | None = None
    """classify: the label with the highest score; null for other tasks."""
    top_chunks: tuple[int, ...] = ()
    """classify: indices of the chunks that scored highest for top_label, best first (at most 3)."""
    mentions: tuple[Mention, ...] = ()
    """entities: every mention once, in document order, after the duplicates of the chunk overlap are merged; empty
    for other tasks."""
    entities: tuple[EntitySummary, ...] = ()
    """entities: the distinct entities (label, normalised text) with counts and pages; empty for other tasks."""
    mentions_truncated: bool = False
    """entities: the document had more mentions than the reducer keeps (tasks.entities.max_document_mentions); the
    ones with the lowest offsets are kept."""
    output: str | None = None
    """A user task's document result, as JSON; null for the built-in tasks."""


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """chunks: ((doc_id), model_id, chunk_index). A chunk (ChunkCreated) and its result of one task's model
    (ChunkResult)."""

    doc_id: str
    """Document this chunk belongs to; the record key."""
    model_id: str
    """Model (and revision) that produced the embedding."""
    chunk_index: int
    """0-based position of the chunk in the document."""
    chunk_id: str
    """Deterministic id from (content_sha256, chunker settings, chunk_index)."""
    job_id: str
    """Job of the document."""
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
    embedding: Sequence[float]
    """The embedding vector; empty when status is failed."""
    status: ChunkStatus = "ok"
    """Outcome for this chunk."""
    error_code: str | None = None
    """Machine-readable failure code when status is failed."""
    heading: str | None = None
    """Section heading in force at the chunk start, when the document reveals one."""
    text_source: str = "text_layer"
    """Where the chunk's text came from: text_layer (the document's own text) or ocr (any of its pages was read by
    OCR); text_layer in records written before v3."""
    ocr_engine: str | None = None
    """The OCR engine that read the chunk's OCR pages (tesseract, rapidocr) when text_source is ocr; else null."""
    page_verdicts: tuple[str, ...] = ()
    """Quality verdict of each of the chunk's pages, page_start to page_end (ok, no_text_layer, unmapped, mojibake,
    ok_with_ocr_layer: docs/chunking.md); empty in records written before v3."""
    page_reasons: tuple[str, ...] = ()
    """Why each of the chunk's pages kept the text it kept, page_start to page_end (text_layer, layer_redecoded,
    ocr_reads_better, ocr_forced, ocr_not_better, ocr_unavailable_for_script, ocr_unavailable, ocr_failed,
    ocr_off: docs/chunking.md "Provenance"); empty in records written before v5."""
    kind: str = "text"
    """What the chunk holds: text, or table (one part of a table found on a born-digital page, its text the part's
    Markdown: docs/chunking.md "Tables"); text in records written before v6."""
    table_part: TablePart | None = None
    """The table part of a ``table`` chunk (``ChunkCreated.table``, typed): page, bbox, caption, header, cells; None
    for a text chunk."""
    page_furniture: Annotated[tuple[str, ...], TEXTS] = ()
    """Running heads, page numbers and footers of the chunk's pages that left its text (chunker.furniture auto: short
    text repeated at the same place on the pages around; docs/chunking.md "Page furniture"), each once, in page
    order; empty with furniture off and in records written before v10."""
    task: str = "embed"
    """The task that made the result: embed, classify, entities or a user task; embed in records written before v5."""
    label_scores: Annotated[dict[str, float], FLOAT32] = field(default_factory=dict)
    """classify: the chunk's score per label (they sum to 1); empty for other tasks."""
    mentions: tuple[Mention, ...] = ()
    """entities: the chunk's mentions, in document offsets (a mention's ``cut`` is not stored)."""
    output: str | None = None
    """A user task's output for the chunk, as JSON; null for the built-in tasks."""


@dataclass(frozen=True, slots=True)
class JobRow:
    """jobs: ((job_id)). A job (JobStatus): what its submission asked, and its counts as its last status gives them."""

    job_id: str
    """The job; the record key."""
    tenant: str
    """Tenant owning the job."""
    created_at: datetime
    """When the job was created (UTC)."""
    status: JobState
    """Where the job is: running, then the state it ended in."""
    document_count: int
    """Documents in the job (0 when not yet known)."""
    options: dict[str, str] = field(default_factory=dict)
    """What the job's submission asked (lane, tasks, model, chunk sizes), as the store keeps it: read it through
    ``docstream.records.JobOptions.from_mapping``."""
    webhook_url: str | None = None
    """Where the job's final status is posted; null: nowhere."""
    completed: int = 0
    """Documents completed."""
    partial: int = 0
    """Documents completed with some failed chunks."""
    failed: int = 0
    """Documents failed."""
    updated_at: datetime | None = None
    """When its counts last changed (UTC); null before the first document ended."""
    usage: Usage | None = None
    """What the job's terminal documents cost (the reducer's totals); null: nothing counted yet."""
