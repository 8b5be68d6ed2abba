"""A group's committed offsets asked again while its coordinator refuses (docstream.kafka.clients.ask_committed),
with the consumer's ``committed`` answers given in order: a list of offsets, or the KafkaError it raises (no I/O)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from docstream.errors import FatalError, RetryableError
from docstream.kafka.clients import ask_committed
from tests.fixtures.clock import FakeClock

_OFFSETS = [TopicPartition("t", 0, 7), TopicPartition("t", 1, -1001)]


def _answers(*answers: list[TopicPartition] | int, clock: FakeClock,
             timeouts: list[float]) -> Callable[[float], list[TopicPartition]]:
    pending = list(answers)

    def ask(timeout: float) -> list[TopicPartition]:
        timeouts.append(timeout)
        clock.now += 0.01  # a refusal comes back at once
        answer = pending.pop(0)
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer

    return ask


def test_a_coordinator_that_moved_or_is_loading_is_asked_again_until_it_answers() -> None:
    clock, timeouts = FakeClock(), []
    ask = _answers(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, _OFFSETS, clock=clock,
                   timeouts=timeouts)
    assert ask_committed(ask, timeout_s=15, context="offsets", clock=clock, sleep=clock.sleep) == _OFFSETS
    assert len(timeouts) == 3
    # each ask is given what is left of the 15 s, and the pauses between them are backoffs of at most 0.1 s, 0.2 s
    assert timeouts[0] == 15 and 15 - 0.01 - 0.1 <= timeouts[1] < timeouts[0] and timeouts[2] < timeouts[1]
    assert clock.now <= 0.03 + 0.1 + 0.2


def test_a_refusal_that_outlives_the_timeout_is_a_retryable_error_naming_it() -> None:
    clock, timeouts = FakeClock(), []
    ask = _answers(*[KafkaError.NOT_COORDINATOR] * 1000, clock=clock, timeouts=timeouts)
    with pytest.raises(RetryableError) as caught:
        ask_committed(ask, timeout_s=5, context="offsets of group g", clock=clock, sleep=clock.sleep)
    assert caught.value.code == "kafka_not_coordinator"
    assert caught.value.message.startswith("offsets of group g:")
    assert 5 <= clock.now < 5 + 0.01 + 2.0  # the last pause ends at the deadline, its ask answers at once
    assert len(timeouts) > 3


def test_a_refusal_no_waiting_fixes_is_raised_at_once() -> None:
    clock, timeouts = FakeClock(), []
    ask = _answers(KafkaError.GROUP_AUTHORIZATION_FAILED, _OFFSETS, clock=clock, timeouts=timeouts)
    with pytest.raises(FatalError) as caught:
        ask_committed(ask, timeout_s=15, context="offsets", clock=clock, sleep=clock.sleep)
    assert caught.value.code == "kafka_group_authorization_failed"
    assert timeouts == [15]
