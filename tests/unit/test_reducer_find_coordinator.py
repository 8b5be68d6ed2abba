"""Patches of the exactly-once reducer: FindCoordinator retries, and the transaction timeout.

Without it, aiokafka 0.14.0 turns a KafkaConnectionError during FindCoordinator (the broker went away
mid-request) into a KafkaError that ends the sender routine, and the exactly-once reducer exits 1
on a broker restart. The patched method is called on a stand-in for the Sender's state (its client,
transaction manager and backoff), with no broker.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.client import CoordinationType
from aiokafka.producer.sender import Sender

from docstream_reducer.app import retry_find_coordinator


class _Client:
    """coordinator_lookup answers with the given errors first, then node 7; every node is ready."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.lookups = 0
        self.metadata_updates = 0

    async def coordinator_lookup(self, coordinator_type: Any, coordinator_key: str) -> int:
        self.lookups += 1
        if self.errors:
            raise self.errors.pop(0)
        return 7

    async def ready(self, node_id: int, group: Any = None) -> bool:
        return True

    async def force_metadata_update(self) -> bool:
        self.metadata_updates += 1
        return True


def _sender(client: _Client) -> Any:
    return SimpleNamespace(client=client, _txn_manager=SimpleNamespace(transactional_id="reducer-0"),
                           _coordinators={}, _retry_backoff=0.0)


def _find(sender: Any) -> int:
    return asyncio.run(Sender._find_coordinator(sender, CoordinationType.GROUP, "group"))


def test_a_connection_lost_during_find_coordinator_is_retried_until_the_broker_answers() -> None:
    retry_find_coordinator()
    client = _Client(kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"),
                     kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"))
    sender = _sender(client)
    assert _find(sender) == 7
    assert client.lookups == 3 and client.metadata_updates == 2
    assert sender._coordinators[CoordinationType.GROUP] == 7


def test_a_non_retriable_error_still_fails() -> None:
    retry_find_coordinator()
    client = _Client(kafka_errors.GroupAuthorizationFailedError())
    with pytest.raises(kafka_errors.GroupAuthorizationFailedError):
        _find(_sender(client))
    client = _Client(kafka_errors.UnsupportedVersionError())
    with pytest.raises(kafka_errors.KafkaError):
        _find(_sender(client))
    assert client.lookups == 1


def test_patching_twice_wraps_once() -> None:
    retry_find_coordinator()
    patched = Sender._find_coordinator
    retry_find_coordinator()
    assert Sender._find_coordinator is patched


def test_transactional_producers_get_the_configured_transaction_timeout() -> None:
    from faust.transport.drivers.aiokafka import Producer

    from docstream_reducer.app import use_transaction_timeout

    use_transaction_timeout(300)
    use_transaction_timeout(450)  # the last call wins; the method is wrapped once
    in_txn = SimpleNamespace(app=SimpleNamespace(in_transaction=True))
    plain = SimpleNamespace(app=SimpleNamespace(in_transaction=False))
    assert Producer._settings_extra(in_txn) == {"acks": "all", "enable_idempotence": True,
                                                "transaction_timeout_ms": 450_000}
    assert Producer._settings_extra(plain) == {}
