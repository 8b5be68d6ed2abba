"""The reducer creates Faust's internal topics before its worker starts (real Kafka)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from docstream.kafka.admin import create_topics
from docstream_reducer.app import TABLES, by_job_topic, internal_topic_specs
from tests.fixtures.kafka import kafka_settings

pytestmark = pytest.mark.integration


def test_internal_topics_exist_before_faust_starts_with_faust_s_names_and_configs(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    app_id = unique_name("reducer-topics")
    settings = kafka_settings(kafka_bootstrap, partitions=3).with_overrides(reducer={"app_id": app_id})

    created = create_topics(settings.kafka, internal_topic_specs(settings.kafka, settings.reducer))
    again = create_topics(settings.kafka, internal_topic_specs(settings.kafka, settings.reducer))

    changelogs = [f"{app_id}-{table}-changelog" for table in TABLES]
    assert sorted(created) == sorted([by_job_topic(settings.reducer), *changelogs]) and again == []
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert all(len(metadata.topics[name].partitions) == 3 for name in created)
    for name in changelogs:
        [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)]).values()
        config = future.result(timeout=10)
        assert config["cleanup.policy"].value == "compact"
        assert config["max.message.bytes"].value == str(settings.kafka.max_message_bytes)  # not the broker's 1 MiB
