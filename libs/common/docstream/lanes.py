"""The two lanes a job runs in, ``interactive`` and ``batch``, and how a job's options and a record name them.

The inference service serves the lanes fairly (``docstream_inference.fair_queue``); the intake, the reducer, the
jobs view and the CLI only name them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

__all__ = ["BATCH", "INTERACTIVE", "LANES", "PRIORITY_OPTION", "Lane", "job_lane", "lane_of"]

Lane = Literal["interactive", "batch"]
INTERACTIVE: Lane = "interactive"
BATCH: Lane = "batch"
LANES: tuple[Lane, ...] = (INTERACTIVE, BATCH)


PRIORITY_OPTION = "priority"
"""The key of a job's lane in its options (``JobRow.options``); absent: batch."""


def lane_of(priority: str) -> Lane:
    """The lane of a record's ``priority``: interactive, or batch for anything else (a record from before lanes)."""
    return INTERACTIVE if priority == INTERACTIVE else BATCH


def job_lane(options: Mapping[str, str]) -> Lane:
    """A job's lane, from its options."""
    return lane_of(options.get(PRIORITY_OPTION, BATCH))
