"""`docstream api --host/--port` and `docstream chunker --metrics-port` beat the settings (real processes)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from docstream.settings import CassandraSettings
from tests.fixtures.kafka import wait_until
from tests.fixtures.services import Pipeline, ServiceProcess, free_port, http_status, service_env

pytestmark = pytest.mark.integration


def test_api_and_metrics_listen_where_the_flags_say(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    api_port, metrics_port, unused = free_port(), free_port(), free_port()
    env = service_env(kafka_bootstrap, f"addresses-{uuid.uuid4().hex[:12]}", cassandra_settings, tmp_path,
                      DOCSTREAM_STORE__BACKEND="sqlite", DOCSTREAM_STORE__SQLITE_PATH=str(tmp_path / "store.db"),
                      # the settings say elsewhere: the flags must win
                      DOCSTREAM_API__HOST="0.0.0.0", DOCSTREAM_API__PORT=str(unused),
                      DOCSTREAM_METRICS__HOST="0.0.0.0", DOCSTREAM_METRICS__PORT=str(unused))
    pipeline = Pipeline(env, tmp_path / "logs")
    pipeline.services["api"] = ServiceProcess("api", env, pipeline.folder,
                                              args=["--host", "127.0.0.1", "--port", str(api_port)])
    pipeline.services["chunker"] = ServiceProcess(
        "chunker", env, pipeline.folder, args=["--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port)])
    try:
        pipeline.start("api", "chunker")
        pipeline.until(lambda: http_status(f"http://127.0.0.1:{api_port}/healthz") == 200, "api /healthz", 120)
        pipeline.until(lambda: http_status(f"http://127.0.0.1:{metrics_port}/healthz") == 200, "chunker /healthz", 120)
        assert http_status(f"http://127.0.0.1:{unused}/healthz") == 0  # nothing listens where the settings said
    finally:
        pipeline.stop()
    wait_until(lambda: http_status(f"http://127.0.0.1:{api_port}/healthz") == 0, 30, "the api to stop")
