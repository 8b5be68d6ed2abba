"""DLQ tools: list, show and replay the records of a ``<topic>.dlq`` (docs/replay.md "Dead letters").

Pure half: ``DlqRecord`` (a dead letter and its DLQ headers), ``summarize``, ``select``,
``replay_headers``, ``preview`` and the tables. I/O half: ``iter_dlq`` reads a DLQ from its
start to its end without joining a group (``assign``), ``send_back`` produces chosen records
to their original topic and partition, and the ``<prefix>-dlq-replay`` consumer group keeps,
per DLQ partition, the offset up to which records were sent back, so that the same record is
not replayed twice by accident (``--again`` overrides).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from rich.console import Console
from rich.table import Table

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, InputError, RetryableError
from docstream.kafka.clients import ReliableProducer, common_config, consumer_error, kafka_error
from docstream.logging import get_logger
from docstream.replay import GroupAdmin
from docstream.settings import KafkaSettings, Settings
from docstream.topics import Topics, dlq_topic

__all__ = [
    "REPLAY_GROUP_SERVICE",
    "REPLAY_HEADERS",
    "DlqRecord",
    "DlqSelection",
    "DlqSummary",
    "SendResult",
    "advance_marks",
    "iter_dlq",
    "preview",
    "records_table",
    "replay_group",
    "replay_headers",
    "resolve_dlq_topic",
    "run_dlq_list",
    "run_dlq_replay",
    "run_dlq_show",
    "select",
    "send_back",
    "summarize",
    "summary_table",
]

_log = get_logger(__name__)

REPLAY_GROUP_SERVICE = "dlq-replay"
"""``Topics(prefix).group(REPLAY_GROUP_SERVICE)`` is the group whose offsets mark what was replayed."""

REPLAY_HEADERS = ("replayed_from", "replayed_at", "replayed_error_code")
"""Headers of a record sent back: ``<dlq topic>:<partition>:<offset>``, epoch ms, the DLQ error_code."""

_SEQUENCE_PREVIEW = 4
_MAX_STRING = 160


def replay_group(settings: Settings) -> str:
    """The consumer group whose committed offsets mark replayed DLQ records: ``<prefix>-dlq-replay``."""
    return Topics(settings.kafka.topic_prefix).group(REPLAY_GROUP_SERVICE)


def resolve_dlq_topic(topic: str) -> str:
    """``topic`` if it is a DLQ (ends in ``.dlq``), else its DLQ.

    Raises:
        InputError: an empty name.
    """
    name = topic.strip()
    if not name:
        raise InputError("a topic name is needed", code="dlq_topic")
    return name if name.endswith(".dlq") else dlq_topic(name)


# -- records (pure) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DlqRecord:
    """A record of a DLQ topic.

    Attributes:
        topic: the DLQ topic.
        partition: its partition.
        offset: its offset.
        key: the original key bytes.
        value: the original value bytes (None when the router dropped a too-large value).
        headers: every header, in order.
        timestamp_ms: the DLQ record's timestamp.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` as text, or None."""
        for key, value in reversed(self.headers):
            if key == name:
                return value.decode("utf-8", errors="replace")
        return None

    def _int_header(self, name: str) -> int | None:
        raw = self.header(name)
        return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None

    @property
    def original_topic(self) -> str | None:
        """The topic the record failed on."""
        return self.header("original_topic")

    @property
    def original_partition(self) -> int | None:
        """Its partition there."""
        return self._int_header("original_partition")

    @property
    def original_offset(self) -> int | None:
        """Its offset there."""
        return self._int_header("original_offset")

    @property
    def error_code(self) -> str:
        """The machine-readable error code (``unknown`` without the header)."""
        return self.header("error_code") or "unknown"

    @property
    def error(self) -> str:
        """The error message."""
        return self.header("error") or ""

    @property
    def failed_at_ms(self) -> int:
        """When it was dead-lettered, epoch ms (the ``timestamp`` header, else the record's)."""
        return self._int_header("timestamp") or self.timestamp_ms


@dataclass
class DlqSummary:
    """Dead letters of one original topic and error code.

    Attributes:
        original_topic: where they failed.
        error_code: why.
        count: how many.
        offsets: DLQ partition → (first, last) offset.
        pending: how many are at or after the dlq-replay mark (not replayed yet).
        first_ms: earliest failure time, epoch ms.
        last_ms: latest failure time, epoch ms.
        example_error: one error message.
    """

    original_topic: str
    error_code: str
    count: int = 0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    pending: int = 0
    first_ms: int = 0
    last_ms: int = 0
    example_error: str = ""


def summarize(records: Iterable[DlqRecord], marks: Mapping[int, int] | None = None) -> list[DlqSummary]:
    """Count dead letters per (original topic, error code), with DLQ offsets and failure times. Pure.

    Args:
        records: the DLQ's records (streamed: values are not kept).
        marks: DLQ partition → the dlq-replay group's offset; records before it count as replayed.
    """
    marks = marks or {}
    groups: dict[tuple[str, str], DlqSummary] = {}
    for record in records:
        key = (record.original_topic or "?", record.error_code)
        summary = groups.get(key)
        if summary is None:
            summary = groups[key] = DlqSummary(original_topic=key[0], error_code=key[1], example_error=record.error)
            summary.first_ms = summary.last_ms = record.failed_at_ms
        summary.count += 1
        first, last = summary.offsets.get(record.partition, (record.offset, record.offset))
        summary.offsets[record.partition] = (min(first, record.offset), max(last, record.offset))
        if record.offset >= marks.get(record.partition, 0):
            summary.pending += 1
        summary.first_ms = min(summary.first_ms, record.failed_at_ms)
        summary.last_ms = max(summary.last_ms, record.failed_at_ms)
    return sorted(groups.values(), key=lambda s: (s.original_topic, -s.count, s.error_code))


@dataclass(frozen=True)
class DlqSelection:
    """Which dead letters to replay.

    Attributes:
        partition: only this DLQ partition (None: all).
        from_offset: only offsets ≥ this (None: from the start).
        to_offset: only offsets ≤ this (None: to the end).
        error_code: only this error code (None: any).
        again: include records before the dlq-replay mark (already replayed).
    """

    partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    error_code: str | None = None
    again: bool = False

    def matches(self, record: DlqRecord) -> bool:
        """Whether ``record`` is in the partition, offset range and error code asked for."""
        return (
            (self.partition is None or record.partition == self.partition)
            and (self.from_offset is None or record.offset >= self.from_offset)
            and (self.to_offset is None or record.offset <= self.to_offset)
            and (self.error_code is None or record.error_code == self.error_code)
        )


def select(
    records: Iterable[DlqRecord], selection: DlqSelection, marks: Mapping[int, int], *, target: str | None = None
) -> tuple[list[DlqRecord], list[tuple[DlqRecord, str]]]:
    """The records to send back, and the matching ones left out with why. Pure.

    Left out: already replayed (before the mark, unless ``again``), no value (dropped as too
    large), no ``original_topic`` header and no ``target`` given.
    """
    chosen: list[DlqRecord] = []
    skipped: list[tuple[DlqRecord, str]] = []
    for record in records:
        if not selection.matches(record):
            continue
        if not selection.again and record.offset < marks.get(record.partition, 0):
            skipped.append((record, "already replayed (use --again)"))
        elif record.value is None:
            skipped.append((record, "no value: it was dropped as too large when dead-lettered"))
        elif target is None and not record.original_topic:
            skipped.append((record, "no original_topic header (use --to TOPIC)"))
        else:
            chosen.append(record)
    return chosen, skipped


def replay_headers(record: DlqRecord, replayed_at_ms: int) -> list[tuple[str, bytes]]:
    """Headers of the record sent back: where it comes from, when, and the error it had. Pure.

    The DLQ headers themselves are not copied: if it fails again, its new DLQ record gets fresh ones.
    """
    values = (f"{record.topic}:{record.partition}:{record.offset}", str(replayed_at_ms), record.error_code)
    return [(name, value.encode("utf-8")) for name, value in zip(REPLAY_HEADERS, values, strict=True)]


def advance_marks(current: Mapping[int, int], sent: Iterable[DlqRecord]) -> dict[int, int]:
    """DLQ partition → new mark (last sent offset + 1), only where it moves forward. Pure."""
    marks: dict[int, int] = {}
    for record in sent:
        after = record.offset + 1
        if after > max(current.get(record.partition, 0), marks.get(record.partition, 0)):
            marks[record.partition] = after
    return marks


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_STRING:
        return f"{value[:_MAX_STRING]}… ({len(value)} chars)"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list | tuple) and len(value) > _SEQUENCE_PREVIEW:
        head = ", ".join(str(_shorten(v)) for v in value[:_SEQUENCE_PREVIEW])
        return f"[{head}, … ({len(value)} items)]"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    return value


def preview(value: bytes | None, decode: Callable[[bytes], Any] | None, *, max_bytes: int = 64) -> str:
    """A short description of a value: its decoded fields (long ones shortened), else a hex preview. Pure.

    Args:
        value: the bytes.
        decode: turns bytes into a record with ``to_record()`` (or a dict); raising means undecodable.
        max_bytes: how many bytes the hex preview shows.
    """
    if value is None:
        return "(no value)"
    if decode is not None:
        try:
            decoded = decode(value)
        except DocstreamError:
            decoded = None
        if decoded is not None:
            fields = decoded.to_record() if hasattr(decoded, "to_record") else decoded
            body = json.dumps(_shorten(fields), ensure_ascii=False, default=str)
            return f"{type(decoded).__name__} {body}"
    shown = value[:max_bytes].hex(" ")
    more = f" … ({len(value)} bytes)" if len(value) > max_bytes else f" ({len(value)} bytes)"
    return f"undecodable: {shown}{more}"


def _when(epoch_ms: int) -> str:
    if epoch_ms <= 0:
        return "?"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


def summary_table(topic: str, summaries: Sequence[DlqSummary]) -> Table:
    """``dlq list`` output: count per original topic and error code, DLQ offsets, pending."""
    table = Table(title=f"{topic}: {sum(s.count for s in summaries)} records")
    for name in ("original topic", "error_code", "count", "pending", "DLQ offsets (partition: first-last)",
                 "first failed", "last failed", "example error"):
        table.add_column(name, justify="right" if name in ("count", "pending") else "left", overflow="fold")
    for s in summaries:
        offsets = ", ".join(f"{p}: {a}-{b}" for p, (a, b) in sorted(s.offsets.items()))
        table.add_row(s.original_topic, s.error_code, str(s.count), str(s.pending), offsets, _when(s.first_ms),
                      _when(s.last_ms), _shorten(s.example_error))
    return table


def records_table(records: Sequence[DlqRecord], decode: Callable[[bytes], Any] | None, *, max_bytes: int) -> Table:
    """``dlq show`` output: one row per record with its headers and value preview."""
    table = Table(title=f"{len(records)} records", show_lines=True)
    table.add_column("partition:offset", no_wrap=True)
    table.add_column("key", overflow="fold")
    table.add_column("headers", overflow="fold")
    table.add_column("value", overflow="fold")
    for r in records:
        headers = "\n".join(f"{k}={_shorten(v.decode('utf-8', errors='replace'))}" for k, v in r.headers)
        key = "" if r.key is None else _shorten(r.key.decode("utf-8", errors="replace"))
        table.add_row(f"{r.partition}:{r.offset}", key, headers, preview(r.value, decode, max_bytes=max_bytes))
    return table


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
