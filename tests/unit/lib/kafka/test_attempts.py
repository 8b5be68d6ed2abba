"""The loop's retry policy: poison → DLQ at once, transient → backoff then fatal, other → N tries then DLQ."""

from __future__ import annotations

import random

import pytest

from docstream.errors import FatalError, PoisonRecord, RetryableError, SchemaError
from docstream.kafka.attempts import run_with_retries
from docstream.settings import RetrySettings

_RETRY = RetrySettings(max_attempts=4, base_delay_ms=100, max_delay_ms=250, handler_attempts=3)


class _Failing:
    def __init__(self, *errors: BaseException, result: str = "ok") -> None:
        self.errors = list(errors)
        self.calls = 0
        self.result = result

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


class _Waits:
    def __init__(self, stop_after: int | None = None) -> None:
        self.delays: list[float] = []
        self.stop_after = stop_after

    def __call__(self, delay: float) -> bool:
        self.delays.append(delay)
        return self.stop_after is not None and len(self.delays) >= self.stop_after


def test_success_first_time() -> None:
    waits = _Waits()
    outcome = run_with_retries(_Failing(), retry=_RETRY, wait=waits)
    assert (outcome.ok, outcome.value, outcome.attempts, waits.delays) == (True, "ok", 1, [])


def test_poison_goes_to_the_dlq_without_retry() -> None:
    call = _Failing(SchemaError("bad bytes"))
    outcome = run_with_retries(call, retry=_RETRY, wait=_Waits())
    assert isinstance(outcome.error, PoisonRecord)
    assert (outcome.attempts, call.calls, outcome.ok) == (1, 1, False)


def test_transient_faults_back_off_with_bounded_full_jitter_then_succeed() -> None:
    waits = _Waits()
    retries: list[int] = []
    call = _Failing(RetryableError("blip"), TimeoutError("slow"), ConnectionError("reset"))
    outcome = run_with_retries(call, retry=_RETRY, wait=waits, on_retry=lambda a, e, d: retries.append(a),
                               rng=random.Random(1))
    assert (outcome.ok, outcome.attempts, retries) == (True, 4, [1, 2, 3])
    ceilings = [0.1, 0.2, 0.25]
    assert all(0 <= d <= c for d, c in zip(waits.delays, ceilings, strict=True))


def test_transient_fault_outliving_max_attempts_is_fatal() -> None:
    call = _Failing(*[RetryableError("down")] * 10)
    with pytest.raises(FatalError) as info:
        run_with_retries(call, retry=_RETRY, wait=_Waits())
    assert info.value.code == "retries_exhausted"
    assert isinstance(info.value.__cause__, RetryableError)
    assert call.calls == _RETRY.max_attempts


def test_other_errors_are_tried_handler_attempts_times_then_dead_lettered() -> None:
    call = _Failing(*[KeyError("bug")] * 10)
    outcome = run_with_retries(call, retry=_RETRY, wait=_Waits())
    assert isinstance(outcome.error, KeyError)
    assert outcome.attempts == call.calls == _RETRY.handler_attempts


def test_fatal_errors_are_raised_at_once() -> None:
    call = _Failing(FatalError("config"))
    with pytest.raises(FatalError):
        run_with_retries(call, retry=_RETRY, wait=_Waits())
    assert call.calls == 1


def test_a_stop_during_backoff_interrupts_without_an_outcome() -> None:
    call = _Failing(*[RetryableError("down")] * 10)
    outcome = run_with_retries(call, retry=_RETRY, wait=_Waits(stop_after=2))
    assert outcome.interrupted and not outcome.ok and outcome.error is None
    assert call.calls == 2
