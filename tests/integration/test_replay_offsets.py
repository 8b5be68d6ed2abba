"""`docstream replay` against the real Kafka: plans from the broker's offsets, refusal of a live group, resets
to earliest / a time / a new group, and the command line."""

from __future__ import annotations

import io
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from rich.console import Console

from docstream.settings import Settings
from docstream_cli.ops.replay import GroupAdmin, run_replay
from docstream_cli.ops.replay_plan import ResetTarget
from tests.fixtures.kafka import committed_offset, kafka_settings, wait_until
from tests.fixtures.services import DOCSTREAM, ROOT

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 4
OLD_MS = 10 * 60 * 1000


def _produce(bootstrap: str, topic: str, now_ms: int) -> None:
    """PER_PARTITION records per partition: the first half 10 minutes old, the second half now."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            at = now_ms - OLD_MS if i < PER_PARTITION // 2 else now_ms
            producer.produce(topic, key=f"k{i}", value=f"v{partition}-{i}".encode(), partition=partition,
                             timestamp=at)
    assert producer.flush(10) == 0


def _consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    consumer.subscribe([topic])
    return consumer


def _consume_all(bootstrap: str, group: str, topic: str, count: int) -> list[str]:
    """Join ``group``, read ``count`` records, commit, leave; the values read."""
    consumer = _consumer(bootstrap, group, topic)
    values: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def _run(settings: Settings, **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = run_replay(settings, service="inference", console=Console(file=out, width=200, color_system=None),
                      confirm=lambda _: pytest.fail("asked although --yes"), wait_s=2, **options)
    return code, out.getvalue()


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    return [committed_offset(bootstrap, group, topic, p) for p in range(PARTITIONS)]


@pytest.fixture
def replayable(broker: str, unique_name: Callable[[str], str],
               create_topics: Callable[..., list[str]]) -> tuple[Settings, str, int]:
    """Settings with their own prefix, its chunks topic filled, and the inference group read to the end."""
    prefix = unique_name("replay")
    settings = kafka_settings(broker, topic_prefix=prefix)
    topic = f"{prefix}.chunks"
    create_topics(broker, topic, partitions=PARTITIONS)
    now_ms = int(time.time() * 1000)
    _produce(broker, topic, now_ms)
    assert len(_consume_all(broker, f"{prefix}-inference", topic, PARTITIONS * PER_PARTITION)) == 12
    return settings, topic, now_ms


def test_plan_reads_the_brokers_offsets(replayable: tuple[Settings, str, int]) -> None:
    settings, topic, _ = replayable
    admin = GroupAdmin(settings.kafka)
    group = f"{settings.kafka.topic_prefix}-inference"
    observed = admin.observe(topic, group, ResetTarget("earliest"))
    assert [(o.partition, o.low, o.high, o.committed) for o in observed] == [(p, 0, 4, 4) for p in range(3)]
    assert admin.describe_group(group).state in ("EMPTY", "DEAD") or admin.describe_group(group).members == 0
    code, text = _run(settings, to_offset="earliest", dry_run=True)
    assert code == 0 and "dry run" in text and "12" in text
    assert _committed(settings.kafka.bootstrap_servers, group, topic) == [4, 4, 4]


def test_reset_to_earliest_replays_everything(replayable: tuple[Settings, str, int]) -> None:
    settings, topic, _ = replayable
    bootstrap, group = settings.kafka.bootstrap_servers, f"{settings.kafka.topic_prefix}-inference"
    code, text = _run(settings, to_offset="earliest", yes=True)
    assert code == 0, text
    assert _committed(bootstrap, group, topic) == [0, 0, 0]
    again = _consume_all(bootstrap, group, topic, PARTITIONS * PER_PARTITION)
    assert sorted(again) == sorted(f"v{p}-{i}" for p in range(PARTITIONS) for i in range(PER_PARTITION))


def test_reset_to_a_time_never_skips_a_later_record(replayable: tuple[Settings, str, int]) -> None:
    settings, topic, now_ms = replayable
    bootstrap, group = settings.kafka.bootstrap_servers, f"{settings.kafka.topic_prefix}-inference"
    code, text = _run(settings, to_datetime=str(now_ms - OLD_MS // 2), yes=True)
    assert code == 0, text
    assert _committed(bootstrap, group, topic) == [2, 2, 2]  # the first record at or after the time


def test_a_live_group_is_refused_and_a_new_group_is_created(
    replayable: tuple[Settings, str, int], unique_name: Callable[[str], str]
) -> None:
    settings, topic, _ = replayable
    bootstrap, group = settings.kafka.bootstrap_servers, f"{settings.kafka.topic_prefix}-inference"
    member = _consumer(bootstrap, group, topic)
    try:
        wait_until(lambda: member.poll(0.1) is None and bool(member.assignment()), 60, "a live member")
        code, text = _run(settings, to_offset="earliest", yes=True)
        assert code == 1 and "refused" in text
        forced, text = _run(settings, to_offset="earliest", yes=True, force=True)
        assert forced == 1 and "live members" in text  # brokers never move offsets under live members
        assert _committed(bootstrap, group, topic) == [4, 4, 4]
        fresh = unique_name("fresh")
        code, text = _run(settings, to_offset="earliest", yes=True, new_group=fresh)
        assert code == 0 and f"DOCSTREAM_INFERENCE__GROUP_ID={fresh}" in text
        assert _committed(bootstrap, fresh, topic) == [0, 0, 0]
    finally:
        member.close()


def test_the_command_line_prints_the_plan_and_exits_by_outcome(replayable: tuple[Settings, str, int]) -> None:
    settings, topic, _ = replayable
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    env.update({"DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
                "DOCSTREAM_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix, "COLUMNS": "200"})
    base = [str(DOCSTREAM), "replay", "--service", "inference"]
    dry = subprocess.run([*base, "--to-offset", "latest", "--model", "m@2", "--dry-run"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert dry.returncode == 0, dry.stderr
    assert topic in dry.stdout and "latest" in dry.stdout and "model: m@2" in dry.stdout
    bad = subprocess.run([*base, "--to-offset", "latest", "--to-datetime", "2024-01-01T00:00:00Z"], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "exactly one" in bad.stderr
    declined = subprocess.run([*base, "--to-offset", "earliest"], env=env, cwd=ROOT, input="n\n",
                              capture_output=True, text=True, timeout=120, check=False)
    assert declined.returncode == 1 and "nothing changed" in declined.stdout
    group = f"{settings.kafka.topic_prefix}-inference"
    assert _committed(settings.kafka.bootstrap_servers, group, topic) == [4, 4, 4]


def test_committed_offsets_are_read_without_joining_the_group(replayable: tuple[Settings, str, int]) -> None:
    # fetch_committed_offsets asks through a consumer of the group, not the AdminClient (whose OffsetFetch
    # crashes librdkafka 2.16 on NOT_COORDINATOR, issue #5040): the group must not gain a member or move
    from docstream.kafka.clients import fetch_committed_offsets

    settings, topic, _ = replayable
    group = f"{settings.kafka.topic_prefix}-inference"
    admin = GroupAdmin(settings.kafka)
    before = admin.describe_group(group)
    found = fetch_committed_offsets(settings.kafka, group, topic, [0, 1, 2], timeout_s=10)
    assert found == {0: 4, 1: 4, 2: 4}
    unknown = fetch_committed_offsets(settings.kafka, f"{group}-never-committed", topic, [0, 2], timeout_s=10)
    assert set(unknown) == {0, 2} and all(offset < 0 for offset in unknown.values())
    assert fetch_committed_offsets(settings.kafka, group, topic, [], timeout_s=10) == {}
    after = admin.describe_group(group)
    assert after.members == before.members == 0
    assert admin.committed(group, topic, [0, 1, 2]) == {0: 4, 1: 4, 2: 4}
