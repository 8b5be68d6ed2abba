"""The partition stall, reproduced on the real Kafka: a gap of 2+ offsets right after offset 0.

Under read_committed a consumer never sees transaction markers or aborted records, so a
partition's offsets have gaps. faust-streaming 0.15.3 records a gap only when its read offset is
true (``if gap > 1 and r_offset`` in ``Consumer._drain_messages``); after reading offset 0 it is
0, and a gap right there is lost: the partition commits offset 1 once and never again. In the
reducer that was the stall of docs/reducer.md (every stalled partition seen had committed 1).
The shim's fetch loop (``FetchGate``, ``_Consumer._drain_messages``) counts offset 0 as read. Both cases run
here, on one topic shape:

    offset 0: v0 (committed)   1: marker   2: x (aborted)   3: marker   4-11: v2-v9   12: marker
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import faust
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from docstream_reducer import faust_shim
from docstream_reducer.faust_shim import ThreadWorker
from tests.fixtures.kafka import wait_until

_VISIBLE = [b"v0", *(f"v{i}".encode() for i in range(2, 10))]
_LAST_DATA_OFFSET = 11
_COMMIT_INTERVAL_S = 0.2
_ROUNDS_WITHOUT_PROGRESS = 15  # commit rounds after the last record, for the case that must not move


def _write_gap_after_zero(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)

    def transaction(values: list[bytes], *, commit: bool) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, key=b"k", value=value)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction(_VISIBLE[:1], commit=True)
    transaction([b"x"], commit=False)
    transaction(_VISIBLE[1:], commit=True)


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


class _Worker:
    """A Faust exactly-once app with one agent over ``topic``, on a thread of its own."""

    def __init__(self, bootstrap: str, app_id: str, topic: str, datadir: Path, *, shimmed: bool) -> None:
        self.seen: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self.app = faust.App(app_id, broker=f"kafka://{bootstrap}", processing_guarantee="exactly_once",
                             store="memory://", datadir=str(datadir), web_enabled=False, autodiscover=False,
                             topic_partitions=1, broker_commit_interval=_COMMIT_INTERVAL_S, loop=self._loop)
        self.shim = faust_shim.apply(self.app, transaction_timeout_s=60) if shimmed else None
        source = self.app.topic(topic, key_serializer="raw", value_serializer="raw")

        async def collect(stream: faust.StreamT[bytes]) -> None:
            async for value in stream:
                self.seen.append(value)

        self.app.agent(source, name=f"{app_id}-collect")(collect)
        self._worker = ThreadWorker(self.app, loglevel="WARNING", override_logging=False, quiet=True,
                                    redirect_stdouts=False, loop=self._loop)
        self._worker.spinner = None
        self._thread = threading.Thread(target=self._run, name=f"faust-{app_id}", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._worker.execute_from_commandline()
        except SystemExit:
            pass  # the worker's way of saying it stopped

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._worker.request_stop)
        self._thread.join(60)
        if self.shim is not None:
            self.shim.undo()


@pytest.fixture
def workers() -> Iterator[list[_Worker]]:
    started: list[_Worker] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.mark.parametrize("shimmed", [True, False], ids=["with-shim", "faust-as-is"])
def test_a_gap_right_after_offset_0_is_committed_past_only_with_the_shim(
    shimmed: bool, kafka_bootstrap: str, unique_name: Callable[[str], str],
    create_topics: Callable[..., list[str]], workers: list[_Worker], tmp_path: Path,
) -> None:
    topic = unique_name("gap0")
    create_topics(kafka_bootstrap, topic)
    _write_gap_after_zero(kafka_bootstrap, topic)
    app_id = unique_name("gap0-app")
    worker = _Worker(kafka_bootstrap, app_id, topic, tmp_path, shimmed=shimmed)
    workers.append(worker)
    worker.start()

    wait_until(lambda: len(worker.seen) >= len(_VISIBLE), timeout_s=60, what="every visible record delivered")
    assert worker.seen == _VISIBLE
    if shimmed:
        committed = wait_until(lambda: (c := _committed(kafka_bootstrap, app_id, topic)) > _LAST_DATA_OFFSET and c,
                               timeout_s=30, what="a commit past the last record", poll_s=0.5)
        assert committed == _LAST_DATA_OFFSET + 1
    else:
        wait_until(lambda: _committed(kafka_bootstrap, app_id, topic) == 1, timeout_s=30,
                   what="the first commit (offset 1)", poll_s=0.5)
        time.sleep(_ROUNDS_WITHOUT_PROGRESS * _COMMIT_INTERVAL_S)  # not a wait for a condition: rounds that
        # must not commit
        assert _committed(kafka_bootstrap, app_id, topic) == 1, "faust 0.15.3 was expected to stay at offset 1"
