"""Where jobs stand in their lanes, read from the store: the I/O edge of ``docstream.jobs.standing`` (docs/operations.md
"Where a job stands"). ``docstream status``, the API's job views and ``/ui`` all call ``standings``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from docstream.jobs.standing import QueueStanding, queue_standing
from docstream.lanes import LANES
from docstream.records import JobOptions
from docstream.settings import FairnessSettings, InferenceSettings, KafkaSettings
from docstream.store.base import JobRow, JobsStore
from docstream.tasks.selection import job_task_names
from docstream.topics import Topics

__all__ = ["standings"]


def standings(store: JobsStore, jobs: Sequence[JobRow], now: datetime, *, kafka: KafkaSettings,
              inference: InferenceSettings, fairness: FairnessSettings) -> dict[str, QueueStanding]:
    """Where each running job of ``jobs`` stands at ``now`` in the lanes of ``kafka``'s topics, by job_id (ended
    jobs stand nowhere: left out).

    Reads each lane's queue once and the rate of each inference group the jobs' tasks run in once
    (``inference.group_id``, the group of every task when set), and only when a job is running. A job of several
    tasks goes at its slowest group's rate among those measured; the share between lanes is
    ``fairness.batch_share``.

    Raises:
        StoreError: a read failed transiently.
    """
    running = [job for job in jobs if job.status == "running"]
    if not running:
        return {}
    topics, group_id = Topics(kafka.topic_prefix), inference.group_id
    queues = {lane: store.list_queue(topics.lane(lane)) for lane in LANES}
    rates: dict[str, float] = {}
    found: dict[str, QueueStanding] = {}
    for job in running:
        groups = {group_id or topics.inference_group(task) for task in job_task_names(job)}
        for group in groups - rates.keys():
            rates[group] = store.throughput(group, now)
        measured = [rates[group] for group in groups if rates[group] > 0]
        lane = JobOptions.from_mapping(job.options).lane
        other = next(name for name in LANES if name != lane)
        found[job.job_id] = queue_standing(job, queues[lane], queues[other], min(measured, default=0.0),
                                           fairness.batch_share, now)
    return found
