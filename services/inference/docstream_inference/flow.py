"""Flow control of the inference consumer's lanes: how many records the next fetch may take, and when a lane's
partitions are paused or resumed. Pure: the caller (``InferencePipeline``) passes each lane's state and acts.

One consumer reads both lanes, and librdkafka hands over its fetched records in one queue, a lane's behind the
other's. A fetch sized to the fullest lane's room would leave an interactive chunk behind a full batch lane's
records until that lane is paused, the model fed from the batch lane only meanwhile. So a fetch takes what the
emptiest open lane has room for; what a full lane gets past its room is held outside Q0 (at most one fetch), and
that lane is paused at once. A lane full with nothing held is paused only once it has stayed full ``grace_s``: a
pause drops librdkafka's prefetched records, and a short stall is cheaper to wait out. A paused lane resumes once it
has drained to half its capacity.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Flow(enum.Enum):
    """What to do with a lane's partitions."""

    KEEP = "keep"
    PAUSE = "pause"
    RESUME = "resume"


@dataclass(frozen=True, slots=True)
class LaneState:
    """One lane as the consumer sees it.

    Attributes:
        backlog: the lane's chunks read and not batched yet: in Q0, plus held.
        held: of those, the ones read past the lane's room, waiting outside Q0.
        paused: its partitions are paused.
        full_since: since when (the caller's clock) the backlog has been at capacity; None while it is not.
    """

    backlog: int
    held: int
    paused: bool
    full_since: float | None


def fetch_size(open_lanes: Iterable[LaneState], capacity: int, most: int) -> int:
    """How many records the next fetch may take: the most room an open lane has, at most ``most``. 0: every open
    lane is full (or none is open), and the consumer waits for room instead."""
    return min(most, max((capacity - lane.backlog for lane in open_lanes), default=0))


def flow(lane: LaneState, capacity: int, now: float, grace_s: float) -> Flow:
    """Pause a lane that holds records past its room, or that has been full ``grace_s``; resume a paused one
    that has drained to half of ``capacity``."""
    if not lane.paused:
        stalled = lane.full_since is not None and now - lane.full_since >= grace_s
        return Flow.PAUSE if lane.held or stalled else Flow.KEEP
    return Flow.RESUME if lane.backlog <= capacity // 2 else Flow.KEEP
