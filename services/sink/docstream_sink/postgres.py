"""The PostgreSQL engine of a sink (psycopg 3): one table, vectors in a ``real[]`` column.

``CREATE TABLE <collection> (id uuid PRIMARY KEY, tenant, source, doc_id text, vector real[], payload jsonb)``
with an index on (tenant, source). An upsert is ``INSERT ... ON CONFLICT (id) DO UPDATE``, one transaction per
batch (psycopg pipelines the statements). The table's name is checked by SinkSettings' pattern and quoted as an
identifier; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from docstream.errors import ConfigError, DocstreamError, PoisonRecord, RetryableError
from docstream.settings import SinkSettings
from docstream_sink.engine import HeldPoint
from docstream_sink.points import SinkPoint

__all__ = ["PostgresEngine"]

_T = TypeVar("_T")
_SCAN_BATCH = 1000


class PostgresEngine:
    """A sink's points in one PostgreSQL table."""

    overlaps_reads = False

    def __init__(self, settings: SinkSettings) -> None:
        self._uri = settings.uri.get_secret_value()
        self._timeout = settings.timeout_s
        self._table = sql.Identifier(settings.collection)
        self._name = settings.collection
        self._conn: psycopg.Connection | None = None
        self._ready = False
        self._connection()

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self._uri, connect_timeout=max(1, int(self._timeout)),
                                             options=f"-c statement_timeout={int(self._timeout * 1000)}")
            except psycopg.OperationalError as exc:
                # the message names the host, never the URI (which may hold a password)
                raise RetryableError(f"postgres did not answer: {str(exc).splitlines()[0][:300]}",
                                     code="sink_unavailable") from exc
        return self._conn

    def _call(self, what: str, fn: Callable[[psycopg.Connection], _T]) -> _T:
        """Run ``fn`` in one transaction, its errors as docstream's (engine.py); a broken connection is dropped
        and opened again on the next call."""
        conn = self._connection()
        try:
            with conn.transaction():
                return fn(conn)
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            conn.close()
            raise RetryableError(f"postgres did not finish the {what}: {str(exc)[:300]}",
                                 code="sink_unavailable") from exc
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            raise PoisonRecord(f"postgres refused the {what}: {str(exc)[:300]}", code="sink_refused") from exc
        except psycopg.Error as exc:
            raise DocstreamError(f"postgres failed the {what}: {str(exc)[:300]}", code="sink_error") from exc

    def ensure(self, dimensions: int) -> None:
        if self._ready:
            return

        def create(conn: psycopg.Connection) -> int | None:
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (id uuid PRIMARY KEY, tenant text NOT NULL, source text NOT NULL, "
                "doc_id text NOT NULL, vector real[] NOT NULL, payload jsonb NOT NULL)").format(self._table))
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tenant, source)").format(
                sql.Identifier(f"{self._name}_source"), self._table))
            row = conn.execute(sql.SQL("SELECT cardinality(vector) FROM {} LIMIT 1").format(self._table)).fetchone()
            return int(row[0]) if row is not None else None

        held = self._call("table creation", create)
        if held is not None and held != dimensions:
            raise ConfigError(f"postgres table {self._name!r} holds vectors of {held} dimensions, the sink's model "
                              f"gives {dimensions}: name another collection")
        self._ready = True

    def upsert(self, points: Sequence[SinkPoint]) -> None:
        statement = sql.SQL(
            "INSERT INTO {} (id, tenant, source, doc_id, vector, payload) VALUES (%s, %s, %s, %s, %s::real[], %s) "
            "ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, source = EXCLUDED.source, "
            "doc_id = EXCLUDED.doc_id, vector = EXCLUDED.vector, payload = EXCLUDED.payload").format(self._table)
        rows = [(p.id, p.tenant, p.source, p.doc_id, p.vector, Jsonb(p.payload)) for p in points]

        def write(conn: psycopg.Connection) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(statement, rows)

        self._call("upsert", write)

    def _delete(self, what: str, where: sql.Composable, params: Sequence[str]) -> int:
        statement = sql.SQL("DELETE FROM {} WHERE ").format(self._table) + where
        try:
            return self._call(what, lambda conn: conn.execute(statement, params).rowcount)
        except DocstreamError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
                return 0  # no point was ever written (the table comes with the first upsert): nothing to delete
            raise

    def delete_other_versions(self, tenant: str, source: str, doc_id: str) -> int:
        return self._delete("delete of other versions", sql.SQL("tenant = %s AND source = %s AND doc_id <> %s"),
                            (tenant, source, doc_id))

    def delete_source(self, tenant: str, source: str) -> int:
        return self._delete("delete of a source", sql.SQL("tenant = %s AND source = %s"), (tenant, source))

    def delete_ids(self, ids: Sequence[str]) -> None:
        if ids:
            self._delete("delete by id", sql.SQL("id = ANY(%s::uuid[])"), [list(ids)])  # type: ignore[list-item]

    def delete_if_held(self, points: Sequence[tuple[str, str]]) -> None:
        if not points:
            return
        statement = sql.SQL("DELETE FROM {} WHERE (id, doc_id) IN (SELECT * FROM unnest(%s::uuid[], %s::text[]))"
                            ).format(self._table)
        ids, doc_ids = [p[0] for p in points], [p[1] for p in points]
        self._call("delete of held points", lambda conn: conn.execute(statement, (ids, doc_ids)).rowcount)

    def scan(self, tenant: str) -> Iterator[HeldPoint]:
        conn = self._connection()
        exists = self._call("table check", lambda c: c.execute("SELECT to_regclass(%s)", (self._name,)).fetchone())
        if exists is None or exists[0] is None:
            return
        try:
            with conn.transaction(), conn.cursor(name=f"{self._name}_scan") as cursor:
                cursor.itersize = _SCAN_BATCH
                cursor.execute(sql.SQL("SELECT id::text, doc_id, vector FROM {} WHERE tenant = %s").format(
                    self._table), (tenant,))
                for point_id, doc_id, vector in cursor:
                    yield str(point_id), str(doc_id), [float(x) for x in vector]
        except psycopg.OperationalError as exc:
            conn.close()
            raise RetryableError(f"postgres did not finish the scan: {str(exc)[:300]}",
                                 code="sink_unavailable") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
