"""Taking a lease row of the store (an admission's, docs/operations.md "Quotas and admission"): the waiting both
backends share; each backend writes its own take (a lightweight transaction, a conditional upsert)."""

from __future__ import annotations

import time
from collections.abc import Callable

from docstream.errors import StoreError
from docstream.retry import backoff_delay

__all__ = ["acquire_lease"]


def acquire_lease(take: Callable[[], bool], *, wait_s: float, busy: str, base_s: float,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Call ``take`` until it takes a lease (True), with backoff and jitter between tries.

    Raises:
        StoreError: ``admission_busy`` with ``busy`` as its message, once ``wait_s`` passed.
    """
    deadline = clock() + wait_s
    attempt = 0
    while not take():
        if clock() >= deadline:
            raise StoreError(busy, code="admission_busy")
        attempt += 1
        sleep(backoff_delay(attempt, base_s=base_s, max_s=base_s * 25))
