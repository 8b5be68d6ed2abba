"""docstream.lanes: lanes and deficit round robin between tenants, with injected queues. Pure."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docstream.lanes import LANES, Lane
from docstream_inference.fair_queue import FairQueue, Waiting


def _push(queue: FairQueue[str], lane: Lane, tenant: str, count: int, tokens: int | list[int]) -> None:
    for i in range(count):
        cost = tokens if isinstance(tokens, int) else tokens[i % len(tokens)]
        queue.push(Waiting(lane, tenant, cost, f"{tenant}-{lane}-{i}"))


def _drain(queue: FairQueue[str], n: int) -> list[Waiting[str]]:
    out = []
    for _ in range(n):
        taken = queue.take()
        if taken is None:
            break
        out.append(taken)
    return out


def test_nothing_waiting_gives_nothing() -> None:
    queue: FairQueue[str] = FairQueue()
    assert queue.take() is None and queue.take_batch(8, 4096) == [] and len(queue) == 0


def test_interactive_goes_first_and_each_tenant_keeps_its_order() -> None:
    queue: FairQueue[str] = FairQueue()
    _push(queue, "batch", "a", 5, 100)
    _push(queue, "interactive", "b", 3, 100)
    taken = [w.item for w in _drain(queue, 8)]
    assert taken[0] == "b-interactive-0"
    assert [t for t in taken if t.startswith("b-")] == ["b-interactive-0", "b-interactive-1", "b-interactive-2"]
    assert [t for t in taken if t.startswith("a-")] == [f"a-batch-{i}" for i in range(5)]


@pytest.mark.parametrize("share", [0.1, 0.2, 0.5])
def test_batch_keeps_its_guaranteed_share_while_interactive_work_never_stops(share: float) -> None:
    queue: FairQueue[str] = FairQueue(batch_share=share)
    _push(queue, "batch", "backfill", 5000, [120, 250, 40])
    _push(queue, "interactive", "urgent", 5000, 200)
    taken = _drain(queue, 1000)
    tokens = Counter()
    for waiting in taken:
        tokens[waiting.lane] += waiting.tokens
    assert tokens["batch"] / (tokens["batch"] + tokens["interactive"]) == pytest.approx(share, abs=0.02)


def test_two_tenants_in_one_lane_with_equal_weights_get_equal_tokens_whatever_their_backlogs() -> None:
    queue: FairQueue[str] = FairQueue(quantum=256)
    _push(queue, "batch", "big", 100_000, [512, 64, 300])  # a backfill pushed first
    _push(queue, "batch", "small", 400, [128, 256])
    tokens = Counter(w.tenant for w in _drain(queue, 600) for _ in range(w.tokens))
    assert abs(tokens["big"] - tokens["small"]) <= 256 + 512  # a quantum plus one chunk, at most
    assert tokens["small"] / tokens["big"] == pytest.approx(1.0, abs=0.2)


def test_a_small_job_behind_another_tenants_backfill_is_served_within_a_few_rounds() -> None:
    queue: FairQueue[str] = FairQueue(quantum=256)
    _push(queue, "batch", "a", 100_000, 256)
    _drain(queue, 50)
    _push(queue, "batch", "b", 3, 256)
    taken = _drain(queue, 6)
    assert [w.tenant for w in taken].count("b") == 3  # interleaved one for one, not after a's 99,950 chunks


def test_weights_share_a_lane_in_their_ratio() -> None:
    queue: FairQueue[str] = FairQueue(quantum=100, weights={"gold": 2.0})
    _push(queue, "interactive", "gold", 10_000, 100)
    _push(queue, "interactive", "basic", 10_000, 100)
    counts = Counter(w.tenant for w in _drain(queue, 3000))
    assert counts["gold"] / counts["basic"] == pytest.approx(2.0, abs=0.05)


def test_a_tenant_that_empties_its_queue_keeps_no_credit() -> None:
    queue: FairQueue[str] = FairQueue(quantum=1000)
    _push(queue, "batch", "a", 1, 10)
    assert queue.take() is not None  # a was owed 1000 tokens and used 10
    _push(queue, "batch", "a", 50, 100)
    _push(queue, "batch", "b", 50, 100)
    first = [w.tenant for w in _drain(queue, 20)]
    assert first.count("a") == first.count("b") == 10


def test_a_batch_holds_at_most_its_items_and_tokens_but_always_one_item() -> None:
    queue: FairQueue[str] = FairQueue()
    _push(queue, "batch", "a", 10, 300)
    assert len(queue.take_batch(8, 1000)) == 3  # 900 tokens; a fourth would pass 1000
    assert len(queue.take_batch(2, 10_000)) == 2
    assert len(queue.take_batch(8, 100)) == 1  # one chunk larger than the budget still runs alone
    assert len(queue) == 4 and queue.tokens("batch") == 1200


def test_bad_settings_are_refused() -> None:
    for bad in ({"batch_share": 0.0}, {"batch_share": 1.0}, {"quantum": 0}, {"weights": {"a": 0.0}}):
        with pytest.raises(ValueError):
            FairQueue(**bad)  # type: ignore[arg-type]


_ITEMS = st.lists(st.tuples(st.sampled_from(LANES), st.sampled_from(["a", "b", "c"]), st.integers(1, 600)),
                  min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(items=_ITEMS, max_items=st.integers(1, 10), max_tokens=st.integers(1, 3000), seed=st.integers(0, 10))
def test_batches_take_exactly_what_single_takes_would_in_the_same_order(
    items: list[tuple[Lane, str, int]], max_items: int, max_tokens: int, seed: int,
) -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 0.5}
    one: FairQueue[int] = FairQueue(quantum=200, weights=weights)
    two: FairQueue[int] = FairQueue(quantum=200, weights=weights)
    for n, (lane, tenant, tokens) in enumerate(items):
        one.push(Waiting(lane, tenant, tokens, n))
        two.push(Waiting(lane, tenant, tokens, n))
    singles = [w.item for w in iter(one.take, None)]
    batched: list[int] = []
    rng = random.Random(seed)
    while len(two):
        batch = two.take_batch(rng.randint(1, max_items), max_tokens)
        assert batch and len(batch) <= max_items
        assert len(batch) == 1 or sum(w.tokens for w in batch) <= max_tokens
        batched.extend(w.item for w in batch)
    assert batched == singles
    assert sorted(singles) == list(range(len(items)))  # every item once


def test_removed_items_leave_and_the_others_keep_their_order_and_counts() -> None:
    queue: FairQueue[str] = FairQueue(quantum=100)
    _push(queue, "batch", "a", 4, 100)
    _push(queue, "batch", "b", 4, 50)
    _push(queue, "interactive", "c", 2, 10)
    first = queue.take()
    assert first is not None and first.lane == "interactive"
    removed = queue.remove(lambda w: w.item.endswith(("-1", "-3")) or w.tenant == "c")
    assert sorted(w.item for w in removed) == ["a-batch-1", "a-batch-3", "b-batch-1", "b-batch-3", "c-interactive-1"]
    assert queue.count("interactive") == 0 and queue.count("batch") == 4 and len(queue) == 4
    assert queue.tokens("batch") == 300 and queue.tenant_tokens("batch") == {"a": 200, "b": 100}
    rest = [w.item for w in _drain(queue, 10)]
    assert [i for i in rest if i.startswith("a")] == ["a-batch-0", "a-batch-2"]
    assert [i for i in rest if i.startswith("b")] == ["b-batch-0", "b-batch-2"]
    assert queue.take() is None and queue.remove(lambda w: True) == []
