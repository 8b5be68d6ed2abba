"""TableStore: the ResultStore methods both backends share, over a few queries each backend writes.

A backend (``SqliteStore``, ``CassandraStore``) supplies its :class:`~docstream.store.rows.ColumnEncoding`,
one upsert, one update of some columns, one map-entry write and one read by primary key for any table, the
three keyset page queries and a document's result rows;
everything between those queries and the rows — which columns, in which order, how a row
is built back, limits and paging — is here and in :mod:`docstream.store.rows`, once. What
only one backend does (Cassandra's logged jobs batch, chunk writes, search, migrations)
stays in that backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from docstream.errors import StoreError
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocState,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    QueuedJobRow,
    SourceRow,
    TaskTally,
)
from docstream.store.paging import at_least_one, keyset_rows
from docstream.store.rows import (
    API_KEY_ROWS,
    CHUNK_ROWS,
    DOCUMENT_RESULT_ROWS,
    DOCUMENT_ROWS,
    JOB_DOCUMENT_ROWS,
    JOB_DOCUMENTS,
    JOB_ROWS,
    QUEUE_ROWS,
    SOURCE_ROWS,
    USAGE_COLUMNS,
    ColumnEncoding,
    Columns,
    RowMapping,
    Table,
    task_tally_to_json,
    usage_to_columns,
)
from docstream.tasks.base import check_task_name
from docstream.tenants.usage import Usage

__all__ = ["MAX_RESULTS_PER_DOCUMENT", "TableStore"]

MAX_RESULTS_PER_DOCUMENT = 64
"""Most document_results rows ``list_document_results`` reads of one document (one per model_id: a job's
tasks, at most 8, and the models of replays beside them)."""

R = TypeVar("R")

_STATUS_COLUMNS = ("status", "error_code", *USAGE_COLUMNS, "updated_at")
_KEPT_BY_DOCUMENTS = ("status", "job_id", "content_sha256")
"""The documents columns a conditional write is decided on (``write_document_unless``)."""
_KEPT_BY_JOB_DOCUMENTS = ("status",)
_CAS_ROUNDS = 8
"""Compare-and-set rounds of one conditional write before it gives up (``store_cas_contended``, retryable): each
round lost means another writer changed the row between this one's read and its write."""


def _doc_id(row: JobDocumentRow) -> str:
    return row.doc_id


def _chunk_index(row: ChunkRow) -> int:
    return row.chunk_index


class TableStore(ABC):
    """The row reads and writes of ``ResultStore``, written once over a backend's queries.

    A subclass sets ``_encoding`` (how it stores timestamps, options, absent text) and
    ``_page_size`` (rows per ``iter_chunks`` query), and implements ``_upsert``, ``_update``, ``_set_entry``,
    ``_get``, ``_document_results_of`` and the page queries ``_jobs_page``, ``_job_documents_page``,
    ``_chunks_page``: rows strictly after a key, ordered by it, at most ``limit`` of them, read by column name.
    """

    _encoding: ClassVar[ColumnEncoding]
    _page_size: int

    # -- what a backend writes -------------------------------------------------------

    @abstractmethod
    def _upsert(self, table: Table, values: Sequence[Any], operation: str) -> None:
        """Write one row: ``values`` in ``table.columns`` order."""

    @abstractmethod
    def _put_if(self, table: Table, values: Sequence[Any], expected: Mapping[str, Any] | None,
                operation: str) -> tuple[bool, Columns | None]:
        """Write one row (``values`` in ``table.columns`` order) only while the row stands as ``expected``.

        ``expected``: the stored values of some columns the row must still hold (None: no row may stand). Decided
        atomically against every other writer of the row. Returns whether it was written, and when not, the row
        that stands (None: none does).
        """

    @abstractmethod
    def _get(self, table: Table, key: Sequence[Any], operation: str) -> Columns | None:
        """The row of ``table`` whose primary key (``table.key`` order) is ``key``, or ``None``."""

    @abstractmethod
    def _update(self, table: Table, key: Sequence[Any], columns: Sequence[str], values: Sequence[Any],
                operation: str) -> None:
        """Write only ``columns`` (``values`` in their order) of the row whose key is ``key``, creating it if absent.

        Every other column of an existing row stays as it is.
        """

    @abstractmethod
    def _set_entry(self, table: Table, key: Sequence[Any], column: str, entry: tuple[str, str],
                   also: Mapping[str, Any], created: Mapping[str, Any], operation: str) -> None:
        """Set one entry (name, text) of the text map ``column`` of one row, and the ``also`` columns, atomically.

        Other entries stay: two writers of different entries both land, whatever their order. A row the
        write creates also gets ``created`` where the backend cannot leave those columns empty (SQLite's
        NOT NULL); a backend that can writes nothing for them, and they read back as the same values.
        """

    @abstractmethod
    def _document_results_of(self, doc_id: str, limit: int) -> Sequence[Columns]:
        """A document's document_results rows, by model_id, at most ``limit``."""

    @abstractmethod
    def _jobs_page(self, tenant: str, after: str, limit: int) -> Sequence[Columns]:
        """A tenant's jobs with job_id > ``after``, by job_id."""

    @abstractmethod
    def _job_documents_page(self, job_id: str, after: str, limit: int) -> Sequence[Columns]:
        """A job's documents with doc_id > ``after``, by doc_id."""

    @abstractmethod
    def _delete(self, table: Table, key: Sequence[Any], operation: str) -> None:
        """Delete one row by its primary key (nothing when there is none)."""

    @abstractmethod
    def _chunks_page(self, doc_id: str, model_id: str, after: int, limit: int) -> Sequence[Columns]:
        """A document's chunks of one model with chunk_index > ``after``, by chunk_index."""

    # -- one row by its key, through its table's mapping ------------------------------

    def _put(self, mapping: RowMapping[R], row: R, operation: str) -> None:
        """Upsert one row of ``mapping``'s table."""
        self._upsert(mapping.table, mapping.to_columns(row, self._encoding), operation)

    def _put_unless(self, mapping: RowMapping[R], row: R, keep: Callable[[R], bool], compared: tuple[str, ...],
                    operation: str) -> bool:
        """Upsert one row unless ``keep`` says the row that stands stays, decided on the row as it stands at the
        write: a compare-and-set on ``compared`` (the columns ``keep`` reads), read again and decided again when
        another writer changed them in between.

        Raises:
            StoreError: the write failed transiently, or lost ``_CAS_ROUNDS`` rounds in a row (``store_cas_contended``).
        """
        table = mapping.table
        values = mapping.to_columns(row, self._encoding)
        found = self._get(table, table.key_of(values), operation)
        for _ in range(_CAS_ROUNDS):
            if found is not None and keep(mapping.from_columns(found, self._encoding)):
                return False
            expected = None if found is None else {name: found[name] for name in compared}
            written, found = self._put_if(table, values, expected, operation)
            if written:
                return True
        raise StoreError(f"{operation}: the row changed under {_CAS_ROUNDS} writes in a row",
                         code="store_cas_contended")

    def _read(self, mapping: RowMapping[R], key: tuple[Any, ...], operation: str) -> R | None:
        """One row of ``mapping``'s table by its key, or None."""
        found = self._get(mapping.table, key, operation)
        return None if found is None else mapping.from_columns(found, self._encoding)

    # -- jobs ------------------------------------------------------------------------

    def upsert_job(self, row: JobRow) -> None:
        """Write a jobs row.

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(JOB_ROWS, row, "upsert_job")

    def get_job(self, job_id: str) -> JobRow | None:
        """Read a jobs row.

        Raises:
            StoreError: the read failed transiently.
        """
        return self._read(JOB_ROWS, (job_id,), "get_job")

    def list_jobs(self, tenant: str, *, limit: int = 50, after: str | None = None) -> list[JobRow]:
        """A tenant's jobs ordered by job_id, strictly after ``after`` (paging).

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        at_least_one("limit", limit)
        return [JOB_ROWS.from_columns(found, self._encoding) for found in self._jobs_page(tenant, after or "", limit)]

    # -- documents -------------------------------------------------------------------

    def upsert_job_document(self, row: JobDocumentRow) -> None:
        """Write a job_documents row.

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(JOB_DOCUMENT_ROWS, row, "upsert_job_document")

    def upsert_job_document_task(self, job_id: str, doc_id: str, task: str, tally: TaskTally,
                                 updated_at: datetime) -> None:
        """Set one task's entry of a job_documents row, and its updated_at; other entries stay (idempotent).

        A row this creates holds no status (SQLite: ``submitted``, as it reads on both backends), no filename.

        Raises:
            InputError: ``task`` is not a task name (``task_invalid``).
            StoreError: the write failed transiently.
        """
        check_task_name(task)
        self._set_entry(JOB_DOCUMENTS, (job_id, doc_id), "tasks", (task, task_tally_to_json(tally)),
                        {"updated_at": self._encoding.timestamp(updated_at)}, {"status": "submitted"},
                        "upsert_job_document_task")

    def write_job_document_unless(self, row: JobDocumentRow, keep: Callable[[JobDocumentRow], bool]) -> bool:
        """Write a job_documents row unless the one that stands is to stay (``keep`` of it is true): as
        ``write_document_unless``, by compare-and-set on its status alone (``keep`` reads no other column). Its
        ``tasks`` entries are left as they are. Returns whether the row was written.

        Raises:
            StoreError: the write failed transiently; ``store_cas_unknown``: it may or may not have landed.
        """
        return self._put_unless(JOB_DOCUMENT_ROWS, row, keep, _KEPT_BY_JOB_DOCUMENTS, "write_job_document_unless")

    def update_job_document_status(self, job_id: str, doc_id: str, status: DocState, error_code: str | None,
                                   usage: Usage | None, updated_at: datetime) -> None:
        """Set only status, error_code, usage and updated_at of a job_documents row (filename and tasks stay).

        Raises:
            StoreError: the write failed transiently.
        """
        encoding = self._encoding
        values = (status, encoding.text(error_code), *usage_to_columns(usage, encoding), encoding.timestamp(updated_at))
        self._update(JOB_DOCUMENTS, (job_id, doc_id), _STATUS_COLUMNS, values, "update_job_document_status")

    def list_job_documents(self, job_id: str, *, limit: int = 100, after: str | None = None) -> list[JobDocumentRow]:
        """One page of a job's documents ordered by doc_id, strictly after ``after``.

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        at_least_one("limit", limit)
        return self._job_documents(job_id, after or "", limit)

    def iter_job_documents(self, job_id: str, *, page_size: int = 500) -> Iterator[JobDocumentRow]:
        """Stream a job's documents ordered by doc_id, fetched page by page (keyset paging).

        Raises:
            ValueError: page_size < 1.
            StoreError: a page read failed transiently.
        """

        def _page(after: str, limit: int) -> list[JobDocumentRow]:
            return self._job_documents(job_id, after, limit)

        return keyset_rows(_page, start="", key=_doc_id, page_size=page_size)

    def _job_documents(self, job_id: str, after: str, limit: int) -> list[JobDocumentRow]:
        page = self._job_documents_page(job_id, after, limit)
        return [JOB_DOCUMENT_ROWS.from_columns(found, self._encoding) for found in page]

    def upsert_document(self, row: DocumentRow) -> None:
        """Write a documents row.

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(DOCUMENT_ROWS, row, "upsert_document")

    def write_document_unless(self, row: DocumentRow, keep: Callable[[DocumentRow], bool]) -> bool:
        """Write a documents row unless the one that stands is to stay (``keep`` of it is true).

        Decided on the row as it stands at the write, by compare-and-set on its status, job and bytes (a
        lightweight transaction on Cassandra, a transaction on SQLite), so a writer that moves the row on between
        this one's read and its write is never overwritten by a decision made before it. ``keep`` must read no
        more of the row than those three columns. Returns whether the row was written.

        Raises:
            StoreError: the write failed transiently; ``store_cas_unknown``: it may or may not have landed (a
                second call decides on what stands).
        """
        return self._put_unless(DOCUMENT_ROWS, row, keep, _KEPT_BY_DOCUMENTS, "write_document_unless")

    def get_document(self, doc_id: str) -> DocumentRow | None:
        """Read a documents row.

        Raises:
            StoreError: the read failed transiently.
        """
        return self._read(DOCUMENT_ROWS, (doc_id,), "get_document")

    def upsert_document_result(self, row: DocumentResultRow) -> None:
        """Write a document_results row.

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(DOCUMENT_RESULT_ROWS, row, "upsert_document_result")

    def get_document_result(self, doc_id: str, model_id: str) -> DocumentResultRow | None:
        """Read a document_results row.

        Raises:
            StoreError: the read failed transiently.
        """
        return self._read(DOCUMENT_RESULT_ROWS, (doc_id, model_id), "get_document_result")

    def list_document_results(self, doc_id: str) -> list[DocumentResultRow]:
        """Every document_results row of a document (one per model_id), by model_id.

        At most ``MAX_RESULTS_PER_DOCUMENT`` rows, the first by model_id.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._document_results_of(doc_id, MAX_RESULTS_PER_DOCUMENT)
        return [DOCUMENT_RESULT_ROWS.from_columns(row, self._encoding) for row in found]

    # -- chunks ----------------------------------------------------------------------

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        """Stream a document's chunks for one model by chunk_index, ``page_size`` rows per query.

        Raises:
            StoreError: a page read failed transiently.
        """

        def _page(after: int, limit: int) -> list[ChunkRow]:
            return self._chunks(doc_id, model_id, after, limit)

        return keyset_rows(_page, start=-1, key=_chunk_index, page_size=self._page_size)

    def list_chunks(self, doc_id: str, model_id: str, *, limit: int = 100, after: int = -1) -> list[ChunkRow]:
        """One page of a document's chunks for one model by chunk_index, strictly after index ``after``.

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        at_least_one("limit", limit)
        return self._chunks(doc_id, model_id, after, limit)

    def _chunks(self, doc_id: str, model_id: str, after: int, limit: int) -> list[ChunkRow]:
        page = self._chunks_page(doc_id, model_id, after, limit)
        return [CHUNK_ROWS.from_columns(found, self._encoding) for found in page]

    # -- API keys --------------------------------------------------------------------

    def upsert_api_key(self, row: ApiKeyRow) -> None:
        """Write an api_keys row.

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(API_KEY_ROWS, row, "upsert_api_key")

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        """Read an api_keys row.

        Raises:
            StoreError: the read failed transiently.
        """
        return self._read(API_KEY_ROWS, (key_id,), "get_api_key")

    # -- sources ---------------------------------------------------------------------

    def get_source(self, tenant: str, source_key: str) -> SourceRow | None:
        """Read a sources row.

        Raises:
            StoreError: the read failed transiently.
        """
        return self._read(SOURCE_ROWS, (tenant, source_key), "get_source")

    @staticmethod
    def _same_source(stored: SourceRow | None, expected: SourceRow | None) -> bool:
        """Whether ``stored`` is the row ``expected`` names (by generation and deletion: what a swap compares)."""
        if stored is None or expected is None:
            return stored is expected
        return (stored.generation, stored.deleted_through) == (expected.generation, expected.deleted_through)

    @classmethod
    def _landed(cls, stored: SourceRow | None, row: SourceRow) -> bool:
        """Whether ``stored`` is ``row`` itself: a swap repeated after an attempt that landed counts as written."""
        return stored is not None and cls._same_source(stored, row) and stored.doc_id == row.doc_id

    def upsert_queued_job(self, row: QueuedJobRow) -> None:
        """Write a lane_queue row (a plain upsert: a write repeated leaves the same row).

        Raises:
            StoreError: the write failed transiently.
        """
        self._put(QUEUE_ROWS, row, "upsert_queued_job")

    def delete_queued_job(self, lane: str, job_id: str) -> None:
        """Delete a lane_queue row (nothing when there is none; on Cassandra a tombstone in the lane's partition,
        which the table's short gc_grace_seconds drops soon).

        Raises:
            StoreError: the write failed transiently.
        """
        self._delete(QUEUE_ROWS.table, (lane, job_id), "delete_queued_job")
