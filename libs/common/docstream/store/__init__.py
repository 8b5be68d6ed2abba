"""docstream.store: the ResultStore protocol, its rows, and the SQLite and Cassandra stores.

``CassandraStore`` is imported on first use, so importing this package needs neither a
Cassandra connection nor the driver's start-up cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from docstream.settings import Settings
from docstream.store.base import (
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    ResultStore,
    SearchHit,
)
from docstream.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from docstream.store.cassandra import CassandraStore

__all__ = [
    "CassandraStore",
    "ChunkRow",
    "DocumentResultRow",
    "DocumentRow",
    "JobDocumentRow",
    "JobRow",
    "ResultStore",
    "SearchHit",
    "SqliteStore",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "CassandraStore":
        from docstream.store.cassandra import CassandraStore

        return CassandraStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(settings: Settings) -> ResultStore:
    """The result store ``settings.store.backend`` names (not yet migrated; call ``migrate()``).

    Neither store connects here: the SQLite file opens and Cassandra connects on first use.

    Raises:
        ValueError: an unknown backend (settings validation normally prevents it).
    """
    backend = settings.store.backend
    if backend == "sqlite":
        return SqliteStore(settings.store.sqlite_path)
    if backend == "cassandra":
        from docstream.store.cassandra import CassandraStore

        return CassandraStore(settings.cassandra)
    raise ValueError(f"unknown store backend {backend!r}")
