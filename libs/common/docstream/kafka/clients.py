"""librdkafka clients from KafkaSettings, the reliable producer, and Kafka errors as docstream errors.

Every client gets the settings' security options and then ``client_options`` verbatim (they
win). librdkafka's own log lines go through the stdlib logger ``docstream.librdkafka`` (and so
through structlog); configs are only ever logged through ``redact_config``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from docstream.errors import DocstreamError, FatalError, PoisonRecord, RetryableError
from docstream.logging import get_logger
from docstream.retry import backoff_delay
from docstream.settings import KafkaSettings

__all__ = [
    "DeliveryCallback",
    "ReliableProducer",
    "admin_config",
    "ask_committed",
    "common_config",
    "consumer_config",
    "consumer_error",
    "create_consumer",
    "fetch_committed_offsets",
    "kafka_error",
    "producer_config",
    "raise_for_message",
    "redact_config",
    "topic_partitions",
]

DeliveryCallback = Callable[[KafkaError | None, Message], None]

_log = get_logger(__name__)
_LIBRDKAFKA_LOGGER = logging.getLogger("docstream.librdkafka")
_MIN_ASK_S = 1.0
"""The shortest wait given to one ask: a last one close to the deadline still gets an answer."""
_SECRET_WORDS = ("password", "secret", "token", "user.info", "key.pem", "private")
_TRANSIENT = frozenset({
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._QUEUE_FULL,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError._RESOLVE,
    KafkaError._MAX_POLL_EXCEEDED,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
})
# consumer errors that no waiting fixes: wrong credentials, ACLs or group settings
_FATAL_CONSUMER = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._SSL,
    KafkaError.INVALID_SESSION_TIMEOUT,
    KafkaError.INCONSISTENT_GROUP_PROTOCOL,
})
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


def _on_client_error(err: KafkaError) -> None:
    _log.warning("kafka_client_error", error_code=err.name(), error=err.str(), fatal=err.fatal())


def common_config(kafka: KafkaSettings, *, client_id: str | None = None) -> dict[str, Any]:
    """Options every client shares: bootstrap, security, logging, then ``client_options``."""
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "security.protocol": kafka.security_protocol,
        "logger": _LIBRDKAFKA_LOGGER,
        "error_cb": _on_client_error,
    }
    if client_id:
        conf["client.id"] = client_id
    if kafka.sasl_mechanism:
        conf["sasl.mechanism"] = kafka.sasl_mechanism
    if kafka.sasl_username:
        conf["sasl.username"] = kafka.sasl_username
    if kafka.sasl_password is not None:
        conf["sasl.password"] = kafka.sasl_password.get_secret_value()
    if kafka.ssl_ca_location:
        conf["ssl.ca.location"] = kafka.ssl_ca_location
    conf.update(kafka.client_options)
    return conf


def producer_config(
    kafka: KafkaSettings, *, client_id: str | None = None, transactional_id: str | None = None
) -> dict[str, Any]:
    """Producer options: idempotent, acks=all, short linger, lz4; ``client_options`` win."""
    conf = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.max.bytes": kafka.max_message_bytes,
    }
    if transactional_id:
        conf["transactional.id"] = transactional_id
    return {**conf, **common_config(kafka, client_id=client_id)}


def consumer_config(kafka: KafkaSettings, *, group_id: str, client_id: str | None = None) -> dict[str, Any]:
    """Consumer options: manual commits and offset store, earliest reset, our group timings.

    ``session.timeout.ms``/``heartbeat.interval.ms`` come from the settings (6000/1000 by
    default, where librdkafka's session is 45 s): a member that dies without leaving its group
    loses its partitions within seconds (docs/messaging.md). Assignment is cooperative-sticky.
    """
    conf = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": kafka.session_timeout_ms,
        "heartbeat.interval.ms": kafka.heartbeat_interval_ms,
        "max.poll.interval.ms": kafka.max_poll_interval_ms,
        "fetch.wait.max.ms": kafka.fetch_wait_max_ms,
        "partition.assignment.strategy": "cooperative-sticky",
        "isolation.level": "read_committed",
    }
    return {**conf, **common_config(kafka, client_id=client_id)}


def admin_config(kafka: KafkaSettings, *, client_id: str | None = None) -> dict[str, Any]:
    """AdminClient options."""
    return common_config(kafka, client_id=client_id)


def redact_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy fit for logs: secret values masked, callables and loggers named only."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        if any(word in key.lower() for word in _SECRET_WORDS):
            out[key] = "***"
        elif callable(value) or isinstance(value, logging.Logger):
            out[key] = f"<{type(value).__name__}>"
        else:
            out[key] = value
    return out


def kafka_error(err: KafkaError, context: str = "kafka") -> DocstreamError:
    """A librdkafka error as a docstream error: FatalError, RetryableError or, for oversized records, PoisonRecord."""
    code = "kafka_" + err.name().strip("_").lower()
    message = f"{context}: {err.str()}"
    if err.fatal():
        return FatalError(message, code=code)
    if err.code() in _TOO_LARGE:
        return PoisonRecord(message, code=code)
    if err.retriable() or err.code() in _TRANSIENT:
        return RetryableError(message, code=code)
    return FatalError(message, code=code)


def consumer_error(err: KafkaError, context: str = "consume") -> DocstreamError:
    """A consumer-side error: FatalError when it is fatal or no waiting fixes it (credentials,
    ACLs, group settings), else RetryableError (librdkafka recovers on its own)."""
    code = "kafka_" + err.name().strip("_").lower()
    message = f"{context}: {err.str()}"
    if err.fatal() or err.code() in _FATAL_CONSUMER:
        return FatalError(message, code=code)
    return RetryableError(message, code=code)


def raise_for_message(msg: Message) -> None:
    """Raise the error a consumed message carries, if any (end-of-partition events are not errors).

    Raises:
        FatalError: a fatal consumer error, or one no waiting fixes (see ``consumer_error``).
        RetryableError: a transient one (librdkafka keeps retrying on its own).
    """
    err = msg.error()
    if err is None or err.code() == KafkaError._PARTITION_EOF:
        return
    raise consumer_error(err, f"consume {msg.topic()}")


def create_consumer(
    kafka: KafkaSettings,
    *,
    group_id: str,
    client_id: str | None = None,
    on_commit: Callable[[KafkaError | None, list[Any]], None] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Consumer:
    """A Consumer with ``consumer_config`` and ``options`` over it; ``on_commit`` is served by ``poll``."""
    conf = {**consumer_config(kafka, group_id=group_id, client_id=client_id), **(options or {})}
    if on_commit is not None:
        conf["on_commit"] = on_commit
    _log.debug("kafka_consumer_created", config=redact_config(conf))
    return Consumer(conf)


def fetch_committed_offsets(
    kafka: KafkaSettings, group_id: str, topic: str, partitions: Sequence[int], *, timeout_s: float,
) -> dict[int, int]:
    """``group_id``'s committed offset of each of ``topic``'s ``partitions`` (negative where it has none).

    Asked through a consumer of the group that never joins it (no subscribe, no assign, no commit),
    not through ``AdminClient.list_consumer_group_offsets``: librdkafka 2.16 crashes the whole
    process (SIGSEGV in ``rd_kafka_cgrp_op``, librdkafka issue #5040) when the admin request's
    OffsetFetch is answered NOT_COORDINATOR, as it is right after the group's coordinator moved to
    another broker (a broker killed or restarted on a cluster). The consumer's answer of that kind is
    asked again within ``timeout_s`` (``ask_committed``).

    Raises:
        RetryableError | FatalError: the broker did not answer in time, or refused.
    """
    if not partitions:
        return {}
    consumer = Consumer(consumer_config(kafka, group_id=group_id, client_id="docstream-offsets"))
    asked = [TopicPartition(topic, p) for p in partitions]
    try:
        found = ask_committed(lambda timeout: consumer.committed(asked, timeout=timeout), timeout_s=timeout_s,
                              context=f"offsets of group {group_id}")
    finally:
        consumer.close()
    return {int(tp.partition): int(tp.offset) for tp in found}


def ask_committed(
    ask: Callable[[float], list[TopicPartition]], *, timeout_s: float, context: str,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> list[TopicPartition]:
    """``ask(timeout)`` (a consumer's ``committed``), asked again with backoff and jitter while it fails with a
    transient error, until ``timeout_s`` passed. librdkafka answers an OffsetFetch that the group's coordinator
    refused (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS: a coordinator that moved, or a broker still loading
    its offsets topic) with that error once, and does not ask again on its own.

    Raises:
        RetryableError: still refused, or unanswered, once ``timeout_s`` passed.
        FatalError: the broker refused for good (authorization, an unknown group protocol).
    """
    deadline = clock() + timeout_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return ask(max(deadline - clock(), _MIN_ASK_S))
        except KafkaException as exc:
            error = kafka_error(exc.args[0], context)
            left = deadline - clock()
            if not isinstance(error, RetryableError) or left <= 0:
                raise error from exc
            _log.warning("committed_offsets_retry", attempt=attempt, error_code=error.code)
        sleep(min(backoff_delay(attempt, base_s=0.1, max_s=2.0), left))


def topic_partitions(consumer: Consumer, topic: str) -> list[int]:
    """The partition ids of ``topic``, sorted, for a consumer that assigns them itself (static assignment).

    Raises:
        FatalError: the topic does not exist (or has no partitions).
        DocstreamError: the metadata request failed (``kafka_error``'s families).
    """
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException as exc:
        raise kafka_error(exc.args[0], f"metadata of {topic}") from exc
    if info is None or info.error is not None or not info.partitions:
        raise FatalError(f"topic {topic} not found for static assignment", code="kafka_unknown_topic")
    return sorted(info.partitions)


class ReliableProducer:
    """A Producer that never loses a delivery failure.

    The first failed delivery (or fatal client error) is kept and raised, as a docstream
    error, by every later ``produce``/``flush``/``raise_if_failed`` until ``clear_error``: a
    caller can therefore never move on (and commit) past an output that was not delivered.

    Args:
        kafka: Kafka settings.
        client_id: client.id of the producer.
        overrides: librdkafka options applied last (tests, transactions).
        queue_full_timeout_s: how long ``produce`` waits for room in a full local queue.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        client_id: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        queue_full_timeout_s: float = 30.0,
    ) -> None:
        conf = {**producer_config(kafka, client_id=client_id), **(overrides or {})}
        conf["error_cb"] = self._on_error
        self._queue_full_timeout_s = queue_full_timeout_s
        self._error: DocstreamError | None = None
        self._producer = Producer(conf)
        _log.debug("kafka_producer_created", config=redact_config(conf))

    @property
    def producer(self) -> Producer:
        """The underlying confluent_kafka Producer (transactions, metadata)."""
        return self._producer

    @property
    def error(self) -> DocstreamError | None:
        """The kept delivery error, if any."""
        return self._error

    def __len__(self) -> int:
        """Messages produced and not yet acknowledged (or failed)."""
        return len(self._producer)

    def produce(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | dict[str, bytes] | None = None,
        on_delivery: DeliveryCallback | None = None,
        *,
        partition: int | None = None,
    ) -> None:
        """Queue one message; ``on_delivery(err, msg)`` runs from a later ``poll``/``flush``.

        Raises:
            RetryableError | FatalError: a kept delivery error, or the local queue stayed full.
            PoisonRecord: the message is larger than the producer accepts.
        """
        self.raise_if_failed()
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._callback(on_delivery)}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        deadline = time.monotonic() + self._queue_full_timeout_s
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    raise RetryableError("producer queue stayed full", code="kafka_queue_full") from None
                self._producer.poll(0.1)
                self.raise_if_failed()
            except KafkaException as exc:
                raise kafka_error(exc.args[0], f"produce to {topic}") from exc

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks; returns how many ran."""
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued message is acknowledged.

        Raises:
            RetryableError | FatalError: a kept delivery error, or messages still in flight after ``timeout``.
        """
        remaining = self._producer.flush(timeout)
        self.raise_if_failed()
        if remaining:
            raise RetryableError(f"{remaining} messages not delivered within {timeout} s", code="kafka_flush_timeout")

    def close(self, timeout: float = 30.0) -> None:
        """Flush what can be delivered in ``timeout`` and release the client; never raises."""
        remaining = self._producer.flush(timeout)
        if remaining:
            _log.error("producer_closed_with_undelivered", messages=remaining)
        self._producer.close()

    def raise_if_failed(self) -> None:
        """Raise the kept delivery error, if any.

        Raises:
            RetryableError | FatalError | PoisonRecord: the first delivery failure.
        """
        if self._error is not None:
            raise self._error

    def clear_error(self) -> None:
        """Forget the kept error (the caller has dealt with every affected record)."""
        self._error = None

    def _keep(self, error: DocstreamError) -> None:
        if self._error is None:
            self._error = error

    def _on_error(self, err: KafkaError) -> None:
        _on_client_error(err)
        if err.fatal():
            self._keep(kafka_error(err, "producer"))

    def _callback(self, user: DeliveryCallback | None) -> DeliveryCallback:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                _log.error("kafka_delivery_failed", topic=msg.topic(), error_code=err.name(), error=err.str())
                error = kafka_error(err, f"deliver to {msg.topic()}")
                self._keep(error if not isinstance(error, PoisonRecord) else FatalError(error.message, code=error.code))
            if user is not None:
                user(err, msg)

        return on_delivery


def close_abandoned_consumer(consumer: Consumer, timeout_s: float = 10.0) -> bool:
    """Close a consumer given up on (it never rejoined its group) on a side thread, waiting at most
    ``timeout_s``: a stuck one may never finish closing. True when it closed in time."""

    def close() -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            _log.warning("stuck_consumer_close_failed", error=str(exc))

    closer = threading.Thread(target=close, name="stuck-consumer-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        _log.warning("stuck_consumer_close_pending")
        return False
    return True
