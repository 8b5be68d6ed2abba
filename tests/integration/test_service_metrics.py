"""/metrics, /healthz and /readyz of running services: inference (a process), the chunker (its main())."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from docstream.kafka.admin import create_topics, topic_specs
from docstream.metrics import Metrics
from docstream.settings import CassandraSettings, Settings
from docstream.store import SqliteStore
from docstream.topics import Topics
from docstream_chunker.main import build_chunker
from docstream_chunker.main import main as chunker_main
from tests.fixtures.kafka import kafka_settings, wait_until
from tests.fixtures.services import free_port, running_pipeline

pytestmark = pytest.mark.integration

# The metrics of docs/operations.md "Observability": consumer lag, batch size, batch wait, model latency,
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
    port = free_port()
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


def _chunker_settings(bootstrap: str, prefix: str, root: Path, port: int = 0) -> Settings:
    """A chunker of its own topics (created here), SQLite store and object store under ``root``."""
    settings = kafka_settings(bootstrap, topic_prefix=prefix, partitions=1).with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(root / "store.db")},
        object_store={"url": str(root / "objects")},
        metrics={"port": port, "host": "127.0.0.1"},
        log={"format": "json", "level": "WARNING"},
    )
    create_topics(settings.kafka, topic_specs(settings.kafka, Topics(prefix)), timeout_s=60)
    return settings


def test_the_chunker_is_ready_while_its_loop_consumes_not_before_and_not_once_stopped(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    settings = _chunker_settings(kafka_bootstrap, unique_name("ready"), tmp_path)
    store = SqliteStore(tmp_path / "store.db")
    service = build_chunker(settings, store=store, metrics=Metrics())
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="chunker-loop", daemon=True)
    try:
        assert not service.ready, "not ready before its loop runs"
        thread.start()
        wait_until(lambda: service.ready, timeout_s=60, what="the chunker's loop consuming")
        service.stop()
        assert not service.ready, "not ready as soon as a stop is asked (it drains)"
        thread.join(60)
        assert not thread.is_alive() and errors == []
        assert not service.ready, "not ready once stopped"
    finally:
        service.stop()
        thread.join(60)
        service.close()
        store.close()


def test_chunker_readyz_is_true_while_its_loop_consumes_and_false_once_it_stops(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    port = free_port()
    settings = _chunker_settings(kafka_bootstrap, unique_name("readyz"), tmp_path, port)
    readyz = f"http://127.0.0.1:{port}/readyz"
    default_handler = signal.getsignal(signal.SIGTERM)
    seen: list[str] = []

    def watch() -> None:
        """Ready while the loop runs; SIGTERM; then not ready until the endpoint closes."""
        deadline = time.monotonic() + 120
        while _get(readyz)[0] != 200:
            if time.monotonic() > deadline:
                seen.append("never ready")
                if signal.getsignal(signal.SIGTERM) is not default_handler:  # only main's handler may get it
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)
        seen.append("ready")
        os.kill(os.getpid(), signal.SIGTERM)  # main's handler: the loop's stop()
        while (status := _get(readyz)[0]) == 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append({503: "not ready", 0: "closed"}.get(status, str(status)))

    watcher = threading.Thread(target=watch, name="readyz-watch", daemon=True)
    watcher.start()
    try:
        code = chunker_main(settings)  # on this (the main) thread: its SIGTERM handler is installed here
    finally:
        structlog.contextvars.unbind_contextvars("service")  # main() binds it for its process
    watcher.join(30)
    assert code == 0
    assert seen == ["ready", "not ready"], "ready while consuming, not ready after stop() and before the exit"
    assert _get(readyz)[0] == 0, "the endpoint closed with the process's main()"
