"""Shared fixtures: each area keeps its fixtures in tests/fixtures/<area>.py."""

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.cassandra",
    "tests.fixtures.documents",
    "tests.fixtures.browser",
    "tests.fixtures.infinity",
    "tests.fixtures.llm",
    "tests.fixtures.fault_proxy",
    "tests.fixtures.inference",
    "tests.fixtures.ordering",
    "tests.fixtures.sinks",
]
