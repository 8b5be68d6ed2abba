"""Replay planning (docstream_cli.ops.replay), pure: targets, sources, partition moves, refusal, output, retries."""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from rich.console import Console

from docstream.errors import FatalError, InputError, RetryableError
from docstream.settings import Settings
from docstream_cli.ops.replay import GroupAdmin, apply_plan, run_replay
from docstream_cli.ops.replay_plan import (
    GroupState,
    PartitionOffsets,
    ReplayPlan,
    ResetTarget,
    is_live,
    next_steps,
    parse_target,
    plan_reset,
    plan_table,
    refusal,
    replay_source,
    resolve_offset,
)
from tests.fixtures.clock import FakeClock


def _settings(**sections: dict[str, Any]) -> Settings:
    return Settings().with_overrides(kafka={"topic_prefix": "t1"}, **sections)


# -- targets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to_offset", "expected"),
    [("earliest", ResetTarget("earliest")), ("LATEST", ResetTarget("latest")), ("42", ResetTarget("offset", 42))],
)
def test_offset_targets(to_offset: str, expected: ResetTarget) -> None:
    assert parse_target(None, to_offset) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-17T12:00:00Z", datetime(2024, 5, 17, 12, tzinfo=UTC)),
        ("2024-05-17T14:00:00+02:00", datetime(2024, 5, 17, 12, tzinfo=UTC)),
        ("2024-05-17T12:00:00.250z", datetime(2024, 5, 17, 12, 0, 0, 250_000, tzinfo=UTC)),
        ("1715947200000", datetime(2024, 5, 17, 12, tzinfo=UTC)),
    ],
)
def test_datetime_targets_are_epoch_ms(text: str, expected: datetime) -> None:
    target = parse_target(text, None)
    assert target.kind == "datetime"
    assert target.timestamp_ms == int(expected.timestamp() * 1000)
    assert expected.isoformat(timespec="milliseconds").replace("+00:00", "") in target.describe()


@pytest.mark.parametrize(
    ("to_datetime", "to_offset", "why"),
    [
        (None, None, "exactly one"),
        ("2024-05-17T12:00:00Z", "earliest", "exactly one"),
        ("2024-05-17T12:00:00", None, "no time zone"),
        ("yesterday", None, "ISO 8601"),
        (None, "-3", "earliest, latest or a number"),
        (None, "first", "earliest, latest or a number"),
    ],
)
def test_bad_targets_are_refused(to_datetime: str | None, to_offset: str | None, why: str) -> None:
    with pytest.raises(InputError, match=why) as caught:
        parse_target(to_datetime, to_offset)
    assert caught.value.code == "replay_target"


# -- sources ---------------------------------------------------------------------------------------


def test_each_service_replays_its_input_topic_as_its_group() -> None:
    settings = _settings(reducer={"app_id": "t1-reducer-app"})
    chunker, inference, reducer = (replay_source(settings, s) for s in ("chunker", "inference", "reducer"))
    assert (chunker.topic, chunker.group_id) == ("t1.documents.submitted", "t1-chunker")
    assert (inference.topic, inference.group_id) == ("t1.chunks", "t1-inference")
    assert (reducer.topic, reducer.group_id) == ("t1.chunks.results", "t1-reducer-app")
    assert not any(s.new_group for s in (chunker, inference, reducer))


def test_the_interactive_lane_replays_its_own_topics_in_the_same_groups() -> None:
    settings = _settings()
    chunker, inference = (replay_source(settings, s, lane="interactive") for s in ("chunker", "inference"))
    assert (chunker.topic, chunker.group_id) == ("t1.documents.submitted.interactive", "t1-chunker")
    assert (inference.topic, inference.group_id) == ("t1.chunks.interactive", "t1-inference")
    for service, lane in (("inference", "urgent"), ("reducer", "interactive")):
        with pytest.raises(InputError) as caught:
            replay_source(settings, service, lane=lane)
        assert caught.value.code == "replay_lane"


def test_group_overrides_and_new_groups() -> None:
    settings = _settings(inference={"group_id": "custom"})
    assert replay_source(settings, "inference").group_id == "custom"
    fresh = replay_source(settings, "inference", new_group=" t1-inference-v2 ")
    assert (fresh.group_id, fresh.default_group, fresh.new_group) == ("t1-inference-v2", "custom", True)
    with pytest.raises(InputError, match="must not be empty"):
        replay_source(settings, "inference", new_group="  ")
    with pytest.raises(InputError, match="chunker, inference, reducer"):
        replay_source(settings, "ingest")


# -- offsets and plans -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "at_time", "expected"),
    [
        (ResetTarget("earliest"), None, 10),
        (ResetTarget("latest"), None, 50),
        (ResetTarget("offset", 30), None, 30),
        (ResetTarget("offset", 3), None, 10),  # below what retention kept: the earliest kept
        (ResetTarget("offset", 99), None, 50),
        (ResetTarget("datetime", timestamp_ms=1), 25, 25),
        (ResetTarget("datetime", timestamp_ms=1), -1, 50),  # nothing at or after the time: the end
        (ResetTarget("datetime", timestamp_ms=1), 4, 10),
    ],
)
def test_resolve_offset_stays_within_the_log(target: ResetTarget, at_time: int | None, expected: int) -> None:
    assert resolve_offset(target, PartitionOffsets(0, low=10, high=50, committed=40, at_time=at_time)) == expected


def _plan(target: ResetTarget, *observed: PartitionOffsets, service: str = "inference",
          group: GroupState | None = None, model_id: str | None = None) -> ReplayPlan:
    source = replay_source(_settings(), service)
    return plan_reset(source, target, group or GroupState(source.group_id, "EMPTY"), list(observed),
                      model_id=model_id)


def test_plan_counts_records_per_partition() -> None:
    plan = _plan(
        ResetTarget("earliest"),
        PartitionOffsets(1, low=0, high=8, committed=8),
        PartitionOffsets(0, low=2, high=12, committed=5),
        PartitionOffsets(2, low=0, high=0),
    )
    assert [p.partition for p in plan.partitions] == [0, 1, 2]
    assert plan.offsets == {0: 2, 1: 0, 2: 0}
    assert [(p.records_to_replay, p.records_reprocessed, p.records_skipped) for p in plan.partitions] == [
        (10, 3, 0), (8, 8, 0), (0, 0, 0)
    ]
    assert plan.records_to_replay == 18


def test_a_new_group_replays_everything_and_latest_skips_what_is_unread() -> None:
    fresh = _plan(ResetTarget("earliest"), PartitionOffsets(0, low=0, high=7))
    assert (fresh.partitions[0].current, fresh.partitions[0].records_reprocessed) == (None, 7)
    ahead = _plan(ResetTarget("latest"), PartitionOffsets(0, low=0, high=7, committed=3))
    assert (ahead.records_to_replay, ahead.partitions[0].records_skipped) == (0, 4)


def test_plans_need_partitions_and_model_only_for_chunker_or_inference() -> None:
    with pytest.raises(InputError, match="does it exist") as missing:
        _plan(ResetTarget("earliest"))
    assert missing.value.code == "topic_missing"
    with pytest.raises(InputError, match="only applies to --service chunker or inference"):
        _plan(ResetTarget("earliest"), PartitionOffsets(0, 0, 1), service="reducer", model_id="m2")
    assert _plan(ResetTarget("earliest"), PartitionOffsets(0, 0, 1), model_id="m2").model_id == "m2"
    chunker = _plan(ResetTarget("earliest"), PartitionOffsets(0, 0, 1), service="chunker", model_id="m2")
    steps = next_steps(chunker)
    assert "DOCSTREAM_CHUNKER__MODEL_ID=m2 docstream chunker" in steps[0]
    assert any("DOCSTREAM_INFERENCE__MODEL_ID=m2" in step for step in steps[1:])


@pytest.mark.parametrize(
    ("state", "members", "live"),
    [("STABLE", 0, True), ("STABLE", 2, True), ("PREPARING_REBALANCING", 0, True), ("EMPTY", 0, False),
     ("DEAD", 0, False), ("UNKNOWN", 1, True)],
)
def test_liveness_looks_at_state_and_members(state: str, members: int, live: bool) -> None:
    # either is enough: a live state counts even when the broker lists no member, members count in any state
    assert is_live(GroupState("g", state, members)) is live


def test_a_live_group_is_refused_unless_forced() -> None:
    plan = _plan(ResetTarget("earliest"), PartitionOffsets(0, 0, 5), group=GroupState("t1-inference", "STABLE", 2))
    reason = refusal(plan, force=False)
    assert reason is not None and "stop the inference service" in reason and "2 member(s)" in reason
    assert refusal(plan, force=True) is None
    assert refusal(_plan(ResetTarget("earliest"), PartitionOffsets(0, 0, 5)), force=False) is None


def _render(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=220, color_system=None).print(renderable)
    return out.getvalue()


def test_plan_table_shows_from_to_and_records() -> None:
    plan = _plan(ResetTarget("earliest"), PartitionOffsets(0, low=2, high=12, committed=5),
                 PartitionOffsets(1, low=0, high=4), model_id="m@replay")
    text = _render(plan_table(plan))
    assert "replay inference: group t1-inference on t1.chunks → earliest" in text
    assert "│         0 │                5 │  2 │  12 │                10 │" in text
    assert "│         1 │             none │  0 │   4 │                 4 │" in text
    assert "total" in text and "14" in text and "model: m@replay" in text


def test_next_steps_name_the_settings_to_start_with() -> None:
    settings = _settings()
    source = replay_source(settings, "inference", new_group="t1-inference-v2")
    plan = plan_reset(source, ResetTarget("earliest"), GroupState("t1-inference-v2", "DEAD"),
                      [PartitionOffsets(0, 0, 3)], model_id="all-MiniLM-L6-v2@replay")
    steps = next_steps(plan)
    assert steps[0] == ("start the inference service: DOCSTREAM_INFERENCE__GROUP_ID=t1-inference-v2 "
                        "DOCSTREAM_INFERENCE__MODEL_ID=all-MiniLM-L6-v2@replay docstream inference")
    reducer = plan_reset(replay_source(settings, "reducer", new_group="r2"), ResetTarget("earliest"),
                         GroupState("r2", "DEAD"), [PartitionOffsets(0, 0, 3)])
    assert next_steps(reducer)[0] == "start the reducer service: DOCSTREAM_REDUCER__APP_ID=r2 docstream reducer"
    same = plan_reset(replay_source(settings, "reducer"), ResetTarget("earliest"), GroupState("x", "EMPTY"),
                      [PartitionOffsets(0, 0, 3)])
    assert any("completion markers" in step for step in next_steps(same))


# -- applying, with a fake admin ---------------------------------------------------------------------


class FakeGroupAdmin:
    """A GroupAdmin stand-in: a group, a topic's offsets, and a broker that refuses ``busy`` times."""

    def __init__(self, group: GroupState, observed: list[PartitionOffsets], *, busy: int = 0,
                 error: Exception | None = None) -> None:
        self.group = group
        self.observed = observed
        self.busy = busy
        self.error = error
        self.altered: list[tuple[str, str, dict[int, int]]] = []

    def describe_group(self, group_id: str) -> GroupState:
        return self.group

    def observe(self, topic: str, group_id: str, target: ResetTarget) -> list[PartitionOffsets]:
        return self.observed

    def alter_offsets(self, group_id: str, topic: str, offsets: Mapping[int, int]) -> None:
        if self.error is not None:
            raise self.error
        if self.busy:
            self.busy -= 1
            raise RetryableError("live members", code="group_active")
        self.altered.append((group_id, topic, dict(offsets)))


def test_apply_waits_for_members_to_leave_within_the_deadline() -> None:
    admin = FakeGroupAdmin(GroupState("g", "EMPTY"), [], busy=3)
    plan = _plan(ResetTarget("earliest"), PartitionOffsets(0, 1, 5))
    clock, waits = FakeClock(), []
    apply_plan(cast(GroupAdmin, admin), plan, wait_s=10, on_wait=waits.append, clock=clock, sleep=clock.sleep)
    assert admin.altered == [("t1-inference", "t1.chunks", {0: 1})]
    assert len(waits) == 3


def test_apply_gives_up_at_the_deadline_and_never_retries_other_errors() -> None:
    plan = _plan(ResetTarget("earliest"), PartitionOffsets(0, 1, 5))
    clock = FakeClock()
    with pytest.raises(RetryableError) as caught:
        apply_plan(cast(GroupAdmin, FakeGroupAdmin(GroupState("g", "EMPTY"), [], busy=100)), plan, wait_s=5,
                   clock=clock, sleep=clock.sleep)
    assert caught.value.code == "group_active" and clock.now == 5
    refused = FakeGroupAdmin(GroupState("g", "EMPTY"), [], error=FatalError("denied", code="kafka_denied"))
    with pytest.raises(FatalError):
        apply_plan(cast(GroupAdmin, refused), plan, wait_s=60, clock=clock, sleep=clock.sleep)


def _run(admin: FakeGroupAdmin, *, answer: bool = False, **options: Any) -> tuple[int, str, list[str]]:
    out = io.StringIO()
    asked: list[str] = []

    def confirm(question: str) -> bool:
        asked.append(question)
        return answer

    code = run_replay(_settings(), service="inference", to_offset="earliest",
                      console=Console(file=out, width=200, color_system=None), confirm=confirm,
                      admin=cast(GroupAdmin, admin), **options)
    return code, out.getvalue(), asked


def test_run_replay_asks_and_applies_only_when_told() -> None:
    observed = [PartitionOffsets(0, low=0, high=6, committed=6)]
    declined = FakeGroupAdmin(GroupState("t1-inference", "EMPTY"), observed)
    code, text, asked = _run(declined)
    assert (code, declined.altered, len(asked)) == (1, [], 1) and "nothing changed" in text
    accepted = FakeGroupAdmin(GroupState("t1-inference", "EMPTY"), observed)
    code, text, _ = _run(accepted, answer=True)
    assert code == 0 and accepted.altered == [("t1-inference", "t1.chunks", {0: 0})]
    assert "6 records to replay" in text and "next: start the inference service" in text
    unasked = FakeGroupAdmin(GroupState("t1-inference", "EMPTY"), observed)
    code, _, asked = _run(unasked, yes=True)
    assert (code, asked, len(unasked.altered)) == (0, [], 1)


def test_run_replay_dry_run_and_live_groups_change_nothing() -> None:
    observed = [PartitionOffsets(0, low=0, high=6, committed=6)]
    dry = FakeGroupAdmin(GroupState("t1-inference", "EMPTY"), observed)
    code, text, asked = _run(dry, dry_run=True)
    assert (code, dry.altered, asked) == (0, [], []) and "dry run" in text and "records to replay" in text
    live = FakeGroupAdmin(GroupState("t1-inference", "STABLE", 1), observed)
    code, text, asked = _run(live, yes=True)
    assert (code, live.altered, asked) == (1, [], []) and "refused" in text
    forced = FakeGroupAdmin(GroupState("t1-inference", "STABLE", 1), observed)
    code, _, _ = _run(forced, yes=True, force=True)
    assert code == 0 and len(forced.altered) == 1


def test_a_task_is_replayed_in_its_own_group_and_runs_on_every_chunk() -> None:
    settings = _settings()
    source = replay_source(settings, "inference", task="entities")
    assert (source.topic, source.group_id, source.task) == ("t1.chunks", "t1-inference-entities", "entities")
    assert replay_source(settings, "inference", task="embed").group_id == "t1-inference"
    plan = plan_reset(source, ResetTarget("earliest"), GroupState(source.group_id, "DEAD"), [PartitionOffsets(0, 0, 3)])
    steps = next_steps(plan)
    assert steps[0] == "start the inference service: docstream inference --task entities --every-chunk"
    assert "beside the existing ones" in steps[1]
    with pytest.raises(InputError):
        replay_source(settings, "reducer", task="entities")
    with pytest.raises(InputError):
        replay_source(settings, "inference", task="Not A Task")
