"""The SQLite store's lane queue and throughput heartbeats (the contract suite runs both backends)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from docstream.errors import FatalError
from docstream.store.base import QueuedJobRow
from docstream.store.sqlite import SqliteStore

T0 = datetime(2026, 12, 4, 9, 0, 0, 123000, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    sqlite = SqliteStore(tmp_path / "store.db")
    sqlite.migrate()
    try:
        yield sqlite
    finally:
        sqlite.close()


def _queued(lane: str, job_id: str, created_at: datetime, **changes: object) -> QueuedJobRow:
    row = QueuedJobRow(lane=lane, job_id=job_id, tenant="acme", created_at=created_at, waiting_tokens=1200,
                       ended_documents=0, updated_at=created_at + timedelta(seconds=3))
    return replace(row, **changes)  # type: ignore[arg-type]


def test_a_lanes_queue_lists_its_jobs_by_created_at_then_job_id(store: SqliteStore) -> None:
    late = _queued("batch", "job-a", T0 + timedelta(minutes=5))
    early = _queued("batch", "job-z", T0)
    tied = _queued("batch", "job-b", T0 + timedelta(minutes=5))
    for row in (late, early, tied):
        store.upsert_queued_job(row)
    assert store.list_queue("batch") == [early, late, tied]


def test_lanes_are_kept_apart(store: SqliteStore) -> None:
    batch, interactive = _queued("batch", "job-1", T0), _queued("interactive", "job-2", T0)
    store.upsert_queued_job(batch)
    store.upsert_queued_job(interactive)
    assert store.list_queue("batch") == [batch]
    assert store.list_queue("interactive") == [interactive]
    assert store.list_queue("other") == []
    store.delete_queued_job("interactive", "job-1")  # the job is in the other lane: nothing happens
    assert store.list_queue("batch") == [batch]


def test_an_upsert_of_the_same_job_replaces_its_row(store: SqliteStore) -> None:
    row = _queued("interactive", "job-1", T0)
    store.upsert_queued_job(row)
    later = replace(row, waiting_tokens=300, ended_documents=4, updated_at=T0 + timedelta(minutes=1))
    store.upsert_queued_job(later)
    store.upsert_queued_job(later)  # again: the same row
    assert store.list_queue("interactive") == [later]


def test_a_deleted_job_leaves_its_lane_and_a_second_delete_changes_nothing(store: SqliteStore) -> None:
    kept, ended = _queued("batch", "job-1", T0), _queued("batch", "job-2", T0 + timedelta(seconds=1))
    store.upsert_queued_job(kept)
    store.upsert_queued_job(ended)
    store.delete_queued_job("batch", "job-2")
    store.delete_queued_job("batch", "job-2")
    assert store.list_queue("batch") == [kept]


def test_queue_timestamps_read_back_as_aware_utc_milliseconds(store: SqliteStore) -> None:
    naive = datetime(2026, 12, 4, 9, 0, 0, 123456)
    store.upsert_queued_job(_queued("batch", "job-1", naive, updated_at=naive))
    (row,) = store.list_queue("batch")
    assert row.created_at == row.updated_at == naive.replace(microsecond=123000, tzinfo=UTC)


def test_throughput_sums_the_live_rows_of_every_instance(store: SqliteStore) -> None:
    assert store.throughput("docstream", T0) == 0.0
    store.record_throughput("docstream", "reducer-1", 100.0, T0, 30)
    store.record_throughput("docstream", "reducer-2", 250.5, T0, 30)
    assert store.throughput("docstream", T0 + timedelta(seconds=1)) == pytest.approx(350.5)
    store.record_throughput("docstream", "reducer-1", 40.0, T0 + timedelta(seconds=2), 30)  # its row replaced
    assert store.throughput("docstream", T0 + timedelta(seconds=3)) == pytest.approx(290.5)


def test_each_deployment_sums_its_own_rows(store: SqliteStore) -> None:
    store.record_throughput("docstream", "reducer-1", 100.0, T0, 30)
    store.record_throughput("staging", "reducer-1", 3.0, T0, 30)
    assert store.throughput("docstream", T0) == pytest.approx(100.0)
    assert store.throughput("staging", T0) == pytest.approx(3.0)
    assert store.throughput("other", T0) == 0.0


def test_a_row_past_its_ttl_is_not_counted_and_the_next_write_deletes_it(store: SqliteStore) -> None:
    store.record_throughput("docstream", "stopped", 500.0, T0, 10)
    store.record_throughput("docstream", "alive", 20.0, T0 + timedelta(seconds=9), 10)
    assert store.throughput("docstream", T0 + timedelta(seconds=9)) == pytest.approx(520.0)
    # the stopped one expires at T0 + 10 s exactly
    assert store.throughput("docstream", T0 + timedelta(seconds=10)) == pytest.approx(20.0)
    assert store.throughput("docstream", T0 + timedelta(seconds=30)) == 0.0
    store.record_throughput("docstream", "alive", 25.0, T0 + timedelta(seconds=15), 10)
    with sqlite3.connect(store.path) as conn:
        assert [name for (name,) in conn.execute("SELECT instance FROM throughput")] == ["alive"]
    assert store.throughput("docstream", T0 + timedelta(seconds=16)) == pytest.approx(25.0)


@pytest.mark.parametrize(("tokens_per_s", "ttl_s"), [(-1.0, 10), (math.nan, 10), (math.inf, 10), (1.0, 0)])
def test_a_throughput_no_store_keeps_is_refused(store: SqliteStore, tokens_per_s: float, ttl_s: int) -> None:
    with pytest.raises(ValueError, match=r"^(tokens_per_s|ttl_s) must be"):
        store.record_throughput("docstream", "reducer-1", tokens_per_s, T0, ttl_s)
    assert store.throughput("docstream", T0) == 0.0


def test_an_unmigrated_store_is_a_fatal_error(tmp_path: Path) -> None:
    sqlite = SqliteStore(tmp_path / "store.db")
    try:
        for call in (lambda: sqlite.list_queue("batch"), lambda: sqlite.throughput("docstream", T0)):
            with pytest.raises(FatalError) as caught:
                call()
            assert caught.value.code == "store_not_migrated"
    finally:
        sqlite.close()
