"""An inference process's rate in the store (docs/operations.md "Where a job stands"): written from the write stage's
ticks, every RATE_EVERY_S, under the process's consumer group; a failed write waits for the next tick."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.errors import StoreError
from docstream.jobs.standing import RATE_EVERY_S
from docstream.store.sqlite import SqliteStore
from docstream_inference.stages import ThroughputWriter
from tests.fixtures.clock import FakeClock


class _Failing(SqliteStore):
    fail = 0

    def record_throughput(self, name: str, instance: str, tokens_per_s: float, at: datetime, ttl_s: int) -> None:
        if self.fail:
            self.fail -= 1
            raise StoreError("cassandra timeout")
        super().record_throughput(name, instance, tokens_per_s, at, ttl_s)


def test_the_write_stage_writes_the_rate_of_its_group_every_few_seconds_and_again_after_a_failure(
        tmp_path: Path) -> None:
    store = _Failing(tmp_path / "store.db")
    store.migrate()
    clock = FakeClock(1_000.0)
    writer = ThroughputWriter(store, "docstream-inference", clock=clock, instance="i-1")
    clock.now += RATE_EVERY_S
    writer.tick(5_000)
    assert store.throughput("docstream-inference", datetime.now(UTC)) == pytest.approx(5_000 / RATE_EVERY_S)
    clock.now += 1.0
    writer.tick(9_000)  # not due: the row keeps the last rate
    assert store.throughput("docstream-inference", datetime.now(UTC)) == pytest.approx(5_000 / RATE_EVERY_S)
    store.fail = 1
    clock.now += RATE_EVERY_S
    writer.tick(9_000)  # due, and the store fails: logged, the stage goes on
    clock.now += RATE_EVERY_S
    writer.tick(9_000)
    elapsed = 1.0 + 3 * RATE_EVERY_S
    assert store.throughput("docstream-inference", datetime.now(UTC)) == pytest.approx(9_000 / elapsed)
    assert store.throughput("docstream-inference-classify", datetime.now(UTC)) == 0.0
    store.close()
