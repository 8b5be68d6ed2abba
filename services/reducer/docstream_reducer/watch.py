"""The partition watch and what it decides, pure: the I/O (end offsets, probes, seeks) is app.py's.

``PartitionWatch`` notices source partitions whose records wait while nothing moves; ``stall_actions`` decides,
from what the broker holds past each stall's committed offset, what the app does about each (docs/reducer.md
"Partition watch"): wait for the next period, mark it quiet, re-fetch it from its committed offset, or restart
the process when a re-fetch did not move it either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["PartitionWatch", "Stall", "StallAction", "stall_actions"]


@dataclass(frozen=True, slots=True)
class Stall:
    """A source partition with records waiting past its committed offset and no progress.

    Attributes:
        topic, partition: the partition.
        committed: the group's committed offset (0 when it has none): where a re-fetch starts.
        end: its end offset (the last stable offset under exactly-once).
        periods: stall periods in a row without progress (1 the first time).
    """

    topic: str
    partition: int
    committed: int
    end: int
    periods: int


class PartitionWatch:
    """Notices source partitions whose records wait while nothing moves (pure; app.py does the I/O).

    faust-streaming 0.15.3 was seen to stop delivering an assigned partition, after a restart
    or a rebalance under exactly-once: records fetched but never given to the agent, or handled
    but never committed (docs/reducer.md "Partition watch"). Progress of a partition is a move
    of its committed offset or of the next offset the agents handled; records wait while its end
    is past the committed offset (one more offset is allowed: a transaction marker). A partition
    with records waiting and no progress for ``stall_s`` is reported, once per period, with the
    number of periods in a row. While a handler has been running for more than ``busy_s`` (store
    retries during an outage) nothing counts as stalled.

    Args:
        stall_s: how long a partition with waiting records may go without progress.
        clock: monotonic seconds.
        busy_s: a handler running longer than this pauses the watch.
    """

    def __init__(self, stall_s: float, clock: Callable[[], float], *, busy_s: float = 1.0) -> None:
        self._stall_s = stall_s
        self._clock = clock
        self._busy_s = busy_s
        self._next: dict[tuple[str, int], int] = {}
        self._seen: dict[tuple[str, int], tuple[int, int | None]] = {}
        self._moved: dict[tuple[str, int], float] = {}
        self._periods: dict[tuple[str, int], int] = {}
        self._quiet: dict[tuple[str, int], int] = {}
        self._running: dict[int, float] = {}

    def started(self, token: int) -> None:
        """A handler (``token``: any id unique while it runs) started."""
        self._running[token] = self._clock()

    def finished(self, token: int) -> None:
        """The handler of ``token`` returned or raised."""
        self._running.pop(token, None)

    def handled(self, topic: str, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``topic[partition]`` was handled."""
        self._next[(topic, partition)] = offset + 1

    def reset(self) -> None:
        """Start every period anew (the app rebalanced or recovered its tables meanwhile)."""
        self._seen.clear()

    def quiet(self, topic: str, partition: int, end: int) -> None:
        """The broker holds no record for us below ``end`` (only markers or aborted records)."""
        self._quiet[(topic, partition)] = end

    def stalled(self, ends: dict[tuple[str, int], int], committed: dict[tuple[str, int], int]) -> list[Stall]:
        """The stalled partitions among ``ends`` (end offsets of the assigned source partitions).

        Args:
            ends: end offsets.
            committed: the group's committed offsets (a partition without one counts from 0).
        """
        now = self._clock()
        busy = any(now - since > self._busy_s for since in self._running.values())
        out: list[Stall] = []
        for key, end in sorted(ends.items()):
            start = committed.get(key) or 0
            position = (start, self._next.get(key))
            waiting = end > max(start + 1, self._quiet.get(key, 0))
            if busy or not waiting or self._seen.get(key) != position:
                self._seen[key] = position
                self._moved[key] = now
                self._periods[key] = 0
                continue
            if now - self._moved.setdefault(key, now) >= self._stall_s:
                self._moved[key] = now  # once per stall period
                self._periods[key] = self._periods.get(key, 0) + 1
                out.append(Stall(key[0], key[1], start, end, self._periods[key]))
        return out


StallDecision = Literal["quiet", "refetch", "restart"]


@dataclass(frozen=True, slots=True)
class StallAction:
    """What to do about one stalled partition.

    Attributes:
        stall: the stall.
        decision: ``quiet``: the broker holds no record for us past the committed offset (only transaction
            markers or aborted records): stop counting it stalled below its end; ``refetch``: seek to the
            committed offset and resume the partition; ``restart``: a re-fetch in the previous period did not
            move it: restart the process (nothing after a restart is acted on).
    """

    stall: Stall
    decision: StallDecision


def stall_actions(stalls: Sequence[Stall], holds: Mapping[tuple[str, int], bool],
                  refetched: Mapping[tuple[str, int], int], *, can_restart: bool) -> list[StallAction]:
    """What to do about each stall, in order, up to and including the first restart.

    Args:
        stalls: this period's stalls (``PartitionWatch.stalled``).
        holds: per partition, whether the broker holds records for us between committed and end; a partition
            missing is undecided (the probe did not answer in time): nothing is done, the next period asks again.
        refetched: per partition, the stall period of its last re-fetch.
        can_restart: the process may restart itself (else a stuck partition is re-fetched again and again).
    """
    actions: list[StallAction] = []
    for stall in stalls:
        key = (stall.topic, stall.partition)
        if key not in holds:
            continue
        if not holds[key]:
            actions.append(StallAction(stall, "quiet"))
        elif can_restart and refetched.get(key) == stall.periods - 1:
            actions.append(StallAction(stall, "restart"))
            break
        else:
            actions.append(StallAction(stall, "refetch"))
    return actions
