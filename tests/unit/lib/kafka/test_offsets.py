"""OffsetTracker: commit the lowest unfinished offset per partition, whatever order records finish in."""

from __future__ import annotations

import random

import pytest

from docstream.kafka.offsets import OffsetTracker

_TP = ("t", 0)
_TP1 = ("t", 1)


def test_nothing_to_commit_before_anything_is_tracked() -> None:
    assert OffsetTracker().committable() == {}


def test_commit_offset_is_the_lowest_pending_offset() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.track(_TP, offset)
    assert tracker.committable() == {}, "committing the first taken offset would be no progress"
    tracker.done(_TP, 11)
    assert tracker.committable() == {}
    tracker.done(_TP, 10)
    assert tracker.committable() == {_TP: 12}
    tracker.done(_TP, 12)
    assert tracker.committable() == {_TP: 13}
    assert tracker.pending_count() == 0


def test_only_moved_offsets_are_offered_after_mark_committed() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 0)
    tracker.track(_TP1, 5)
    tracker.done(_TP, 0)
    tracker.done(_TP1, 5)
    first = tracker.committable()
    assert first == {_TP: 1, _TP1: 6}
    tracker.mark_committed(first)
    assert tracker.committable() == {}
    tracker.track(_TP, 1)
    tracker.done(_TP, 1)
    assert tracker.committable() == {_TP: 2}


def test_forget_committed_offers_a_failed_commit_again() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 3)
    tracker.done(_TP, 3)
    tracker.mark_committed(tracker.committable())
    tracker.forget_committed([_TP])
    assert tracker.committable() == {_TP: 4}


def test_gaps_in_offsets_are_fine() -> None:
    tracker = OffsetTracker()
    for offset in (0, 5, 9):
        tracker.track(_TP, offset)
    tracker.done(_TP, 0)
    assert tracker.committable() == {_TP: 5}
    tracker.done(_TP, 9)
    tracker.done(_TP, 5)
    assert tracker.committable() == {_TP: 10}


def test_done_of_unknown_or_repeated_offsets_is_ignored() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 0)
    tracker.track(_TP, 2)
    assert tracker.done(_TP, 1) is False
    assert tracker.done(("other", 0), 0) is False
    assert tracker.done(_TP, 0) is True
    assert tracker.done(_TP, 0) is False
    assert tracker.committable() == {_TP: 2}
    assert tracker.is_pending(_TP, 2) and not tracker.is_pending(_TP, 0)


def test_revoke_drops_partitions_and_their_pending_records() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 0)
    tracker.track(_TP1, 0)
    tracker.done(_TP1, 0)
    tracker.mark_committed({_TP1: 1})
    assert tracker.revoke([_TP, _TP1, ("t", 9)]) == 1, "one record was still pending"
    assert tracker.pending_count() == 0
    assert tracker.committable() == {}
    assert tracker.done(_TP, 0) is False
    tracker.track(_TP, 0)  # reassigned: starts again
    tracker.done(_TP, 0)
    assert tracker.committable() == {_TP: 1}


def test_offsets_must_be_tracked_in_increasing_order() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 5)
    with pytest.raises(ValueError, match="out of order"):
        tracker.track(_TP, 5)
    with pytest.raises(ValueError, match="negative"):
        tracker.track(_TP, -1)


def test_pending_count_per_partition_and_in_total() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 0)
    tracker.track(_TP, 1)
    tracker.track(_TP1, 0)
    tracker.done(_TP, 1)
    assert (tracker.pending_count(), tracker.pending_count(_TP), tracker.pending_count(("x", 9))) == (2, 1, 0)
    assert sorted(tracker.partitions()) == [_TP, _TP1]


def test_committable_can_be_limited_to_some_partitions() -> None:
    tracker = OffsetTracker()
    tracker.track(_TP, 0)
    tracker.track(_TP1, 7)
    tracker.done(_TP, 0)
    tracker.done(_TP1, 7)
    assert tracker.committable([_TP1, ("absent", 0)]) == {_TP1: 8}


@pytest.mark.parametrize("seed", range(200))
def test_random_out_of_order_completions_never_commit_past_an_unfinished_record(seed: int) -> None:
    rng = random.Random(seed)
    tracker = OffsetTracker()
    partitions = [("t", p) for p in range(rng.randint(1, 3))]
    tracked: dict[tuple[str, int], list[int]] = {tp: [] for tp in partitions}
    finished: set[tuple[tuple[str, int], int]] = set()
    committed: dict[tuple[str, int], int] = {}
    next_offset = dict.fromkeys(partitions, 0)
    for _ in range(rng.randint(1, 120)):
        action = rng.random()
        if action < 0.45:
            tp = rng.choice(partitions)
            next_offset[tp] += rng.choice((1, 1, 1, 2, 5))  # gaps happen (compaction, txn markers)
            tracked[tp].append(next_offset[tp])
            tracker.track(tp, next_offset[tp])
        elif action < 0.85:
            open_records = [(tp, o) for tp, offs in tracked.items() for o in offs if (tp, o) not in finished]
            if open_records:
                record = rng.choice(open_records)
                finished.add(record)
                assert tracker.done(*record) is True
        else:
            offsets = tracker.committable()
            for tp, offset in offsets.items():
                assert offset >= committed.get(tp, 0), "commits never go backwards"
                unfinished = [o for o in tracked[tp] if (tp, o) not in finished]
                assert all(o >= offset for o in unfinished), "never commits past an unfinished record"
            for tp, offsets_of_tp in tracked.items():
                if not offsets_of_tp:
                    continue
                unfinished = [o for o in offsets_of_tp if (tp, o) not in finished]
                expected = min(unfinished) if unfinished else max(offsets_of_tp) + 1
                if expected in (offsets_of_tp[0], committed.get(tp)):
                    assert tp not in offsets, "no commit without progress"
                else:
                    assert offsets[tp] == expected, "commits as far as is safe"
            tracker.mark_committed(offsets)
            committed.update(offsets)
    assert tracker.pending_count() == sum(1 for tp, offs in tracked.items() for o in offs if (tp, o) not in finished)
