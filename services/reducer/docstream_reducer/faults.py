"""Fault injection for chaos tests (``settings.faults``); off by default, and outside the app's builder.

``keep_partition_paused`` makes the reducer behave as faust-streaming 0.15.3 was seen to: an assigned partition
of the result topic stops being delivered (docs/reducer.md "Partition watch"), so the tests can show the
partition watch re-fetching it and then the process restarting itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from faust.types import TP

from docstream.logging import get_logger
from docstream_reducer.app import Reducer

__all__ = ["keep_partition_paused"]


def keep_partition_paused(reducer: Reducer, topic: str, partition: int, every_s: float) -> None:
    """Pause ``topic[partition]`` every ``every_s`` once the app is ready and not rebalancing (the watch's terms),
    and from then on ignore every resume of it, the watch's re-fetch included: the partition stays stuck whatever
    the timing (a resume that slipped in between two pauses let it catch up on a quiet machine).

    Registers a timer: call it before the worker starts. Logs ``fault_partition_paused`` at the first pause, so a
    test produces the partition's records only once it is held (produced before, a loaded machine's reducer
    could read them all before the timer's first tick).
    """
    app = reducer.app
    stuck = TP(topic, partition)

    async def _pause() -> None:
        if app.rebalancing or app.in_recovery or not reducer.ready():
            return
        consumer: Any = app.consumer  # patched: this is a fault, not a use of faust's interface
        if not getattr(consumer, "_docstream_stall_fault", False):
            resume = consumer.resume_partitions

            def resume_all_but_the_stuck_one(partitions: Iterable[TP]) -> None:
                resume({tp for tp in partitions if tp != stuck})

            consumer.resume_partitions = resume_all_but_the_stuck_one
            consumer._docstream_stall_fault = True
            consumer.pause_partitions({stuck})
            get_logger(__name__).info("fault_partition_paused", topic=topic, partition=partition)
            return
        consumer.pause_partitions({stuck})

    app.timer(every_s, name="fault-stall-partition")(_pause)
