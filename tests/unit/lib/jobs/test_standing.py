"""Where a job stands in its lane (docstream.jobs.standing): pure, with rows, rates and clocks handed in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docstream.jobs.standing import TokenRate, queue_standing
from docstream.store.base import JobRow, QueuedJobRow

T0 = datetime(2026, 12, 4, 12, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)


def _job(job_id: str, minute: int, lane: str = "batch", **kw: object) -> JobRow:
    job = JobRow(job_id, "acme", T0 + timedelta(minutes=minute), "running", 3, options={"priority": lane})
    return replace(job, **kw)  # type: ignore[arg-type]


def _row(job_id: str, minute: int, waiting: int, lane: str = "batch", ended: int = 0) -> QueuedJobRow:
    return QueuedJobRow(lane, job_id, "acme", T0 + timedelta(minutes=minute), waiting, ended, T0)


def test_a_batch_job_has_the_waiting_tokens_of_the_earlier_jobs_of_its_lane_ahead_and_starts_at_the_rate() -> None:
    batch = [_row("backfill", 0, 90_000), _row("mine", 2, 500), _row("later", 3, 7_000)]
    standing = queue_standing(_job("mine", 2), batch, [], tokens_per_s=1_000.0, batch_share=0.2, now=NOW)
    assert (standing.lane, standing.started, standing.tokens_ahead, standing.waiting_tokens) == (
        "batch", False, 90_000, 500)
    assert standing.start_in_s == pytest.approx(90.0)
    assert standing.estimated_start == NOW + timedelta(seconds=90)


def test_an_interactive_job_waits_for_its_lane_and_the_batch_share_served_meanwhile_not_for_the_backfill() -> None:
    interactive = [_row("first", 1, 800, "interactive"), _row("mine", 2, 300, "interactive")]
    batch = [_row("backfill", 0, 90_000)]
    standing = queue_standing(_job("mine", 2, "interactive"), interactive, batch, 1_000.0, 0.2, NOW)
    assert standing.tokens_ahead == 800 + 200  # batch keeps 0.2 of what is served: 1 token for every 4
    alone = queue_standing(_job("first", 1, "interactive"), interactive, batch, 1_000.0, 0.2, NOW)
    assert (alone.tokens_ahead, alone.start_in_s, alone.estimated_start) == (0, 0.0, NOW)


def test_a_batch_job_behind_interactive_work_is_served_its_share_and_waits_for_all_of_it_without_one() -> None:
    interactive = [_row("urgent", 1, 10_000, "interactive")]
    batch = [_row("backfill", 0, 1_000), _row("mine", 2, 50)]
    # batch is served 1 token for every 4 interactive ones: 1,000 of batch ahead take 4,000 interactive along
    assert queue_standing(_job("mine", 2), batch, interactive, 100.0, 0.2, NOW).tokens_ahead == 5_000
    # once the interactive work is done, the rest goes at the whole rate
    few = [_row("urgent", 1, 1_500, "interactive")]
    assert queue_standing(_job("mine", 2), batch, few, 100.0, 0.2, NOW).tokens_ahead == 2_500
    assert queue_standing(_job("mine", 2), batch, interactive, 100.0, 0.0, NOW).tokens_ahead == 11_000
    # a batch job first in its lane starts with its share at once
    assert queue_standing(_job("backfill", 0), batch, interactive, 100.0, 0.2, NOW).tokens_ahead == 0


def test_a_job_with_a_document_ended_has_started_an_ended_job_stands_nowhere_and_no_rate_gives_no_estimate() -> None:
    batch = [_row("backfill", 0, 90_000), _row("mine", 2, 500, ended=1)]
    started = queue_standing(_job("mine", 2), batch, [], 1_000.0, 0.2, NOW)
    assert (started.started, started.tokens_ahead, started.start_in_s) == (True, 0, 0.0)
    counted = queue_standing(_job("other", 3, completed=1), batch, [], 1_000.0, 0.2, NOW)
    assert counted.started
    ended = queue_standing(_job("mine", 2, status="completed"), batch, [], 1_000.0, 0.2, NOW)
    assert (ended.tokens_ahead, ended.start_in_s, ended.estimated_start) == (None, None, None)
    unknown = queue_standing(_job("late", 4), batch, [], 0.0, 0.2, NOW)
    assert (unknown.tokens_ahead, unknown.start_in_s, unknown.estimated_start) == (90_500, None, None)


def test_a_job_not_chunked_yet_stands_behind_every_earlier_job_and_ties_on_time_go_by_job_id() -> None:
    batch = [_row("a", 1, 100), _row("b", 1, 200), _row("c", 2, 400)]
    assert queue_standing(_job("b", 1), batch, [], 10.0, 0.2, NOW).tokens_ahead == 100
    fresh = queue_standing(_job("z", 9), batch, [], 10.0, 0.2, NOW)
    assert (fresh.tokens_ahead, fresh.waiting_tokens) == (700, 0)


@given(st.lists(st.integers(0, 10_000), max_size=8), st.lists(st.integers(0, 10_000), max_size=8),
       st.floats(0.0, 1.0))
def test_tokens_ahead_are_at_least_the_lanes_own_and_at_most_everything_waiting(
        before: list[int], other: list[int], share: float) -> None:
    lane = [_row(f"j{i}", i, w) for i, w in enumerate(before)] + [_row("mine", 100, 5)]
    others = [_row(f"i{i}", i, w, "interactive") for i, w in enumerate(other)]
    ahead = queue_standing(_job("mine", 100), lane, others, 1.0, share, NOW).tokens_ahead
    assert ahead is not None and sum(before) <= ahead <= sum(before) + sum(other)


def test_the_rate_is_the_growth_of_the_running_total_over_the_window() -> None:
    rate = TokenRate(window_s=60.0)
    assert rate.rate() == 0.0
    rate.observe(0.0, 0)
    assert rate.rate() == 0.0  # one sample: no span yet
    rate.observe(10.0, 5_000)
    assert rate.rate() == pytest.approx(500.0)
    rate.observe(20.0, 8_000)
    assert rate.rate() == pytest.approx(400.0)  # 8,000 over 20 s: each interval counted once
    for at in (30.0, 40.0, 50.0, 60.0, 70.0):
        rate.observe(at, 8_000 + int((at - 20.0) * 100))
    # the window spans 60 s back from 70 s: from the sample at 10 s on
    assert rate.rate() == pytest.approx((13_000 - 5_000) / 60.0)
    rate.observe(80.0, 13_000)
    rate.observe(140.0, 13_000)  # idle for a minute
    assert rate.rate() == 0.0
