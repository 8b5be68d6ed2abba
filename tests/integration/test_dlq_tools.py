"""`docstream dlq list|show|replay` against the real Kafka, on dead letters written by the real
DlqRouter: counts, previews, records sent back with their key to their original partition, and the dlq-replay
group that keeps the same record from going back twice."""

from __future__ import annotations

import io
import os
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from docstream.avro.serde import AvroSerde
from docstream.errors import PoisonRecord, SchemaError
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.dlq import DlqRouter
from docstream.records import ChunkCreated
from docstream.settings import Settings
from docstream_cli.ops.dlq import iter_dlq, run_dlq_list, run_dlq_replay, run_dlq_show
from docstream_cli.ops.dlq_plan import DlqSelection
from tests.fixtures.kafka import committed_offset, kafka_settings, read_topic
from tests.fixtures.services import DOCSTREAM, ROOT

pytestmark = pytest.mark.integration



def _chunk(doc: str, index: int) -> ChunkCreated:
    text = f"{doc} chunk {index}: " + "words " * 80
    return ChunkCreated(job_id="job-1", doc_id=doc, chunk_id=f"{doc}-{index}", chunk_index=index, chunk_count=3,
                        content_sha256="ab" * 32, text=text, page_start=1, page_end=1, char_start=0,
                        char_end=len(text), token_count=90, chunker_settings="s",
                        created_at=datetime(2024, 5, 17, tzinfo=UTC))


def _dead_letter(settings: Settings, topic: str, letters: list[tuple[int, int, str, bytes, BaseException]]) -> None:
    """Publish (partition, offset, key, value, error) through the real DlqRouter and wait for delivery."""
    producer = ReliableProducer(settings.kafka, client_id="test-dlq")
    router = DlqRouter(producer, "inference")
    delivered = threading.Event()
    remaining = [len(letters)]

    def on_delivery(err: Any, _: Any) -> None:
        assert err is None, err
        remaining[0] -= 1
        if not remaining[0]:
            delivered.set()

    for partition, offset, key, value, error in letters:
        router.publish(topic, partition, offset, key.encode(), value, error, 2, on_delivery=on_delivery)
    producer.flush(30)
    producer.close(10)
    assert delivered.is_set()


@pytest.fixture
def dead_letters(broker: str, unique_name: Callable[[str], str],
                 create_topics: Callable[..., list[str]]) -> tuple[Settings, str, list[ChunkCreated]]:
    """A prefix whose chunks topic (3 partitions) has 4 dead letters in its DLQ (1 partition)."""
    prefix = unique_name("dlq")
    settings = kafka_settings(broker, topic_prefix=prefix)
    topic = f"{prefix}.chunks"
    create_topics(broker, topic, partitions=3)
    create_topics(broker, f"{topic}.dlq", partitions=1)
    serde = AvroSerde(settings.kafka)
    chunks = [_chunk("doc-a", 0), _chunk("doc-b", 1), _chunk("doc-c", 2)]
    _dead_letter(settings, topic, [
        (2, 10, "doc-a", serde.serialize(chunks[0], topic), PoisonRecord("model failed", code="model_error")),
        (0, 11, "doc-x", b"\x00\x01junk" * 40, SchemaError("undecodable", code="schema_error")),
        (1, 12, "doc-b", serde.serialize(chunks[1], topic), PoisonRecord("model failed", code="model_error")),
        (2, 13, "doc-c", serde.serialize(chunks[2], topic), PoisonRecord("model failed", code="model_error")),
    ])
    return settings, topic, chunks


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=250, color_system=None), out


def test_list_and_show(dead_letters: tuple[Settings, str, list[ChunkCreated]]) -> None:
    settings, topic, chunks = dead_letters
    console, out = _console()
    assert run_dlq_list(settings, topic, console=console) == 0
    text = out.getvalue()
    assert f"{topic}.dlq: 4 records" in text
    assert "model_error" in text and "0: 0-3" in text and "schema_error" in text
    console, out = _console()
    assert run_dlq_show(settings, f"{topic}.dlq", console=console, count=2, max_bytes=8) == 0
    shown = out.getvalue()
    assert "original_offset=10" in shown and "ChunkCreated" in shown and f"({len(chunks[0].text)} chars)" in shown
    assert "undecodable: 00 01 6a 75 6e 6b 00 01 … (240 bytes)" in shown
    assert "original_offset=12" not in shown  # -n 2


def test_replay_sends_back_once_unless_again(dead_letters: tuple[Settings, str, list[ChunkCreated]]) -> None:
    settings, topic, chunks = dead_letters
    bootstrap = settings.kafka.bootstrap_servers
    group = f"{settings.kafka.topic_prefix}-dlq-replay"

    def replay(**options: Any) -> tuple[int, str]:
        console, out = _console()
        code = run_dlq_replay(settings, topic, console=console, confirm=lambda _: True, yes=True, **options)
        return code, out.getvalue()

    code, text = replay(selection=DlqSelection(error_code="model_error", to_offset=2))
    assert code == 0 and "sent 2 record(s)" in text, text
    messages = read_topic(bootstrap, topic, expected=2).messages
    serde = AvroSerde(settings.kafka)
    back = {(m.partition(), m.key().decode()): (serde.deserialize(m.value(), topic), dict(m.headers()))
            for m in messages}
    assert set(back) == {(2, "doc-a"), (1, "doc-b")}  # each to its original partition, with its key
    record, headers = back[(2, "doc-a")]
    assert record == chunks[0]
    assert headers["replayed_from"] == f"{topic}.dlq:0:0".encode()
    assert headers["replayed_error_code"] == b"model_error"
    assert committed_offset(bootstrap, group, f"{topic}.dlq", 0) == 3

    # the mark is one offset per partition: the schema_error record at offset 1, left out by the filter, is
    # behind it now and counts as handled (docs/replay.md); offset 3 is the only one still pending
    code, text = replay(selection=DlqSelection(), everything=True)
    assert code == 0 and "sent 1 record(s)" in text and "skipped 3: already replayed" in text
    assert committed_offset(bootstrap, group, f"{topic}.dlq", 0) == 4
    code, text = replay(selection=DlqSelection(), everything=True)
    assert code == 0 and "nothing to send" in text
    code, text = replay(selection=DlqSelection(from_offset=0, to_offset=0, again=True))
    assert code == 0 and "sent 1 record(s)" in text
    assert len(read_topic(bootstrap, topic, expected=4, linger_s=5).messages) == 4  # and no fifth
    assert len(list(iter_dlq(settings.kafka, f"{topic}.dlq"))) == 4  # the DLQ itself is left as it was


def test_replay_needs_a_choice_and_the_command_line_confirms(
    dead_letters: tuple[Settings, str, list[ChunkCreated]],
) -> None:
    settings, topic, _ = dead_letters
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    env.update({"DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
                "DOCSTREAM_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix, "COLUMNS": "200"})

    def cli(*args: str, answer: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DOCSTREAM), "dlq", *args], env=env, cwd=ROOT, input=answer, capture_output=True,
                              text=True, timeout=120, check=False)

    unchosen = cli("replay", topic)
    assert unchosen.returncode == 2 and "choose records" in unchosen.stderr
    declined = cli("replay", topic, "--all", answer="n\n")
    assert declined.returncode == 1 and "nothing sent" in declined.stdout
    dry = cli("replay", topic, "--all", "--dry-run")
    assert dry.returncode == 0 and "dry run: nothing sent" in dry.stdout
    assert read_topic(settings.kafka.bootstrap_servers, topic, expected=0, linger_s=3).messages == []
    listed = cli("list", topic)
    assert listed.returncode == 0 and "4 records" in listed.stdout
    missing = cli("list", f"{topic}-nope")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
