"""The webhook's address check at call time (issue 43, point 4), against real listeners on 127.0.0.1.

Every name here resolves through an injected resolver to loopback addresses, so no test looks a name up in DNS
and no packet leaves the machine. Off, the setting refuses before any connection: the listener counts none.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest

from docstream.errors import InputError
from docstream.records import JobStatus
from docstream.settings import ReducerSettings, RetrySettings
from docstream_reducer.webhook import WebhookNotifier
from tests.fixtures.webhooks import WebhookReceiver

pytestmark = pytest.mark.integration

STATUS = JobStatus(job_id="job-1", state="completed", document_count=1, updated_at=datetime(2024, 1, 2, tzinfo=UTC),
                   tenant="acme", completed=1, partial=0, failed=0, final=True)


class _Resolver:
    """Answers every name with ``addresses`` and keeps what it was asked."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = list(addresses)
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.addresses


def _notify(url: str, *, allow_private: bool, resolver: _Resolver | None = None,
            attempts: int = 3) -> tuple[bool, list[float]]:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    async def run() -> bool:
        extra = {} if resolver is None else {"resolve": resolver}
        notifier = WebhookNotifier(
            ReducerSettings(webhook_max_attempts=attempts, webhook_timeout_s=5, webhook_allow_private=allow_private),
            RetrySettings(base_delay_ms=10, max_delay_ms=20), sleep=sleep, rng=random.Random(1), **extra)
        try:
            return await notifier.notify(url, STATUS)
        finally:
            await notifier.aclose()

    return asyncio.run(run()), delays


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver([200])
    yield server
    server.close()


def test_a_loopback_webhook_is_refused_before_any_connection(receiver: WebhookReceiver) -> None:
    with pytest.raises(InputError) as caught:
        _notify(receiver.url, allow_private=False)
    assert caught.value.code == "webhook_address_refused"
    assert "token" not in caught.value.message  # the URL's query may be a secret
    assert receiver.connections == 0 and receiver.calls == []


@pytest.mark.parametrize("answer", [["127.0.0.1"], ["::ffff:127.0.0.1"], ["93.184.216.34", "127.0.0.1"]],
                         ids=["loopback", "mapped", "one-of-two"])
def test_a_name_that_resolves_to_loopback_is_refused_before_any_connection(
    receiver: WebhookReceiver, answer: list[str],
) -> None:
    """A name is refused when any of its addresses is: the refusal comes before a connection to any of them."""
    resolver = _Resolver(answer)
    with pytest.raises(InputError) as caught:
        _notify(f"http://hooks.example.test:{receiver.port}/hook", allow_private=False, resolver=resolver)
    assert caught.value.code == "webhook_address_refused"
    assert resolver.asked == [("hooks.example.test", receiver.port)]
    assert receiver.connections == 0


def test_with_the_setting_on_the_webhook_reaches_the_checked_address_with_its_own_host_header(
    receiver: WebhookReceiver,
) -> None:
    """The request goes to the address the resolver gave, never to the name looked up again (rebinding); the
    receiver still sees the URL's host."""
    resolver = _Resolver(["127.0.0.1"])
    delivered, delays = _notify(f"http://hooks.example.test:{receiver.port}/hook?token=abc", allow_private=True,
                                resolver=resolver)
    assert delivered and delays == []
    assert len(resolver.asked) == 1 and len(receiver.calls) == 1
    assert receiver.calls[0][1]["Host"] == f"hooks.example.test:{receiver.port}"


def test_with_the_setting_on_a_literal_loopback_url_is_delivered(receiver: WebhookReceiver) -> None:
    delivered, _ = _notify(receiver.url, allow_private=True)
    assert delivered and len(receiver.calls) == 1


def test_the_checked_addresses_are_tried_in_turn(receiver: WebhookReceiver) -> None:
    """The receiver listens on 127.0.0.1 only: ::1 refuses the connection and the next address is tried."""
    resolver = _Resolver(["::1", "127.0.0.1"])
    delivered, delays = _notify(f"http://hooks.example.test:{receiver.port}/hook", allow_private=True,
                                resolver=resolver)
    assert delivered and delays == [] and len(receiver.calls) == 1


def test_a_redirect_is_a_final_answer_and_not_followed() -> None:
    target = WebhookReceiver([200])
    redirecting = WebhookReceiver([302], location=target.url)
    try:
        delivered, delays = _notify(redirecting.url, allow_private=True)
    finally:
        redirecting.close()
        target.close()
    assert not delivered and delays == []  # not retried either
    assert len(redirecting.calls) == 1
    assert target.connections == 0
