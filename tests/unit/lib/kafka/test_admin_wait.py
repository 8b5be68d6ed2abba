"""create_topics' wait until every new partition answers on its leader (docstream.kafka.admin.wait_until_answered),
with a stand-in for the broker's answers: which partitions answer at each round (no I/O)."""

from __future__ import annotations

import pytest

from docstream.errors import RetryableError
from docstream.kafka.admin import wait_until_answered
from tests.fixtures.clock import FakeClock


def test_it_asks_again_only_for_the_partitions_that_have_not_answered_until_all_have() -> None:
    rounds = [{("t", 1)}, set(), {("t", 0), ("u", 0)}]
    asked: list[set[tuple[str, int]]] = []

    def answering(pending: set[tuple[str, int]]) -> set[tuple[str, int]]:
        asked.append(set(pending))
        return rounds.pop(0) & pending

    clock = FakeClock()
    wait_until_answered({("t", 0), ("t", 1), ("u", 0)}, answering, deadline=10.0, clock=clock, sleep=clock.sleep)
    assert asked == [{("t", 0), ("t", 1), ("u", 0)}, {("t", 0), ("u", 0)}, {("t", 0), ("u", 0)}]
    assert clock.now == pytest.approx(0.1)  # two pauses of 0.05 s


def test_nothing_to_wait_for_asks_nothing() -> None:
    def answering(pending: set[tuple[str, int]]) -> set[tuple[str, int]]:
        raise AssertionError("asked with nothing pending")

    wait_until_answered(set(), answering, deadline=0.0)


def test_a_partition_that_never_answers_fails_at_the_deadline_naming_it() -> None:
    clock = FakeClock()
    with pytest.raises(RetryableError) as caught:
        wait_until_answered({("t", 0), ("t", 1)}, lambda pending: {("t", 1)} & pending, deadline=1.0, clock=clock,
                            sleep=clock.sleep)
    assert caught.value.code == "kafka_timeout"
    assert "('t', 0)" in caught.value.message and "('t', 1)" not in caught.value.message
    assert 1.0 <= clock.now < 1.1
