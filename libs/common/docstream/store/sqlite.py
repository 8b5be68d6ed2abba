"""SqliteStore: the embedded ResultStore, one SQLite file with Cassandra's table shapes.

WAL mode lets readers (the CLI) run beside a writer (the inference service). Each thread
gets its own connection; every write is one upsert (``INSERT ... ON CONFLICT DO UPDATE``)
or one transaction of them, so retrying any write leaves the same rows.
"""

# ruff: noqa: S608 - statements are built only from constant column lists and the keyspace
# name (validated by CassandraSettings' pattern); every value is a bound parameter.

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from docstream.errors import FatalError, StoreError
from docstream.logging import get_logger
from docstream.store.base import (
    ChunkRow,
    JobState,
    QueuedJobRow,
    SearchHit,
    SourceRow,
    check_throughput,
)
from docstream.store.codec import none_if_empty, utc_millis
from docstream.store.leases import acquire_lease
from docstream.store.paging import at_least_one, keyset_pages
from docstream.store.ranking import TopK, cosine_scores, search_query
from docstream.store.rows import (
    CHUNK_ROWS,
    CHUNKS,
    DOCUMENT_RESULTS,
    JOB_DOCUMENTS,
    JOBS,
    QUEUE_ROWS,
    SOURCE_ROWS,
    SOURCES,
    ColumnEncoding,
    Columns,
    Table,
)
from docstream.store.schema import load_migrations
from docstream.store.table_store import TableStore
from docstream.tenants.admission import Slot, TenantLoad

__all__ = ["SqliteStore"]

_log = get_logger(__name__)
_ADMISSION_TTL_S = 30.0  # a lease of a holder that died frees after this
_ADMISSION_WAIT_S = 10.0  # how long an admission waits for another of its tenant

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version TEXT NOT NULL PRIMARY KEY,
    applied_at TEXT NOT NULL
)
"""


@functools.cache
def _row_sql(table: Table) -> str:
    """The read of one row of ``table`` by its key."""
    return f"SELECT {table.select_list} FROM {table.name} WHERE {table.key_condition}"


def _upsert_sql(table: Table) -> str:
    updates = ", ".join(f"{name} = excluded.{name}" for name in table.columns if name not in table.key)
    placeholders = ", ".join("?" for _ in table.columns)
    return (
        f"INSERT INTO {table.name} ({table.column_list}) VALUES ({placeholders}) "
        f"ON CONFLICT ({', '.join(table.key)}) DO UPDATE SET {updates}"
    )


_UPSERT_CHUNK = _upsert_sql(CHUNKS)

_PAGE_SIZE = 16384
"""Bytes of a page of a new database (SQLite's default is 4096): a chunk row with its vector is over 2 KB, and a
write of a batch of them costs about a third less in 16 KB pages (docs/performance.md)."""


def _ts(value: datetime) -> str:
    return utc_millis(value).isoformat(timespec="milliseconds")


def _options(value: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(value.items())))


def _read_options(value: str) -> dict[str, str]:
    return dict(json.loads(value))


def _counts(value: Mapping[str, int]) -> str:
    return json.dumps(dict(sorted(value.items())))


def _read_counts(value: str | None) -> dict[str, int]:
    return {str(k): int(v) for k, v in json.loads(value).items()} if value else {}


_EMPTY_STRUCTURES: dict[type, str] = {list: "[]", tuple: "[]", dict: "{}"}
"""What ``json.dumps`` writes for an empty one: most rows' task fields are empty (an embed chunk's)."""


def _structure(value: Any) -> str:
    if not value:
        empty = _EMPTY_STRUCTURES.get(type(value))
        if empty is not None:
            return empty
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _read_structure(value: str | None) -> Any:
    return json.loads(value) if value else None


# timestamps are ISO-8601 UTC text (milliseconds), options, count maps and task results JSON text, absent
# optional text NULL
_ENCODING = ColumnEncoding(
    timestamp=_ts,
    read_timestamp=datetime.fromisoformat,
    text=none_if_empty,
    options=_options,
    read_options=_read_options,
    counts=_counts,
    read_counts=_read_counts,
    structure=_structure,
    read_structure=_read_structure,
)


class SqliteStore(TableStore):
    """ResultStore on one SQLite file (the embedded default).

    Args:
        path: the database file; its folder is created on first use.
        page_size: rows fetched per query by ``iter_chunks`` and scanned per step by ``search``.
        busy_timeout_s: how long a write waits for another writer's lock before ``StoreError``.

    Raises:
        ValueError: page_size < 1 or busy_timeout_s < 0.
    """

    _encoding = _ENCODING

    def __init__(self, path: Path, *, page_size: int = 1000, busy_timeout_s: float = 10.0) -> None:
        at_least_one("page_size", page_size)
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
        # rows are read by column name (docstream.store.rows), never by position
        conn.row_factory = sqlite3.Row
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")  # takes hold only in a database not yet written
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

    def _one(self, sql: str, params: Sequence[Any], operation: str) -> sqlite3.Row | None:
        with self._errors(operation):
            row: sqlite3.Row | None = self._connection().execute(sql, params).fetchone()
            return row

    def _all(self, sql: str, params: Sequence[Any], operation: str) -> list[sqlite3.Row]:
        with self._errors(operation):
            return self._connection().execute(sql, params).fetchall()

    def _write(self, sql: str, params: Sequence[Any], operation: str) -> None:
        with self._errors(operation):
            self._connection().execute(sql, params)

    def _upsert(self, table: Table, values: Sequence[Any], operation: str) -> None:
        self._write(_upsert_sql(table), values, operation)

    def _put_if(self, table: Table, values: Sequence[Any], expected: Mapping[str, Any] | None,
                operation: str) -> tuple[bool, Columns | None]:
        # one transaction under the write lock: no writer changes the row between the read and the write
        conn = self._connection()
        with self._errors(operation), self._transaction(conn):
            found: sqlite3.Row | None = conn.execute(_row_sql(table), table.key_of(values)).fetchone()
            stands = found is not None and expected is not None and all(
                found[name] == value for name, value in expected.items())
            if not (stands or (found is None and expected is None)):
                return False, found
            conn.execute(_upsert_sql(table), values)
        return True, None

    def _delete(self, table: Table, key: Sequence[Any], operation: str) -> None:
        self._write(f"DELETE FROM {table.name} WHERE {table.key_condition}", key, operation)

    def _get(self, table: Table, key: Sequence[Any], operation: str) -> Columns | None:
        return self._one(_row_sql(table), key, operation)

    def _update(self, table: Table, key: Sequence[Any], columns: Sequence[str], values: Sequence[Any],
                operation: str) -> None:
        names = (*table.key, *columns)
        self._write(
            f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)}) "
            f"ON CONFLICT ({', '.join(table.key)}) DO UPDATE SET "
            + ", ".join(f"{name} = excluded.{name}" for name in columns),
            (*key, *values),
            operation,
        )

    def _set_entry(self, table: Table, key: Sequence[Any], column: str, entry: tuple[str, str],
                   also: Mapping[str, Any], created: Mapping[str, Any], operation: str) -> None:
        # one UPSERT, atomic under the write lock; json_patch adds or replaces only this entry (its value is a
        # JSON string, so the merge never reaches into another entry)
        name, value = entry
        names = (*table.key, *also, *created)
        self._write(
            f"INSERT INTO {table.name} ({', '.join(names)}, {column}) "
            f"VALUES ({', '.join('?' for _ in names)}, json_object(?, ?)) "
            f"ON CONFLICT ({', '.join(table.key)}) DO UPDATE SET "
            f"{column} = json_patch(coalesce({column}, '{{}}'), excluded.{column})"
            + "".join(f", {other} = excluded.{other}" for other in also),
            (*key, *also.values(), *created.values(), name, value),
            operation,
        )

    def _document_results_of(self, doc_id: str, limit: int) -> list[sqlite3.Row]:
        return self._all(
            f"SELECT {DOCUMENT_RESULTS.select_list} FROM document_results WHERE doc_id = ? ORDER BY model_id LIMIT ?",
            (doc_id, limit),
            "list_document_results",
        )

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
                applied = {row["version"] for row in conn.execute("SELECT version FROM schema_migrations")}
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
            applied = {row["version"] for row in conn.execute("SELECT version FROM schema_migrations")}
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
        return {row["version"]: datetime.fromisoformat(row["applied_at"]) for row in rows}

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

    def _jobs_page(self, tenant: str, after: str, limit: int) -> list[sqlite3.Row]:
        return self._all(
            f"SELECT {JOBS.select_list} FROM jobs WHERE tenant = ? AND job_id > ? ORDER BY job_id LIMIT ?",
            (tenant, after, limit),
            "list_jobs",
        )

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

    def _job_documents_page(self, job_id: str, after: str, limit: int) -> list[sqlite3.Row]:
        return self._all(
            f"SELECT {JOB_DOCUMENTS.select_list} FROM job_documents "
            "WHERE job_id = ? AND doc_id > ? ORDER BY doc_id LIMIT ?",
            (job_id, after, limit),
            "list_job_documents",
        )

    # -- chunks --------------------------------------------------------------------

    def upsert_chunks(self, rows: Sequence[ChunkRow]) -> None:
        """Write chunk rows in one transaction; returns when it is committed.

        Raises:
            StoreError: the write failed transiently (nothing of it was written).
        """
        if not rows:
            return
        params = [CHUNK_ROWS.to_columns(row, _ENCODING) for row in rows]
        conn = self._connection()
        with self._errors("upsert_chunks"), self._transaction(conn):
            conn.executemany(_UPSERT_CHUNK, params)

    def _chunks_page(self, doc_id: str, model_id: str, after: int, limit: int) -> list[sqlite3.Row]:
        return self._all(
            f"SELECT {CHUNKS.select_list} FROM chunks "
            "WHERE doc_id = ? AND model_id = ? AND chunk_index > ? ORDER BY chunk_index LIMIT ?",
            (doc_id, model_id, after, limit),
            "iter_chunks",
        )

    def delete_results(self, doc_id: str, model_id: str) -> None:
        """Delete a document's chunk rows and its document_results row under one model, in one transaction.

        Raises:
            StoreError: the write failed transiently (nothing of it was written).
        """
        conn = self._connection()
        with self._errors("delete_results"), self._transaction(conn):
            conn.execute("DELETE FROM chunks WHERE doc_id = ? AND model_id = ?", (doc_id, model_id))
            conn.execute("DELETE FROM document_results WHERE doc_id = ? AND model_id = ?", (doc_id, model_id))

    def delete_document_rows(self, doc_id: str) -> None:
        """Delete a document's chunk rows and document_results rows under every model, in one transaction.

        Raises:
            StoreError: the write failed transiently (nothing of it was written).
        """
        conn = self._connection()
        with self._errors("delete_document_rows"), self._transaction(conn):
            conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
            conn.execute("DELETE FROM document_results WHERE doc_id = ?", (doc_id,))

    def mark_document_deleted(self, doc_id: str, at: datetime) -> None:
        """Set ``deleted_at`` on a documents row, that column alone (no row: nothing).

        Raises:
            StoreError: the write failed transiently.
        """
        self._write("UPDATE documents SET deleted_at = ? WHERE doc_id = ?", (_ENCODING.timestamp(at), doc_id),
                    "mark_document_deleted")

    def set_document_generation(self, doc_id: str, generation: int) -> None:
        """Set ``generation`` on a documents row, that column alone (no row: nothing).

        Raises:
            StoreError: the write failed transiently.
        """
        self._write("UPDATE documents SET generation = ? WHERE doc_id = ?", (generation, doc_id),
                    "set_document_generation")

    def swap_source(self, expected: SourceRow | None, row: SourceRow) -> tuple[bool, SourceRow | None]:
        """Write ``row`` when the stored sources row is still ``expected`` (one transaction under the write lock).

        Returns:
            Whether it was written, and the row that stands now.

        Raises:
            StoreError: the transaction failed transiently (nothing of it was written).
        """
        conn = self._connection()
        with self._errors("swap_source"), self._transaction(conn):
            found = conn.execute(f"SELECT {SOURCES.select_list} FROM sources WHERE tenant = ? AND source_key = ?",
                                 (row.tenant, row.source_key)).fetchone()
            stored = None if found is None else SOURCE_ROWS.from_columns(found, _ENCODING)
            if not self._same_source(stored, expected):
                return self._landed(stored, row), stored
            conn.execute(_upsert_sql(SOURCES), SOURCE_ROWS.to_columns(row, _ENCODING))
        return True, row

    def count_chunks(self, doc_id: str, model_id: str) -> int:
        """Number of chunk rows of a document for one model.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one(
            "SELECT COUNT(*) AS n FROM chunks WHERE doc_id = ? AND model_id = ?", (doc_id, model_id), "count_chunks"
        )
        return int(found["n"]) if found else 0

    # -- admission ---------------------------------------------------------------------

    def admit_documents(self, tenant: str, job_id: str, doc_ids: Sequence[str], at: datetime) -> None:
        """Write the tenant's in-flight rows of ``doc_ids`` (one transaction).

        Raises:
            StoreError: the write failed transiently.
        """
        conn = self._connection()
        with self._errors("admit_documents"), self._transaction(conn):
            conn.executemany(
                "INSERT INTO tenant_inflight (tenant, doc_id, job_id, admitted_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (tenant, doc_id) DO UPDATE SET job_id = excluded.job_id",
                [(tenant, doc_id, job_id, utc_millis(at).isoformat(timespec="milliseconds")) for doc_id in doc_ids])

    def set_document_tokens(self, tenant: str, doc_id: str, tokens: int) -> None:
        """Set an in-flight document's tokens (nothing when it is not in flight).

        Raises:
            StoreError: the write failed transiently.
        """
        self._write("UPDATE tenant_inflight SET tokens = ? WHERE tenant = ? AND doc_id = ?", (tokens, tenant, doc_id),
                    "set_document_tokens")

    def end_document(self, tenant: str, doc_id: str, day: str, tokens: int) -> None:
        """Take a document out of flight and count its tokens on ``day`` (one transaction).

        Raises:
            StoreError: the write failed transiently.
        """
        conn = self._connection()
        with self._errors("end_document"), self._transaction(conn):
            conn.execute("DELETE FROM tenant_inflight WHERE tenant = ? AND doc_id = ?", (tenant, doc_id))
            conn.execute("INSERT INTO tenant_daily (tenant, day, doc_id, tokens) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (tenant, day, doc_id) DO UPDATE SET tokens = excluded.tokens",
                         (tenant, day, doc_id, tokens))

    def release_documents(self, tenant: str, doc_ids: Sequence[str]) -> None:
        """Take ``doc_ids`` out of the tenant's flight, counting nothing (one transaction).

        Raises:
            StoreError: the write failed transiently (run it again: deleting twice changes nothing).
        """
        conn = self._connection()
        with self._errors("release_documents"), self._transaction(conn):
            conn.executemany("DELETE FROM tenant_inflight WHERE tenant = ? AND doc_id = ?",
                             [(tenant, doc_id) for doc_id in doc_ids])

    def list_in_flight(self, tenant: str, limit: int) -> list[Slot]:
        """At most ``limit`` of the tenant's in-flight documents, by doc_id.

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._all("SELECT doc_id, job_id, admitted_at FROM tenant_inflight WHERE tenant = ? ORDER BY doc_id "
                          "LIMIT ?", (tenant, limit), "list_in_flight")
        return [Slot(row["doc_id"], row["job_id"], datetime.fromisoformat(row["admitted_at"])) for row in found]

    def tenant_load(self, tenant: str, day: str) -> TenantLoad:
        """The tenant's in-flight documents, their tokens, and the tokens of ``day``.

        Raises:
            StoreError: the read failed transiently.
        """
        flight = self._one("SELECT COUNT(*) AS documents, COALESCE(SUM(tokens), 0) AS tokens FROM tenant_inflight "
                           "WHERE tenant = ?", (tenant,), "tenant_load")
        daily = self._one("SELECT COALESCE(SUM(tokens), 0) AS tokens FROM tenant_daily WHERE tenant = ? AND day = ?",
                          (tenant, day), "tenant_load")
        assert flight is not None and daily is not None
        return TenantLoad(int(flight["documents"]), int(flight["tokens"]), int(daily["tokens"]))

    @contextmanager
    def admission_lease(self, tenant: str) -> Iterator[None]:
        """Hold the tenant's admission lease (a leases row that expires, for a holder that died).

        Raises:
            StoreError: ``admission_busy``, another process held it for ``_ADMISSION_WAIT_S``; or the store failed.
        """
        name, owner = f"admission/{tenant}", uuid.uuid4().hex

        def take() -> bool:
            now = time.time()
            self._write(
                "INSERT INTO leases (name, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "owner = excluded.owner, expires_at = excluded.expires_at WHERE leases.expires_at < ?",
                (name, owner, now + _ADMISSION_TTL_S, now), "admission_lease")
            row = self._one("SELECT owner FROM leases WHERE name = ?", (name,), "admission_lease")
            return row is not None and row["owner"] == owner

        acquire_lease(take, wait_s=_ADMISSION_WAIT_S, base_s=0.01,
                      busy=f"another admission of tenant {tenant} held its lease for {_ADMISSION_WAIT_S:.0f} s")
        try:
            yield
        finally:
            self._write("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner), "admission_lease")

    # -- where jobs stand ---------------------------------------------------------------

    def list_queue(self, lane: str) -> list[QueuedJobRow]:
        """Every lane_queue row of ``lane``, by created_at then job_id (ISO-8601 UTC text sorts by time).

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._all(f"SELECT {QUEUE_ROWS.table.select_list} FROM lane_queue WHERE lane = ? "
                          "ORDER BY created_at, job_id", (lane,), "list_queue")
        return [QUEUE_ROWS.from_columns(row, _ENCODING) for row in found]

    def record_throughput(self, name: str, instance: str, tokens_per_s: float, at: datetime, ttl_s: int) -> None:
        """Write ``instance``'s rate, expiring ``ttl_s`` after ``at``, and delete the rows expired at ``at`` (one
        transaction).

        Raises:
            ValueError: ttl_s < 1, or tokens_per_s negative or not finite.
            StoreError: the write failed transiently.
        """
        check_throughput(tokens_per_s, ttl_s)
        now = utc_millis(at)
        conn = self._connection()
        with self._errors("record_throughput"), self._transaction(conn):
            conn.execute("DELETE FROM throughput WHERE name = ? AND expires_at <= ?",
                         (name, now.timestamp()))
            conn.execute("INSERT INTO throughput (name, instance, tokens_per_s, updated_at, expires_at) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name, instance) DO UPDATE SET "
                         "tokens_per_s = excluded.tokens_per_s, updated_at = excluded.updated_at, "
                         "expires_at = excluded.expires_at",
                         (name, instance, float(tokens_per_s), _ts(now), now.timestamp() + ttl_s))

    def throughput(self, name: str, at: datetime) -> float:
        """The sum of the rates whose rows expire after ``at`` (0.0: none).

        Raises:
            StoreError: the read failed transiently.
        """
        found = self._one("SELECT COALESCE(SUM(tokens_per_s), 0.0) AS total FROM throughput "
                          "WHERE name = ? AND expires_at > ?", (name, utc_millis(at).timestamp()),
                          "throughput")
        return float(found["total"]) if found is not None else 0.0

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
        query = search_query(embedding, k)
        best: TopK[int] = TopK(k)
        where = "model_id = ?" + (" AND job_id = ?" if job_id is not None else "")
        filters: tuple[Any, ...] = (model_id,) if job_id is None else (model_id, job_id)
        blob_size = query.size * 4

        def _page(after: int, limit: int) -> list[sqlite3.Row]:
            return self._all(
                f"SELECT rowid, embedding FROM chunks WHERE {where} AND rowid > ? ORDER BY rowid LIMIT ?",
                (*filters, after, limit),
                "search",
            )

        for page in keyset_pages(_page, start=0, key=_rowid, page_size=self._page_size):
            usable = [found for found in page if len(found["embedding"]) == blob_size]
            if usable:
                blobs = b"".join(found["embedding"] for found in usable)
                matrix = np.frombuffer(blobs, dtype="<f4").reshape(len(usable), -1)
                best.offer(cosine_scores(matrix, query), [_rowid(found) for found in usable])
        return self._hits(best.best())

    def _hits(self, ranked: list[tuple[float, int]]) -> list[SearchHit]:
        if not ranked:
            return []
        placeholders = ", ".join("?" for _ in ranked)
        rows = self._all(
            f"SELECT rowid, {CHUNKS.select_list} FROM chunks WHERE rowid IN ({placeholders})",
            [rowid for _, rowid in ranked],
            "search",
        )
        by_rowid = {_rowid(found): CHUNK_ROWS.from_columns(found, _ENCODING) for found in rows}
        return [SearchHit(chunk=by_rowid[rowid], score=score) for score, rowid in ranked if rowid in by_rowid]

def _rowid(found: sqlite3.Row) -> int:
    rowid: int = found["rowid"]
    return rowid
