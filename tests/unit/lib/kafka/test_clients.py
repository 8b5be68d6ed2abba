"""librdkafka configs from settings, secret redaction, and error mapping."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from docstream.errors import FatalError, PoisonRecord, RetryableError
from docstream.kafka.admin import topic_specs
from docstream.kafka.clients import (
    admin_config,
    common_config,
    consumer_config,
    consumer_error,
    kafka_error,
    producer_config,
    redact_config,
)
from docstream.settings import KafkaSettings
from docstream.topics import Topics


def test_producer_is_idempotent_with_acks_all_short_linger_and_compression() -> None:
    conf = producer_config(KafkaSettings(bootstrap_servers="b:1"), client_id="chunker")
    assert conf["bootstrap.servers"] == "b:1" and conf["client.id"] == "chunker"
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert 0 < conf["linger.ms"] <= 20 and conf["compression.type"] in ("lz4", "zstd")
    assert conf["message.max.bytes"] == KafkaSettings().max_message_bytes
    assert "transactional.id" not in conf
    assert producer_config(KafkaSettings(), transactional_id="tx-1")["transactional.id"] == "tx-1"


def test_consumer_commits_manually_and_uses_our_group_timings() -> None:
    kafka = KafkaSettings(session_timeout_ms=6000, heartbeat_interval_ms=1000)
    conf = consumer_config(kafka, group_id="g")
    assert conf["group.id"] == "g"
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False
    assert conf["auto.offset.reset"] == "earliest"
    assert (conf["session.timeout.ms"], conf["heartbeat.interval.ms"]) == (6000, 1000)
    assert conf["max.poll.interval.ms"] == kafka.max_poll_interval_ms
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"


def test_security_options_and_pass_through_options_win() -> None:
    kafka = KafkaSettings(
        security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="s3cret",
        ssl_ca_location="/ca.pem", client_options={"linger.ms": "50", "socket.keepalive.enable": "true"},
    )
    conf = producer_config(kafka)
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "u" and conf["sasl.password"] == "s3cret"
    assert conf["ssl.ca.location"] == "/ca.pem"
    assert conf["linger.ms"] == "50" and conf["socket.keepalive.enable"] == "true"
    assert admin_config(kafka)["sasl.password"] == "s3cret"
    assert "sasl.password" not in common_config(KafkaSettings())


def test_redacted_config_hides_secrets_and_objects() -> None:
    conf = consumer_config(KafkaSettings(sasl_password="s3cret"), group_id="g")
    conf["ssl.key.password"] = "k"
    shown = redact_config(conf)
    assert shown["sasl.password"] == "***" and shown["ssl.key.password"] == "***"
    assert "s3cret" not in repr(shown)
    assert shown["logger"] == "<Logger>" and shown["group.id"] == "g"


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._MSG_TIMED_OUT, RetryableError),
        (KafkaError._TRANSPORT, RetryableError),
        (KafkaError.NOT_ENOUGH_REPLICAS, RetryableError),
        (KafkaError.MSG_SIZE_TOO_LARGE, PoisonRecord),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, FatalError),
        (KafkaError._INVALID_ARG, FatalError),
    ],
)
def test_kafka_errors_map_to_docstream_errors(code: int, kind: type) -> None:
    error = kafka_error(KafkaError(code), "produce")
    assert isinstance(error, kind)
    assert error.code.startswith("kafka_") and error.message.startswith("produce: ")


def test_fatal_flag_wins() -> None:
    assert isinstance(kafka_error(KafkaError(KafkaError._MSG_TIMED_OUT, fatal=True)), FatalError)


def test_topic_specs_cover_every_topic_and_dlq_with_their_retention() -> None:
    kafka = KafkaSettings(partitions=4, replication_factor=1, intake_retention_ms=1, results_retention_ms=2,
                          dlq_retention_ms=3, max_message_bytes=4096)
    topics = Topics("p")
    specs = {s.name: s for s in topic_specs(kafka, topics)}
    assert set(specs) == {*topics.all(), *(f"{t}.dlq" for t in topics.all())}
    retention = {name: spec.config["retention.ms"] for name, spec in specs.items()}
    assert retention[topics.submitted] == retention[topics.chunks] == "1"
    assert {retention[t] for t in (topics.results, topics.legacy_results, topics.completed, topics.jobs)} == {"2"}
    assert retention[f"{topics.legacy_results}.dlq"] == "3"
    assert retention[f"{topics.chunks}.dlq"] == "3"
    assert all(s.partitions == 4 and s.config["max.message.bytes"] == "4096" for s in specs.values())
    assert {s.name for s in topic_specs(kafka, topics, include_dlq=False)} == set(topics.all())
    assert all("min.insync.replicas" not in s.config for s in specs.values())  # unset: the broker's


def test_a_replicated_deployment_sets_min_insync_replicas_on_every_topic() -> None:
    kafka = KafkaSettings(replication_factor=3, min_insync_replicas=2)
    specs = topic_specs(kafka, Topics("p"))
    assert {(s.replication_factor, s.config["min.insync.replicas"]) for s in specs} == {(3, "2")}


def test_min_insync_replicas_above_the_replication_factor_is_refused() -> None:
    with pytest.raises(ValueError, match="no write could ever be acknowledged"):
        KafkaSettings(replication_factor=2, min_insync_replicas=3)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._TRANSPORT, RetryableError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, RetryableError),
        (KafkaError._MAX_POLL_EXCEEDED, RetryableError),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, FatalError),
        (KafkaError.INVALID_SESSION_TIMEOUT, FatalError),
    ],
)
def test_consumer_errors_are_fatal_only_when_waiting_cannot_fix_them(code: int, kind: type) -> None:
    assert isinstance(consumer_error(KafkaError(code)), kind)
