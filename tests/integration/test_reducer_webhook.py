"""The job webhook against a local http.server on 127.0.0.1: retries, backoff, final answers."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from docstream.errors import InputError
from docstream.records import JobStatus
from docstream.settings import ReducerSettings, RetrySettings
from docstream_reducer.webhook import WebhookNotifier, job_status_payload, validate_webhook_url
from tests.fixtures.webhooks import WebhookReceiver

pytestmark = pytest.mark.integration

STATUS = JobStatus(job_id="job-1", state="completed", document_count=3, updated_at=datetime(2024, 1, 2, tzinfo=UTC),
                   tenant="acme", completed=2, partial=0, failed=1, final=True)


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[WebhookReceiver]:
    server = WebhookReceiver(list(request.param))
    yield server
    server.close()


def _notify(url: str, attempts: int = 4) -> tuple[bool, list[float]]:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    async def run() -> bool:
        # the receiver is on 127.0.0.1: let the webhook reach it (test_webhook_addresses.py: refused without)
        notifier = WebhookNotifier(ReducerSettings(webhook_max_attempts=attempts, webhook_timeout_s=5,
                                                   webhook_allow_private=True),
                                   RetrySettings(base_delay_ms=100, max_delay_ms=250), sleep=sleep,
                                   rng=random.Random(1))
        try:
            return await notifier.notify(url, STATUS)
        finally:
            await notifier.aclose()

    return asyncio.run(run()), delays


@pytest.mark.parametrize("receiver", [[500, 503, 200]], indirect=True)
def test_failed_calls_are_retried_with_backoff_until_delivered(receiver: WebhookReceiver) -> None:
    delivered, delays = _notify(receiver.url)
    assert delivered
    assert len(receiver.calls) == 3
    assert len(delays) == 2 and all(0 <= d <= 0.25 for d in delays)
    body, headers = receiver.calls[-1]
    assert body == job_status_payload(STATUS)
    assert body["final"] is True and body["updated_at"] == "2024-01-02T00:00:00+00:00"
    assert headers["Idempotency-Key"] == "job-1:final"
    assert headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("receiver", [[404]], indirect=True)
def test_a_refusing_receiver_is_not_retried(receiver: WebhookReceiver) -> None:
    delivered, delays = _notify(receiver.url)
    assert not delivered
    assert len(receiver.calls) == 1 and delays == []


@pytest.mark.parametrize("receiver", [[429, 429, 429]], indirect=True)
def test_attempts_are_bounded(receiver: WebhookReceiver) -> None:
    delivered, delays = _notify(receiver.url, attempts=3)
    assert not delivered
    assert len(receiver.calls) == 3 and len(delays) == 2


def test_an_unreachable_receiver_is_retried_then_given_up() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    delivered, delays = _notify(f"http://127.0.0.1:{port}/hook", attempts=2)
    assert not delivered and len(delays) == 1


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http://", "javascript:alert(1)", ""])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(InputError) as info:
        validate_webhook_url(url)
    assert info.value.code == "invalid_webhook_url"
    assert validate_webhook_url(" https://hooks.example.com/a?b=c ") == "https://hooks.example.com/a?b=c"
