"""Retry decisions: pure functions, no sleeping here."""

from __future__ import annotations

import random

from docstream.errors import FatalError, PoisonRecord, RetryableError

__all__ = ["backoff_ceiling", "backoff_delay", "is_retryable"]


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a transient fault worth retrying.

    Docstream's own types decide first; otherwise well-known transient types of the
    standard library (timeouts, connection errors) count as retryable.
    """
    if isinstance(exc, RetryableError):
        return True
    if isinstance(exc, (PoisonRecord, FatalError)):
        return False
    return isinstance(exc, (TimeoutError, ConnectionError))


def backoff_delay(
    attempt: int,
    *,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): exponential, full jitter.

    The ceiling doubles per attempt from ``base_s`` up to ``max_s``; the delay is uniform
    in [0, ceiling] ("full jitter"), which spreads retries of many clients apart.

    Raises:
        ValueError: attempt < 1 or a negative bound.
    """
    return (rng or random).uniform(0.0, backoff_ceiling(attempt, base_s=base_s, max_s=max_s))


def backoff_ceiling(attempt: int, *, base_s: float, max_s: float) -> float:
    """The largest wait before retry number ``attempt`` (1-based): ``base_s`` doubled per attempt, at most ``max_s``.

    Raises:
        ValueError: attempt < 1 or a negative bound.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    if base_s < 0 or max_s < 0:
        raise ValueError("delays must be non-negative")
    return float(min(max_s, base_s * (2 ** min(attempt - 1, 62))))
