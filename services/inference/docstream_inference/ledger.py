"""AckLedger: which effects each consumed record still owes, and the offsets safe to commit.

A chunk is done when its store write AND its ChunkResult delivery (and, for a failed
chunk, its DLQ delivery) are acknowledged. Only then is it marked done in the OffsetTracker,
which commits each partition up to its lowest record not done. Acknowledgements come from
several threads (the writer, librdkafka delivery callbacks), so every call holds one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from docstream.kafka.offsets import OffsetTracker, TopicPartitionKey

__all__ = ["DLQ", "PRODUCE", "WRITE", "AckLedger"]

WRITE = "write"
PRODUCE = "produce"
DLQ = "dlq"


class AckLedger:
    """Thread-safe effects-owed book over an ``OffsetTracker``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracker = OffsetTracker()
        self._owed: dict[tuple[TopicPartitionKey, int], set[str]] = {}

    def track(self, tp: TopicPartitionKey, offset: int, effects: Iterable[str] = (WRITE, PRODUCE)) -> None:
        """A record was consumed; it owes ``effects`` before its offset may be committed.

        Raises:
            ValueError: offsets of ``tp`` tracked out of order, or no effects.
        """
        owed = set(effects)
        if not owed:
            raise ValueError("a tracked record must owe at least one effect")
        with self._lock:
            self._tracker.track(tp, offset)
            self._owed[(tp, offset)] = owed

    def skip(self, tp: TopicPartitionKey, offset: int) -> None:
        """A record was consumed that owes nothing (its job did not ask for this task): done at once.

        Raises:
            ValueError: offsets of ``tp`` tracked out of order.
        """
        with self._lock:
            self._tracker.track(tp, offset)
            self._tracker.done(tp, offset)

    def expect(self, tp: TopicPartitionKey, offset: int, effect: str) -> None:
        """Add an effect the record owes (e.g. its DLQ copy once it failed); ignored when not tracked."""
        with self._lock:
            owed = self._owed.get((tp, offset))
            if owed is not None:
                owed.add(effect)

    def ack(self, tp: TopicPartitionKey, offset: int, effect: str) -> bool:
        """One effect of the record is acknowledged.

        Returns:
            True when this made the record done (its offset may now be committed past).
        """
        with self._lock:
            owed = self._owed.get((tp, offset))
            if owed is None:
                return False
            owed.discard(effect)
            if owed:
                return False
            del self._owed[(tp, offset)]
            return self._tracker.done(tp, offset)

    def owes(self, tp: TopicPartitionKey, offset: int) -> frozenset[str]:
        """Effects the record still owes (empty when done or not tracked)."""
        with self._lock:
            return frozenset(self._owed.get((tp, offset), ()))

    def committable(self, tps: Iterable[TopicPartitionKey] | None = None) -> dict[TopicPartitionKey, int]:
        """Per partition, the next offset to commit, where it moved since the last commit."""
        with self._lock:
            return self._tracker.committable(tps)

    def mark_committed(self, offsets: dict[TopicPartitionKey, int]) -> None:
        """Record that ``offsets`` were sent for commit."""
        with self._lock:
            self._tracker.mark_committed(offsets)

    def forget_committed(self, tps: Iterable[TopicPartitionKey]) -> None:
        """A commit of ``tps`` failed: offer them again."""
        with self._lock:
            self._tracker.forget_committed(tps)

    def revoke(self, tps: Iterable[TopicPartitionKey]) -> int:
        """Drop ``tps`` and what they owe; later acks of their records are ignored.

        Returns:
            Records dropped while still owing effects (they will be consumed again).
        """
        wanted = set(tps)
        with self._lock:
            dropped = [key for key in self._owed if key[0] in wanted]
            for key in dropped:
                del self._owed[key]
            self._tracker.revoke(wanted)
            return len(dropped)

    def pending_count(self, tps: Iterable[TopicPartitionKey] | None = None) -> int:
        """Records still owing effects, in ``tps`` or in all partitions."""
        with self._lock:
            if tps is None:
                return self._tracker.pending_count()
            return sum(self._tracker.pending_count(tp) for tp in set(tps))
