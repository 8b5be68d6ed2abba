"""Topic creation: the topics of docstream.topics.Topics (and their DLQs), idempotent, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from docstream.errors import RetryableError
from docstream.kafka.clients import admin_config, kafka_error
from docstream.logging import get_logger
from docstream.settings import KafkaSettings
from docstream.topics import Topics, dlq_topic

__all__ = ["TopicSpec", "create_topics", "ensure_topics", "topic_specs", "wait_until_answered"]

_log = get_logger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create.

    Attributes:
        name: topic name.
        partitions: partition count.
        replication_factor: replicas per partition.
        config: topic configs (retention.ms, max.message.bytes, ...).
    """

    name: str
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


def topic_specs(kafka: KafkaSettings, topics: Topics, *, include_dlq: bool = True) -> list[TopicSpec]:
    """The specs of docstream's topics: intake and chunks keep ``intake_retention_ms``, results
    ``results_retention_ms``, DLQs ``dlq_retention_ms``; all get ``max.message.bytes``, and
    ``min.insync.replicas`` when ``kafka.min_insync_replicas`` is set."""
    intake = {*topics.intakes(), *topics.lanes()}
    specs: list[TopicSpec] = []
    for name in topics.all():
        retention = kafka.intake_retention_ms if name in intake else kafka.results_retention_ms
        specs.append(_spec(kafka, name, retention))
    if include_dlq:
        specs.extend(_spec(kafka, dlq_topic(name), kafka.dlq_retention_ms) for name in topics.all())
    return specs


def _spec(kafka: KafkaSettings, name: str, retention_ms: int) -> TopicSpec:
    config = {"retention.ms": str(retention_ms), "max.message.bytes": str(kafka.max_message_bytes)}
    if kafka.min_insync_replicas is not None:
        config["min.insync.replicas"] = str(kafka.min_insync_replicas)
    return TopicSpec(name=name, partitions=kafka.partitions, replication_factor=kafka.replication_factor,
                     config=config)


def create_topics(kafka: KafkaSettings, specs: Iterable[TopicSpec], *, timeout_s: float = 30.0) -> list[str]:
    """Create ``specs`` that do not exist yet and wait until every one is in the metadata and every partition of
    them answers on its leader.

    Existing topics are left as they are (TOPIC_ALREADY_EXISTS is success).

    A broker puts a new topic in its metadata before its replica manager hosts the partitions. An idempotent
    producer's first request to a partition can then fail (NOT_LEADER_OR_FOLLOWER, retried) while its second,
    sent behind it, lands once the partition is there; a broker before Kafka 4.5 accepts any first sequence from
    a producer it has no state for, so it appends the second and refuses every retry of the first as out of
    order, and the first request's records are lost with no error (KAFKA-15591). A `docstream run` on a loaded
    machine lost three of eight documents that way. A ListOffsets request goes through the same replica
    manager: once every new partition answers one, no produce to it meets that window.

    Returns:
        The names created by this call.

    Raises:
        RetryableError: the broker did not answer, or the topics did not appear, in ``timeout_s``.
        FatalError: the broker refused a topic (bad config, authorization).
    """
    specs = list(specs)
    if not specs:
        return []
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(admin_config(kafka))
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=dict(s.config))
        for s in specs
    ]
    created: list[str] = []
    futures = admin.create_topics(new, request_timeout=max(1.0, timeout_s))
    for name, future in futures.items():
        try:
            future.result(timeout=max(0.1, deadline - time.monotonic()))
            created.append(name)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise kafka_error(err, f"create topic {name}") from exc
        except TimeoutError as exc:
            raise RetryableError(f"create topic {name}: no answer in {timeout_s} s", code="kafka_timeout") from exc
    counts = _wait_for_metadata(admin, [s.name for s in specs], deadline)
    # every partition, also of a topic another process created a moment ago (TOPIC_ALREADY_EXISTS here): an old
    # partition answers at once, in the same request
    partitions = {(name, p) for name, count in counts.items() for p in range(count)}
    wait_until_answered(partitions, lambda pending: _answering(admin, pending, deadline), deadline=deadline)
    if created:
        _log.info("topics_created", topics=created)
    return created


def wait_until_answered(
    partitions: Iterable[tuple[str, int]], answering: Callable[[set[tuple[str, int]]], set[tuple[str, int]]], *,
    deadline: float, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    pause_s: float = 0.05,
) -> None:
    """Ask ``answering`` which of the partitions not yet answered answer now, until all have (no I/O of its own).

    Raises:
        RetryableError: ``kafka_timeout``, some partition had not answered at ``deadline``.
    """
    pending = set(partitions)
    while pending:
        pending -= answering(pending)
        if not pending:
            return
        if clock() >= deadline:
            raise RetryableError(f"partitions not served by their leaders in time: {sorted(pending)[:10]}",
                                 code="kafka_timeout")
        sleep(pause_s)


def _answering(admin: AdminClient, pending: set[tuple[str, int]], deadline: float) -> set[tuple[str, int]]:
    """The partitions of ``pending`` whose leader answered a ListOffsets request (a refusal is asked again)."""
    timeout = max(0.5, min(5.0, deadline - time.monotonic()))
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(t, p): latest for t, p in pending},
                                 request_timeout=timeout)
    answered: set[tuple[str, int]] = set()
    refusal = ""
    for tp, future in futures.items():
        try:
            future.result(timeout=timeout + 1.0)
            answered.add((tp.topic, tp.partition))
        except KafkaException as exc:
            refusal = str(exc)
        except TimeoutError:
            refusal = "no answer"
    if refusal:
        _log.debug("partitions_not_served_yet", partitions=len(pending) - len(answered), error=refusal)
    return answered


def _wait_for_metadata(admin: AdminClient, names: list[str], deadline: float) -> dict[str, int]:
    """The partition count of each of ``names`` once every one is in the metadata."""
    missing = set(names)
    counts: dict[str, int] = {}
    while True:
        try:
            metadata = admin.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
            for name in list(missing):
                topic = metadata.topics.get(name)
                if topic is not None and topic.error is None:
                    counts[name] = len(topic.partitions)
                    missing.discard(name)
        except KafkaException as exc:
            _log.warning("topic_metadata_unavailable", error=str(exc))
        if not missing:
            return counts
        if time.monotonic() >= deadline:
            raise RetryableError(f"topics not in metadata in time: {sorted(missing)}", code="kafka_timeout")
        time.sleep(0.1)


def ensure_topics(
    kafka: KafkaSettings, topics: Topics, *, include_dlq: bool = True, timeout_s: float = 30.0
) -> list[str]:
    """Create docstream's topics (and their ``.dlq``) where missing; idempotent.

    Returns:
        The names created by this call.

    Raises:
        RetryableError: the broker did not answer in ``timeout_s``.
        FatalError: the broker refused a topic.
    """
    return create_topics(kafka, topic_specs(kafka, topics, include_dlq=include_dlq), timeout_s=timeout_s)
