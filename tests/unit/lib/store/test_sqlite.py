"""SqliteStore specifics: migrations applied once, open_store, lazy Cassandra import."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from docstream.errors import FatalError
from docstream.settings import load_settings
from docstream.store import ResultStore, SqliteStore, open_store

_VERSIONS = ["001_init", "003_api_keys", "004_result_runtime", "005_usage", "006_provenance", "007_task_results",
             "008_page_reasons", "009_chunk_tables", "010_chat_tokens", "011_sources", "012_admission",
             "013_queue_throughput", "014_generations", "015_page_furniture"]


def test_migrations_are_applied_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a" / "store.db")
    try:
        assert store.pending_migrations() == _VERSIONS
        store.migrate()
        applied = store.applied_migrations()
        assert list(applied) == _VERSIONS
        assert store.pending_migrations() == []
        store.migrate()
        assert store.applied_migrations() == applied
    finally:
        store.close()


def test_a_second_process_sees_the_migrations(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    first, second = SqliteStore(path), SqliteStore(path)
    try:
        first.migrate()
        assert second.pending_migrations() == []
        second.migrate()
        assert second.applied_migrations() == first.applied_migrations()
    finally:
        first.close()
        second.close()


def test_unmigrated_store_is_a_fatal_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        with pytest.raises(FatalError) as caught:
            store.get_job("job-1")
        assert caught.value.code == "store_not_migrated"
    finally:
        store.close()


def test_wal_mode_and_a_connection_per_thread(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    seen: list[int] = []

    def _count() -> None:
        seen.append(store.count_chunks("doc", "model"))

    thread = threading.Thread(target=_count)
    thread.start()
    thread.join(timeout=30)
    store.close()
    assert seen == [0]
    conn = sqlite3.connect(tmp_path / "store.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # WAL persists in the file
    finally:
        conn.close()
    with pytest.raises(FatalError, match="closed"):
        store.ping()


def test_open_store_chooses_by_backend(tmp_path: Path) -> None:
    settings = load_settings(store={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    sqlite = open_store(settings.store, settings.cassandra)
    try:
        assert isinstance(sqlite, SqliteStore)
        assert sqlite.path == tmp_path / "s.db"
        assert isinstance(sqlite, ResultStore)
    finally:
        sqlite.close()
    settings = load_settings(store={"backend": "cassandra"}, cassandra={"keyspace": "ks_x"})
    cassandra = open_store(settings.store, settings.cassandra)
    try:
        assert type(cassandra).__name__ == "CassandraStore"
        assert isinstance(cassandra, ResultStore)
        assert cassandra.keyspace == "ks_x"  # type: ignore[attr-defined]
    finally:
        cassandra.close()


def test_importing_the_store_package_does_not_import_cassandra() -> None:
    code = "import sys, docstream.store; print('cassandra' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
