"""Exactly-once loses no table change whose input offset committed, on the real Kafka (issue 44).

faust-streaming 0.15.3 flushes its producer buffer before an at-least-once commit only; under
exactly-once a table change still buffered joined the next transaction while the offset of the
record that made it committed in this one, and a kill -9 lost it. The shim's
``_Producer.commit_transactions`` commits only once every buffered send is acknowledged in its
transaction. Here a small exactly-once Faust app with the shim applied runs as a process of its own;
each buffered send reaches its transaction late (the window, widened), the process is killed once
every input offset is committed, and every table change must be in the changelog (read_committed).
Without the fix 19 of 20 were lost, in each of two runs (the fix toggled off by hand); with it none.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faust
import pytest
from confluent_kafka import Producer

from docstream_reducer import faust_shim
from tests.fixtures.kafka import TopicReader, committed_offset, read_topic, wait_until

_RECORDS = 20
_SEND_DELAY_S = 0.2
_COMMIT_INTERVAL_S = 0.5
_TRANSACTION_TIMEOUT_S = 30.0
_ROOT = Path(__file__).resolve().parents[2]


def _serve(bootstrap: str, app_id: str, topic: str, datadir: str) -> None:
    """The app: one agent puts each record into a table; every buffered send waits ``_SEND_DELAY_S`` first."""
    app = faust.App(app_id, broker=f"kafka://{bootstrap}", processing_guarantee="exactly_once", store="memory://",
                    datadir=datadir, web_enabled=False, autodiscover=False, topic_partitions=1,
                    broker_commit_interval=_COMMIT_INTERVAL_S, consumer_auto_offset_reset="earliest")
    faust_shim.apply(app, transaction_timeout_s=_TRANSACTION_TIMEOUT_S)
    table = app.Table("seen", partitions=1, schema=faust.Schema(key_serializer="raw", value_serializer="raw"))
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")
    producer: Any = app.producer
    send = producer.send

    async def late_send(*args: Any, **kwargs: Any) -> Any:  # the table's changelog sends, from the buffer
        await asyncio.sleep(_SEND_DELAY_S)
        return await send(*args, **kwargs)

    producer.send = late_send

    async def put(stream: Any) -> None:
        async for event in stream.events():
            table[event.key] = event.value

    app.agent(source, name="put")(put)
    worker = faust.Worker(app, loglevel="WARNING", override_logging=False, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_killed_exactly_once_app_keeps_every_table_change_whose_input_offset_committed(
    kafka_bootstrap: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]],
    processes: list[subprocess.Popen[bytes]], tmp_path: Path,
) -> None:
    topic, app_id = unique_name("eos-flush"), unique_name("eos-flush-app")
    create_topics(kafka_bootstrap, topic)
    keys = {f"k{i:02d}".encode() for i in range(_RECORDS)}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key in sorted(keys):
        producer.produce(topic, key=key, value=b"v")
    assert producer.flush(30) == 0
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.integration.test_reducer_eos_flush", kafka_bootstrap,
                                 app_id, topic, str(tmp_path / "data")], cwd=_ROOT, stdout=out, stderr=out)
    processes.append(proc)

    wait_until(lambda: proc.poll() is not None or committed_offset(kafka_bootstrap, app_id, topic) >= _RECORDS,
               timeout_s=90, what="every input offset committed", poll_s=0.1)
    assert proc.poll() is None, log.read_text()[-3000:]
    proc.kill()  # at once: buffered sends still on their way die with the process
    proc.wait(30)

    def _every_key(reader: TopicReader) -> bool:
        return {m.key() for m in reader.messages} >= keys

    changelog = read_topic(kafka_bootstrap, f"{app_id}-seen-changelog", until=_every_key, timeout_s=20,
                           what=f"the {_RECORDS} table changes of committed inputs")
    assert {m.key() for m in changelog.messages} == keys


if __name__ == "__main__":
    _serve(*sys.argv[1:5])
