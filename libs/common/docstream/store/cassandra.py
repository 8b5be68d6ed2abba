"""CassandraStore: the production ResultStore on Apache Cassandra 5 (docs/storage.md).

Every write is an upsert (plain INSERT) on a key built from deterministic ids: no counters,
no lightweight transactions, no read-before-write, so a retried write leaves the same rows.
(The one lightweight transaction is the migration lease of ``migrate()``, taken only while
the schema changes.)
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
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
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
from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy, TokenAwarePolicy
from cassandra.protocol import ErrorMessage, IsBootstrappingErrorMessage, OverloadedErrorMessage
from cassandra.query import BatchStatement, BatchType, PreparedStatement, dict_factory

from docstream.errors import FatalError, StoreError
from docstream.logging import get_logger
from docstream.retry import backoff_delay
from docstream.settings import CassandraSettings
from docstream.store.base import (
    ChunkRow,
    JobRow,
    JobState,
    QueuedJobRow,
    SearchHit,
    SourceRow,
    check_throughput,
)
from docstream.store.codec import encode_embedding, utc_millis
from docstream.store.leases import acquire_lease
from docstream.store.paging import at_least_one, keyset_rows
from docstream.store.ranking import cosine_scores, search_query
from docstream.store.rows import (
    CHUNK_ROWS,
    CHUNKS,
    DOCUMENT_RESULTS,
    JOB_DOCUMENTS,
    JOB_ROWS,
    JOBS,
    QUEUE_ROWS,
    SOURCE_ROWS,
    SOURCES,
    ColumnEncoding,
    Columns,
    Table,
)
from docstream.store.schema import Migration, bootstrap_table_id, load_migrations, schema_not_visible
from docstream.store.table_store import TableStore
from docstream.store.vectors import fast_float_vectors
from docstream.tenants.admission import Slot, TenantLoad

__all__ = ["DEFAULT_DIMENSIONS", "CassandraStore"]

DEFAULT_DIMENSIONS: tuple[int, ...] = (384,)
"""Embedding dimensions whose vector tables ``migrate()`` creates up front (all-MiniLM-L6-v2: 384)."""

_log = get_logger(__name__)

_VECTOR_TABLE = re.compile(r"^chunk_vectors_d(\d+)$")
_SCHEMA_TIMEOUT_S = 120.0

# the migration lease (docs/storage.md "Migrations"): one process at a time changes the schema
_LEASE_NAME = "migrate"
_LEASE_TTL_S = 300  # renewed after every migration; a holder that died frees it after this
_ADMISSION_TTL_S = 30  # an admission lease of a holder that died frees after this
_ADMISSION_WAIT_S = 10.0  # how long an admission waits for another of its tenant
_TOKENS_TTL_S = 30 * 86_400  # a chunker's tokens of a document no longer in flight (a replay) expire after this
_LEASE_WAIT_S = 900.0  # how long a migrate waits for another's to finish before it gives up
_CAS_WRITE_UNKNOWN = 0x1700  # protocol v5; the driver has no class of its own for it

_TIMEOUTS = (OperationTimedOut, Timeout)
_UNAVAILABLE = (
    Unavailable,
    NoHostAvailable,
    ConnectionException,
    CoordinationFailure,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
)

_VECTOR_COLUMNS = "doc_id, model_id, chunk_index, job_id, embedding"
_ROWS_PER_REQUEST = 32  # chunks of one document per write request: ~130 KiB, bounded latency per request


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


def _read_options(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


def _read_counts(value: Mapping[str, int] | None) -> dict[str, int]:
    return dict(value or {})


def _as_is(value: Any) -> Any:
    # task results bind as the driver takes them: dicts for maps, lists, tuples for UDT values (field order)
    return value


_ENCODING = ColumnEncoding(timestamp=_ts, read_timestamp=_dt, text=_text, options=dict, read_options=_read_options,
                           counts=dict, read_counts=_read_counts, structure=_as_is, read_structure=_as_is)


def _partition_groups(rows: Sequence[ChunkRow], most: int) -> list[list[ChunkRow]]:
    """``rows`` grouped by doc_id (first-seen order), each group cut to at most ``most`` rows."""
    by_doc: dict[str, list[ChunkRow]] = {}
    for row in rows:
        by_doc.setdefault(row.doc_id, []).append(row)
    return [group[i:i + most] for group in by_doc.values() for i in range(0, len(group), most)]


_FLOAT32 = np.dtype("<f4")
"""A stored embedding's values: little-endian float32 (``docstream.store.codec``)."""


_RECONNECT_BASE_S = 0.5


def reconnection_policy(max_delay_s: float) -> ExponentialReconnectionPolicy:
    """The driver's schedule for reaching a node it lost: doubling from 0.5 s up to ``max_delay_s``, never ending.

    The driver's default doubles up to 600 s, so a service kept waiting minutes after a short outage was over, and it
    stops after 64 attempts, after which a node that returns is never used again by that process.
    """
    return ExponentialReconnectionPolicy(min(_RECONNECT_BASE_S, max_delay_s), max_delay_s, max_attempts=None)


def _has_cosine(vector: npt.NDArray[np.float32]) -> bool:
    # an SAI cosine index refuses zero and non-finite vectors
    return bool(vector.any() and np.isfinite(vector).all())


class CassandraStore(TableStore):
    """ResultStore on Cassandra 5; connects on first use.

    Args:
        settings: contact points, keyspace, consistency, auth, TLS, concurrency.
        dimensions: embedding dimensions whose ``chunk_vectors_d<N>`` tables ``migrate()``
            creates; a new dimension met by ``upsert_chunks`` gets its table then (a schema change).
        page_size: rows fetched per query by ``iter_chunks``.

    Raises:
        ValueError: page_size < 1 or a dimension < 1.
    """

    _encoding = _ENCODING

    def __init__(
        self,
        settings: CassandraSettings,
        *,
        dimensions: Sequence[int] = DEFAULT_DIMENSIONS,
        page_size: int = 500,
    ) -> None:
        at_least_one("page_size", page_size)
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
            # rows are read by column name (docstream.store.rows)
            row_factory=dict_factory,
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
            reconnection_policy=reconnection_policy(s.reconnect_max_delay_s),
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
        except ErrorMessage as exc:
            if getattr(exc, "code", None) != _CAS_WRITE_UNKNOWN:
                raise
            # a lightweight transaction's proposal reached too few replicas: it may or may not take effect
            raise StoreError(f"Cassandra {operation}: {exc}", code="store_cas_unknown") from exc

    def _prepare(self, cql: str) -> PreparedStatement:
        statement = self._prepared.get(cql)
        if statement is None:
            session = self._connect()
            with self._errors("prepare"):
                # vector<float, N> bind columns (the vector insert, the ANN query) bound by numpy
                statement = fast_float_vectors(session.prepare(cql))
            # every statement is an upsert, a delete or a read: the driver may send it again to another
            # replica after a coordinator died mid-request (a node down in a ring, docs/operations.md)
            statement.is_idempotent = True
            self._prepared[cql] = statement
        return statement

    def _execute(self, cql: str, params: Sequence[Any], operation: str) -> list[Any]:
        statement = self._prepare(cql)
        with self._errors(operation):
            return list(self._connect().execute(statement, params))

    def _upsert(self, table: Table, values: Sequence[Any], operation: str) -> None:
        self._execute(_insert(f"{self._ks}.{table.name}", table.column_list), values, operation)

    def _put_if(self, table: Table, values: Sequence[Any], expected: Mapping[str, Any] | None,
                operation: str) -> tuple[bool, Columns | None]:
        # a lightweight transaction: INSERT IF NOT EXISTS for no row (a refusal answers the row that stands), else
        # an UPDATE IF on the expected columns (a refusal answers those alone: the row is read again, at the
        # store's consistency, which sees the transaction that refused this one)
        key = table.key_of(values)
        if expected is None:
            found = self._execute(_insert(f"{self._ks}.{table.name}", table.column_list) + " IF NOT EXISTS",
                                  values, operation)
            if not found or found[0]["[applied]"]:
                return True, None
            return False, found[0]
        assigned = [(name, value) for name, value in zip(table.columns, values, strict=True) if name not in table.key]
        assignments = ", ".join(f"{name} = ?" for name, _ in assigned)
        conditions = " AND ".join(f"{name} = ?" for name in expected)
        found = self._execute(
            f"UPDATE {self._ks}.{table.name} SET {assignments} WHERE {table.key_condition} IF {conditions}",
            (*(value for _, value in assigned), *key, *expected.values()), operation)
        if not found or found[0]["[applied]"]:
            return True, None
        return False, self._get(table, key, operation)

    def _delete(self, table: Table, key: Sequence[Any], operation: str) -> None:
        self._execute(f"DELETE FROM {self._ks}.{table.name} WHERE {table.key_condition}", key, operation)

    def _get(self, table: Table, key: Sequence[Any], operation: str) -> Columns | None:
        rows = self._select(table, table.name, table.key_condition, key, operation)
        return rows[0] if rows else None

    def _select(self, table: Table, source: str, clause: str, params: Sequence[Any], operation: str) -> list[Any]:
        # source: the table itself or a copy of its rows under another key (jobs_by_tenant);
        # clause: what follows WHERE (conditions, LIMIT)
        return self._execute(f"SELECT {table.select_list} FROM {self._ks}.{source} WHERE {clause}", params, operation)

    def _update(self, table: Table, key: Sequence[Any], columns: Sequence[str], values: Sequence[Any],
                operation: str) -> None:
        assignments = ", ".join(f"{name} = ?" for name in columns)
        self._execute(f"UPDATE {self._ks}.{table.name} SET {assignments} WHERE {table.key_condition}",
                      (*values, *key), operation)

    def _set_entry(self, table: Table, key: Sequence[Any], column: str, entry: tuple[str, str],
                   also: Mapping[str, Any], created: Mapping[str, Any], operation: str) -> None:
        # one element of a non-frozen map: a cell of its own, so concurrent writers of other entries never
        # overwrite this one (and no tombstone); ``created`` is not written: a row without it reads the same
        assignments = "".join(f", {name} = ?" for name in also)
        self._execute(f"UPDATE {self._ks}.{table.name} SET {column}[?] = ?{assignments} WHERE {table.key_condition}",
                      (*entry, *also.values(), *key), operation)

    def _document_results_of(self, doc_id: str, limit: int) -> list[Any]:
        return self._select(DOCUMENT_RESULTS, "document_results", "doc_id = ? LIMIT ?", (doc_id, limit),
                            "list_document_results")

    def _schema(self, cql: str) -> None:
        with self._errors("migrate"):
            self._connect().execute(cql, timeout=_SCHEMA_TIMEOUT_S)

    def _agree(self) -> None:
        """Wait until every live node has the same schema, and read it into the driver's metadata."""
        cluster = self._cluster
        if cluster is None:
            return
        with self._errors("schema agreement"):
            cluster.refresh_schema_metadata(max_schema_agreement_wait=int(_SCHEMA_TIMEOUT_S))

    def _once_visible(self, cql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run ``cql``, retrying while its coordinator has not seen a keyspace or table another process created."""
        deadline = time.monotonic() + _SCHEMA_TIMEOUT_S
        attempt = 0
        while True:
            with self._errors("migrate"):
                try:
                    return list(self._connect().execute(cql, params, timeout=_SCHEMA_TIMEOUT_S))
                except InvalidRequest as exc:
                    if not schema_not_visible(str(exc)):
                        raise  # a refusal: FatalError store_invalid_request
                    if time.monotonic() >= deadline:
                        raise StoreError(f"Cassandra schema not visible after {_SCHEMA_TIMEOUT_S:.0f} s: {exc}",
                                         code="store_schema_disagreement") from exc
            attempt += 1
            self._agree()
            time.sleep(backoff_delay(attempt, base_s=0.1, max_s=2.0))

    # -- lifecycle -----------------------------------------------------------------

    def migrate(self) -> None:
        """Create the keyspace and apply pending CQL migrations, recording each version.

        Idempotent, and safe to run from many processes at once (docs/storage.md "Migrations"):
        the keyspace and the two bootstrap tables are created with fixed ids, so concurrent
        creations agree; then one process at a time holds the migration lease (a lightweight
        transaction on ``schema_lock``) while it applies what is pending, and the others wait
        and find nothing left to do. A process that finds nothing pending takes no lease.

        Raises:
            StoreError: Cassandra is unreachable or timed out, the schema did not settle, or
                another process held the lease for longer than 15 minutes.
            FatalError: Cassandra refused a statement.
        """
        self._connect()
        self._bootstrap()
        if self._pending():
            self._apply_pending()
        with self._lock:
            self._vector_tables.update(self._dimensions_to_migrate())

    def _apply_pending(self, *, also: Sequence[int] = ()) -> list[str]:
        """Under the lease, apply what is still pending once the schema agrees (another process may have); the versions.

        ``also``: embedding dimensions to give vector tables besides the configured and existing ones.
        """
        applied = []
        with self._migration_lease() as owner:
            self._agree()
            for migration, dimension in self._pending(also):
                self._apply(migration, dimension)
                self._renew_lease(owner)
                applied.append(migration.applied_version(dimension))
        return applied

    def _bootstrap(self) -> None:
        metadata = self._cluster.metadata if self._cluster is not None else None
        keyspace = metadata.keyspaces.get(self._ks) if metadata is not None else None
        if keyspace is not None and {"schema_migrations", "schema_lock"} <= set(keyspace.tables):
            return
        self._once_visible(f"CREATE KEYSPACE IF NOT EXISTS {self._ks} WITH replication = {self._settings.replication}")
        self._once_visible(
            f"CREATE TABLE IF NOT EXISTS {self._ks}.schema_migrations (version text PRIMARY KEY, applied_at timestamp)"
            f" WITH ID = {bootstrap_table_id(self._ks, 'schema_migrations')}"
        )
        self._once_visible(
            f"CREATE TABLE IF NOT EXISTS {self._ks}.schema_lock (name text PRIMARY KEY, owner text, taken_at timestamp)"
            f" WITH ID = {bootstrap_table_id(self._ks, 'schema_lock')}"
        )
        self._agree()

    def _pending(self, also: Sequence[int] = ()) -> list[tuple[Migration, int | None]]:
        applied = {row["version"] for row in self._once_visible(f"SELECT version FROM {self._ks}.schema_migrations")}
        dimensions = self._dimensions_to_migrate(also)
        return [
            (migration, dimension)
            for migration in load_migrations("cql")
            for dimension in (dimensions if migration.per_dimension else [None])
            if migration.applied_version(dimension) not in applied
        ]

    def _dimensions_to_migrate(self, also: Sequence[int] = ()) -> list[int]:
        return sorted(set(self._dimensions) | self._existing_vector_tables() | set(also))

    def _cas(self, cql: str, params: Sequence[Any]) -> dict[str, Any]:
        """One lightweight transaction of the lease, repeated while Cassandra fails transiently.

        Each is safe to repeat: a repeated take finds our own row, a repeated renew or release
        is conditional on our owner id.
        """
        deadline = time.monotonic() + _SCHEMA_TIMEOUT_S
        attempt = 0
        while True:
            try:
                row: dict[str, Any] = self._once_visible(cql, params)[0]
                return row
            except StoreError as exc:
                attempt += 1
                if time.monotonic() >= deadline:
                    raise
                _log.info("store_migration_lease_retry", keyspace=self._ks, code=exc.code, attempt=attempt)
                time.sleep(backoff_delay(attempt, base_s=0.25, max_s=4.0))

    @contextmanager
    def _migration_lease(self) -> Iterator[str]:
        """Hold ``schema_lock``'s row while the block changes the schema; wait while another process holds it.

        Yields the owner id the block renews the lease with (``_renew_lease``).

        Raises:
            StoreError: another process held it for more than ``_LEASE_WAIT_S``, or Cassandra failed.
        """
        owner = uuid.uuid4().hex
        deadline = time.monotonic() + _LEASE_WAIT_S
        attempt = 0
        holder = None
        while True:
            row = self._cas(
                f"INSERT INTO {self._ks}.schema_lock (name, owner, taken_at) VALUES (%s, %s, %s)"
                f" IF NOT EXISTS USING TTL {_LEASE_TTL_S}",
                (_LEASE_NAME, owner, _ts(datetime.now(UTC))),
            )
            # a repeated insert of our own finds our row: that is ours too
            if row["[applied]"] or row.get("owner") == owner:
                break
            if time.monotonic() >= deadline:
                raise StoreError(f"another process held the migration lease of {self._ks} for {_LEASE_WAIT_S:.0f} s",
                                 code="store_migration_lease_timeout")
            if row.get("owner") != holder:
                holder = row.get("owner")
                _log.info("store_migration_waiting", keyspace=self._ks, holder=holder)
            attempt += 1
            time.sleep(backoff_delay(attempt, base_s=0.25, max_s=2.0))
        try:
            yield owner
        finally:
            self._release_lease(owner)

    def _renew_lease(self, owner: str) -> None:
        row = self._cas(
            f"UPDATE {self._ks}.schema_lock USING TTL {_LEASE_TTL_S} SET taken_at = %s WHERE name = %s IF owner = %s",
            (_ts(datetime.now(UTC)), _LEASE_NAME, owner),
        )
        if not row["[applied]"]:
            raise StoreError(f"the migration lease of {self._ks} expired while held (now {row.get('owner')})",
                             code="store_migration_lease_lost")

    def _release_lease(self, owner: str) -> None:
        try:
            self._cas(f"DELETE FROM {self._ks}.schema_lock WHERE name = %s IF owner = %s", (_LEASE_NAME, owner))
        except StoreError as exc:
            # the row's TTL frees the lease: the next migrate waits at most that long
            _log.warning("store_migration_lease_not_released", keyspace=self._ks, error=str(exc),
                         expires_in_s=_LEASE_TTL_S)

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
        return {row["version"]: _dt(row["applied_at"]) for row in rows}

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
            # a model of a new dimension: one schema change, once, under the migration lease, then plain upserts
            if dimension not in self._existing_vector_tables() and self._apply_pending(also=(dimension,)):
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
        params = JOB_ROWS.to_columns(row, _ENCODING)
        # a logged batch: the tenant listing never misses a job the jobs table has
        batch = _batch(BatchType.LOGGED)
        batch.add(self._prepare(_insert(f"{self._ks}.jobs", JOBS.column_list)), params)
        batch.add(self._prepare(_insert(f"{self._ks}.jobs_by_tenant", JOBS.column_list)), params)
        with self._errors("upsert_job"):
            self._connect().execute(batch)

    def _jobs_page(self, tenant: str, after: str, limit: int) -> list[Any]:
        return self._select(JOBS, "jobs_by_tenant", "tenant = ? AND job_id > ? LIMIT ?", (tenant, after, limit),
                            "list_jobs")

    def set_job_status(self, job_id: str, tenant: str, status: JobState, updated_at: datetime) -> None:
        """Set only the status and updated_at of a jobs row and its jobs_by_tenant copy (one logged batch).

        The row must exist (read it first): like every Cassandra write this is an upsert, and a
        missing job would get a row holding only these columns. The counts are not written, so
        a concurrent progress write by the reducer is not undone.

        Raises:
            StoreError: the write failed transiently.
        """
        at = _ts(updated_at)
        batch = _batch(BatchType.LOGGED)
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

    def _job_documents_page(self, job_id: str, after: str, limit: int) -> list[Any]:
        return self._select(JOB_DOCUMENTS, "job_documents", "job_id = ? AND doc_id > ? LIMIT ?",
                            (job_id, after, limit), "list_job_documents")

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
        chunk_insert = self._prepare(_insert(f"{self._ks}.chunks", CHUNKS.column_list))
        requests: list[tuple[BatchStatement, None]] = []
        for group in _partition_groups(rows, _ROWS_PER_REQUEST):
            batch = _batch(BatchType.UNLOGGED)
            for row in group:
                packed = encode_embedding(row.embedding)  # a model's Float32Vector gives the bytes it holds
                vector = np.frombuffer(packed, dtype=_FLOAT32)
                batch.add(chunk_insert, CHUNK_ROWS.to_columns(row, _ENCODING, encoded={"embedding": packed}))
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

    def _chunks_page(self, doc_id: str, model_id: str, after: int, limit: int) -> list[Any]:
        return self._select(CHUNKS, "chunks", "doc_id = ? AND model_id = ? AND chunk_index > ? LIMIT ?",
                            (doc_id, model_id, after, limit), "iter_chunks")

    def delete_results(self, doc_id: str, model_id: str) -> None:
        """Delete a document's chunk rows, their vector rows and its document_results row under one model.

        Each is one range delete inside the document's partition (a single range tombstone), vectors first, so a
        search never finds a vector whose chunk row is gone for long. Deleting again changes nothing.

        Raises:
            StoreError: a write timed out or Cassandra was unavailable (run it again: every delete is idempotent).
        """
        self._connect()
        key = (doc_id, model_id)
        for dimension in sorted(self._vector_tables | self._existing_vector_tables()):
            self._execute(f"DELETE FROM {self._ks}.chunk_vectors_d{dimension} WHERE doc_id = ? AND model_id = ?",
                          key, "delete_results")
        self._execute(f"DELETE FROM {self._ks}.chunks WHERE doc_id = ? AND model_id = ?", key, "delete_results")
        self._execute(f"DELETE FROM {self._ks}.document_results WHERE doc_id = ? AND model_id = ?", key,
                      "delete_results")

    def delete_document_rows(self, doc_id: str) -> None:
        """Delete a document's vector rows, chunk rows and document_results rows under every model: one partition
        delete in each table, vectors first. Deleting again changes nothing.

        Raises:
            StoreError: a write timed out or Cassandra was unavailable (run it again).
        """
        self._connect()
        for dimension in sorted(self._vector_tables | self._existing_vector_tables()):
            self._execute(f"DELETE FROM {self._ks}.chunk_vectors_d{dimension} WHERE doc_id = ?", (doc_id,),
                          "delete_document_rows")
        self._execute(f"DELETE FROM {self._ks}.chunks WHERE doc_id = ?", (doc_id,), "delete_document_rows")
        self._execute(f"DELETE FROM {self._ks}.document_results WHERE doc_id = ?", (doc_id,), "delete_document_rows")

    def mark_document_deleted(self, doc_id: str, at: datetime) -> None:
        """Set ``deleted_at`` on a documents row, that cell alone.

        Raises:
            StoreError: the write failed transiently.
        """
        self._execute(f"UPDATE {self._ks}.documents SET deleted_at = ? WHERE doc_id = ?", (_ts(at), doc_id),
                      "mark_document_deleted")

    def set_document_generation(self, doc_id: str, generation: int) -> None:
        """Set ``generation`` on a documents row, that cell alone.

        Raises:
            StoreError: the write failed transiently.
        """
        self._execute(f"UPDATE {self._ks}.documents SET generation = ? WHERE doc_id = ?", (generation, doc_id),
                      "set_document_generation")

    def swap_source(self, expected: SourceRow | None, row: SourceRow) -> tuple[bool, SourceRow | None]:
        """Write ``row`` when the stored sources row is still ``expected``: a lightweight transaction (an INSERT IF
        NOT EXISTS for no row; else an UPDATE IF on its generation and deletion).

        Returns:
            Whether it was written (or found written by an earlier attempt of the same write), and the row that
            stands now.

        Raises:
            StoreError: the write failed transiently; ``store_cas_unknown``: it may or may not have landed (read
                the row again).
        """
        values = SOURCE_ROWS.to_columns(row, _ENCODING)
        if expected is None:
            found = self._execute(_insert(f"{self._ks}.sources", SOURCES.column_list) + " IF NOT EXISTS", values,
                                  "swap_source")
        else:
            columns = [c for c in SOURCES.columns if c not in SOURCES.key]
            by_name = dict(zip(SOURCES.columns, values, strict=True))
            assignments = ", ".join(f"{c} = ?" for c in columns)
            found = self._execute(
                f"UPDATE {self._ks}.sources SET {assignments} WHERE tenant = ? AND source_key = ? "
                "IF generation = ? AND deleted_through = ?",
                (*(by_name[c] for c in columns), row.tenant, row.source_key,
                 expected.generation or None, expected.deleted_through), "swap_source")
        if not found or found[0]["[applied]"]:
            return True, row
        # a refused UPDATE IF answers the compared columns alone: the row that stands is read again (the
        # transaction that refused this one is decided, so a read at the store's consistency sees it)
        standing = self.get_source(row.tenant, row.source_key)
        if self._landed(standing, row):
            return True, row  # an earlier attempt of this write landed
        return False, standing

    # -- admission ---------------------------------------------------------------------

    def admit_documents(self, tenant: str, job_id: str, doc_ids: Sequence[str], at: datetime) -> None:
        """Write the tenant's in-flight rows of ``doc_ids`` (one partition: unlogged batches of 100).

        Raises:
            StoreError: a write failed transiently (run it again: the rows are upserts).
        """
        insert = self._prepare(f"INSERT INTO {self._ks}.tenant_inflight (tenant, doc_id, job_id, admitted_at) "
                               "VALUES (?, ?, ?, ?)")
        requests: list[tuple[BatchStatement, None]] = []
        for start in range(0, len(doc_ids), 100):
            batch = _batch(BatchType.UNLOGGED)
            for doc_id in doc_ids[start:start + 100]:
                batch.add(insert, (tenant, doc_id, job_id, _ts(at)))
            requests.append((batch, None))
        if not requests:
            return
        with self._errors("admit_documents"):
            execute_concurrent(self._connect(), requests, concurrency=self._settings.write_concurrency,
                               raise_on_first_error=True)

    def set_document_tokens(self, tenant: str, doc_id: str, tokens: int) -> None:
        """Set a document's tokens; a document not in flight gets a row of tokens alone, not counted, which expires.

        Raises:
            StoreError: the write failed transiently.
        """
        self._execute(f"UPDATE {self._ks}.tenant_inflight USING TTL {_TOKENS_TTL_S} SET tokens = ? "
                      "WHERE tenant = ? AND doc_id = ?", (tokens, tenant, doc_id), "set_document_tokens")

    def end_document(self, tenant: str, doc_id: str, day: str, tokens: int) -> None:
        """Count the document's tokens on ``day``, then take it out of flight.

        Raises:
            StoreError: a write failed transiently (run it again: both are idempotent).
        """
        self._execute(f"INSERT INTO {self._ks}.tenant_daily (tenant, day, doc_id, tokens) VALUES (?, ?, ?, ?)",
                      (tenant, day, doc_id, tokens), "end_document")
        self._execute(f"DELETE FROM {self._ks}.tenant_inflight WHERE tenant = ? AND doc_id = ?", (tenant, doc_id),
                      "end_document")

    def release_documents(self, tenant: str, doc_ids: Sequence[str]) -> None:
        """Delete the tenant's in-flight rows of ``doc_ids`` (one partition: unlogged batches of 100), counting nothing.
        A chunker's later tokens of one leave a row of tokens alone, not counted, which expires.

        Raises:
            StoreError: a write failed transiently (run it again: deleting twice changes nothing).
        """
        delete = self._prepare(f"DELETE FROM {self._ks}.tenant_inflight WHERE tenant = ? AND doc_id = ?")
        requests: list[tuple[BatchStatement, None]] = []
        for start in range(0, len(doc_ids), 100):
            batch = _batch(BatchType.UNLOGGED)
            for doc_id in doc_ids[start:start + 100]:
                batch.add(delete, (tenant, doc_id))
            requests.append((batch, None))
        if not requests:
            return
        with self._errors("release_documents"):
            execute_concurrent(self._connect(), requests, concurrency=self._settings.write_concurrency,
                               raise_on_first_error=True)

    def list_in_flight(self, tenant: str, limit: int) -> list[Slot]:
        """At most ``limit`` of the tenant's in-flight rows with an admission, by doc_id (rows of tokens alone are
        read and skipped, so fewer may come back while more are in flight).

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(f"SELECT doc_id, job_id, admitted_at FROM {self._ks}.tenant_inflight WHERE tenant = ? "
                             "LIMIT ?", (tenant, limit), "list_in_flight")
        return [Slot(row["doc_id"], row["job_id"], _dt(row["admitted_at"])) for row in rows
                if row["admitted_at"] is not None]

    def tenant_load(self, tenant: str, day: str) -> TenantLoad:
        """The tenant's in-flight documents (rows with an admission), their tokens, and the tokens of ``day``: two
        partitions read whole.

        Raises:
            StoreError: a read failed transiently.
        """
        rows = self._execute(f"SELECT admitted_at, tokens FROM {self._ks}.tenant_inflight WHERE tenant = ?",
                             (tenant,), "tenant_load")
        admitted = [row for row in rows if row["admitted_at"] is not None]
        daily = self._execute(f"SELECT tokens FROM {self._ks}.tenant_daily WHERE tenant = ? AND day = ?",
                              (tenant, day), "tenant_load")
        return TenantLoad(len(admitted), sum(int(row["tokens"] or 0) for row in admitted),
                          sum(int(row["tokens"] or 0) for row in daily))

    @contextmanager
    def admission_lease(self, tenant: str) -> Iterator[None]:
        """Hold the tenant's admission lease: a leases row taken by a lightweight transaction, with a TTL for a
        holder that died. A take repeated after a transient failure finds its own row.

        Raises:
            StoreError: ``admission_busy``, another process held it for ``_ADMISSION_WAIT_S``; or Cassandra failed.
        """
        name, owner = f"admission/{tenant}", uuid.uuid4().hex
        take = (f"INSERT INTO {self._ks}.leases (name, owner, taken_at) VALUES (?, ?, ?) IF NOT EXISTS "
                f"USING TTL {_ADMISSION_TTL_S}")

        def taken() -> bool:
            try:
                row = self._execute(take, (name, owner, _ts(datetime.now(UTC))), "admission_lease")[0]
            except StoreError as exc:  # a take repeated after this finds our own row if this one landed
                _log.info("admission_lease_retry", tenant=tenant, code=exc.code)
                return False
            return bool(row["[applied]"] or row.get("owner") == owner)

        acquire_lease(taken, wait_s=_ADMISSION_WAIT_S, base_s=0.02,
                      busy=f"another admission of tenant {tenant} held its lease for {_ADMISSION_WAIT_S:.0f} s")
        try:
            yield
        finally:
            try:
                self._execute(f"DELETE FROM {self._ks}.leases WHERE name = ? IF owner = ?", (name, owner),
                              "admission_lease")
            except StoreError as exc:  # its TTL frees it
                _log.warning("admission_lease_not_released", tenant=tenant, error=str(exc),
                             expires_in_s=_ADMISSION_TTL_S)

    # -- where jobs stand ---------------------------------------------------------------

    def list_queue(self, lane: str) -> list[QueuedJobRow]:
        """Every lane_queue row of ``lane`` (one partition, paged by job_id), sorted by created_at then job_id.

        Raises:
            StoreError: a page read failed transiently.
        """

        def _page(after: str, limit: int) -> list[QueuedJobRow]:
            found = self._select(QUEUE_ROWS.table, "lane_queue", "lane = ? AND job_id > ? LIMIT ?",
                                 (lane, after, limit), "list_queue")
            return [QUEUE_ROWS.from_columns(row, _ENCODING) for row in found]

        rows = keyset_rows(_page, start="", key=_job_id, page_size=self._page_size)
        return sorted(rows, key=_queue_order)

    def record_throughput(self, name: str, instance: str, tokens_per_s: float, at: datetime, ttl_s: int) -> None:
        """Write ``instance``'s rate with a TTL of ``ttl_s`` (a plain upsert: its row replaced, expired by Cassandra).

        Raises:
            ValueError: ttl_s < 1, or tokens_per_s negative or not finite.
            StoreError: the write failed transiently.
        """
        check_throughput(tokens_per_s, ttl_s)
        self._execute(f"INSERT INTO {self._ks}.throughput (name, instance, tokens_per_s, updated_at) "
                      "VALUES (?, ?, ?, ?) USING TTL ?",
                      (name, instance, float(tokens_per_s), _ts(at), ttl_s), "record_throughput")

    def throughput(self, name: str, at: datetime) -> float:
        """The sum of the live rates: the partition read whole. The rows' TTLs do the expiry, so ``at`` is not
        read (the rows alive now are those not expired).

        Raises:
            StoreError: the read failed transiently.
        """
        rows = self._execute(f"SELECT tokens_per_s FROM {self._ks}.throughput WHERE name = ?",
                             (name,), "throughput")
        return float(sum(float(row["tokens_per_s"] or 0.0) for row in rows))

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
        return int(rows[0]["n"]) if rows else 0

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
        query = search_query(embedding, k)
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
        chunks = self._read_chunks([(c["doc_id"], c["model_id"], c["chunk_index"]) for c in candidates])
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
            f"SELECT {CHUNKS.select_list} FROM {self._ks}.chunks WHERE {CHUNKS.key_condition}"
        )
        with self._errors("search"):
            results = execute_concurrent(
                self._connect(),
                [(select, key) for key in keys],
                concurrency=self._settings.write_concurrency,
                raise_on_first_error=True,
            )
        return [CHUNK_ROWS.from_columns(row, _ENCODING) for result in results for row in result.result_or_exc]


def _job_id(row: QueuedJobRow) -> str:
    return row.job_id


def _queue_order(row: QueuedJobRow) -> tuple[datetime, str]:
    return row.created_at, row.job_id


def _batch(kind: Any) -> BatchStatement:
    """A batch of upserts: idempotent, like every statement of the store."""
    batch = BatchStatement(batch_type=kind)
    batch.is_idempotent = True
    return batch
