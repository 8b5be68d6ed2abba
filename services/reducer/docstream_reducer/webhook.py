"""The job webhook: POST the final JobStatus to the job's URL, retried with backoff and jitter."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from docstream.errors import InputError
from docstream.logging import get_logger
from docstream.records import JobStatus
from docstream.retry import backoff_delay
from docstream.settings import ReducerSettings, RetrySettings

__all__ = ["WebhookNotifier", "job_status_payload", "validate_webhook_url"]

_log = get_logger(__name__)
_RETRY_STATUS = frozenset({408, 425, 429})


def validate_webhook_url(url: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host.

    Raises:
        InputError: any other scheme, or no host (code ``invalid_webhook_url``).
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"webhook URL must be http(s)://host/...: got scheme {parts.scheme!r}",
                         code="invalid_webhook_url")
    return url.strip()


def job_status_payload(status: JobStatus) -> dict[str, Any]:
    """The JSON body of a webhook call: the JobStatus fields, times in ISO-8601 UTC."""
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in status.to_record().items()}


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}"  # no path/query: they may hold secrets


class WebhookNotifier:
    """Calls job webhooks; one instance per process (it holds an HTTP connection pool).

    Args:
        reducer: timeout and attempts of a call.
        retry: backoff bounds.
        sleep: awaited between attempts (injected in tests).
        rng: jitter source (injected in tests).
    """

    def __init__(
        self,
        reducer: ReducerSettings,
        retry: RetrySettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._attempts = reducer.webhook_max_attempts
        self._base_s = retry.base_delay_ms / 1000
        self._max_s = retry.max_delay_ms / 1000
        self._sleep = sleep
        self._rng = rng
        self._client = httpx.AsyncClient(timeout=reducer.webhook_timeout_s, follow_redirects=False)

    async def notify(self, url: str, status: JobStatus) -> bool:
        """POST ``status`` to ``url`` until a 2xx answer or the attempts run out.

        Connection errors, timeouts, 408/425/429 and 5xx are retried; other answers are final.

        Returns:
            True when the receiver answered 2xx; False when it refused or never answered.

        Raises:
            InputError: ``url`` is not an http(s) URL.
        """
        target = validate_webhook_url(url)
        body = job_status_payload(status)
        headers = {"Idempotency-Key": f"{status.job_id}:final", "User-Agent": "docstream-reducer"}
        for attempt in range(1, self._attempts + 1):
            retry, outcome = await self._post(target, body, headers)
            if outcome == "ok":
                _log.info("webhook_delivered", job_id=status.job_id, attempts=attempt, target=_where(target))
                return True
            _log.warning("webhook_attempt_failed", job_id=status.job_id, attempt=attempt, outcome=outcome,
                         target=_where(target))
            if not retry:
                break
            if attempt < self._attempts:
                await self._sleep(backoff_delay(attempt, base_s=self._base_s, max_s=self._max_s, rng=self._rng))
        _log.error("webhook_given_up", job_id=status.job_id, attempts=self._attempts, target=_where(target))
        return False

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bool, str]:
        try:
            response = await self._client.post(url, json=body, headers=headers)
        except httpx.TimeoutException:
            return True, "timeout"
        except httpx.TransportError as exc:
            return True, type(exc).__name__
        if 200 <= response.status_code < 300:
            return False, "ok"
        code = response.status_code
        return code in _RETRY_STATUS or code >= 500, f"http_{code}"

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
