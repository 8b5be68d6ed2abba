"""Chaos fixtures: the local stack under control, one shared pipeline of service processes, the report.

* ``local_stack`` (session): stops and starts Kafka or Cassandra of the deploy/local stack the tests
  talk to. It reads the same DOCSTREAM_STACK_* variables as deploy/local/stack and FAILS when the
  broker or Cassandra the tests use (DOCSTREAM_TEST_KAFKA / DOCSTREAM_TEST_CASSANDRA) is not that
  stack: an outage must hit what the services use. At the end both components are up again.
  A private stack: run with DOCSTREAM_STACK_HOME, DOCSTREAM_STACK_KAFKA_PORT,
  DOCSTREAM_STACK_CASSANDRA_PORT, DOCSTREAM_STACK_CASSANDRA_STORAGE_PORT set, and
  DOCSTREAM_TEST_KAFKA=127.0.0.1:<kafka port>, DOCSTREAM_TEST_CASSANDRA=127.0.0.1:<cassandra port>.
* ``shared_pipeline`` (module): chunker, inference and reducer as subprocesses under one prefix of the
  module's own (exactly-once reducer, a retry budget that outlives the outages, low chunker limits
  for the bad-input kinds), plus an upstream chunker under ``<prefix>-src`` whose chunks the poison
  scenario relays; scenarios run their own jobs on it, so the services start once.
  ``chaos_env`` (module) is what they run with: ``CHAOS_ENV``, plus the replication of a cluster in
  tests/chaos/test_cluster.py, which also overrides ``kafka_bootstrap`` and ``cassandra_settings``.
* ``pipeline``: the shared pipeline, healthy: before a scenario every service runs with the default
  settings (a dead one is restarted); after it the stack is up again.
* ``chaos_report`` (session): figures of each scenario, written as JSON to
  ``$DOCSTREAM_CHAOS_REPORT`` (default ``.docstream/chaos/report-<mode>.json``) and printed at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docstream.kafka.admin import ensure_topics
from docstream.settings import CassandraSettings
from docstream.store.base import ResultStore
from docstream.topics import Topics
from tests.chaos.harness import (
    CHAOS_ENV,
    SCALE,
    SERVICES,
    UPSTREAM,
    ChaosReport,
    LocalStack,
    store_answers,
    wait_ready,
)
from tests.fixtures.kafka import kafka_settings
from tests.fixtures.services import ROOT, Pipeline, running_pipeline


@pytest.fixture(scope="session")
def local_stack(kafka_bootstrap: str, cassandra_settings: CassandraSettings) -> Iterator[LocalStack]:
    """The deploy/local stack the tests talk to; both components up again at the end."""
    stack = LocalStack()
    # a cluster's bootstrap is a list (`stack env`): its first broker is node 1, on the stack's port
    host, _, port = kafka_bootstrap.split(",")[0].strip().rpartition(":")
    if host not in ("127.0.0.1", "localhost") or int(port) != stack.kafka_port \
            or cassandra_settings.port != stack.cassandra_port:
        pytest.fail(
            f"the chaos tests stop and start the deploy/local stack (Kafka port {stack.kafka_port}, Cassandra port "
            f"{stack.cassandra_port}, home {stack.home}) but the tests use Kafka {kafka_bootstrap} and Cassandra "
            f"port {cassandra_settings.port}: set DOCSTREAM_TEST_KAFKA/DOCSTREAM_TEST_CASSANDRA and "
            "DOCSTREAM_STACK_* to the same stack", pytrace=False)
    for component in ("kafka", "cassandra"):
        if not stack.running(component):
            pytest.fail(f"{component} of the deploy/local stack ({stack.home}) is not running", pytrace=False)
    try:
        yield stack
    finally:
        stack.ensure_up()


_REPORT: list[ChaosReport] = []


@pytest.fixture(scope="session")
def chaos_report() -> Iterator[ChaosReport]:
    """The run's report of figures."""
    default = ROOT / ".docstream" / "chaos" / f"report-{SCALE.mode}.json"
    report = ChaosReport(Path(os.environ.get("DOCSTREAM_CHAOS_REPORT") or default))
    _REPORT.append(report)
    try:
        yield report
    finally:
        report.write()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the chaos figures after the tests."""
    for report in _REPORT:
        if not report.scenarios:
            continue
        terminalreporter.section(f"chaos figures ({SCALE.mode}, seed {SCALE.seed}) -> {report.path}")
        for scenario, figures in report.scenarios.items():
            terminalreporter.write_line(f"{scenario}: {json.dumps(figures, default=str)}")


@pytest.fixture(scope="module")
def chaos_env() -> dict[str, str]:
    """What every service of the module's shared pipeline runs with (a cluster module adds its replication)."""
    return dict(CHAOS_ENV)


@pytest.fixture(scope="module")
def shared_pipeline(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore,
    tmp_path_factory: pytest.TempPathFactory, local_stack: LocalStack, chaos_env: dict[str, str],
) -> Iterator[Pipeline]:
    """Chunker, inference and reducer of the module, started once (the keyspace is migrated before)."""
    root = tmp_path_factory.mktemp("chaos")
    replication: dict[str, int] = {"replication_factor": int(chaos_env.get("DOCSTREAM_KAFKA__REPLICATION_FACTOR", "1"))}
    if "DOCSTREAM_KAFKA__MIN_INSYNC_REPLICAS" in chaos_env:
        replication["min_insync_replicas"] = int(chaos_env["DOCSTREAM_KAFKA__MIN_INSYNC_REPLICAS"])
    with running_pipeline(kafka_bootstrap, cassandra_settings, root, "chaos", **chaos_env) as pipeline:
        upstream = Topics(f"{pipeline.prefix}-src")
        for topics in (pipeline.topics, upstream):
            ensure_topics(kafka_settings(kafka_bootstrap, topic_prefix=topics.prefix, partitions=3,
                                         **replication).kafka, topics)
        pipeline.add(UPSTREAM, "chunker", DOCSTREAM_KAFKA__TOPIC_PREFIX=upstream.prefix)
        pipeline.start(*SERVICES, UPSTREAM)  # together: their start-ups overlap
        wait_ready(pipeline, *SERVICES, UPSTREAM)
        yield pipeline
        pipeline.stop(timeout_s=10)  # they are built to be killed; the scenarios checked their stops


@pytest.fixture
def pipeline(
    shared_pipeline: Pipeline, local_stack: LocalStack, cassandra_store: ResultStore
) -> Iterator[Pipeline]:
    """The shared pipeline with every service running on default settings; the stack restored after."""
    local_stack.ensure_up()
    store_answers(cassandra_store)
    restarted = []
    for name in (*SERVICES, UPSTREAM):
        service = shared_pipeline.service(name)
        if not service.alive() or service.extra:
            service.stop()
            service.start()
            restarted.append(name)
    wait_ready(shared_pipeline, *restarted)
    try:
        yield shared_pipeline
    finally:
        local_stack.ensure_up()
        store_answers(cassandra_store)
