"""docstream.store: the ResultStore protocol (and its narrow parts by concern), its rows, and the SQLite and Cassandra
stores.

``CassandraStore`` is imported on first use, so importing this package needs neither a
Cassandra connection nor the driver's start-up cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from docstream.settings import CassandraSettings, StoreSettings
from docstream.store.base import (
    ApiKeysStore,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    JobsStore,
    ResultsStore,
    ResultStore,
    SearchHit,
    SourcesStore,
    TenantLedger,
)
from docstream.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from docstream.store.cassandra import CassandraStore

__all__ = [
    "ApiKeysStore",
    "CassandraStore",
    "ChunkRow",
    "DocumentResultRow",
    "DocumentRow",
    "JobDocumentRow",
    "JobRow",
    "JobsStore",
    "ResultStore",
    "ResultsStore",
    "SearchHit",
    "SourcesStore",
    "SqliteStore",
    "TenantLedger",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "CassandraStore":
        from docstream.store.cassandra import CassandraStore

        return CassandraStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(store: StoreSettings, cassandra: CassandraSettings) -> ResultStore:
    """The result store ``store.backend`` names (not yet migrated; call ``migrate()``).

    Neither store connects here: the SQLite file opens and Cassandra connects on first use.

    Args:
        store: which backend, and the SQLite file of the sqlite one.
        cassandra: the connection of the cassandra backend.

    Raises:
        ValueError: an unknown backend (settings validation normally prevents it).
    """
    backend = store.backend
    if backend == "sqlite":
        return SqliteStore(store.sqlite_path)
    if backend == "cassandra":
        from docstream.store.cassandra import CassandraStore

        return CassandraStore(cassandra)
    raise ValueError(f"unknown store backend {backend!r}")
