"""The reducer's decision about stalled partitions, pure: quiet, re-fetch, or restart (docs/reducer.md)."""

from __future__ import annotations

from docstream_reducer.watch import Stall, StallAction, stall_actions

A = Stall("t", 0, 5, 9, 1)
B = Stall("t", 1, 0, 3, 1)


def test_a_partition_the_probe_did_not_answer_for_is_left_for_the_next_period() -> None:
    assert stall_actions([A, B], {("t", 1): True}, {}, can_restart=True) == [StallAction(B, "refetch")]


def test_a_partition_holding_only_markers_is_quiet_not_refetched() -> None:
    assert stall_actions([A], {("t", 0): False}, {}, can_restart=True) == [StallAction(A, "quiet")]


def test_the_first_period_of_a_stall_refetches() -> None:
    assert stall_actions([A, B], {("t", 0): True, ("t", 1): True}, {}, can_restart=True) == [
        StallAction(A, "refetch"), StallAction(B, "refetch")]


def test_a_stall_that_outlived_its_refetch_restarts_and_nothing_after_it_is_acted_on() -> None:
    again = Stall("t", 0, 5, 9, 2)
    assert stall_actions([again, B], {("t", 0): True, ("t", 1): True}, {("t", 0): 1}, can_restart=True) == [
        StallAction(again, "restart")]


def test_without_restart_a_stuck_partition_is_refetched_again() -> None:
    again = Stall("t", 0, 5, 9, 2)
    assert stall_actions([again], {("t", 0): True}, {("t", 0): 1}, can_restart=False) == [
        StallAction(again, "refetch")]


def test_a_refetch_periods_ago_is_not_a_restart() -> None:
    later = Stall("t", 0, 5, 9, 4)  # re-fetched at period 1, moved since, stalled again
    assert stall_actions([later], {("t", 0): True}, {("t", 0): 1}, can_restart=True) == [
        StallAction(later, "refetch")]
