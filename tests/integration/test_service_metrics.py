"""/metrics, /healthz and /readyz of a running inference service (`docstream inference`)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from docstream.settings import CassandraSettings
from tests.fixtures.kafka import wait_until
from tests.fixtures.services import running_pipeline

pytestmark = pytest.mark.integration

# The metrics of DESIGN.md "Operations": consumer lag, batch size, batch wait, model latency,
# write latency, records in/out/failed, DLQ count.
EXPECTED = {
    "docstream_consumer_lag": "gauge",
    "docstream_batch_size": "histogram",
    "docstream_batch_wait_seconds": "histogram",
    "docstream_model_latency_seconds": "histogram",
    "docstream_write_latency_seconds": "histogram",
    "docstream_records_in_total": "counter",
    "docstream_records_out_total": "counter",
    "docstream_records_failed_total": "counter",
    "docstream_dlq_total": "counter",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_running_inference_serves_the_design_metrics(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with running_pipeline(
        kafka_bootstrap, cassandra_settings, tmp_path, "metrics",
        DOCSTREAM_METRICS__PORT=str(port), DOCSTREAM_METRICS__HOST="127.0.0.1",
    ) as pipeline:
        pipeline.start("inference")
        wait_until(lambda: _get(f"{base}/healthz")[0] == 200, timeout_s=120, what="inference /healthz")
        wait_until(lambda: _get(f"{base}/readyz")[0] == 200, timeout_s=120, what="inference /readyz")
        status, body = _get(f"{base}/metrics")

    assert status == 200
    for name, kind in EXPECTED.items():
        assert f"# TYPE {name} {kind}" in body, name
    assert _get(f"{base}/nope")[0] in (0, 404)
