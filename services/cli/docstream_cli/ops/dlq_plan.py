"""DLQ planning, pure: a dead letter and its DLQ headers (``DlqRecord``), ``summarize``, ``select``,
``replay_headers``, ``advance_marks``, ``preview`` and the tables shown (docs/replay.md "Dead letters"). Reading a DLQ,
sending records back and the commands: ``docstream_cli.ops.dlq``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from docstream.errors import DocstreamError, InputError
from docstream.topics import Topics, dlq_topic

if TYPE_CHECKING:  # only its attributes are read: the plan imports nothing that reads the environment
    from docstream.settings import Settings

__all__ = [
    "REPLAY_GROUP_SERVICE",
    "REPLAY_HEADERS",
    "DlqRecord",
    "DlqSelection",
    "DlqSummary",
    "advance_marks",
    "preview",
    "records_table",
    "replay_group",
    "replay_headers",
    "resolve_dlq_topic",
    "select",
    "summarize",
    "summary_table",
]

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
    if isinstance(value, Sequence) and not isinstance(value, str):  # a list, a tuple, a vector (Float32Vector)
        if len(value) > _SEQUENCE_PREVIEW:
            head = ", ".join(str(_shorten(v)) for v in value[:_SEQUENCE_PREVIEW])
            return f"[{head}, … ({len(value)} items)]"
        return [_shorten(v) for v in value]
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
