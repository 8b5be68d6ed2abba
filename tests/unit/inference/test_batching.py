"""The pure batcher: close rules, recorded wait, length order, discard."""

from __future__ import annotations

import pytest

from docstream_inference.batching import Batch, Batcher, BatchPolicy, order_by_length
from tests.fixtures.clock import FakeClock


def _batcher(
    size: int = 4, tokens: int = 1000, latency_s: float = 0.2, pool: int = 1
) -> tuple[Batcher[str], FakeClock]:
    clock = FakeClock(100.0)
    return Batcher(BatchPolicy(size, tokens, latency_s, pool), clock), clock


def test_closes_at_max_batch_size() -> None:
    batcher, _ = _batcher(size=3)
    assert batcher.add("a", 5) == []
    assert batcher.add("b", 5) == []
    [batch] = batcher.add("c", 5)
    assert batch.items == ("a", "b", "c")
    assert batch.reason == "size"
    assert batcher.pending == 0
    assert batcher.deadline() is None


def test_closes_when_tokens_reach_the_limit() -> None:
    batcher, _ = _batcher(tokens=10)
    assert batcher.add("a", 4) == []
    [batch] = batcher.add("b", 6)
    assert batch.items == ("a", "b")
    assert batch.reason == "tokens"
    assert batch.tokens == 10


def test_record_that_would_overflow_tokens_starts_the_next_batch() -> None:
    batcher, _ = _batcher(tokens=10)
    batcher.add("a", 6)
    [batch] = batcher.add("b", 6)
    assert batch.items == ("a",)
    assert batch.reason == "tokens"
    assert batcher.pending == 1
    assert batcher.pending_tokens == 6


def test_single_record_above_the_token_limit_is_a_batch_of_its_own() -> None:
    batcher, _ = _batcher(tokens=10)
    batcher.add("a", 3)
    closed = batcher.add("huge", 50)
    assert [b.items for b in closed] == [("a",), ("huge",)]
    assert [b.reason for b in closed] == ["tokens", "tokens"]
    assert batcher.pending == 0


def test_latency_cap_closes_a_lone_record_and_records_its_wait() -> None:
    batcher, clock = _batcher(latency_s=0.25)
    batcher.add("only", 3)
    assert batcher.time_left() == pytest.approx(0.25)
    clock.sleep(0.1)
    assert batcher.poll() is None
    assert batcher.time_left() == pytest.approx(0.15)
    clock.sleep(0.15)
    assert batcher.time_left() == 0.0
    batch = batcher.poll()
    assert batch is not None
    assert batch.reason == "latency"
    assert batch.items == ("only",)
    assert batch.oldest_wait_s == pytest.approx(0.25)
    assert batcher.poll() is None


def test_late_poll_records_the_true_wait() -> None:
    batcher, clock = _batcher(latency_s=0.2)
    batcher.add("a", 1)
    clock.sleep(0.5)
    batch = batcher.poll()
    assert batch is not None
    assert batch.oldest_wait_s == pytest.approx(0.5)


def test_wait_counts_from_arrival_time() -> None:
    batcher, clock = _batcher(latency_s=0.2)
    batcher.add("a", 1, arrived_at=clock.now - 0.15)
    assert batcher.time_left() == pytest.approx(0.05)
    clock.sleep(0.05)
    batch = batcher.poll()
    assert batch is not None
    assert batch.oldest_wait_s == pytest.approx(0.2)


def test_arrival_in_the_future_counts_as_now() -> None:
    batcher, clock = _batcher(latency_s=0.2)
    batcher.add("a", 1, arrived_at=clock.now + 10)
    assert batcher.deadline() == pytest.approx(clock.now + 0.2)


def test_deadline_follows_the_oldest_record() -> None:
    batcher, clock = _batcher(latency_s=1.0)
    batcher.add("a", 1)
    first_deadline = batcher.deadline()
    clock.sleep(0.6)
    batcher.add("b", 1)
    assert batcher.deadline() == first_deadline


def test_a_backlog_of_overdue_records_still_fills_batches_to_size() -> None:
    batcher, clock = _batcher(size=3, latency_s=0.2)
    closed = []
    for i in range(6):  # each waited 1 s upstream already
        closed.extend(batcher.add(f"r{i}", 1, arrived_at=clock.now - 1.0))
    assert [(b.items, b.reason) for b in closed] == [(("r0", "r1", "r2"), "size"), (("r3", "r4", "r5"), "size")]
    assert closed[0].oldest_wait_s == pytest.approx(1.0)


def test_add_never_closes_on_latency_poll_does() -> None:
    batcher, clock = _batcher(latency_s=0.2)
    batcher.add("a", 1)
    clock.sleep(0.3)
    assert batcher.add("b", 1) == []
    batch = batcher.poll()
    assert batch is not None
    assert (batch.items, batch.reason) == (("a", "b"), "latency")


def test_flush_closes_whatever_is_open() -> None:
    batcher, clock = _batcher()
    assert batcher.flush() == []
    batcher.add("a", 1)
    clock.sleep(0.05)
    [batch] = batcher.flush()
    assert batch.reason == "flush"
    assert batch.oldest_wait_s == pytest.approx(0.05)
    assert batcher.pending == 0


def test_discard_removes_matching_records() -> None:
    batcher, _ = _batcher()
    batcher.add("p0-a", 1)
    batcher.add("p1-b", 2)
    batcher.add("p0-c", 3)
    assert batcher.discard(lambda item: item.startswith("p0")) == ["p0-a", "p0-c"]
    assert batcher.pending == 1
    assert batcher.pending_tokens == 2
    assert batcher.discard(lambda item: True) == ["p1-b"]
    assert batcher.deadline() is None


def test_length_order_runs_longest_first_and_restores_arrival_order() -> None:
    batch = Batch(items=("a", "b", "c", "d"), token_counts=(5, 9, 5, 1), reason="size", opened_at=0, closed_at=1)
    order = batch.by_length()
    assert order.apply(batch.items) == ["b", "a", "c", "d"]
    outputs = [f"out-{x}" for x in order.apply(batch.items)]
    assert order.restore(outputs) == ["out-a", "out-b", "out-c", "out-d"]


def test_restore_refuses_a_wrong_length() -> None:
    with pytest.raises(ValueError, match="expected 2"):
        order_by_length([1, 2]).restore([1])


@pytest.mark.parametrize(
    ("size", "tokens", "latency", "pool"),
    [(0, 10, 0.1, 1), (1, 0, 0.1, 1), (1, 10, -1.0, 1), (1, 10, 0.1, 0)],
)
def test_policy_refuses_impossible_limits(size: int, tokens: int, latency: float, pool: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        BatchPolicy(size, tokens, latency, pool)


def test_negative_tokens_are_refused() -> None:
    batcher, _ = _batcher()
    with pytest.raises(ValueError, match="non-negative"):
        batcher.add("a", -1)


def test_many_records_every_batch_respects_every_limit() -> None:
    batcher, clock = _batcher(size=5, tokens=40, latency_s=0.1)
    closed: list[Batch[str]] = []
    for i in range(200):
        clock.sleep(0.01 * (i % 7))
        closed.extend(batcher.add(f"r{i}", (i * 13) % 17))
        polled = batcher.poll()
        if polled is not None:
            closed.append(polled)
    closed.extend(batcher.flush())
    assert [item for b in closed for item in b.items] == [f"r{i}" for i in range(200)]
    for batch in closed:
        assert len(batch) <= 5
        assert batch.tokens <= 40 or len(batch) == 1
        assert batch.oldest_wait_s <= 0.1 + 0.07
    assert {b.reason for b in closed} >= {"size", "tokens", "latency"}


def test_close_idle_closes_the_open_batch_before_its_deadline() -> None:
    batcher, clock = _batcher(size=16)
    assert batcher.close_idle() is None
    batcher.add("a", 10)
    clock.sleep(0.01)
    batch = batcher.close_idle()
    assert batch is not None
    assert (batch.items, batch.reason, batch.oldest_wait_s) == (("a",), "idle", pytest.approx(0.01))
    assert batcher.pending == 0 and batcher.deadline() is None


# -- the length pool (pool_batches > 1) ---------------------------------------------------------


def _padded(batches: list[Batch[str]]) -> int:
    return sum(len(b) * max(b.token_counts) for b in batches)


def test_a_pool_cuts_batches_of_similar_length() -> None:
    batcher, _ = _batcher(size=2, pool=2)
    closed: list[Batch[str]] = []
    for name, tokens in [("s0", 10), ("l0", 200), ("s1", 12), ("l1", 210)]:
        closed.extend(batcher.add(name, tokens))
    # four records fill the pool of two batches: the oldest (s0) goes with its nearest length (s1)
    assert [(b.items, b.reason) for b in closed] == [(("s0", "s1"), "size")]
    assert batcher.pending == 2
    closed.extend(batcher.flush())
    assert [b.items for b in closed] == [("s0", "s1"), ("l0", "l1")]
    assert _padded(closed) == 2 * 12 + 2 * 210  # arrival order would pad to 200 and 210: 820


def test_every_pooled_batch_takes_the_oldest_record() -> None:
    batcher, clock = _batcher(size=4, tokens=600, pool=8)
    lengths = [(i * 37) % 251 + 5 for i in range(400)]
    order = {f"r{i}": i for i in range(400)}
    waiting: set[str] = set()
    closed: list[Batch[str]] = []
    for i, tokens in enumerate(lengths):
        clock.sleep(0.001)
        waiting.add(f"r{i}")
        for batch in batcher.add(f"r{i}", tokens):
            oldest = min(waiting, key=order.__getitem__)
            assert oldest in batch.items
            assert list(batch.items) == sorted(batch.items, key=order.__getitem__)  # arrival order
            waiting -= set(batch.items)
            closed.append(batch)
        assert batcher.pending == len(waiting) < 4 * 8
    closed.extend(batcher.flush())
    assert sorted((item for b in closed for item in b.items), key=order.__getitem__) == list(order)
    for batch in closed:
        assert len(batch) <= 4
        assert batch.tokens <= 600 or len(batch) == 1
    in_arrival = [lengths[i:i + 4] for i in range(0, 400, 4)]
    assert _padded(closed) < 0.9 * sum(len(b) * max(b) for b in in_arrival)


def test_a_pooled_batch_keeps_to_the_token_limit_and_the_oldest() -> None:
    batcher, _ = _batcher(size=4, tokens=100, pool=4)
    for name, tokens in [("old", 60), ("a", 50), ("b", 55), ("c", 65), ("d", 70)]:
        assert batcher.add(name, tokens) == []
    batch = batcher.flush()[0]
    assert batch.items[0] == "old"
    assert batch.tokens <= 100


def test_latency_in_a_pool_follows_the_oldest_record_and_closes_one_batch() -> None:
    batcher, clock = _batcher(size=2, latency_s=0.2, pool=4)
    batcher.add("first", 100)
    clock.sleep(0.1)
    batcher.add("short", 5)
    batcher.add("shorter", 4)
    assert batcher.deadline() == pytest.approx(clock.now + 0.1)
    clock.sleep(0.11)
    batch = batcher.poll()
    assert batch is not None
    assert (batch.items, batch.reason) == (("first", "short"), "latency")
    assert batch.oldest_wait_s == pytest.approx(0.21)
    assert batcher.pending == 1
    assert batcher.deadline() == pytest.approx(clock.now + 0.09)  # "shorter" arrived 0.11 s ago


def test_an_idle_model_takes_one_pooled_batch_at_a_time() -> None:
    batcher, _ = _batcher(size=2, pool=4)
    for i in range(5):
        batcher.add(f"r{i}", 10 + i)
    batch = batcher.close_idle()
    assert batch is not None
    assert (batch.items, batch.reason) == (("r0", "r1"), "idle")
    assert batcher.pending == 3


def test_discard_in_a_pool_keeps_the_others_and_their_tokens() -> None:
    batcher, _ = _batcher(size=2, pool=4)
    for name, tokens in [("p0-a", 1), ("p1-b", 2), ("p0-c", 3), ("p1-d", 4)]:
        batcher.add(name, tokens)
    assert batcher.discard(lambda item: item.startswith("p0")) == ["p0-a", "p0-c"]
    assert (batcher.pending, batcher.pending_tokens) == (2, 6)
    assert [b.items for b in batcher.flush()] == [("p1-b", "p1-d")]


def test_an_urgent_record_is_cut_into_the_next_batch_before_older_ones_with_urgent_ones_first() -> None:
    batcher, clock = _batcher(size=4, pool=4)
    closed: list[Batch[str]] = []
    for i in range(12):  # a backlog: the pool holds three batches' worth of older records
        clock.sleep(0.001)
        closed.extend(batcher.add(f"old{i}", 50))
    assert closed == []
    for i in range(3):
        clock.sleep(0.001)
        closed.extend(batcher.add(f"urgent{i}", 50, urgent=True))
    clock.sleep(0.001)
    closed.extend(batcher.add("old12", 50))  # the pool is full: a batch closes
    assert [b.items for b in closed] == [("old0", "urgent0", "urgent1", "urgent2")]  # in arrival order
    rest = batcher.flush()
    assert [item for b in rest for item in b.items] == [f"old{i}" for i in range(1, 13)]  # then oldest first again


def test_urgent_records_of_any_length_go_together_and_the_oldest_others_fill_the_batch() -> None:
    batcher, clock = _batcher(size=8, tokens=10_000, pool=4)
    closed: list[Batch[str]] = []
    for i in range(24):  # with the 5 below, 29: under the pool's 32
        clock.sleep(0.001)
        closed.extend(batcher.add(f"old{i}", 10 + (i * 37) % 190))
    for i, tokens in enumerate((12, 180, 64, 150, 33)):
        clock.sleep(0.001)
        closed.extend(batcher.add(f"urgent{i}", tokens, urgent=True))
    assert closed == []
    closed.extend(batcher.flush())
    assert set(closed[0].items) == {f"urgent{i}" for i in range(5)} | {"old0", "old1", "old2"}
    assert not any(item.startswith("urgent") for b in closed[1:] for item in b.items)
