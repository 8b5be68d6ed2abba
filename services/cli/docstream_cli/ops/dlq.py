"""DLQ tools: list, show and replay the records of a ``<topic>.dlq`` (docs/replay.md "Dead letters").

Pure half, in ``docstream_cli.ops.dlq_plan``: ``DlqRecord`` (a dead letter and its DLQ headers), ``summarize``,
``select``, ``replay_headers``, ``preview`` and the tables. I/O half, here: ``iter_dlq`` reads a DLQ from its
start to its end without joining a group (``assign``), ``send_back`` produces chosen records
to their original topic and partition, and the ``<prefix>-dlq-replay`` consumer group keeps,
per DLQ partition, the offset up to which records were sent back, so that the same record is
not replayed twice by accident (``--again`` overrides).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from rich.console import Console

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, InputError, RetryableError
from docstream.kafka.clients import ReliableProducer, common_config, consumer_error, kafka_error
from docstream.logging import get_logger
from docstream.settings import KafkaSettings, Settings
from docstream_cli.ops.dlq_plan import (
    DlqRecord,
    DlqSelection,
    advance_marks,
    preview,
    records_table,
    replay_group,
    replay_headers,
    resolve_dlq_topic,
    select,
    summarize,
    summary_table,
)
from docstream_cli.ops.replay import GroupAdmin

__all__ = [
    "SendResult",
    "iter_dlq",
    "run_dlq_list",
    "run_dlq_replay",
    "run_dlq_show",
    "send_back",
]

_log = get_logger(__name__)

# -- Kafka I/O ----------------------------------------------------------------------------------


def _message_headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    items = raw.items() if isinstance(raw, dict) else (raw or [])
    return tuple((str(k), v.encode("utf-8") if isinstance(v, str) else (v or b"")) for k, v in items)


def iter_dlq(
    kafka: KafkaSettings,
    topic: str,
    *,
    start: Mapping[int, int] | None = None,
    partitions: Sequence[int] | None = None,
    timeout_s: float = 60.0,
) -> Generator[DlqRecord, None, None]:
    """Every record of ``topic`` from ``start`` (partition → offset; default the beginning) to its end.

    Reads with ``assign`` (no group join, nothing committed) and stops at each partition's end
    (partition EOF), or at ``timeout_s``.

    Raises:
        InputError: the topic does not exist.
        RetryableError: no end reached in ``timeout_s``.
        FatalError: the broker refused (authorization).
    """
    conf = {
        **common_config(kafka, client_id="docstream-dlq"),
        "group.id": "docstream-dlq-reader",  # never joined: assign() only, offsets never committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "allow.auto.create.topics": False,
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(conf)
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=min(timeout_s, 15.0))
        except KafkaException as exc:
            raise kafka_error(exc.args[0], f"metadata of {topic}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise InputError(f"topic {topic} does not exist", code="topic_missing")
        wanted = sorted(found.partitions) if partitions is None else sorted(set(partitions) & set(found.partitions))
        if not wanted:
            return
        starts = start or {}
        consumer.assign([TopicPartition(topic, p, starts.get(p, -2)) for p in wanted])  # -2: beginning
        yield from _read_to_end(consumer, topic, set(wanted), time.monotonic() + timeout_s)
    finally:
        consumer.close()


def _read_to_end(consumer: Consumer, topic: str, open_partitions: set[int], deadline: float) -> Iterator[DlqRecord]:
    while open_partitions:
        if time.monotonic() >= deadline:
            raise RetryableError(f"{topic}: end not reached in time (partitions {sorted(open_partitions)})",
                                 code="kafka_timeout")
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                open_partitions.discard(int(msg.partition() or 0))
                continue
            error = consumer_error(err, f"read {topic}")
            if not isinstance(error, RetryableError):
                raise error
            continue
        partition = int(msg.partition() or 0)
        if partition not in open_partitions:
            continue  # a record that arrived after this partition's end was reached
        yield DlqRecord(topic=topic, partition=partition, offset=int(msg.offset() or 0), key=msg.key(),
                        value=msg.value(), headers=_message_headers(msg.headers()),
                        timestamp_ms=int(msg.timestamp()[1]))


@dataclass(frozen=True)
class SendResult:
    """What ``send_back`` did.

    Attributes:
        sent: records delivered to their original topic.
        marks: DLQ partition → the dlq-replay group's new offset.
    """

    sent: int
    marks: dict[int, int]


def send_back(
    records: Sequence[DlqRecord],
    *,
    producer: ReliableProducer,
    admin: GroupAdmin,
    group_id: str,
    current_marks: Mapping[int, int],
    target: str | None = None,
    partitions_of: Callable[[str], int] | None = None,
    clock: Callable[[], float] = time.time,
    flush_timeout_s: float = 60.0,
) -> SendResult:
    """Produce ``records`` back to their original topic (or ``target``), then move the dlq-replay marks.

    A record goes to its ``original_partition`` when that partition exists (so it stays in order
    with its document's other records whatever partitioner produced them), else by key. The marks
    move only after every record is acknowledged: a failure leaves them where they were.

    Raises:
        RetryableError | FatalError: a delivery failed (nothing marked), or the marks could not be committed.
    """
    now_ms = int(clock() * 1000)
    counts: dict[str, int] = {}
    for record in records:
        topic = target or record.original_topic
        assert topic is not None  # select() leaves out records without one
        if topic not in counts:
            counts[topic] = partitions_of(topic) if partitions_of is not None else 0
        partition = record.original_partition
        use = partition if partition is not None and 0 <= partition < counts[topic] else None
        producer.produce(topic, record.key, record.value, headers=replay_headers(record, now_ms), partition=use)
        producer.poll(0)
    producer.flush(flush_timeout_s)
    marks = advance_marks(current_marks, records)
    if marks and records:
        admin.alter_offsets(group_id, records[0].topic, marks)
    _log.info("dlq_records_replayed", topic=records[0].topic if records else None, records=len(records),
              targets=sorted(counts))
    return SendResult(sent=len(records), marks=marks)


# -- the commands -------------------------------------------------------------------------------


def _marks(admin: GroupAdmin, group_id: str, topic: str) -> dict[int, int]:
    partitions = admin.partitions(topic)
    if not partitions:
        raise InputError(f"topic {topic} does not exist", code="topic_missing")
    return admin.committed(group_id, topic, partitions)


def _decoder(settings: Settings) -> Callable[[bytes], Any]:
    serde = AvroSerde(settings.kafka)
    return lambda value: serde.deserialize(value, "")


def run_dlq_list(settings: Settings, topic: str, *, console: Console, admin: GroupAdmin | None = None) -> int:
    """``docstream dlq list TOPIC``: counts per original topic and error code. Returns the exit status.

    Raises:
        InputError: the topic does not exist.
        RetryableError | FatalError: the broker did not answer or refused.
    """
    name = resolve_dlq_topic(topic)
    admin = admin or GroupAdmin(settings.kafka)
    marks = _marks(admin, replay_group(settings), name)
    summaries = summarize(iter_dlq(settings.kafka, name), marks)
    console.print(summary_table(name, summaries))
    if marks:
        console.print(f"replayed up to (group {replay_group(settings)}): "
                      + ", ".join(f"{p}: {o}" for p, o in sorted(marks.items())))
    return 0


def run_dlq_show(
    settings: Settings,
    topic: str,
    *,
    console: Console,
    count: int = 10,
    partition: int | None = None,
    offset: int | None = None,
    max_bytes: int = 64,
    as_json: bool = False,
) -> int:
    """``docstream dlq show TOPIC``: the first ``count`` records (from ``offset`` in ``partition``).

    Raises:
        InputError: the topic does not exist, or bad options.
        RetryableError | FatalError: the broker did not answer or refused.
    """
    if count < 1:
        raise InputError("-n must be at least 1", code="dlq_count")
    if offset is not None and partition is None:
        raise InputError("--offset needs --partition", code="dlq_offset")
    name = resolve_dlq_topic(topic)
    start = {partition: offset} if partition is not None and offset is not None else None
    shown: list[DlqRecord] = []
    partitions = None if partition is None else [partition]
    with closing(iter_dlq(settings.kafka, name, start=start, partitions=partitions)) as records:
        for record in records:
            shown.append(record)
            if len(shown) >= count:
                break
    decode = _decoder(settings)
    if as_json:
        rows = [{"partition": r.partition, "offset": r.offset,
                 "key": None if r.key is None else r.key.decode("utf-8", errors="replace"),
                 "headers": {k: v.decode("utf-8", errors="replace") for k, v in r.headers},
                 "value": preview(r.value, decode, max_bytes=max_bytes)} for r in shown]
        console.out(json.dumps(rows, ensure_ascii=False), highlight=False)
    else:
        console.print(records_table(shown, decode, max_bytes=max_bytes))
    return 0


def run_dlq_replay(
    settings: Settings,
    topic: str,
    *,
    console: Console,
    confirm: Callable[[str], bool],
    selection: DlqSelection,
    everything: bool = False,
    target: str | None = None,
    yes: bool = False,
    dry_run: bool = False,
    admin: GroupAdmin | None = None,
) -> int:
    """``docstream dlq replay TOPIC``: send chosen dead letters back. Returns the exit status.

    Needs a choice: ``everything`` or a range/error code in ``selection``. 0: sent (or dry run,
    or nothing to send); 1: declined at the prompt, or the send failed.

    Raises:
        InputError: no choice made, or the topic does not exist.
    """
    chose = any(v is not None for v in (selection.partition, selection.from_offset, selection.to_offset,
                                        selection.error_code))
    if not chose and not everything:
        raise InputError("choose records: --all, or --partition/--from-offset/--to-offset/--error-code",
                         code="dlq_selection")
    name = resolve_dlq_topic(topic)
    admin = admin or GroupAdmin(settings.kafka)
    group = replay_group(settings)
    marks = _marks(admin, group, name)
    partitions = None if selection.partition is None else [selection.partition]
    chosen, skipped = select(iter_dlq(settings.kafka, name, partitions=partitions), selection, marks, target=target)
    console.print(records_table(chosen, None, max_bytes=16) if dry_run else
                  f"{len(chosen)} record(s) of {name} to send back")
    for reason in sorted({why for _, why in skipped}):
        console.print(f"skipped {sum(1 for _, why in skipped if why == reason)}: {reason}")
    if not chosen or dry_run:
        console.print("dry run: nothing sent" if dry_run else "nothing to send")
        return 0
    destinations = sorted({target or r.original_topic or "?" for r in chosen})
    missing = [t for t in destinations if not admin.partitions(t)]
    if missing:
        raise InputError(f"topic(s) to send back to do not exist: {', '.join(missing)}", code="topic_missing")
    if not yes and not confirm(f"Send {len(chosen)} record(s) back to {', '.join(destinations)}?"):
        console.print("nothing sent")
        return 1
    producer = ReliableProducer(settings.kafka, client_id="docstream-dlq-replay")
    try:
        result = send_back(chosen, producer=producer, admin=admin, group_id=group, current_marks=marks, target=target,
                           partitions_of=lambda t: len(admin.partitions(t)))
    except DocstreamError as exc:
        console.print(f"[red]replay failed:[/red] {exc.message}")
        return 1
    finally:
        producer.close(10)
    console.print(f"sent {result.sent} record(s) back to {', '.join(destinations)}; marked in group {group}: "
                  + ", ".join(f"{p}: {o}" for p, o in sorted(result.marks.items())))
    return 0
