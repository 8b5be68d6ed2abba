"""docstream.kafka: clients, topic admin, offset tracking, DLQ, the consume loop."""

from docstream.kafka.admin import TopicSpec, create_topics, ensure_topics, topic_specs
from docstream.kafka.attempts import Outcome, run_with_retries
from docstream.kafka.clients import (
    DeliveryCallback,
    ReliableProducer,
    admin_config,
    common_config,
    consumer_config,
    consumer_error,
    create_consumer,
    kafka_error,
    producer_config,
    raise_for_message,
    redact_config,
)
from docstream.kafka.dlq import DLQ_HEADERS, DlqRouter, dlq_headers, error_code_of
from docstream.kafka.loop import ConsumeLoop, Envelope, Handler, Output
from docstream.kafka.offsets import OffsetTracker, TopicPartitionKey

__all__ = [
    "DLQ_HEADERS",
    "ConsumeLoop",
    "DeliveryCallback",
    "DlqRouter",
    "Envelope",
    "Handler",
    "OffsetTracker",
    "Outcome",
    "Output",
    "ReliableProducer",
    "TopicPartitionKey",
    "TopicSpec",
    "admin_config",
    "common_config",
    "consumer_config",
    "consumer_error",
    "create_consumer",
    "create_topics",
    "dlq_headers",
    "ensure_topics",
    "error_code_of",
    "kafka_error",
    "producer_config",
    "raise_for_message",
    "redact_config",
    "run_with_retries",
    "topic_specs",
]
