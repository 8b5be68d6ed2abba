"""Micro-batching for the model: when a batch closes, and in what order it runs. Pure.

A batch closes when it holds ``max_batch_size`` records, or ``max_batch_tokens`` tokens, or
its oldest record has waited ``max_latency_s`` — whichever comes first (DESIGN.md "Inference
micro-batching") — or, through ``close_idle``, as soon as the model has nothing to run.
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
    """

    max_batch_size: int
    max_batch_tokens: int
    max_latency_s: float

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


class Batcher(Generic[T]):
    """Collects records into batches by size, tokens and the oldest record's wait.

    Not thread-safe: one stage owns it.
    """

    def __init__(self, policy: BatchPolicy, clock: Callable[[], float]) -> None:
        self._policy = policy
        self._clock = clock
        self._items: list[T] = []
        self._tokens: list[int] = []
        self._oldest: float | None = None

    @property
    def policy(self) -> BatchPolicy:
        """The closing rules."""
        return self._policy

    @property
    def pending(self) -> int:
        """Records in the open batch."""
        return len(self._items)

    @property
    def pending_tokens(self) -> int:
        """Tokens in the open batch."""
        return sum(self._tokens)

    def deadline(self) -> float | None:
        """Clock time the open batch must close by; None when it is empty."""
        if self._oldest is None:
            return None
        return self._oldest + self._policy.max_latency_s

    def time_left(self) -> float | None:
        """Seconds until the deadline (0 when due): the caller's poll timeout; None when empty."""
        deadline = self.deadline()
        if deadline is None:
            return None
        return max(0.0, deadline - self._clock())

    def add(self, item: T, tokens: int, *, arrived_at: float | None = None) -> list[Batch[T]]:
        """Add a record; return the batches this closes (none, one, or two).

        Args:
            item: the record.
            tokens: its token count (its share of ``max_batch_tokens``).
            arrived_at: when it arrived (clock time), if before now: its wait counts from there.

        Raises:
            ValueError: a negative token count.
        """
        if tokens < 0:
            raise ValueError("tokens must be non-negative")
        now = self._clock()
        closed: list[Batch[T]] = []
        if self._items and self.pending_tokens + tokens > self._policy.max_batch_tokens:
            closed.append(self._close("tokens", now))
        arrival = now if arrived_at is None else min(arrived_at, now)
        self._items.append(item)
        self._tokens.append(tokens)
        self._oldest = arrival if self._oldest is None else min(self._oldest, arrival)
        if len(self._items) >= self._policy.max_batch_size:
            closed.append(self._close("size", now))
        elif self.pending_tokens >= self._policy.max_batch_tokens:
            closed.append(self._close("tokens", now))
        return closed

    def poll(self) -> Batch[T] | None:
        """Close the open batch if its oldest record reached ``max_latency_s`` (call when no record waits)."""
        due = self.deadline()
        if due is None:
            return None
        now = self._clock()
        return self._close("latency", now) if now >= due else None

    def flush(self) -> Batch[T] | None:
        """Close the open batch now, whatever it holds (shutdown); None when empty."""
        return self._close("flush", self._clock()) if self._items else None

    def close_idle(self) -> Batch[T] | None:
        """Close the open batch now because the model has nothing to run; None when empty.

        The caller saw no record arrive for a moment while the model stage sat idle: waiting
        out ``max_latency_s`` would only leave the model idle longer. The latency rule still
        bounds a batch's wait while the model is busy.
        """
        return self._close("idle", self._clock()) if self._items else None

    def discard(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the open batch's records that match (e.g. of revoked partitions)."""
        kept = [(i, t) for i, t in zip(self._items, self._tokens, strict=True) if not predicate(i)]
        dropped = [i for i in self._items if predicate(i)]
        if dropped:
            # The open batch's opening time stays: the kept records' wait is not reset.
            self._items = [i for i, _ in kept]
            self._tokens = [t for _, t in kept]
            if not self._items:
                self._oldest = None
        return dropped

    def _close(self, reason: CloseReason, now: float) -> Batch[T]:
        opened = now if self._oldest is None else self._oldest
        batch = Batch(
            items=tuple(self._items),
            token_counts=tuple(self._tokens),
            reason=reason,
            opened_at=opened,
            closed_at=now,
        )
        self._items, self._tokens, self._oldest = [], [], None
        return batch
