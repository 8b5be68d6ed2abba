"""SqliteStore: the embedded ResultStore, one SQLite file with Cassandra's table shapes.

WAL mode lets readers (the CLI) run beside a writer (the inference service). Each thread
gets its own connection; every write is one upsert (``INSERT ... ON CONFLICT DO UPDATE``)
or one transaction of them, so retrying any write leaves the same rows.
"""

# ruff: noqa: S608 - statements are built only from constant column lists and the keyspace
# name (validated by CassandraSettings' pattern); every value is a bound parameter.

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from docstream.errors import FatalError, StoreError
from docstream.logging import get_logger
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    JobState,
    SearchHit,
)
from docstream.store.codec import decode_embedding, encode_embedding, none_if_empty, utc_millis
from docstream.store.ranking import TopK, cosine_scores, unit_vector
from docstream.store.schema import load_migrations

__all__ = ["SqliteStore"]

_log = get_logger(__name__)

_JOB_COLUMNS = (
    "job_id, tenant, created_at, status, document_count, options, webhook_url, completed, partial, failed, updated_at"
)
_JOB_DOCUMENT_COLUMNS = "job_id, doc_id, status, updated_at, filename, error_code"
_DOCUMENT_COLUMNS = (
    "doc_id, job_id, source_uri, content_sha256, status, updated_at, media_type, filename, page_count, "
    "error_code, error"
)
_RESULT_COLUMNS = (
    "doc_id, model_id, job_id, status, chunk_count, failed_chunks, token_count, embedding, chunker_settings, "
    "completed_at, content_sha256, runtime"
)
_CHUNK_COLUMNS = (
    "doc_id, model_id, chunk_index, chunk_id, job_id, text, page_start, page_end, char_start, char_end, "
    "token_count, embedding, heading, status, error_code"
)
_API_KEY_COLUMNS = "key_id, tenant, key_hash, created_at, name, revoked_at"

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version TEXT NOT NULL PRIMARY KEY,
    applied_at TEXT NOT NULL
)
"""


def _upsert_sql(table: str, columns: str, key: str) -> str:
    names = [name.strip() for name in columns.split(",")]
    keys = {name.strip() for name in key.split(",")}
    updates = ", ".join(f"{name} = excluded.{name}" for name in names if name not in keys)
    placeholders = ", ".join("?" for _ in names)
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT ({key}) DO UPDATE SET {updates}"


_UPSERT_JOB = _upsert_sql("jobs", _JOB_COLUMNS, "job_id")
_UPSERT_JOB_DOCUMENT = _upsert_sql("job_documents", _JOB_DOCUMENT_COLUMNS, "job_id, doc_id")
_UPSERT_DOCUMENT = _upsert_sql("documents", _DOCUMENT_COLUMNS, "doc_id")
_UPSERT_RESULT = _upsert_sql("document_results", _RESULT_COLUMNS, "doc_id, model_id")
_UPSERT_CHUNK = _upsert_sql("chunks", _CHUNK_COLUMNS, "doc_id, model_id, chunk_index")
_UPSERT_API_KEY = _upsert_sql("api_keys", _API_KEY_COLUMNS, "key_id")


def _ts(value: datetime) -> str:
    return utc_millis(value).isoformat(timespec="milliseconds")


def _ts_or_none(value: datetime | None) -> str | None:
    return None if value is None else _ts(value)


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _dt_or_none(value: str | None) -> datetime | None:
    return None if value is None else _dt(value)


class SqliteStore:
    """ResultStore on one SQLite file (the embedded default).

    Args:
        path: the database file; its folder is created on first use.
        page_size: rows fetched per query by ``iter_chunks`` and scanned per step by ``search``.
        busy_timeout_s: how long a write waits for another writer's lock before ``StoreError``.

    Raises:
        ValueError: page_size < 1 or busy_timeout_s < 0.
    """

    def __init__(self, path: Path, *, page_size: int = 1000, busy_timeout_s: float = 10.0) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        if busy_timeout_s < 0:
            raise ValueError("busy_timeout_s must not be negative")
        self._path = Path(path)
        self._page_size = page_size
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: dict[threading.Thread, sqlite3.Connection] = {}
        self._closed = False

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    # -- connections ---------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._lock:
            if self._closed:
                raise FatalError("store is closed", code="store_closed")
            self._close_dead_threads()
            conn = self._open()
            self._connections[threading.current_thread()] = conn
        self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # autocommit (isolation_level=None): each upsert is its own statement; multi-row
            # writes open explicit transactions. The connection never leaves its thread.
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open SQLite store {self._path}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot open SQLite store {self._path}: {exc}") from exc
        return conn

    def _close_dead_threads(self) -> None:
        for thread in [t for t in self._connections if not t.is_alive()]:
            self._connections.pop(thread).close()

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise FatalError(
                    f"SQLite store {self._path} is not migrated: {exc}", code="store_not_migrated"
                ) from exc
            raise StoreError(f"SQLite {operation} failed: {exc}") from exc

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _one(self, sql: str, params: Sequence[Any], operation: str) -> tuple[Any, ...] | None:
        with self._errors(operation):
            row: tuple[Any, ...] | None = self._connection().execute(sql, params).fetchone()
            return row

    def _all(self, sql: str, params: Sequence[Any], operation: str) -> list[tuple[Any, ...]]:
        with self._errors(operation):
            return self._connection().execute(sql, params).fetchall()

    def _write(self, sql: str, params: Sequence[Any], operation: str) -> None:
        with self._errors(operation):
            self._connection().execute(sql, params)

    # -- lifecycle -----------------------------------------------------------------

    def migrate(self) -> None:
        """Apply the pending SQL migrations, each once (idempotent; safe from several processes).

        Raises:
            StoreError: the file cannot be opened or stays locked past the busy timeout.
        """
        conn = self._connection()
        with self._errors("migrate"):
            conn.execute(_MIGRATIONS_TABLE)
            # BEGIN IMMEDIATE takes the write lock first: a second migrating process waits,
            # then sees the versions the first one recorded.
            with self._transaction(conn):
                applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
                for migration in load_migrations("sql"):
                    if migration.version in applied:
                        continue
                    for statement in migration.render():
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                        (migration.version, _ts(datetime.now(UTC))),
                    )
                    _log.info("store_migration_applied", backend="sqlite", version=migration.version)

    def pending_migrations(self) -> list[str]:
        """Versions of the packaged migrations not yet applied to this file.

        Raises:
            StoreError: the file cannot be opened.
        """
        with self._errors("pending_migrations"):
            conn = self._connection()
            conn.execute(_MIGRATIONS_TABLE)
            applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        return [m.version for m in load_migrations("sql") if m.version not in applied]

    def applied_migrations(self) -> dict[str, datetime]:
        """Applied versions and when each was applied.

        Raises:
            StoreError: the file cannot be opened.
        """
        with self._errors("applied_migrations"):
            conn = self._connection()
            conn.execute(_MIGRATIONS_TABLE)
            rows = conn.execute("SELECT version, applied_at FROM schema_migrations ORDER BY version").fetchall()
        return {version: _dt(applied_at) for version, applied_at in rows}

    def ping(self) -> None:
        """Raise ``StoreError`` unless the database answers.

        Raises:
            StoreError: the file cannot be opened or read.
        """
        self._one("SELECT 1", (), "ping")

    def close(self) -> None:
        """Close every connection of every thread; later calls raise ``FatalError``."""
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
        self._local = threading.local()

    # -- jobs ----------------------------------------------------------------------

    def upsert_job(self, row: JobRow) -> None:
        """Write a jobs row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.job_id,
            row.tenant,
            _ts(row.created_at),
            row.status,
            row.document_count,
            json.dumps(dict(sorted(row.options.items()))),
            none_if_empty(row.webhook_url),
            row.completed,
            row.partial,
            row.failed,
            _ts_or_none(row.updated_at),
        )
        self._write(_UPSERT_JOB, params, "upsert_job")

    def get_job(self, job_id: str) -> JobRow | None:
        """Read a jobs row.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,), "get_job")
        return None if found is None else _job(found)

    def list_jobs(self, tenant: str, *, limit: int = 50, after: str | None = None) -> list[JobRow]:
        """A tenant's jobs ordered by job_id, strictly after ``after`` (paging).

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        rows = self._all(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant = ? AND job_id > ? ORDER BY job_id LIMIT ?",
            (tenant, after or "", limit),
            "list_jobs",
        )
        return [_job(found) for found in rows]

    def set_job_status(self, job_id: str, tenant: str, status: JobState, updated_at: datetime) -> None:
        """Set only the status and updated_at of a jobs row (no row: nothing happens).

        Raises:
            StoreError: the write failed transiently.
        """
        self._write(
            "UPDATE jobs SET status = ?, updated_at = ? WHERE job_id = ? AND tenant = ?",
            (status, _ts(updated_at), job_id, tenant),
            "set_job_status",
        )

    # -- documents -----------------------------------------------------------------

    def upsert_job_document(self, row: JobDocumentRow) -> None:
        """Write a job_documents row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.job_id,
            row.doc_id,
            row.status,
            _ts(row.updated_at),
            none_if_empty(row.filename),
            none_if_empty(row.error_code),
        )
        self._write(_UPSERT_JOB_DOCUMENT, params, "upsert_job_document")

    def iter_job_documents(self, job_id: str, *, page_size: int = 500) -> Iterator[JobDocumentRow]:
        """Stream a job's documents ordered by doc_id, fetched page by page (keyset paging).

        Raises:
            ValueError: page_size < 1.
            StoreError: a page read failed transiently.
        """
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        return self._iter_job_documents(job_id, page_size)

    def _iter_job_documents(self, job_id: str, page_size: int) -> Iterator[JobDocumentRow]:
        after = ""
        while True:
            page = self._job_documents_page(job_id, after, page_size)
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].doc_id

    def list_job_documents(self, job_id: str, *, limit: int = 100, after: str | None = None) -> list[JobDocumentRow]:
        """One page of a job's documents ordered by doc_id, strictly after ``after``.

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return self._job_documents_page(job_id, after or "", limit)

    def _job_documents_page(self, job_id: str, after: str, limit: int) -> list[JobDocumentRow]:
        page = self._all(
            f"SELECT {_JOB_DOCUMENT_COLUMNS} FROM job_documents "
            "WHERE job_id = ? AND doc_id > ? ORDER BY doc_id LIMIT ?",
            (job_id, after, limit),
            "list_job_documents",
        )
        return [
            JobDocumentRow(
                job_id=found[0],
                doc_id=found[1],
                status=found[2],
                updated_at=_dt(found[3]),
                filename=found[4],
                error_code=found[5],
            )
            for found in page
        ]

    def upsert_document(self, row: DocumentRow) -> None:
        """Write a documents row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.doc_id,
            row.job_id,
            row.source_uri,
            row.content_sha256,
            row.status,
            _ts(row.updated_at),
            none_if_empty(row.media_type),
            none_if_empty(row.filename),
            row.page_count,
            none_if_empty(row.error_code),
            none_if_empty(row.error),
        )
        self._write(_UPSERT_DOCUMENT, params, "upsert_document")

    def get_document(self, doc_id: str) -> DocumentRow | None:
        """Read a documents row.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(
            f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE doc_id = ?", (doc_id,), "get_document"
        )
        if found is None:
            return None
        return DocumentRow(
            doc_id=found[0],
            job_id=found[1],
            source_uri=found[2],
            content_sha256=found[3],
            status=found[4],
            updated_at=_dt(found[5]),
            media_type=found[6],
            filename=found[7],
            page_count=found[8],
            error_code=found[9],
            error=found[10],
        )

    def upsert_document_result(self, row: DocumentResultRow) -> None:
        """Write a document_results row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.doc_id,
            row.model_id,
            row.job_id,
            row.status,
            row.chunk_count,
            row.failed_chunks,
            row.token_count,
            encode_embedding(row.embedding),
            row.chunker_settings,
            _ts(row.completed_at),
            none_if_empty(row.content_sha256),
            row.runtime,
        )
        self._write(_UPSERT_RESULT, params, "upsert_document_result")

    def get_document_result(self, doc_id: str, model_id: str) -> DocumentResultRow | None:
        """Read a document_results row.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(
            f"SELECT {_RESULT_COLUMNS} FROM document_results WHERE doc_id = ? AND model_id = ?",
            (doc_id, model_id),
            "get_document_result",
        )
        if found is None:
            return None
        return DocumentResultRow(
            doc_id=found[0],
            model_id=found[1],
            job_id=found[2],
            status=found[3],
            chunk_count=found[4],
            failed_chunks=found[5],
            token_count=found[6],
            embedding=decode_embedding(found[7]),
            chunker_settings=found[8],
            completed_at=_dt(found[9]),
            content_sha256=found[10],
            runtime=found[11],
        )

    # -- chunks --------------------------------------------------------------------

    def upsert_chunks(self, rows: Sequence[ChunkRow]) -> None:
        """Write chunk rows in one transaction; returns when it is committed.

        Raises:
            StoreError: the write failed transiently (nothing of it was written).
        """
        if not rows:
            return
        params = [_chunk_params(row) for row in rows]
        conn = self._connection()
        with self._errors("upsert_chunks"), self._transaction(conn):
            conn.executemany(_UPSERT_CHUNK, params)

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        """Stream a document's chunks for one model by chunk_index, ``page_size`` rows per query.

        Raises:
            StoreError: a page read failed transiently.
        """
        after = -1
        while True:
            page = self._all(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks "
                "WHERE doc_id = ? AND model_id = ? AND chunk_index > ? ORDER BY chunk_index LIMIT ?",
                (doc_id, model_id, after, self._page_size),
                "iter_chunks",
            )
            yield from (_chunk(found) for found in page)
            if len(page) < self._page_size:
                return
            after = page[-1][2]

    def count_chunks(self, doc_id: str, model_id: str) -> int:
        """Number of chunk rows of a document for one model.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(
            "SELECT COUNT(*) FROM chunks WHERE doc_id = ? AND model_id = ?", (doc_id, model_id), "count_chunks"
        )
        return int(found[0]) if found else 0

    def search(
        self, embedding: Sequence[float], model_id: str, *, k: int = 10, job_id: str | None = None
    ) -> list[SearchHit]:
        """Nearest chunks by exact cosine similarity, best first.

        Scans the model's rows (or one job's) ``page_size`` at a time, keeping only the k best.
        Chunks without an embedding, or of another dimension, never match.

        Raises:
            ValueError: k < 1, or the embedding is empty, zero or not finite.
            StoreError: a read failed transiently.
        """
        query = unit_vector(embedding)
        best: TopK[int] = TopK(k)
        where = "model_id = ?" + (" AND job_id = ?" if job_id is not None else "")
        filters: tuple[Any, ...] = (model_id,) if job_id is None else (model_id, job_id)
        blob_size = query.size * 4
        after = 0
        while True:
            page = self._all(
                f"SELECT rowid, embedding FROM chunks WHERE {where} AND rowid > ? "
                "ORDER BY rowid LIMIT ?",
                (*filters, after, self._page_size),
                "search",
            )
            usable = [(rowid, blob) for rowid, blob in page if len(blob) == blob_size]
            if usable:
                matrix = np.frombuffer(b"".join(blob for _, blob in usable), dtype="<f4").reshape(len(usable), -1)
                best.offer(cosine_scores(matrix, query), [rowid for rowid, _ in usable])
            if len(page) < self._page_size:
                break
            after = page[-1][0]
        return self._hits(best.best())

    def _hits(self, ranked: list[tuple[float, int]]) -> list[SearchHit]:
        if not ranked:
            return []
        placeholders = ", ".join("?" for _ in ranked)
        rows = self._all(
            f"SELECT rowid, {_CHUNK_COLUMNS} FROM chunks WHERE rowid IN ({placeholders})",
            [rowid for _, rowid in ranked],
            "search",
        )
        by_rowid = {found[0]: _chunk(found[1:]) for found in rows}
        return [SearchHit(chunk=by_rowid[rowid], score=score) for score, rowid in ranked if rowid in by_rowid]


    # -- API keys ------------------------------------------------------------------

    def upsert_api_key(self, row: ApiKeyRow) -> None:
        """Write an api_keys row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.key_id,
            row.tenant,
            row.key_hash,
            _ts(row.created_at),
            none_if_empty(row.name),
            _ts_or_none(row.revoked_at),
        )
        self._write(_UPSERT_API_KEY, params, "upsert_api_key")

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        """Read an api_keys row.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(f"SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,), "get_api_key")
        if found is None:
            return None
        return ApiKeyRow(
            key_id=found[0],
            tenant=found[1],
            key_hash=found[2],
            created_at=_dt(found[3]),
            name=found[4],
            revoked_at=_dt_or_none(found[5]),
        )


def _chunk_params(row: ChunkRow) -> tuple[Any, ...]:
    return (
        row.doc_id,
        row.model_id,
        row.chunk_index,
        row.chunk_id,
        row.job_id,
        row.text,
        row.page_start,
        row.page_end,
        row.char_start,
        row.char_end,
        row.token_count,
        encode_embedding(row.embedding),
        none_if_empty(row.heading),
        row.status,
        none_if_empty(row.error_code),
    )


def _chunk(found: Sequence[Any]) -> ChunkRow:
    return ChunkRow(
        doc_id=found[0],
        model_id=found[1],
        chunk_index=found[2],
        chunk_id=found[3],
        job_id=found[4],
        text=found[5],
        page_start=found[6],
        page_end=found[7],
        char_start=found[8],
        char_end=found[9],
        token_count=found[10],
        embedding=decode_embedding(found[11]),
        heading=found[12],
        status=found[13],
        error_code=found[14],
    )


def _job(found: Sequence[Any]) -> JobRow:
    return JobRow(
        job_id=found[0],
        tenant=found[1],
        created_at=_dt(found[2]),
        status=found[3],
        document_count=found[4],
        options=dict(json.loads(found[5])),
        webhook_url=found[6],
        completed=found[7],
        partial=found[8],
        failed=found[9],
        updated_at=_dt_or_none(found[10]),
    )

