"""CassandraStore: the production ResultStore on Apache Cassandra 5 (docs/storage.md).

Every write is an upsert (plain INSERT) on a key built from deterministic ids: no counters,
no lightweight transactions, no read-before-write, so a retried write leaves the same rows.
Chunk rows live in ``chunks`` (the table of record, embeddings as float32 blobs of any
dimension); chunks with an embedding are also written to ``chunk_vectors_d<N>``, a
``vector<float, N>`` table with an SAI cosine index per dimension N, which ``search`` queries
with ``ORDER BY embedding ANN OF ?``.
"""

# ruff: noqa: S608 - statements are built only from constant column lists and the keyspace
# name (validated by CassandraSettings' pattern); every value is a bound parameter.

from __future__ import annotations

import math
import re
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from cassandra import (
    ConsistencyLevel,
    CoordinationFailure,
    InvalidRequest,
    OperationTimedOut,
    ProtocolVersion,
    Timeout,
    Unavailable,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.concurrent import execute_concurrent
from cassandra.connection import ConnectionException
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from docstream.errors import FatalError, StoreError
from docstream.logging import get_logger
from docstream.settings import CassandraSettings
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
from docstream.store.codec import decode_embedding, embedding_array, encode_embedding, none_if_empty, utc_millis
from docstream.store.ranking import cosine_scores, unit_vector
from docstream.store.schema import Migration, load_migrations
from docstream.store.vectors import fast_float_vectors

__all__ = ["DEFAULT_DIMENSIONS", "CassandraStore"]

DEFAULT_DIMENSIONS: tuple[int, ...] = (384,)
"""Embedding dimensions whose vector tables ``migrate()`` creates up front (all-MiniLM-L6-v2: 384)."""

_log = get_logger(__name__)

_VECTOR_TABLE = re.compile(r"^chunk_vectors_d(\d+)$")
_SCHEMA_TIMEOUT_S = 120.0

_TIMEOUTS = (OperationTimedOut, Timeout)
_UNAVAILABLE = (
    Unavailable,
    NoHostAvailable,
    ConnectionException,
    CoordinationFailure,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
)

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
_VECTOR_COLUMNS = "doc_id, model_id, chunk_index, job_id, embedding"
_ROWS_PER_REQUEST = 32  # chunks of one document per write request: ~130 KiB, bounded latency per request
_API_KEY_COLUMNS = "key_id, tenant, key_hash, created_at, name, revoked_at"


def _insert(table: str, columns: str) -> str:
    placeholders = ", ".join("?" for _ in columns.split(","))
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"


def _text(value: str | None) -> str:
    # "" instead of null for optional text: binding null writes a cell tombstone on every upsert
    return value or ""


def _ts(value: datetime) -> datetime:
    return utc_millis(value)


def _dt(value: datetime) -> datetime:
    # the driver returns naive datetimes in UTC
    return value.replace(tzinfo=UTC)


def _dt_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _dt(value)


def _partition_groups(rows: Sequence[ChunkRow], most: int) -> list[list[ChunkRow]]:
    """``rows`` grouped by doc_id (first-seen order), each group cut to at most ``most`` rows."""
    by_doc: dict[str, list[ChunkRow]] = {}
    for row in rows:
        by_doc.setdefault(row.doc_id, []).append(row)
    return [group[i:i + most] for group in by_doc.values() for i in range(0, len(group), most)]


def _has_cosine(vector: npt.NDArray[np.float32]) -> bool:
    # an SAI cosine index refuses zero and non-finite vectors
    return bool(vector.any() and np.isfinite(vector).all())


class CassandraStore:
    """ResultStore on Cassandra 5; connects on first use.

    Args:
        settings: contact points, keyspace, consistency, auth, TLS, concurrency.
        dimensions: embedding dimensions whose ``chunk_vectors_d<N>`` tables ``migrate()``
            creates; a new dimension met by ``upsert_chunks`` gets its table then (a schema change).
        page_size: rows fetched per query by ``iter_chunks``.

    Raises:
        ValueError: page_size < 1 or a dimension < 1.
    """

    def __init__(
        self,
        settings: CassandraSettings,
        *,
        dimensions: Sequence[int] = DEFAULT_DIMENSIONS,
        page_size: int = 500,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        if any(d < 1 for d in dimensions):
            raise ValueError("embedding dimensions must be positive")
        self._settings = settings
        self._ks = settings.keyspace
        self._dimensions = tuple(sorted(set(dimensions)))
        self._page_size = page_size
        self._lock = threading.RLock()
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._prepared: dict[str, PreparedStatement] = {}
        self._vector_tables: set[int] = set()
        self._closed = False

    @property
    def keyspace(self) -> str:
        """The keyspace this store uses."""
        return self._ks

    # -- connection ----------------------------------------------------------------

    def _connect(self) -> Session:
        session = self._session
        if session is not None:
            return session
        with self._lock:
            if self._closed:
                raise FatalError("store is closed", code="store_closed")
            if self._session is not None:
                return self._session
            cluster = self._new_cluster()
            try:
                with self._errors("connect"):
                    session = cluster.connect()
            except BaseException:
                cluster.shutdown()
                raise
            self._cluster, self._session = cluster, session
            _log.info(
                "store_connected",
                backend="cassandra",
                contact_points=list(self._settings.contact_points),
                port=self._settings.port,
                keyspace=self._ks,
            )
            return session

    def _new_cluster(self) -> Cluster:
        s = self._settings
        balancing = (
            DCAwareRoundRobinPolicy(local_dc=s.local_dc) if s.local_dc else DCAwareRoundRobinPolicy()
        )
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(balancing),
            consistency_level=ConsistencyLevel.name_to_value[s.consistency],
            request_timeout=s.request_timeout_s,
        )
        auth = None
        if s.username is not None:
            password = s.password.get_secret_value() if s.password is not None else ""
            auth = PlainTextAuthProvider(username=s.username, password=password)
        tls = ssl.create_default_context(cafile=s.ssl_ca_location) if s.ssl_ca_location else None
        return Cluster(
            contact_points=list(s.contact_points),
            port=s.port,
            # Cassandra 4.0+ speaks v5 (vectors need 5.0); pinning it saves two downgrade round trips
            protocol_version=ProtocolVersion.V5,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            auth_provider=auth,
            ssl_context=tls,
            connect_timeout=s.request_timeout_s,
            control_connection_timeout=s.request_timeout_s,
            max_schema_agreement_wait=int(_SCHEMA_TIMEOUT_S),
        )

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except _TIMEOUTS as exc:
            raise StoreError(f"Cassandra {operation} timed out: {exc}", code="store_timeout") from exc
        except _UNAVAILABLE as exc:
            raise StoreError(f"Cassandra {operation} failed: {exc}", code="store_unavailable") from exc
        except InvalidRequest as exc:
            raise FatalError(
                f"Cassandra refused {operation} (schema not migrated?): {exc}", code="store_invalid_request"
            ) from exc

    def _prepare(self, cql: str) -> PreparedStatement:
        statement = self._prepared.get(cql)
        if statement is None:
            session = self._connect()
            with self._errors("prepare"):
                # vector<float, N> bind columns (the vector insert, the ANN query) bound by numpy
                statement = fast_float_vectors(session.prepare(cql))
            self._prepared[cql] = statement
        return statement

    def _execute(self, cql: str, params: Sequence[Any], operation: str) -> list[Any]:
        statement = self._prepare(cql)
        with self._errors(operation):
            return list(self._connect().execute(statement, params))

    def _schema(self, cql: str) -> None:
        with self._errors("migrate"):
            self._connect().execute(cql, timeout=_SCHEMA_TIMEOUT_S)

    # -- lifecycle -----------------------------------------------------------------

    def migrate(self) -> None:
        """Create the keyspace and apply pending CQL migrations, recording each version.

        Idempotent, and safe to run from two processes at once: every statement is
        ``IF NOT EXISTS`` and recording a version is an upsert.

        Raises:
            StoreError: Cassandra is unreachable or timed out.
            FatalError: Cassandra refused a statement.
        """
        session = self._connect()
        metadata = self._cluster.metadata if self._cluster is not None else None
        keyspace = metadata.keyspaces.get(self._ks) if metadata is not None else None
        if keyspace is None:
            self._schema(f"CREATE KEYSPACE IF NOT EXISTS {self._ks} WITH replication = {self._settings.replication}")
        if keyspace is None or "schema_migrations" not in keyspace.tables:
            self._schema(
                f"CREATE TABLE IF NOT EXISTS {self._ks}.schema_migrations "
                "(version text PRIMARY KEY, applied_at timestamp)"
            )
        with self._errors("migrate"):
            applied = {row.version for row in session.execute(f"SELECT version FROM {self._ks}.schema_migrations")}
        dimensions = sorted(set(self._dimensions) | self._existing_vector_tables())
        for migration in load_migrations("cql"):
            for dimension in dimensions if migration.per_dimension else [None]:
                if migration.applied_version(dimension) not in applied:
                    self._apply(migration, dimension)
        with self._lock:
            self._vector_tables.update(dimensions)

    def _apply(self, migration: Migration, dimension: int | None) -> None:
        for statement in migration.render(keyspace=self._ks, dimension=dimension):
            self._schema(statement)
        version = migration.applied_version(dimension)
        self._execute(
            f"INSERT INTO {self._ks}.schema_migrations (version, applied_at) VALUES (?, ?)",
            (version, _ts(datetime.now(UTC))),
            "migrate",
        )
        _log.info("store_migration_applied", backend="cassandra", keyspace=self._ks, version=version)

    def applied_migrations(self) -> dict[str, datetime]:
        """Applied versions and when each was (last) recorded.

        Raises:
            StoreError: Cassandra is unreachable or timed out.
            FatalError: the keyspace has no schema_migrations table.
        """
        rows = self._execute(f"SELECT version, applied_at FROM {self._ks}.schema_migrations", (), "migrations")
        return {row.version: _dt(row.applied_at) for row in rows}

    def _existing_vector_tables(self) -> set[int]:
        metadata = self._cluster.metadata if self._cluster is not None else None
        keyspace = metadata.keyspaces.get(self._ks) if metadata is not None else None
        if keyspace is None:
            return set()
        return {int(m.group(1)) for name in keyspace.tables if (m := _VECTOR_TABLE.match(name))}

    def _ensure_vector_table(self, dimension: int) -> None:
        if dimension in self._vector_tables:
            return
        with self._lock:
            if dimension in self._vector_tables:
                return
            self._connect()
            if dimension not in self._existing_vector_tables():
                # a model of a new dimension: one schema change, once, then plain upserts
                for migration in load_migrations("cql"):
                    if migration.per_dimension:
                        self._apply(migration, dimension)
                _log.info("store_vector_table_created", keyspace=self._ks, dimension=dimension)
            self._vector_tables.add(dimension)

    def ping(self) -> None:
        """Raise ``StoreError`` unless Cassandra answers ``SELECT release_version FROM system.local``.

        Raises:
            StoreError: Cassandra is unreachable or timed out.
        """
        self._execute("SELECT release_version FROM system.local", (), "ping")

    def close(self) -> None:
        """Shut the driver down; later calls raise ``FatalError``."""
        with self._lock:
            self._closed = True
            cluster, self._cluster, self._session = self._cluster, None, None
            self._prepared.clear()
        if cluster is not None:
            cluster.shutdown()

    # -- jobs ----------------------------------------------------------------------

    def upsert_job(self, row: JobRow) -> None:
        """Write a jobs row (and its jobs_by_tenant copy, in one logged batch).

        Raises:
            StoreError: the write failed transiently.
        """
        params = (
            row.job_id,
            row.tenant,
            _ts(row.created_at),
            row.status,
            row.document_count,
            dict(row.options),
            _text(row.webhook_url),
            row.completed,
            row.partial,
            row.failed,
            None if row.updated_at is None else _ts(row.updated_at),
        )
        # a logged batch: the tenant listing never misses a job the jobs table has
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        batch.add(self._prepare(_insert(f"{self._ks}.jobs", _JOB_COLUMNS)), params)
        batch.add(self._prepare(_insert(f"{self._ks}.jobs_by_tenant", _JOB_COLUMNS)), params)
        with self._errors("upsert_job"):
            self._connect().execute(batch)

    def get_job(self, job_id: str) -> JobRow | None:
        """Read a jobs row.

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(f"SELECT {_JOB_COLUMNS} FROM {self._ks}.jobs WHERE job_id = ?", (job_id,), "get_job")
        return _job(rows[0]) if rows else None

    def list_jobs(self, tenant: str, *, limit: int = 50, after: str | None = None) -> list[JobRow]:
        """A tenant's jobs ordered by job_id, strictly after ``after`` (paging).

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        rows = self._execute(
            f"SELECT {_JOB_COLUMNS} FROM {self._ks}.jobs_by_tenant WHERE tenant = ? AND job_id > ? LIMIT ?",
            (tenant, after or "", limit),
            "list_jobs",
        )
        return [_job(row) for row in rows]

    def set_job_status(self, job_id: str, tenant: str, status: JobState, updated_at: datetime) -> None:
        """Set only the status and updated_at of a jobs row and its jobs_by_tenant copy (one logged batch).

        The row must exist (read it first): like every Cassandra write this is an upsert, and a
        missing job would get a row holding only these columns. The counts are not written, so
        a concurrent progress write by the reducer is not undone.

        Raises:
            StoreError: the write failed transiently.
        """
        at = _ts(updated_at)
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        batch.add(
            self._prepare(f"UPDATE {self._ks}.jobs SET status = ?, updated_at = ? WHERE job_id = ?"),
            (status, at, job_id),
        )
        batch.add(
            self._prepare(
                f"UPDATE {self._ks}.jobs_by_tenant SET status = ?, updated_at = ? WHERE tenant = ? AND job_id = ?"
            ),
            (status, at, tenant, job_id),
        )
        with self._errors("set_job_status"):
            self._connect().execute(batch)

    # -- documents -----------------------------------------------------------------

    def upsert_job_document(self, row: JobDocumentRow) -> None:
        """Write a job_documents row.

        Raises:
            StoreError: the write failed transiently.
        """
        params = (row.job_id, row.doc_id, row.status, _ts(row.updated_at), _text(row.filename), _text(row.error_code))
        self._execute(_insert(f"{self._ks}.job_documents", _JOB_DOCUMENT_COLUMNS), params, "upsert_job_document")

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
        """One page of a job's documents ordered by doc_id, strictly after ``after`` (one partition).

        Raises:
            ValueError: limit < 1.
            StoreError: the read failed transiently.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return self._job_documents_page(job_id, after or "", limit)

    def _job_documents_page(self, job_id: str, after: str, limit: int) -> list[JobDocumentRow]:
        cql = (
            f"SELECT {_JOB_DOCUMENT_COLUMNS} FROM {self._ks}.job_documents WHERE job_id = ? AND doc_id > ? LIMIT ?"
        )
        return [
            JobDocumentRow(
                job_id=row.job_id,
                doc_id=row.doc_id,
                status=row.status,
                updated_at=_dt(row.updated_at),
                filename=none_if_empty(row.filename),
                error_code=none_if_empty(row.error_code),
            )
            for row in self._execute(cql, (job_id, after, limit), "list_job_documents")
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
            _text(row.media_type),
            _text(row.filename),
            row.page_count,
            _text(row.error_code),
            _text(row.error),
        )
        self._execute(_insert(f"{self._ks}.documents", _DOCUMENT_COLUMNS), params, "upsert_document")

    def get_document(self, doc_id: str) -> DocumentRow | None:
        """Read a documents row.

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(
            f"SELECT {_DOCUMENT_COLUMNS} FROM {self._ks}.documents WHERE doc_id = ?", (doc_id,), "get_document"
        )
        if not rows:
            return None
        row = rows[0]
        return DocumentRow(
            doc_id=row.doc_id,
            job_id=row.job_id,
            source_uri=row.source_uri,
            content_sha256=row.content_sha256,
            status=row.status,
            updated_at=_dt(row.updated_at),
            media_type=none_if_empty(row.media_type),
            filename=none_if_empty(row.filename),
            page_count=row.page_count,
            error_code=none_if_empty(row.error_code),
            error=none_if_empty(row.error),
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
            _text(row.content_sha256),
            _text(row.runtime),
        )
        self._execute(_insert(f"{self._ks}.document_results", _RESULT_COLUMNS), params, "upsert_document_result")

    def get_document_result(self, doc_id: str, model_id: str) -> DocumentResultRow | None:
        """Read a document_results row.

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(
            f"SELECT {_RESULT_COLUMNS} FROM {self._ks}.document_results WHERE doc_id = ? AND model_id = ?",
            (doc_id, model_id),
            "get_document_result",
        )
        if not rows:
            return None
        row = rows[0]
        return DocumentResultRow(
            doc_id=row.doc_id,
            model_id=row.model_id,
            job_id=row.job_id,
            status=row.status,
            chunk_count=row.chunk_count,
            failed_chunks=row.failed_chunks,
            token_count=row.token_count,
            embedding=decode_embedding(row.embedding),
            chunker_settings=row.chunker_settings,
            completed_at=_dt(row.completed_at),
            content_sha256=none_if_empty(row.content_sha256),
            runtime=none_if_empty(row.runtime),
        )

    # -- chunks --------------------------------------------------------------------

    def upsert_chunks(self, rows: Sequence[ChunkRow]) -> None:
        """Write chunk rows and their vector rows: one request per document, requests concurrent.

        The rows of one document (``chunks`` and ``chunk_vectors_d<N>`` share the partition key
        doc_id) go in one UNLOGGED batch of at most ``_ROWS_PER_REQUEST`` chunks: a single-partition
        mutation, applied as one on each replica and exempt from Cassandra's batch size warnings
        (CASSANDRA-10876), so a micro-batch of 64 chunks is a few requests instead of 128. At most
        ``write_concurrency`` requests are in flight. Returns when every write is acknowledged. On
        failure some documents' rows may be written and others not; writing the same rows again
        completes them (every write is an upsert).

        Raises:
            StoreError: a write timed out or Cassandra was unavailable.
        """
        if not rows:
            return
        chunk_insert = self._prepare(_insert(f"{self._ks}.chunks", _CHUNK_COLUMNS))
        requests: list[tuple[BatchStatement, None]] = []
        for group in _partition_groups(rows, _ROWS_PER_REQUEST):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for row in group:
                vector = embedding_array(row.embedding)
                batch.add(chunk_insert, _chunk_params(row, vector.tobytes()))
                if vector.size and _has_cosine(vector):
                    self._ensure_vector_table(vector.size)
                    vector_insert = self._prepare(_insert(f"{self._ks}.chunk_vectors_d{vector.size}", _VECTOR_COLUMNS))
                    batch.add(vector_insert, (row.doc_id, row.model_id, row.chunk_index, row.job_id, vector))
            requests.append((batch, None))
        session = self._connect()
        with self._errors("upsert_chunks"):
            execute_concurrent(
                session, requests, concurrency=self._settings.write_concurrency, raise_on_first_error=True
            )

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        """Stream a document's chunks for one model by chunk_index, ``page_size`` rows per query.

        Raises:
            StoreError: a page read failed transiently.
        """
        cql = (
            f"SELECT {_CHUNK_COLUMNS} FROM {self._ks}.chunks "
            "WHERE doc_id = ? AND model_id = ? AND chunk_index > ? LIMIT ?"
        )
        after = -1
        while True:
            page = self._execute(cql, (doc_id, model_id, after, self._page_size), "iter_chunks")
            yield from (_chunk(row) for row in page)
            if len(page) < self._page_size:
                return
            after = page[-1].chunk_index

    def count_chunks(self, doc_id: str, model_id: str) -> int:
        """Number of chunk rows of a document for one model (one partition).

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(
            f"SELECT COUNT(*) AS n FROM {self._ks}.chunks WHERE doc_id = ? AND model_id = ?",
            (doc_id, model_id),
            "count_chunks",
        )
        return int(rows[0].n) if rows else 0

    def search(
        self, embedding: Sequence[float], model_id: str, *, k: int = 10, job_id: str | None = None
    ) -> list[SearchHit]:
        """Nearest chunks by cosine similarity, best first.

        The SAI index of ``chunk_vectors_d<N>`` (N = len(embedding)) finds k candidates
        (approximate nearest neighbours, filtered by model_id and job_id); their chunk rows
        are read and scored exactly, so scores agree with the SQLite store.

        Raises:
            ValueError: k < 1, or the embedding is empty, zero or not finite.
            StoreError: a read failed transiently.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        query = unit_vector(embedding)
        dimension = int(query.size)
        self._connect()
        if dimension not in self._vector_tables and dimension not in self._existing_vector_tables():
            return []
        table = f"{self._ks}.chunk_vectors_d{dimension}"
        where = "model_id = ?" + (" AND job_id = ?" if job_id is not None else "")
        filters: tuple[Any, ...] = (model_id,) if job_id is None else (model_id, job_id)
        candidates = self._execute(
            f"SELECT doc_id, model_id, chunk_index FROM {table} WHERE {where} ORDER BY embedding ANN OF ? LIMIT ?",
            (*filters, [float(x) for x in query], k),
            "search",
        )
        chunks = self._read_chunks([(c.doc_id, c.model_id, c.chunk_index) for c in candidates])
        usable = [c for c in chunks if len(c.embedding) == dimension]
        if not usable:
            return []
        scores = cosine_scores(np.asarray([c.embedding for c in usable], dtype=np.float32), query)
        hits = [SearchHit(chunk=c, score=float(s)) for c, s in zip(usable, scores, strict=True) if math.isfinite(s)]
        return sorted(hits, key=lambda hit: hit.score, reverse=True)[:k]

    def _read_chunks(self, keys: list[tuple[str, str, int]]) -> list[ChunkRow]:
        if not keys:
            return []
        select = self._prepare(
            f"SELECT {_CHUNK_COLUMNS} FROM {self._ks}.chunks WHERE doc_id = ? AND model_id = ? AND chunk_index = ?"
        )
        with self._errors("search"):
            results = execute_concurrent(
                self._connect(),
                [(select, key) for key in keys],
                concurrency=self._settings.write_concurrency,
                raise_on_first_error=True,
            )
        return [_chunk(row) for result in results for row in result.result_or_exc]

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
            _text(row.name),
            None if row.revoked_at is None else _ts(row.revoked_at),
        )
        self._execute(_insert(f"{self._ks}.api_keys", _API_KEY_COLUMNS), params, "upsert_api_key")

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        """Read an api_keys row.

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(
            f"SELECT {_API_KEY_COLUMNS} FROM {self._ks}.api_keys WHERE key_id = ?", (key_id,), "get_api_key"
        )
        if not rows:
            return None
        row = rows[0]
        return ApiKeyRow(
            key_id=row.key_id,
            tenant=row.tenant,
            key_hash=row.key_hash,
            created_at=_dt(row.created_at),
            name=none_if_empty(row.name),
            revoked_at=_dt_or_none(row.revoked_at),
        )


def _chunk_params(row: ChunkRow, embedding: bytes) -> tuple[Any, ...]:
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
        embedding,
        _text(row.heading),
        row.status,
        _text(row.error_code),
    )


def _chunk(row: Any) -> ChunkRow:
    return ChunkRow(
        doc_id=row.doc_id,
        model_id=row.model_id,
        chunk_index=row.chunk_index,
        chunk_id=row.chunk_id,
        job_id=row.job_id,
        text=row.text,
        page_start=row.page_start,
        page_end=row.page_end,
        char_start=row.char_start,
        char_end=row.char_end,
        token_count=row.token_count,
        embedding=decode_embedding(row.embedding),
        heading=none_if_empty(row.heading),
        status=row.status,
        error_code=none_if_empty(row.error_code),
    )


def _job(row: Any) -> JobRow:
    return JobRow(
        job_id=row.job_id,
        tenant=row.tenant,
        created_at=_dt(row.created_at),
        status=row.status,
        document_count=row.document_count,
        options=dict(row.options or {}),
        webhook_url=none_if_empty(row.webhook_url),
        completed=row.completed,
        partial=row.partial,
        failed=row.failed,
        updated_at=_dt_or_none(row.updated_at),
    )
