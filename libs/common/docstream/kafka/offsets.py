"""OffsetTracker: which offsets are safe to commit when records finish out of order. Pure.

A consumer commits an offset only after every effect of the record is done (docs/architecture.md
"Identity and idempotency"), and commits per partition up to the lowest offset not yet finished.
Kafka's committed offset is the next offset to read, so for a partition whose tracked records are
all done the commit offset is the last tracked offset + 1; otherwise it is the lowest pending offset.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["OffsetTracker", "TopicPartitionKey"]

TopicPartitionKey = tuple[str, int]


class _PartitionState:
    __slots__ = ("first", "next_offset", "order", "pending")

    def __init__(self, first: int) -> None:
        self.first = first  # where consumption started: committing it would be no progress
        self.order: deque[int] = deque()  # tracked offsets from the lowest pending one, ascending
        self.pending: set[int] = set()  # tracked and not done
        self.next_offset: int | None = None  # last tracked + 1

    def commit_offset(self) -> int | None:
        while self.order and self.order[0] not in self.pending:
            self.order.popleft()
        offset = self.order[0] if self.order else self.next_offset
        return None if offset == self.first else offset


class OffsetTracker:
    """Tracks taken and finished records per (topic, partition); not thread-safe.

    Offsets of one partition must be tracked in increasing order (the order the consumer
    returns them). After a seek or a rebalance, ``revoke`` the partition before tracking
    lower offsets again.
    """

    def __init__(self) -> None:
        self._parts: dict[TopicPartitionKey, _PartitionState] = {}
        self._committed: dict[TopicPartitionKey, int] = {}

    def track(self, tp: TopicPartitionKey, offset: int) -> None:
        """Record that ``offset`` of ``tp`` was taken and its effects are not done yet.

        Raises:
            ValueError: ``offset`` is negative or not above the last tracked offset of ``tp``.
        """
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        state = self._parts.get(tp)
        if state is None:
            state = self._parts[tp] = _PartitionState(offset)
        if state.next_offset is not None and offset < state.next_offset:
            raise ValueError(f"offset {offset} of {tp} tracked out of order (next is {state.next_offset})")
        state.order.append(offset)
        state.pending.add(offset)
        state.next_offset = offset + 1

    def done(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Record that every effect of ``offset`` is acknowledged; any order is fine.

        Returns:
            False when the offset is not tracked (its partition was revoked, or it is already done).
        """
        state = self._parts.get(tp)
        if state is None or offset not in state.pending:
            return False
        state.pending.discard(offset)
        state.commit_offset()  # trims the done prefix
        return True

    def is_pending(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Whether ``offset`` of ``tp`` is tracked and not done."""
        state = self._parts.get(tp)
        return state is not None and offset in state.pending

    def committable(self, tps: Iterable[TopicPartitionKey] | None = None) -> dict[TopicPartitionKey, int]:
        """Per partition, the offset to commit (next to read), where it moved since ``mark_committed``.

        A partition whose first tracked record is not done yet is left out: committing the
        offset consumption started from would be no progress.

        Args:
            tps: only these partitions; default: all tracked partitions.
        """
        wanted = self._parts.keys() if tps is None else [tp for tp in tps if tp in self._parts]
        result: dict[TopicPartitionKey, int] = {}
        for tp in wanted:
            offset = self._parts[tp].commit_offset()
            if offset is not None and self._committed.get(tp) != offset:
                result[tp] = offset
        return result

    def mark_committed(self, offsets: dict[TopicPartitionKey, int]) -> None:
        """Record that ``offsets`` were committed (or sent for commit)."""
        for tp, offset in offsets.items():
            if tp in self._parts:
                self._committed[tp] = offset

    def forget_committed(self, tps: Iterable[TopicPartitionKey]) -> None:
        """Forget the last commit of ``tps`` (it failed) so ``committable`` offers them again."""
        for tp in tps:
            self._committed.pop(tp, None)

    def revoke(self, tps: Iterable[TopicPartitionKey]) -> int:
        """Drop ``tps`` and everything pending in them (their records will be consumed again).

        Returns:
            How many records of ``tps`` were still pending.
        """
        dropped = 0
        for tp in tps:
            state = self._parts.pop(tp, None)
            if state is not None:
                dropped += len(state.pending)
            self._committed.pop(tp, None)
        return dropped

    def pending_count(self, tp: TopicPartitionKey | None = None) -> int:
        """Records taken and not done, in ``tp`` or in all partitions."""
        if tp is None:
            return sum(len(state.pending) for state in self._parts.values())
        state = self._parts.get(tp)
        return len(state.pending) if state is not None else 0

    def partitions(self) -> list[TopicPartitionKey]:
        """Partitions with tracked state."""
        return list(self._parts)
