"""Fault injection for chaos tests (``settings.faults``); off by default, and outside the app's builder.

``keep_partition_paused`` makes the reducer behave as faust-streaming 0.15.3 was seen to: an assigned partition
of the embedded topic stops being delivered (docs/reducer.md "Partition watch"), so the tests can show the
partition watch re-fetching it and then the process restarting itself.
"""

from __future__ import annotations

from faust.types import TP

from docstream_reducer.app import Reducer

__all__ = ["keep_partition_paused"]


def keep_partition_paused(reducer: Reducer, topic: str, partition: int, every_s: float) -> None:
    """Pause ``topic[partition]`` every ``every_s`` once the app is ready and not rebalancing (the watch's terms).

    Registers a timer: call it before the worker starts.
    """
    app = reducer.app

    async def _pause() -> None:
        if app.rebalancing or app.in_recovery or not reducer.ready():
            return
        consumer = app.consumer
        consumer.pause_partitions({TP(topic, partition)})

    app.timer(every_s, name="fault-stall-partition")(_pause)
