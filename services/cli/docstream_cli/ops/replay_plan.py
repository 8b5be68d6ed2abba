"""Replay planning, pure: which topic and group a service reads (``replay_source``), where each partition goes
(``plan_reset`` from plain ``PartitionOffsets`` and ``GroupState``), whether the reset is allowed (``refusal``), and
the table and next steps shown to the user (docs/replay.md). The admin I/O and the command:
``docstream_cli.ops.replay``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from rich.table import Table

from docstream.errors import InputError
from docstream.lanes import BATCH, LANES
from docstream.tasks.base import check_task_name
from docstream.topics import Topics

if TYPE_CHECKING:  # only its attributes are read: the plan imports nothing that reads the environment
    from docstream.settings import Settings

__all__ = [
    "LIVE_STATES",
    "REPLAY_SERVICES",
    "GroupState",
    "PartitionOffsets",
    "PartitionReset",
    "ReplayPlan",
    "ReplayService",
    "ReplaySource",
    "ResetTarget",
    "is_live",
    "next_steps",
    "parse_target",
    "plan_reset",
    "plan_table",
    "refusal",
    "replay_source",
    "resolve_offset",
]

ReplayService = Literal["chunker", "inference", "reducer", "document-stage"]
REPLAY_SERVICES: tuple[ReplayService, ...] = ("chunker", "inference", "reducer", "document-stage")
"""Services whose input can be replayed."""

LIVE_STATES = frozenset({"STABLE", "PREPARING_REBALANCING", "COMPLETING_REBALANCING", "ASSIGNING", "RECONCILING"})
"""Consumer group states that mean members are (or are about to be) consuming."""

_EPOCH_MS = re.compile(r"^\d{10,16}$")


# -- the plan (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResetTarget:
    """Where to move the group: ``earliest``, ``latest``, one ``offset`` for every partition, or a ``datetime``.

    Attributes:
        kind: which of the four.
        offset: the offset, for kind "offset".
        timestamp_ms: epoch ms, for kind "datetime": the first record at or after it.
    """

    kind: Literal["earliest", "latest", "offset", "datetime"]
    offset: int | None = None
    timestamp_ms: int | None = None

    def describe(self) -> str:
        """Human-readable target (for the plan's title)."""
        if self.kind == "offset":
            return f"offset {self.offset}"
        if self.kind == "datetime" and self.timestamp_ms is not None:
            at = datetime.fromtimestamp(self.timestamp_ms / 1000, tz=UTC)
            return f"first record at or after {at.isoformat(timespec='milliseconds')}"
        return self.kind


def parse_target(to_datetime: str | None, to_offset: str | None) -> ResetTarget:
    """The target of ``--to-datetime T`` or ``--to-offset earliest|latest|N`` (exactly one).

    ``T`` is ISO 8601 with a time zone (``2024-05-17T12:00:00Z``, ``...+02:00``) or epoch
    milliseconds; a time without a zone is refused rather than guessed.

    Raises:
        InputError: neither or both given, or a value that does not parse.
    """
    if (to_datetime is None) == (to_offset is None):
        raise InputError("give exactly one of --to-datetime and --to-offset", code="replay_target")
    if to_offset is not None:
        value = to_offset.strip().lower()
        if value in ("earliest", "latest"):
            return ResetTarget(kind="earliest" if value == "earliest" else "latest")
        if value.isdigit():
            return ResetTarget(kind="offset", offset=int(value))
        raise InputError(f"--to-offset must be earliest, latest or a number, got {to_offset!r}", code="replay_target")
    assert to_datetime is not None
    return ResetTarget(kind="datetime", timestamp_ms=_parse_datetime_ms(to_datetime.strip()))


def _parse_datetime_ms(text: str) -> int:
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise InputError(f"--to-datetime: not an ISO 8601 time: {text!r}", code="replay_target") from exc
    if at.tzinfo is None or at.utcoffset() is None:
        raise InputError(
            f"--to-datetime {text!r} has no time zone; add one, e.g. {text}Z or {text}+02:00", code="replay_target"
        )
    return int(at.timestamp() * 1000)


@dataclass(frozen=True)
class ReplaySource:
    """The topic a service consumes and the consumer group to reset.

    Attributes:
        service: chunker, inference, reducer or document-stage.
        topic: the service's input topic.
        group_id: the group to reset or create.
        default_group: the group the service joins without an override.
        task: inference: the task whose group it is (None: embed, the default).
    """

    service: ReplayService
    topic: str
    group_id: str
    default_group: str
    task: str | None = None

    @property
    def new_group(self) -> bool:
        """A group other than the service's default one (``--new-group``)."""
        return self.group_id != self.default_group


def replay_source(settings: Settings, service: str, *, new_group: str | None = None,
                  task: str | None = None, lane: str = BATCH) -> ReplaySource:
    """The input topic and consumer group of ``service`` under ``settings``.

    The chunker and inference read a topic per lane (docs/operations.md "Sharing the service"): ``lane``
    (``batch`` by default, or ``interactive``) names the one to replay; the group is the same.

    chunker reads the intake topic as ``chunker.group_id`` (default ``<prefix>-chunker``);
    inference reads the chunks topic as ``inference.group_id`` (default ``<prefix>-inference``, and
    ``<prefix>-inference-<task>`` for a ``task`` other than embed: a group per task);
    the reducer reads the result topic as its Faust app id ``reducer.app_id``; the document stage reads the
    mapped topic as ``<prefix>-document-stage``.

    Raises:
        InputError: an unknown service, a ``task`` for another service than inference, an empty ``new_group``, or
            an unknown ``lane`` (``replay_lane``) or one for a service with no lanes.
    """
    topics = Topics(settings.kafka.topic_prefix)
    if lane not in LANES:
        raise InputError(f"--lane must be one of {', '.join(LANES)}, got {lane!r}", code="replay_lane")
    if lane != BATCH and service not in ("chunker", "inference"):
        raise InputError("--lane is an option of --service chunker and inference", code="replay_lane")
    if task is not None and service != "inference":
        raise InputError("--task is an option of --service inference", code="replay_task")
    if task is not None:
        check_task_name(task)
    if service == "inference" and task is not None:
        topic, default = topics.lane(lane), settings.inference.group_id or topics.inference_group(task)
    elif service == "chunker":
        topic, default = topics.intake(lane), settings.chunker.group_id or topics.group("chunker")
    elif service == "inference":
        topic, default = topics.lane(lane), settings.inference.group_id or topics.group("inference")
    elif service == "reducer":
        topic, default = topics.results, settings.reducer.app_id
    elif service == "document-stage":
        topic, default = topics.mapped, topics.group("document-stage")
    else:
        choices = ", ".join(REPLAY_SERVICES)
        raise InputError(f"--service must be one of {choices}, got {service!r}", code="replay_service")
    if new_group is not None and not new_group.strip():
        raise InputError("--new-group must not be empty", code="replay_group")
    group = new_group.strip() if new_group is not None else default
    return ReplaySource(service=service, topic=topic, group_id=group, default_group=default,  # type: ignore[arg-type]
                        task=task)


@dataclass(frozen=True)
class GroupState:
    """What the broker says about a consumer group.

    Attributes:
        group_id: the group.
        state: the broker's state name (STABLE, EMPTY, DEAD, ...; UNKNOWN when not told).
        members: members listed (``is_live`` looks at both: a live state counts even with no member listed).
    """

    group_id: str
    state: str
    members: int = 0


def is_live(group: GroupState) -> bool:
    """Whether the group has members consuming (or joining) now."""
    return group.members > 0 or group.state.upper() in LIVE_STATES


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition of the topic as observed, with the group's committed offset.

    Attributes:
        partition: partition number.
        low: earliest offset still kept (retention moves it up).
        high: end offset (the next offset to be written).
        committed: the group's committed offset, None when it has none.
        at_time: for a datetime target, the broker's first offset at or after it (-1: none).
    """

    partition: int
    low: int
    high: int
    committed: int | None = None
    at_time: int | None = None


@dataclass(frozen=True)
class PartitionReset:
    """One partition of a plan: from the committed offset to the target.

    Attributes:
        partition: partition number.
        current: the committed offset now (None: the group has none here).
        target: the offset the group is moved to.
        low: earliest offset kept.
        high: end offset.
    """

    partition: int
    current: int | None
    target: int
    low: int
    high: int

    @property
    def records_to_replay(self) -> int:
        """Records the group will read from the target to today's end."""
        return max(0, self.high - self.target)

    @property
    def records_reprocessed(self) -> int:
        """Records before the committed offset that will be read again (all of them for a new group)."""
        start = self.current if self.current is not None else self.high
        return max(0, min(start, self.high) - self.target)

    @property
    def records_skipped(self) -> int:
        """Records not yet read by the group that the reset jumps over."""
        start = self.current if self.current is not None else self.low
        return max(0, self.target - max(start, self.low))


@dataclass(frozen=True)
class ReplayPlan:
    """The whole reset: source, target, the group as found and every partition's move.

    Attributes:
        source: topic and group.
        target: where to.
        group: the group's state before the reset.
        partitions: one move per partition, by partition number.
        model_id: the model the service is to run with (inference), if given.
    """

    source: ReplaySource
    target: ResetTarget
    group: GroupState
    partitions: tuple[PartitionReset, ...]
    model_id: str | None = None

    @property
    def records_to_replay(self) -> int:
        """Records the group will read, all partitions together."""
        return sum(p.records_to_replay for p in self.partitions)

    @property
    def offsets(self) -> dict[int, int]:
        """partition → target offset."""
        return {p.partition: p.target for p in self.partitions}


def resolve_offset(target: ResetTarget, observed: PartitionOffsets) -> int:
    """The offset ``target`` means for one partition, within [low, high].

    A datetime after the last record (the broker answers -1) means the end: nothing replays.
    """
    if target.kind == "earliest":
        return observed.low
    if target.kind == "latest":
        return observed.high
    if target.kind == "offset":
        wanted = target.offset if target.offset is not None else observed.low
    else:
        wanted = observed.at_time if observed.at_time is not None and observed.at_time >= 0 else observed.high
    return min(max(wanted, observed.low), observed.high)


def plan_reset(
    source: ReplaySource,
    target: ResetTarget,
    group: GroupState,
    observed: Sequence[PartitionOffsets],
    *,
    model_id: str | None = None,
) -> ReplayPlan:
    """The reset plan for every observed partition. Pure.

    Raises:
        InputError: no partitions (the topic does not exist), or ``model_id`` for a service
            other than inference (only inference picks the model its rows are written under).
    """
    if not observed:
        raise InputError(f"topic {source.topic} has no partitions (does it exist?)", code="topic_missing")
    if model_id is not None and source.service not in ("chunker", "inference"):
        raise InputError("--model only applies to --service chunker or inference", code="replay_model")
    moves = tuple(
        PartitionReset(partition=o.partition, current=o.committed, target=resolve_offset(target, o), low=o.low,
                       high=o.high)
        for o in sorted(observed, key=lambda o: o.partition)
    )
    return ReplayPlan(source=source, target=target, group=group, partitions=moves, model_id=model_id)


def refusal(plan: ReplayPlan, *, force: bool) -> str | None:
    """Why the plan must not be applied (a live group without ``force``), else None."""
    if force or not is_live(plan.group):
        return None
    members = f"{plan.group.members} member(s)" if plan.group.members else "members"
    return (
        f"group {plan.group.group_id} is {plan.group.state} with {members} consuming: stop the "
        f"{plan.source.service} service first (its members would commit over the reset), or pass --force"
    )


def plan_table(plan: ReplayPlan) -> Table:
    """The plan as a rich table: per partition, from offset → to offset and records to replay."""
    source = plan.source
    title = (
        f"replay {source.service}: group {source.group_id}{' (new)' if source.new_group else ''} "
        f"on {source.topic} → {plan.target.describe()}"
    )
    table = Table(title=title, show_footer=True)
    table.add_column("partition", justify="right", footer="total")
    table.add_column("from (committed)", justify="right")
    table.add_column("to", justify="right")
    table.add_column("end", justify="right")
    table.add_column("records to replay", justify="right", footer=str(plan.records_to_replay))
    table.add_column("reprocessed", justify="right", footer=str(sum(p.records_reprocessed for p in plan.partitions)))
    table.add_column("skipped", justify="right", footer=str(sum(p.records_skipped for p in plan.partitions)))
    for p in plan.partitions:
        table.add_row(
            str(p.partition),
            "none" if p.current is None else str(p.current),
            str(p.target),
            str(p.high),
            str(p.records_to_replay),
            str(p.records_reprocessed),
            str(p.records_skipped),
        )
    table.caption = f"group state: {plan.group.state}" + (f", model: {plan.model_id}" if plan.model_id else "")
    return table


def next_steps(plan: ReplayPlan) -> list[str]:
    """What to run after the reset for the service to read from the new offsets."""
    source = plan.source
    env: list[str] = []
    if source.new_group:
        variable = {
            "chunker": "DOCSTREAM_CHUNKER__GROUP_ID",
            "inference": "DOCSTREAM_INFERENCE__GROUP_ID",
            "reducer": "DOCSTREAM_REDUCER__APP_ID",
        }[source.service]
        env.append(f"{variable}={source.group_id}")
    if plan.model_id is not None:
        env.append(("DOCSTREAM_CHUNKER__MODEL_ID" if source.service == "chunker" else "DOCSTREAM_INFERENCE__MODEL_ID")
                   + f"={plan.model_id}")
    command = f"docstream {source.service}" + (f" --task {source.task} --every-chunk" if source.task else "")
    steps = [f"start the {source.service} service: {' '.join([*env, command])}"]
    if plan.model_id is not None and source.service == "chunker":
        steps.append(f"the chunks ask for model_id {plan.model_id}: run an inference service with it "
                     f"(DOCSTREAM_INFERENCE__MODEL_ID={plan.model_id})")
    if source.task:
        steps.append(f"--every-chunk runs {source.task} also on the chunks of jobs that did not ask for it; its "
                     "results are written under its own model_id beside the existing ones")
    if plan.model_id is not None:
        steps.append(
            f"rows are written under model_id {plan.model_id} beside the existing ones; the weights come from "
            "inference.model_path (unset: the bundled all-MiniLM-L6-v2)"
        )
    if source.service == "reducer" and not source.new_group:
        steps.append(
            "the reducer ignores chunks of documents it completed within the last hour (its completion markers); "
            "to rebuild document results, replay into a --new-group (a fresh app id starts with empty tables)"
        )
    return steps
