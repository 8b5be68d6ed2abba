"""The reducer's topics: its internal ones and its record bound (what a changelog or an output record may hold), the
result topics its documents agent reads, and the exactly-once partition check."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from docstream.avro import AvroSerde
from docstream.errors import ConfigError
from docstream.metrics import Metrics
from docstream.records import record_limit
from docstream.settings import Settings
from docstream.store.sqlite import SqliteStore
from docstream.topics import Topics
from docstream_reducer import app as app_module
from docstream_reducer.agents import StoreCalls
from docstream_reducer.app import TABLES, build_reducer, check_partitions, internal_topic_specs


def test_every_internal_topic_takes_the_records_the_producer_may_send() -> None:
    settings = Settings().with_overrides(kafka={"max_message_bytes": 3 * 1024 * 1024},
                                         reducer={"app_id": "r"})
    specs = {spec.name: spec.config for spec in internal_topic_specs(settings.kafka, settings.reducer)}
    assert {f"r-{table}-changelog" for table in TABLES} <= set(specs)
    assert all(config["max.message.bytes"] == str(3 * 1024 * 1024) for config in specs.values())
    assert all(specs[f"r-{table}-changelog"]["cleanup.policy"] == "compact" for table in TABLES)


def test_the_record_limit_leaves_headroom_under_the_bound() -> None:
    assert record_limit(8 * 1024 * 1024) == 8 * 1024 * 1024 - 64 * 1024
    assert record_limit(1024) == 768  # a quarter of a small bound
    assert all(0 < record_limit(n) < n for n in (1024, 100_000, 256 * 1024 * 1024))


def test_the_documents_agent_reads_both_result_topics(tmp_path: Path) -> None:
    """For one release the reducer reads chunks.results and the legacy chunks.embedded in one agent (one topic
    group: a document's records of both are in one partition number, one transaction under exactly-once), and its
    partition watch follows both."""
    settings = Settings().with_overrides(kafka={"topic_prefix": "t"},
                                         reducer={"app_id": "t-reducer", "data_dir": str(tmp_path / "reducer")})
    store = SqliteStore(tmp_path / "store.sqlite")
    with ThreadPoolExecutor(max_workers=1) as executor:
        reducer = build_reducer(settings.kafka, settings.reducer, custom_tasks={},
                                store=StoreCalls(store, settings.retry, executor), serde=AvroSerde(settings.kafka),
                                webhooks=None, metrics=Metrics(), clock=time.monotonic, idempotent_producer=True)
    subscribed = {name: tuple(agent.channel.topics) for name, agent in reducer.app.agents.items()}
    assert subscribed["documents"] == ("t.chunks.results", "t.chunks.embedded") == Topics("t").result_topics()
    assert {topic for topics in subscribed.values() for topic in topics} == {
        "t.chunks.results", "t.chunks.embedded", "t.documents.completed", "t.documents.chunked",
        "t-reducer-documents-by-job-repartition"}


@dataclass
class _Metadata:
    """What ``AdminClient.list_topics`` answers, as far as ``check_partitions`` reads it."""

    counts: dict[str, int]

    @property
    def topics(self) -> dict[str, SimpleNamespace]:
        return {name: SimpleNamespace(partitions=dict.fromkeys(range(n))) for name, n in self.counts.items()}


@pytest.mark.parametrize(("legacy", "refused"), [(3, False), (2, True), (0, True)])
def test_exactly_once_needs_both_result_topics_with_the_partition_count_of_the_outputs(
        monkeypatch: pytest.MonkeyPatch, legacy: int, refused: bool) -> None:
    topics = Topics("t")
    counts = {topics.results: 3, topics.completed: 3, topics.mapped: 3}
    if legacy:
        counts[topics.legacy_results] = legacy
    monkeypatch.setattr(app_module, "_cluster_metadata", lambda kafka, timeout_s: _Metadata(counts))
    kafka = Settings().with_overrides(kafka={"topic_prefix": "t", "transactions": True}).kafka
    if refused:
        with pytest.raises(ConfigError) as info:
            check_partitions(kafka)
        assert info.value.code == "partitions_mismatch" and topics.legacy_results in info.value.message
    else:
        check_partitions(kafka)
    check_partitions(kafka.model_copy(update={"transactions": False}))  # at-least-once: not asked
