"""The reducer's internal topics and its record bound: what a changelog or an output record may hold."""

from __future__ import annotations

from docstream.records import record_limit
from docstream.settings import Settings
from docstream_reducer.app import TABLES, internal_topic_specs


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
