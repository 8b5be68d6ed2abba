"""The Cassandra store's migration lease, on the real Cassandra of deploy/local (docs/storage.md "Migrations").

One process at a time changes the schema: it holds the ``schema_lock`` row (a lightweight
transaction with a TTL) while it applies what is pending. These tests play the other process
by writing that row themselves. The concurrent migrate of a new keyspace is the
``cassandra_store`` fixture's (two stores at once).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from cassandra.cluster import Session

from docstream.settings import CassandraSettings
from docstream.store import ResultStore
from docstream.store.base import ChunkRow
from tests.fixtures.cassandra import cluster_of

pytestmark = pytest.mark.integration

_LEASE = "migrate"


@pytest.fixture
def raw(cassandra_settings: CassandraSettings) -> Iterator[Session]:
    cluster = cluster_of(cassandra_settings)
    try:
        yield cluster.connect(cassandra_settings.keyspace)
    finally:
        cluster.shutdown()


def _hold_lease(session: Session, owner: str, ttl_s: int) -> None:
    session.execute(
        "INSERT INTO schema_lock (name, owner, taken_at) VALUES (%s, %s, toTimestamp(now())) IF NOT EXISTS "
        f"USING TTL {ttl_s}", (_LEASE, owner))


def _lease_owner(session: Session) -> str | None:
    row = session.execute("SELECT owner FROM schema_lock WHERE name = %s", (_LEASE,)).one()
    return None if row is None else str(row.owner)


def _chunk(dimension: int) -> ChunkRow:
    doc = f"lease-{uuid.uuid4().hex[:8]}"
    return ChunkRow(doc_id=doc, model_id="m", chunk_index=0, chunk_id=f"{doc}-0", job_id="j", text="x", page_start=1,
                    page_end=1, char_start=0, char_end=1, token_count=1, embedding=[1.0] + [0.0] * (dimension - 1))


def _vector_tables(session: Session) -> set[str]:
    rows = session.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (session.keyspace,))
    return {row.table_name for row in rows if row.table_name.startswith("chunk_vectors_d")}


def test_a_new_dimension_waits_for_the_lease_another_process_holds(
    cassandra_store: ResultStore, raw: Session,
) -> None:
    _hold_lease(raw, "another-process", ttl_s=120)
    assert _lease_owner(raw) == "another-process"
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            cassandra_store.upsert_chunks([_chunk(11)])
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write, name="new-dimension")
    writer.start()
    try:
        # the writer waits: no schema change while the other process holds the lease
        assert not done.wait(3.0)
        assert "chunk_vectors_d11" not in _vector_tables(raw)
    finally:
        raw.execute("DELETE FROM schema_lock WHERE name = %s IF owner = %s", (_LEASE, "another-process"))
    assert done.wait(120.0), "the new dimension's table was never created"
    writer.join()
    assert errors == []
    assert "chunk_vectors_d11" in _vector_tables(raw)
    # released on the way out: the next migrate finds no holder
    assert _lease_owner(raw) is None


def test_a_lease_whose_holder_died_expires_and_the_waiter_takes_it(cassandra_store: ResultStore, raw: Session) -> None:
    # a holder killed mid-migration never deletes its row: its TTL frees the lease
    _hold_lease(raw, "a-dead-process", ttl_s=2)
    cassandra_store.upsert_chunks([_chunk(13)])
    assert "chunk_vectors_d13" in _vector_tables(raw)
    assert _lease_owner(raw) is None


def test_a_migrate_with_nothing_pending_takes_no_lease(cassandra_store: ResultStore, raw: Session) -> None:
    # services restarting on a migrated keyspace never wait on each other (nor on a holder's leftover row)
    _hold_lease(raw, "another-process", ttl_s=120)
    try:
        finished = threading.Event()

        def migrate() -> None:
            cassandra_store.migrate()
            finished.set()

        migrating = threading.Thread(target=migrate, name="migrate")
        migrating.start()
        assert finished.wait(60.0), "migrate waited on a lease although nothing was pending"
        migrating.join()
        assert _lease_owner(raw) == "another-process"
    finally:
        raw.execute("DELETE FROM schema_lock WHERE name = %s", (_LEASE,))
