"""The inference consumer's flow control (docstream_inference.flow): fetch sizes and pauses, as pure logic."""

from __future__ import annotations

from docstream_inference.flow import Flow, LaneState, fetch_size, flow

CAPACITY = 64


def lane(backlog: int, *, held: int = 0, paused: bool = False, full_since: float | None = None) -> LaneState:
    return LaneState(backlog, held, paused, full_since)


def test_a_full_open_lane_does_not_stop_the_fetch_for_a_lane_with_room() -> None:
    # the batch lane full and not paused yet, the interactive lane empty: its records, behind the batch lane's in
    # librdkafka's queue, are fetched now (the batch lane's that come first are held)
    assert fetch_size([lane(CAPACITY), lane(0)], CAPACITY, 500) == CAPACITY
    assert fetch_size([lane(CAPACITY + 3, held=3), lane(10)], CAPACITY, 500) == CAPACITY - 10


def test_a_fetch_takes_nothing_while_every_open_lane_is_full_and_never_more_than_the_most() -> None:
    assert fetch_size([lane(CAPACITY), lane(CAPACITY + 5, held=5)], CAPACITY, 500) == 0
    assert fetch_size([], CAPACITY, 500) == 0
    assert fetch_size([lane(0)], 2048, 500) == 500


def test_a_lane_holding_records_past_its_room_is_paused_at_once() -> None:
    assert flow(lane(CAPACITY + 1, held=1, full_since=10.0), CAPACITY, now=10.0, grace_s=0.1) is Flow.PAUSE


def test_a_full_lane_holding_nothing_is_paused_only_after_the_grace() -> None:
    full = lane(CAPACITY, full_since=10.0)
    assert flow(full, CAPACITY, now=10.05, grace_s=0.1) is Flow.KEEP
    assert flow(full, CAPACITY, now=10.25, grace_s=0.1) is Flow.PAUSE
    assert flow(lane(CAPACITY - 1), CAPACITY, now=99.0, grace_s=0.1) is Flow.KEEP


def test_a_paused_lane_resumes_at_half_its_capacity_and_not_before() -> None:
    assert flow(lane(CAPACITY // 2 + 1, paused=True), CAPACITY, now=0.0, grace_s=0.1) is Flow.KEEP
    assert flow(lane(CAPACITY // 2, paused=True), CAPACITY, now=0.0, grace_s=0.1) is Flow.RESUME
    # held records count in the backlog: a paused lane still holding a fetch's excess stays paused
    assert flow(lane(CAPACITY, held=20, paused=True), CAPACITY, now=0.0, grace_s=0.1) is Flow.KEEP
