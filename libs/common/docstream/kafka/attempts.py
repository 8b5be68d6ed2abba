"""Running a record's handler under docstream's retry policy. Pure: waiting is injected.

| the call raises | what happens |
|---|---|
| PoisonRecord | no retry: the outcome carries the error (the caller dead-letters it) |
| RetryableError (``is_retryable``) | backoff with full jitter, up to ``retry.max_attempts``; then FatalError |
| any other exception | retried up to ``retry.handler_attempts`` in all; then the outcome carries it |
| FatalError | raised at once |
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from docstream.errors import FatalError, PoisonRecord
from docstream.retry import backoff_delay, is_retryable

if TYPE_CHECKING:
    from docstream.settings import RetrySettings

__all__ = ["Outcome", "run_with_retries"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Outcome(Generic[_T]):
    """What came of running a call under the retry policy.

    Attributes:
        value: the call's result when it succeeded.
        error: set when the record must go to the DLQ.
        attempts: how many times the call ran.
        interrupted: True when ``wait`` reported a stop during a backoff (nothing is done).
    """

    value: _T | None
    error: BaseException | None
    attempts: int
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """The call succeeded."""
        return self.error is None and not self.interrupted


def run_with_retries(
    call: Callable[[], _T],
    *,
    retry: RetrySettings,
    wait: Callable[[float], bool],
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    rng: random.Random | None = None,
) -> Outcome[_T]:
    """Run ``call`` until it succeeds, is poison, or runs out of attempts.

    Args:
        call: the work for one record.
        retry: attempt limits and backoff bounds.
        wait: sleeps the given seconds; returns True when the caller is stopping.
        on_retry: told (attempt, error, delay) before each backoff.
        rng: random source of the jitter.

    Raises:
        FatalError: the call raised FatalError, or a transient fault outlived ``retry.max_attempts``.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return Outcome(call(), None, attempt)
        except FatalError:
            raise
        except PoisonRecord as exc:
            return Outcome(None, exc, attempt)
        except Exception as exc:  # the loop's retry policy: the one place that sorts every handler failure
            limit = retry.max_attempts if is_retryable(exc) else retry.handler_attempts
            if attempt >= limit:
                if is_retryable(exc):
                    raise FatalError(
                        f"transient fault persisted over {attempt} attempts: {exc}", code="retries_exhausted"
                    ) from exc
                return Outcome(None, exc, attempt)
            delay = backoff_delay(
                attempt, base_s=retry.base_delay_ms / 1000, max_s=retry.max_delay_ms / 1000, rng=rng
            )
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            if wait(delay):
                return Outcome(None, None, attempt, interrupted=True)
