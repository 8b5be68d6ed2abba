"""Replay: reset (or create) a service's consumer group so its input topic is processed again (docs/replay.md).

Two halves, kept apart:

* the plan, pure, in ``docstream_cli.ops.replay_plan``: which topic and group a service reads
  (``replay_source``), where each partition goes (``plan_reset`` from plain ``PartitionOffsets`` and
  ``GroupState``), whether the reset is allowed (``refusal``), and the table and next steps shown to the user;
* the admin I/O at the edge, here: ``GroupAdmin`` describes the group, lists the topic's offsets
  (earliest, latest, by timestamp) and the group's committed offsets, and applies the plan
  with ``alter_consumer_group_offsets``.

``run_replay`` is the ``docstream replay`` command: plan → print → refuse, ask or apply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from rich.console import Console

from docstream.errors import DocstreamError, InputError, RetryableError
from docstream.kafka.clients import admin_config, fetch_committed_offsets, kafka_error
from docstream.lanes import BATCH
from docstream.logging import get_logger
from docstream.settings import KafkaSettings, Settings
from docstream_cli.ops.replay_plan import (
    GroupState,
    PartitionOffsets,
    ReplayPlan,
    ResetTarget,
    next_steps,
    parse_target,
    plan_reset,
    plan_table,
    refusal,
    replay_source,
)

__all__ = [
    "GroupAdmin",
    "apply_plan",
    "run_replay",
]

_log = get_logger(__name__)

_GROUP_BUSY = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION})


# -- the admin I/O ------------------------------------------------------------------------------


class GroupAdmin:
    """Consumer group and offset admin calls, bounded by ``timeout_s`` each.

    Args:
        kafka: Kafka settings (bootstrap, security).
        timeout_s: time limit of each admin request.
        client: an AdminClient to use (default: one from the settings).
    """

    def __init__(self, kafka: KafkaSettings, *, timeout_s: float = 15.0, client: AdminClient | None = None) -> None:
        # a metadata request must never create the topic it asks about (brokers with auto.create.topics.enable)
        conf = {**admin_config(kafka, client_id="docstream-replay"), "allow.auto.create.topics": False}
        self._admin = client if client is not None else AdminClient(conf)
        self._kafka = kafka
        self._timeout_s = timeout_s

    def describe_group(self, group_id: str) -> GroupState:
        """The group's state and member count (DEAD or EMPTY with 0 members when it does not exist).

        Raises:
            RetryableError | FatalError: the broker did not answer or refused.
        """
        future = self._admin.describe_consumer_groups([group_id], request_timeout=self._timeout_s)[group_id]
        description = self._result(future, f"describe group {group_id}")
        state = getattr(description.state, "name", str(description.state))
        return GroupState(group_id=group_id, state=state, members=len(description.members or []))

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition numbers (empty when it does not exist).

        Raises:
            RetryableError: no metadata in time.
        """
        try:
            metadata = self._admin.list_topics(topic, timeout=self._timeout_s)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], f"metadata of {topic}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return []
        return sorted(found.partitions)

    def observe(self, topic: str, group_id: str, target: ResetTarget) -> list[PartitionOffsets]:
        """Earliest, end and committed offsets of every partition (and the offset at the target time).

        Raises:
            RetryableError | FatalError: the broker did not answer or refused.
        """
        partitions = self.partitions(topic)
        if not partitions:
            return []
        low = self._list_offsets(topic, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        high = self._list_offsets(topic, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        at_time: Mapping[int, int] = {}
        if target.kind == "datetime" and target.timestamp_ms is not None:
            at_time = self._list_offsets(topic, partitions, OffsetSpec.for_timestamp(target.timestamp_ms))
        committed = self.committed(group_id, topic, partitions)
        return [
            PartitionOffsets(partition=p, low=low[p], high=max(high[p], low[p]), committed=committed.get(p),
                             at_time=at_time.get(p))
            for p in partitions
        ]

    def committed(self, group_id: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The group's committed offsets on ``topic`` (partitions without one are left out).

        Raises:
            RetryableError | FatalError: the broker did not answer or refused.
        """
        # not the AdminClient's list_consumer_group_offsets: it can crash the process (fetch_committed_offsets)
        offsets = fetch_committed_offsets(self._kafka, group_id, topic, partitions, timeout_s=self._timeout_s)
        return {p: offset for p, offset in offsets.items() if offset >= 0}

    def alter_offsets(self, group_id: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Commit ``offsets`` (partition → offset) for ``group_id``; creates the group when new.

        Raises:
            RetryableError: code ``group_active`` when the broker refuses because members are live
                (UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS), or no answer in time.
            FatalError: any other refusal.
        """
        parts = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group_id, parts)]
        future = self._admin.alter_consumer_group_offsets(request, request_timeout=self._timeout_s)[group_id]
        try:
            result = self._result(future, f"alter offsets of group {group_id}")
        except DocstreamError as exc:
            if exc.code in ("kafka_unknown_member_id", "kafka_rebalance_in_progress"):
                raise RetryableError(f"group {group_id} has live members: {exc.message}", code="group_active") from exc
            raise
        for tp in result.topic_partitions or []:
            if tp.error is None:
                continue
            if tp.error.code() in _GROUP_BUSY:
                raise RetryableError(f"group {group_id} has live members: {tp.error.str()}", code="group_active")
            raise kafka_error(tp.error, f"alter offset of {topic}[{tp.partition}] for group {group_id}")

    def _list_offsets(self, topic: str, partitions: Sequence[int], spec: OffsetSpec) -> dict[int, int]:
        request = {TopicPartition(topic, p): spec for p in partitions}
        futures = self._admin.list_offsets(request, request_timeout=self._timeout_s)
        return {tp.partition: int(self._result(f, f"offsets of {topic}[{tp.partition}]").offset)
                for tp, f in futures.items()}

    def _result(self, future: Any, context: str) -> Any:
        try:
            return future.result(timeout=self._timeout_s + 5)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], context) from exc
        except TimeoutError as exc:
            raise RetryableError(f"{context}: no answer in {self._timeout_s} s", code="kafka_timeout") from exc


def apply_plan(
    admin: GroupAdmin,
    plan: ReplayPlan,
    *,
    wait_s: float = 0.0,
    on_wait: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Apply ``plan``; while the broker says the group has live members, retry for up to ``wait_s``.

    Raises:
        RetryableError: code ``group_active`` when the members were still there at the deadline.
        FatalError: the broker refused.
    """
    deadline = clock() + wait_s
    while True:
        try:
            admin.alter_offsets(plan.source.group_id, plan.source.topic, plan.offsets)
            _log.info("replay_offsets_reset", group_id=plan.source.group_id, topic=plan.source.topic,
                      target=plan.target.kind, records=plan.records_to_replay)
            return
        except RetryableError as exc:
            if exc.code != "group_active" or clock() >= deadline:
                raise
            if on_wait is not None:
                on_wait(exc.message)
            sleep(1.0)


# -- the command --------------------------------------------------------------------------------


def run_replay(
    settings: Settings,
    *,
    service: str,
    console: Console,
    confirm: Callable[[str], bool],
    to_datetime: str | None = None,
    to_offset: str | None = None,
    new_group: str | None = None,
    model_id: str | None = None,
    task: str | None = None,
    lane: str = BATCH,
    force: bool = False,
    yes: bool = False,
    dry_run: bool = False,
    wait_s: float = 30.0,
    admin: GroupAdmin | None = None,
    then: Callable[[ReplayPlan], int] | None = None,
) -> int:
    """``docstream replay``: plan, print, then refuse, ask or apply. Returns the exit status.

    0: applied (or ``dry_run``); 1: refused (live group), declined at the prompt, or failed.
    ``then``: what processes the replay once the reset is applied (a run's state dir, where no service runs),
    instead of the next steps printed; its exit status is the command's.

    Raises:
        InputError: bad options (the CLI turns it into a message and status 2).
    """
    target = parse_target(to_datetime, to_offset)
    source = replay_source(settings, service, new_group=new_group, task=task, lane=lane)
    admin = admin or GroupAdmin(settings.kafka)
    try:
        group = admin.describe_group(source.group_id)
        plan = plan_reset(source, target, group, admin.observe(source.topic, source.group_id, target),
                          model_id=model_id)
    except InputError:
        raise
    except DocstreamError as exc:
        console.print(f"[red]cannot plan the replay:[/red] {exc.message}")
        return 1
    console.print(plan_table(plan))
    reason = refusal(plan, force=force)
    if reason is not None:
        console.print(f"[red]refused:[/red] {reason}")
        return 0 if dry_run else 1
    if dry_run:
        console.print("dry run: nothing changed")
        return 0
    if not yes and not confirm(f"Reset group {source.group_id} on {source.topic} as shown?"):
        console.print("nothing changed")
        return 1
    try:
        apply_plan(admin, plan, wait_s=wait_s if force else 0.0,
                   on_wait=lambda why: console.print(f"waiting for the group's members to leave: {why}"))
    except DocstreamError as exc:
        console.print(f"[red]reset failed:[/red] {exc.message}")
        if exc.code == "group_active":
            console.print("brokers never move a group's offsets under live members: stop the service and retry")
        return 1
    console.print(f"group {source.group_id} reset: {plan.records_to_replay} records to replay on {source.topic}")
    if then is not None:
        return then(plan)
    for step in next_steps(plan):
        console.print(f"next: {step}")
    return 0
