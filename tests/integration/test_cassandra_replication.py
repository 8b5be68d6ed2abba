"""The Cassandra store's side of a replicated deployment, on the real Cassandra of deploy/local.

* migrations create the keyspace with the configured replication (here NetworkTopologyStrategy over
  the node's own datacenter);
* every statement the store sends is marked idempotent, so the driver may send it again to another
  replica when a coordinator dies mid-request (docs/operations.md "A replicated deployment").
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from docstream.settings import CassandraSettings
from docstream.store.base import ChunkRow, JobRow
from tests.fixtures.cassandra import cluster_of, drop_keyspace

pytestmark = pytest.mark.integration


def test_migrations_create_the_keyspace_with_the_configured_replication_and_every_statement_is_idempotent(
    cassandra_settings: CassandraSettings,
) -> None:
    from docstream.store.cassandra import CassandraStore

    probe = cluster_of(cassandra_settings)
    try:
        datacenter = probe.connect().execute("SELECT data_center FROM system.local").one().data_center
    finally:
        probe.shutdown()
    settings = cassandra_settings.model_copy(update={
        "keyspace": f"docstream_repl_{uuid.uuid4().hex[:10]}",
        "replication": f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': 1}}",
        "local_dc": datacenter,
    })
    store = CassandraStore(settings)
    try:
        store.migrate()
        now = datetime.now(UTC)
        store.upsert_job(JobRow(job_id="j", tenant="t", created_at=now, updated_at=now, status="running",
                                document_count=1))
        store.set_job_status("j", "t", "completed", now)
        store.upsert_chunks([ChunkRow(doc_id="d", model_id="m", chunk_index=0, chunk_id="c", job_id="j", text="x",
                                      page_start=1, page_end=1, char_start=0, char_end=1, token_count=1,
                                      embedding=[1.0, 0.0])])
        assert [row.chunk_id for row in store.iter_chunks("d", "m")] == ["c"]
        rows = store._connect().execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (settings.keyspace,)).one()
        replication = dict(rows["replication"])
        assert replication["class"].endswith("NetworkTopologyStrategy")
        assert replication[datacenter] == "1"
        prepared = list(store._prepared.values())
        assert len(prepared) >= 5
        assert all(statement.is_idempotent for statement in prepared)
    finally:
        store.close()
        drop_keyspace(settings)
