"""The ResultStore protocol, its narrow parts by concern, and the rows it holds (docs/storage.md).

Every write is an upsert on a primary key built from deterministic ids: writing the
same row any number of times leaves the same state. No counters, no read-before-write,
no lightweight transactions on the hot path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from docstream.records import DocumentStatus, JobState
from docstream.store.generated import ChunkRow, DocumentResultRow, DocumentRow, JobRow
from docstream.store.layout import FLOAT32, TEXTS, DocState
from docstream.tenants.admission import Slot, TenantLoad
from docstream.tenants.usage import Usage

__all__ = [
    "FLOAT32",
    "TEXTS",
    "ApiKeyRow",
    "ApiKeysStore",
    "ChunkRow",
    "DocState",
    "DocumentResultRow",
    "DocumentRow",
    "JobDocumentRow",
    "JobRow",
    "JobState",
    "JobsStore",
    "QueuedJobRow",
    "ResultStore",
    "ResultsStore",
    "SearchHit",
    "SourceRow",
    "SourcesStore",
    "TaskTally",
    "TenantLedger",
    "check_throughput",
]

# The rows that hold records' fields (ChunkRow, DocumentResultRow, DocumentRow, JobRow) are declared in
# docstream.store.layout and written from it and the schemas (docstream.store.generated); the rows below are the
# store's own.

TERMINAL_DOC_STATES: frozenset[str] = frozenset({"completed", "partial", "failed", "skipped"})
"""Document states nothing moves a document out of (a new job resubmits it under another doc_id)."""


@dataclass(frozen=True, slots=True)
class TaskTally:
    """One task's terminal status of one document and what that task cost (job_documents.tasks)."""

    status: DocumentStatus
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class JobDocumentRow:
    """job_documents: ((job_id), doc_id).

    ``status``/``usage`` are the document's in its job: for a job of one task that task's, for a job of
    several the combination the reducer counts once every task is terminal (docs/tasks.md).
    """

    job_id: str
    doc_id: str
    status: DocState
    updated_at: datetime
    filename: str | None = None
    error_code: str | None = None
    usage: Usage | None = None
    """What the document cost, once terminal (the reducer's recount reads it); None: nothing counted."""
    tasks: dict[str, TaskTally] = field(default_factory=dict)
    """Each task's terminal status and usage, by task name, as its results completed (written one entry at a
    time by ``upsert_job_document_task``; ``upsert_job_document`` leaves it alone)."""


@dataclass(frozen=True, slots=True)
class ApiKeyRow:
    """api_keys: (key_id). Holds only a hash of the key (``docstream_ingest.apikeys``)."""

    key_id: str
    tenant: str
    key_hash: str
    created_at: datetime
    name: str | None = None
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SourceRow:
    """sources: ((tenant, source_key)). A document's identity across versions and its current version: the
    last one submitted (docs/intake.md "Versions of a document")."""

    tenant: str
    source_key: str
    doc_id: str
    content_sha256: str
    job_id: str
    updated_at: datetime
    generation: int = 0
    """The current version's generation: one more than the version before, assigned by ``swap_source`` (a
    compare-and-set), so versions are ordered by submission; 0: a row written before generations."""
    deleted_through: int | None = None
    """Every version of a generation up to this one is deleted (``docstream delete``); None: never deleted."""

    @property
    def live(self) -> bool:
        """Whether the source has a version not deleted: its current one is newer than its last delete."""
        return self.deleted_through is None or self.generation > self.deleted_through


@dataclass(frozen=True, slots=True)
class QueuedJobRow:
    """lane_queue: ((lane), job_id). A job that has not ended, as the reducer sees it: the tokens of its chunked
    documents that have not ended yet (docs/operations.md "Where a job stands")."""

    lane: str
    """The lane's chunks topic (``Topics.lane``: ``docstream.chunks.interactive`` or ``docstream.chunks``): one queue
    per lane of each deployment."""
    job_id: str
    tenant: str
    created_at: datetime
    waiting_tokens: int
    ended_documents: int
    """Its documents that ended (completed, partial or failed)."""
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One result of a similarity search."""

    chunk: ChunkRow
    score: float


def check_throughput(tokens_per_s: float, ttl_s: int) -> None:
    """Refuse a throughput row no store keeps: a rate must be finite and not negative (one NaN would spoil every
    sum until it expires), a TTL at least 1 s (Cassandra's TTL 0 never expires).

    Raises:
        ValueError: tokens_per_s negative or not finite, or ttl_s < 1.
    """
    if not math.isfinite(tokens_per_s) or tokens_per_s < 0:
        raise ValueError(f"tokens_per_s must be finite and not negative, got {tokens_per_s}")
    if ttl_s < 1:
        raise ValueError(f"ttl_s must be at least 1, got {ttl_s}")


class ResultsStore(Protocol):
    """The documents and what was computed for them: documents rows, document results, chunks and their vectors
    (what the pipeline writes of each document; what the sinks, the exports and search read)."""

    def upsert_document(self, row: DocumentRow) -> None:
        """Write a documents row."""

    def write_document_unless(self, row: DocumentRow, keep: Callable[[DocumentRow], bool]) -> bool:
        """Write a documents row unless the one standing at the write is to stay (``keep`` of it, which reads its
        status, job_id and content_sha256 alone); whether it was written. A compare-and-set: a writer that moved
        the row on after this one's read is never overwritten by a decision made before it."""

    def get_document(self, doc_id: str) -> DocumentRow | None:
        """Read a documents row."""

    def upsert_document_result(self, row: DocumentResultRow) -> None:
        """Write a document_results row."""

    def get_document_result(self, doc_id: str, model_id: str) -> DocumentResultRow | None:
        """Read a document_results row."""

    def list_document_results(self, doc_id: str) -> list[DocumentResultRow]:
        """Every document_results row of a document (one per model_id: one per task), by model_id."""

    def upsert_chunks(self, rows: Sequence[ChunkRow]) -> None:
        """Write chunk rows concurrently; returns when every write is acknowledged."""

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        """Stream a document's chunks for one model, by chunk_index."""

    def list_chunks(self, doc_id: str, model_id: str, *, limit: int = 100, after: int = -1) -> list[ChunkRow]:
        """One page of a document's chunks for one model by chunk_index, strictly after index ``after``."""

    def count_chunks(self, doc_id: str, model_id: str) -> int:
        """Number of chunk rows of a document for one model."""

    def delete_results(self, doc_id: str, model_id: str) -> None:
        """Delete a document's chunk rows (and vectors) and its document_results row under one model: a retired
        version's (docs/intake.md "Versions of a document"). Deleting what is not there changes nothing."""

    def search(
        self, embedding: Sequence[float], model_id: str, *, k: int = 10, job_id: str | None = None
    ) -> list[SearchHit]:
        """Nearest chunks by cosine similarity, best first."""


class JobsStore(Protocol):
    """Jobs, their documents' rows, and where jobs stand in their lanes (docs/operations.md "Where a job stands")."""

    def upsert_job(self, row: JobRow) -> None:
        """Write a jobs row."""

    def get_job(self, job_id: str) -> JobRow | None:
        """Read a jobs row."""

    def list_jobs(self, tenant: str, *, limit: int = 50, after: str | None = None) -> list[JobRow]:
        """A tenant's jobs ordered by job_id, strictly after ``after`` (paging)."""

    def set_job_status(self, job_id: str, tenant: str, status: JobState, updated_at: datetime) -> None:
        """Set only the status and updated_at of an existing jobs row (its counts are left alone)."""

    def upsert_job_document(self, row: JobDocumentRow) -> None:
        """Write a job_documents row (its ``tasks`` entries are left as they are)."""

    def write_job_document_unless(self, row: JobDocumentRow, keep: Callable[[JobDocumentRow], bool]) -> bool:
        """Write a job_documents row unless the one standing at the write is to stay (``keep`` of it, which reads
        its status alone); whether it was written. A compare-and-set, as ``write_document_unless``."""

    def upsert_job_document_task(self, job_id: str, doc_id: str, task: str, tally: TaskTally,
                                 updated_at: datetime) -> None:
        """Set one task's entry of a job_documents row (creating the row if absent); other entries stay."""

    def update_job_document_status(self, job_id: str, doc_id: str, status: DocState, error_code: str | None,
                                   usage: Usage | None, updated_at: datetime) -> None:
        """Set only status, error_code, usage and updated_at of a job_documents row (filename and tasks stay)."""

    def list_job_documents(self, job_id: str, *, limit: int = 100, after: str | None = None) -> list[JobDocumentRow]:
        """One page of a job's documents ordered by doc_id, strictly after ``after``."""

    def iter_job_documents(self, job_id: str, *, page_size: int = 500) -> Iterator[JobDocumentRow]:
        """Stream a job's documents ordered by doc_id, fetched page by page."""

    # -- where jobs stand (written by the reducer and inference) --

    def upsert_queued_job(self, row: QueuedJobRow) -> None:
        """Write a lane_queue row: a job not ended yet, as the reducer last saw it."""

    def delete_queued_job(self, lane: str, job_id: str) -> None:
        """Delete a lane_queue row: the job ended (nothing when there is none)."""

    def list_queue(self, lane: str) -> list[QueuedJobRow]:
        """Every lane_queue row of ``lane`` (a lane's chunks topic), by created_at then job_id."""

    def record_throughput(self, name: str, instance: str, tokens_per_s: float, at: datetime, ttl_s: int) -> None:
        """Write the recent rate of reducer process ``instance`` of the deployment ``name`` (its topic prefix; its
        row replaced), which expires ``ttl_s`` after ``at``. Raises ``ValueError`` for a rate or TTL no store keeps
        (``check_throughput``)."""

    def throughput(self, name: str, at: datetime) -> float:
        """The sum of the rates of the deployment ``name``'s reducer processes whose rows have not expired at ``at``
        (0.0: none)."""


class SourcesStore(Protocol):
    """Sources and the versions of their documents (docs/intake.md "Versions of a document", "Deleting a source"):
    the sources rows, the generation and deletion columns of documents rows, and deleting a source's results."""

    def swap_source(self, expected: SourceRow | None, row: SourceRow) -> tuple[bool, SourceRow | None]:
        """Write ``row`` as its source's row only when the stored row is still ``expected`` (its generation and
        deletion; None: no row): a lightweight transaction on Cassandra, one transaction on SQLite. Every write of
        the sources table goes through here. Returns whether it was written and the row that stands now (a write
        repeated after a transient failure that had landed finds ``row`` itself: written)."""

    def get_source(self, tenant: str, source_key: str) -> SourceRow | None:
        """Read a sources row (at the store's consistency: a ``swap_source`` that returned is seen at QUORUM)."""

    def mark_document_deleted(self, doc_id: str, at: datetime) -> None:
        """Set ``deleted_at`` on a documents row (that column alone)."""

    def set_document_generation(self, doc_id: str, generation: int) -> None:
        """Set ``generation`` on a documents row (that column alone)."""

    def delete_document_rows(self, doc_id: str) -> None:
        """Delete a document's chunk rows, vectors and document_results rows under every model (its partitions).
        Its documents and job_documents rows stay."""


class TenantLedger(Protocol):
    """What each tenant has in flight and has used, for admission (docs/operations.md "Quotas and admission";
    written only for tenants with limits)."""

    def admit_documents(self, tenant: str, job_id: str, doc_ids: Sequence[str], at: datetime) -> None:
        """The tenant's documents were admitted: in flight from now (tenant_inflight)."""

    def set_document_tokens(self, tenant: str, doc_id: str, tokens: int) -> None:
        """An admitted document was chunked into ``tokens`` tokens, enqueued until it ends (a document not in
        flight stays out: a Cassandra row of tokens alone is not counted, and expires)."""

    def end_document(self, tenant: str, doc_id: str, day: str, tokens: int) -> None:
        """A document ended: out of flight, and its ``tokens`` count on the tenant's ``day`` (``YYYY-MM-DD``)."""

    def release_documents(self, tenant: str, doc_ids: Sequence[str]) -> None:
        """Free the slots of the tenant's ``doc_ids`` without counting their tokens on any day: documents that ended
        where the reducer never sees them (skipped, not delivered, found ended by reconciliation). Releasing what is
        not in flight changes nothing."""

    def list_in_flight(self, tenant: str, limit: int) -> list[Slot]:
        """At most ``limit`` of the tenant's documents in flight (admitted, not ended), by doc_id."""

    def tenant_load(self, tenant: str, day: str) -> TenantLoad:
        """The tenant's documents in flight, their enqueued tokens, and the tokens of ``day``."""

    def admission_lease(self, tenant: str) -> AbstractContextManager[None]:
        """Hold the tenant's admission lease while the block reads its load and admits: one admission at a time per
        tenant across processes. Raises ``StoreError`` (``admission_busy``) when another holds it too long."""


class ApiKeysStore(Protocol):
    """The HTTP intake API's keys (their hashes: docs/security.md)."""

    def upsert_api_key(self, row: ApiKeyRow) -> None:
        """Write an api_keys row."""

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        """Read an api_keys row."""


@runtime_checkable
class ResultStore(ResultsStore, JobsStore, SourcesStore, TenantLedger, ApiKeysStore, Protocol):
    """Where chunk and document results live, every concern of them: Cassandra in production, SQLite embedded.

    Methods block; callers on an event loop run them in a thread. Transient failures
    raise ``StoreError`` (retryable); everything else is a bug or bad config. A consumer that
    uses one concern takes its narrow protocol (``ResultsStore``, ``JobsStore``, ``SourcesStore``,
    ``TenantLedger``, ``ApiKeysStore``); what opens, migrates or closes a store takes this one.
    """

    def migrate(self) -> None:
        """Create or upgrade the schema (idempotent)."""

    def ping(self) -> None:
        """Raise ``StoreError`` unless the store answers."""

    def close(self) -> None:
        """Release connections."""
