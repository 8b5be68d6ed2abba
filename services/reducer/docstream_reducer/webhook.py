"""The job webhook: POST the final JobStatus to the job's URL, retried with backoff and jitter.

Each attempt resolves the URL's host, refuses it when any of its addresses is not global
(``docstream.tenants.addresses``; ``reducer.webhook_allow_private`` lets local development through), and connects
to one of the addresses it checked, never to a name resolved again: the request goes to the IP address, with
the URL's ``Host`` header and, over https, the URL's host as TLS server name (SNI and certificate check), so a
DNS answer that changes between the check and the connection (rebinding) reaches nothing. Connections are not
kept alive: a pooled connection is keyed by the IP address and must not carry another host's request.
Redirects are not followed: a 3xx is a final answer (docs/security.md "Webhooks").
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from docstream.errors import InputError
from docstream.logging import get_logger
from docstream.records import JobStatus
from docstream.retry import backoff_delay
from docstream.settings import ReducerSettings, RetrySettings
from docstream.tenants.addresses import check_addresses

__all__ = ["Resolver", "WebhookNotifier", "job_status_payload", "resolve_host", "validate_webhook_url"]

_log = get_logger(__name__)
_RETRY_STATUS = frozenset({408, 425, 429})

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port)`` → the host's IP addresses, in the order to try them."""


async def resolve_host(host: str, port: int) -> list[str]:
    """The IP addresses of ``host`` for a TCP connection (the event loop's ``getaddrinfo``), each once.

    Raises:
        OSError: the name does not resolve (``socket.gaierror``).
    """
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def validate_webhook_url(url: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host.

    Raises:
        InputError: any other scheme, no host, or a URL that does not parse (a bad port, an unclosed ``[``)
            (code ``invalid_webhook_url``).
    """
    try:
        parts = urlsplit(url.strip())
        _ = parts.port, httpx.URL(url.strip())
    except (ValueError, httpx.InvalidURL) as exc:
        raise InputError("webhook URL does not parse", code="invalid_webhook_url") from exc
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
        resolve: the host's addresses (injected in tests: a name that resolves to an address of the test's
            choosing).
    """

    def __init__(
        self,
        reducer: ReducerSettings,
        retry: RetrySettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        resolve: Resolver = resolve_host,
    ) -> None:
        self._attempts = reducer.webhook_max_attempts
        self._allow_private = reducer.webhook_allow_private
        self._base_s = retry.base_delay_ms / 1000
        self._max_s = retry.max_delay_ms / 1000
        self._sleep = sleep
        self._rng = rng
        self._resolve = resolve
        # no proxies from the environment: the address checked must be the address connected to
        self._client = httpx.AsyncClient(timeout=reducer.webhook_timeout_s, follow_redirects=False, trust_env=False,
                                         limits=httpx.Limits(max_keepalive_connections=0))

    async def notify(self, url: str, status: JobStatus) -> bool:
        """POST ``status`` to ``url`` until a 2xx answer or the attempts run out.

        Names that do not resolve, connection errors, timeouts, 408/425/429 and 5xx are retried; other answers are
        final, a redirect (3xx) among them: it is not followed.

        Returns:
            True when the receiver answered 2xx; False when it refused or never answered.

        Raises:
            InputError: ``url`` is not an http(s) URL (``invalid_webhook_url``); its host is or resolves to an address
                that is not global, and ``reducer.webhook_allow_private`` is off (``webhook_address_refused``: no
                connection was made).
        """
        target = validate_webhook_url(url)
        body = job_status_payload(status)
        headers = {"Idempotency-Key": f"{status.job_id}:final", "User-Agent": "docstream-reducer"}
        for attempt in range(1, self._attempts + 1):
            retry, outcome = await self._attempt(httpx.URL(target), body, headers)
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

    async def _attempt(self, url: httpx.URL, body: dict[str, Any], headers: dict[str, str]) -> tuple[bool, str]:
        """One attempt: resolve, check, then try the checked addresses in turn until one connects."""
        host = url.raw_host.decode("ascii")
        try:
            addresses = await self._resolve(host, url.port or (443 if url.scheme == "https" else 80))
        except OSError:
            return True, "name_not_resolved"
        if not self._allow_private:
            check_addresses(host, addresses)
        pinned_headers = {**headers, "Host": url.netloc.decode("ascii")}
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        retry, outcome = True, "name_not_resolved"
        for address in addresses:
            retry, outcome = await self._post(url.copy_with(host=address), body, pinned_headers, extensions)
            if outcome != "ConnectError":
                break
        return retry, outcome

    async def _post(self, url: httpx.URL, body: dict[str, Any], headers: dict[str, str],
                    extensions: dict[str, Any]) -> tuple[bool, str]:
        try:
            response = await self._client.post(url, json=body, headers=headers, extensions=extensions)
        except httpx.TimeoutException:
            return True, "timeout"
        except httpx.TransportError as exc:
            return True, type(exc).__name__
        code = response.status_code
        if 200 <= code < 300:
            return False, "ok"
        if 300 <= code < 400:
            return False, f"redirect_not_followed_{code}"
        return code in _RETRY_STATUS or code >= 500, f"http_{code}"

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
