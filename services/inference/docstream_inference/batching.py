"""Micro-batching for the model: when a batch closes, what it holds, and in what order it runs. Pure.

A batch closes when it holds ``max_batch_size`` records, or ``max_batch_tokens`` tokens, or
its oldest record has waited ``max_latency_s`` — whichever comes first (docs/inference.md
"Batching") — or, through ``close_idle``, as soon as the model has nothing to run.

With ``pool_batches`` > 1 up to that many batches' worth of records wait together, and each
batch is cut from them by length: the oldest waiting record and the records nearest to it in
token count. A model pads every record of a batch to the batch's longest, so a backlog then
runs with almost no padding (the plain ``SentenceTransformer.encode`` over a whole list sorts it
by length for the same reason); every batch takes the oldest record, so none waits behind more
than ``pool_batches`` batches, and a lone record leaves as before. ``pool_batches=1``: a batch is
the records in arrival order. Urgent records (an interactive job's chunks, docs/operations.md "Sharing the
service") are cut into batches before the others, whatever their length; the others fill those batches oldest
first, and what share of the pool they hold is the caller's rule (``docstream.lanes``).

Time comes from an injected clock (seconds, monotonic), so the rules are tested with a fake
clock; the caller uses ``time_left()`` as its poll timeout and calls ``poll()`` when it
expires. Every closed ``Batch`` records why it closed and how long its oldest record waited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["Batch", "BatchPolicy", "Batcher", "CloseReason", "LengthOrder", "order_by_length"]

T = TypeVar("T")
V = TypeVar("V")

CloseReason = Literal["size", "tokens", "latency", "idle", "flush"]


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """When a batch closes.

    Attributes:
        max_batch_size: records in a full batch.
        max_batch_tokens: tokens in a full batch; a record that would push the batch past it
            starts the next batch (a single record above it forms a batch of its own).
        max_latency_s: the longest the oldest record of a batch waits before the batch closes.
        pool_batches: how many batches' worth of records (by count and by tokens) may wait
            together, so that a batch is cut from records of similar length; 1: arrival order.
    """

    max_batch_size: int
    max_batch_tokens: int
    max_latency_s: float
    pool_batches: int = 1

    def __post_init__(self) -> None:
        """Refuse impossible limits.

        Raises:
            ValueError: a limit below its minimum.
        """
        if self.max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if self.max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be at least 1")
        if self.max_latency_s < 0:
            raise ValueError("max_latency_s must be non-negative")
        if self.pool_batches < 1:
            raise ValueError("pool_batches must be at least 1")


@dataclass(frozen=True, slots=True)
class LengthOrder:
    """A permutation that runs a batch longest record first, and its way back.

    Attributes:
        order: ``order[k]`` is the arrival index of the k-th record to run.
    """

    order: tuple[int, ...]

    def apply(self, values: Sequence[V]) -> list[V]:
        """``values`` (arrival order) rearranged into run order."""
        return [values[i] for i in self.order]

    def restore(self, values: Sequence[V]) -> list[V]:
        """``values`` (run order, e.g. embeddings) put back into arrival order.

        Raises:
            ValueError: ``values`` is not as long as the batch.
        """
        if len(values) != len(self.order):
            raise ValueError(f"expected {len(self.order)} values, got {len(values)}")
        restored: list[V | None] = [None] * len(values)
        for position, index in enumerate(self.order):
            restored[index] = values[position]
        return restored  # type: ignore[return-value]


def order_by_length(token_counts: Sequence[int]) -> LengthOrder:
    """Longest first; ties keep arrival order, so the order is deterministic."""
    return LengthOrder(tuple(sorted(range(len(token_counts)), key=lambda i: (-token_counts[i], i))))


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """A closed batch.

    Attributes:
        items: the records, in arrival order.
        token_counts: tokens of each record, same order.
        reason: why it closed: size, tokens, latency (oldest record's deadline) or flush.
        opened_at: clock time the oldest record arrived.
        closed_at: clock time the batch closed.
    """

    items: tuple[T, ...]
    token_counts: tuple[int, ...]
    reason: CloseReason
    opened_at: float
    closed_at: float

    @property
    def oldest_wait_s(self) -> float:
        """How long the oldest record waited in the batcher: the recorded batch wait."""
        return self.closed_at - self.opened_at

    @property
    def tokens(self) -> int:
        """Tokens in the batch."""
        return sum(self.token_counts)

    def __len__(self) -> int:
        return len(self.items)

    def by_length(self) -> LengthOrder:
        """The run order, longest record first (less padding per sub-batch when a batch is split)."""
        return order_by_length(self.token_counts)


@dataclass(frozen=True, slots=True)
class _Waiting(Generic[T]):
    seq: int
    item: T
    tokens: int
    arrived_at: float
    urgent: bool = False


class Batcher(Generic[T]):
    """Collects records into batches by size, tokens, length and the oldest record's wait.

    Not thread-safe: one stage owns it.
    """

    def __init__(self, policy: BatchPolicy, clock: Callable[[], float]) -> None:
        self._policy = policy
        self._clock = clock
        self._waiting: list[_Waiting[T]] = []
        self._tokens = 0
        self._seq = 0

    @property
    def policy(self) -> BatchPolicy:
        """The closing rules."""
        return self._policy

    @property
    def pending(self) -> int:
        """Records waiting."""
        return len(self._waiting)

    @property
    def pending_tokens(self) -> int:
        """Tokens of the records waiting."""
        return self._tokens

    def deadline(self) -> float | None:
        """Clock time the oldest waiting record's batch must close by; None when none waits."""
        if not self._waiting:
            return None
        return min(w.arrived_at for w in self._waiting) + self._policy.max_latency_s

    def time_left(self) -> float | None:
        """Seconds until the deadline (0 when due): the caller's poll timeout; None when empty."""
        deadline = self.deadline()
        if deadline is None:
            return None
        return max(0.0, deadline - self._clock())

    def add(self, item: T, tokens: int, *, arrived_at: float | None = None, urgent: bool = False
            ) -> list[Batch[T]]:
        """Add a record; return the batches this closes (none, one, or more).

        Args:
            item: the record.
            tokens: its token count (its share of ``max_batch_tokens``).
            arrived_at: when it arrived (clock time), if before now: its wait counts from there.
            urgent: an interactive job's record: the next batch is cut from the urgent records first, and filled
                with the oldest others.

        Raises:
            ValueError: a negative token count.
        """
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        now = self._clock()
        policy = self._policy
        room_records = policy.max_batch_size * policy.pool_batches
        room_tokens = policy.max_batch_tokens * policy.pool_batches
        closed: list[Batch[T]] = []
        while self._waiting and self._tokens + tokens > room_tokens:
            closed.append(self._close("tokens", now))
        arrival = now if arrived_at is None else min(arrived_at, now)
        self._waiting.append(_Waiting(self._seq, item, tokens, arrival, urgent))
        self._seq += 1
        self._tokens += tokens
        while self._waiting:
            if len(self._waiting) >= room_records:
                closed.append(self._close("size", now))
            elif self._tokens >= room_tokens:
                closed.append(self._close("tokens", now))
            else:
                break
        return closed

    def poll(self) -> Batch[T] | None:
        """Close a batch if the oldest record reached ``max_latency_s`` (call when no record waits)."""
        due = self.deadline()
        if due is None:
            return None
        now = self._clock()
        return self._close("latency", now) if now >= due else None

    def flush(self) -> list[Batch[T]]:
        """Close every waiting record into batches now (shutdown); empty when none waits."""
        now = self._clock()
        closed: list[Batch[T]] = []
        while self._waiting:
            closed.append(self._close("flush", now))
        return closed

    def close_idle(self) -> Batch[T] | None:
        """Close a batch now because the model has nothing to run; None when empty.

        The caller saw no record arrive for a moment while the model stage sat idle: waiting
        out ``max_latency_s`` would only leave the model idle longer. The latency rule still
        bounds a batch's wait while the model is busy.
        """
        return self._close("idle", self._clock()) if self._waiting else None

    def discard(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the waiting records that match (e.g. of revoked partitions).

        The kept records' waits are not reset.
        """
        dropped = [w.item for w in self._waiting if predicate(w.item)]
        if dropped:
            self._waiting = [w for w in self._waiting if not predicate(w.item)]
            self._tokens = sum(w.tokens for w in self._waiting)
        return dropped

    def _close(self, reason: CloseReason, now: float) -> Batch[T]:
        chosen = _next_batch(self._waiting, self._policy)
        taken = {w.seq for w in chosen}
        self._waiting = [w for w in self._waiting if w.seq not in taken]
        self._tokens -= sum(w.tokens for w in chosen)
        return Batch(
            items=tuple(w.item for w in chosen),
            token_counts=tuple(w.tokens for w in chosen),
            reason=reason,
            opened_at=min(w.arrived_at for w in chosen),
            closed_at=now,
        )


def _next_batch(waiting: Sequence[_Waiting[T]], policy: BatchPolicy) -> list[_Waiting[T]]:
    """The records of the next batch, in arrival order.

    Urgent records (an interactive job's) go first: the batch is cut from them (the oldest and its length
    neighbours, as below), and filled with the oldest others. Otherwise, of the windows of ``max_batch_size``
    consecutive records in token order that hold the oldest record, the one with the least padding (records x
    its longest, less its tokens); then, while it holds more than ``max_batch_tokens``, its longest record other
    than the oldest leaves it. When everything waiting fits one batch, that is the batch.
    """
    if not waiting:
        return []
    fits = len(waiting) <= policy.max_batch_size and sum(w.tokens for w in waiting) <= policy.max_batch_tokens
    if fits:
        return list(waiting)
    urgent = [w for w in waiting if w.urgent]
    if not urgent:
        return _around_the_oldest(waiting, policy)
    chosen = _around_the_oldest(urgent, policy)
    total = sum(w.tokens for w in chosen)
    for other in sorted((w for w in waiting if not w.urgent), key=lambda w: (w.arrived_at, w.seq)):
        if len(chosen) >= policy.max_batch_size:
            break
        if total + other.tokens <= policy.max_batch_tokens:
            chosen.append(other)
            total += other.tokens
    return sorted(chosen, key=lambda w: w.seq)


def _around_the_oldest(waiting: Sequence[_Waiting[T]], policy: BatchPolicy) -> list[_Waiting[T]]:
    """The oldest of ``waiting`` and its length neighbours: at most one batch, by size and tokens."""
    oldest = min(waiting, key=lambda w: (w.arrived_at, w.seq))
    by_length = sorted(waiting, key=lambda w: (w.tokens, w.seq))
    at = by_length.index(oldest)
    size = min(policy.max_batch_size, len(by_length))
    best_start, best_padding = at, -1
    for start in range(max(0, at - size + 1), min(at, len(by_length) - size) + 1):
        window = by_length[start:start + size]
        padding = size * window[-1].tokens - sum(w.tokens for w in window)
        if best_padding < 0 or padding < best_padding:
            best_start, best_padding = start, padding
    window = by_length[best_start:best_start + size]
    total = sum(w.tokens for w in window)
    while total > policy.max_batch_tokens and len(window) > 1:
        leaving = window[-1] if window[-1] is not oldest else window[-2]
        window.remove(leaving)
        total -= leaving.tokens
    return sorted(window, key=lambda w: w.seq)
