"""The two lanes a job runs in, ``interactive`` and ``batch``, and how a record names them (a job's options name
theirs in ``priority``: ``docstream.records.JobOptions.lane``).

The inference service serves the lanes fairly (``docstream_inference.fair_queue``); the intake, the reducer, the
jobs view and the CLI only name them. Pure.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BATCH", "INTERACTIVE", "LANES", "Lane", "lane_of"]

Lane = Literal["interactive", "batch"]
INTERACTIVE: Lane = "interactive"
BATCH: Lane = "batch"
LANES: tuple[Lane, ...] = (INTERACTIVE, BATCH)


def lane_of(priority: str) -> Lane:
    """The lane of a record's ``priority``: interactive, or batch for anything else (a record from before lanes)."""
    return INTERACTIVE if priority == INTERACTIVE else BATCH
