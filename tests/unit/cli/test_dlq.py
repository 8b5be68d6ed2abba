"""DLQ tools (docstream_cli.ops.dlq), pure half: headers read back, summaries, selection, replay marks, previews."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from docstream.avro.segments import Float32Vector
from docstream.avro.serde import AvroSerde
from docstream.errors import InputError, SchemaError
from docstream.kafka.dlq import dlq_headers
from docstream.records import ChunkCreated
from docstream.settings import Settings
from docstream_cli.ops.dlq_plan import (
    REPLAY_HEADERS,
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

DLQ = "p.chunks.dlq"
BAD_BYTES = SchemaError("bad")


def _record(offset: int, *, partition: int = 0, error: BaseException | str = BAD_BYTES,
            topic: str | None = "p.chunks", value: bytes | None = b"v", at_ms: int = 1_700_000_000_000) -> DlqRecord:
    headers = dlq_headers(topic=topic or "", partition=3, offset=100 + offset, error=error, attempts=2,
                          service="inference", timestamp_ms=at_ms)
    if topic is None:
        headers = [(k, v) for k, v in headers if k != "original_topic"]
    return DlqRecord(topic=DLQ, partition=partition, offset=offset, key=b"doc-1", value=value,
                     headers=tuple(headers), timestamp_ms=5)


def test_dlq_headers_read_back() -> None:
    record = _record(7)
    assert (record.original_topic, record.original_partition, record.original_offset) == ("p.chunks", 3, 107)
    assert (record.error_code, record.error, record.failed_at_ms) == ("schema_error", "bad", 1_700_000_000_000)
    bare = DlqRecord(topic=DLQ, partition=0, offset=0, key=None, value=None, timestamp_ms=9)
    assert (bare.original_topic, bare.original_partition, bare.error_code, bare.failed_at_ms) == (None, None,
                                                                                                   "unknown", 9)


def test_topic_names_resolve_to_their_dlq() -> None:
    assert resolve_dlq_topic("p.chunks") == "p.chunks.dlq"
    assert resolve_dlq_topic(" p.chunks.dlq ") == "p.chunks.dlq"
    with pytest.raises(InputError):
        resolve_dlq_topic(" ")
    assert replay_group(Settings().with_overrides(kafka={"topic_prefix": "p"})) == "p-dlq-replay"


def test_summary_counts_per_original_topic_and_error_code() -> None:
    records = [
        _record(0), _record(1, partition=1), _record(2, error=ValueError("boom"), at_ms=1_700_000_100_000),
        _record(3, at_ms=1_600_000_000_000), _record(4, topic="p.chunks.results"),
    ]
    summaries = summarize(records, marks={0: 2})
    assert [(s.original_topic, s.error_code, s.count, s.pending) for s in summaries] == [
        ("p.chunks", "schema_error", 3, 2),
        ("p.chunks", "unhandled_error", 1, 1),
        ("p.chunks.results", "schema_error", 1, 1),
    ]
    first = summaries[0]
    assert first.offsets == {0: (0, 3), 1: (1, 1)}
    assert (first.first_ms, first.last_ms) == (1_600_000_000_000, 1_700_000_000_000)


def test_selection_filters_and_leaves_out_what_cannot_or_should_not_go() -> None:
    records = [
        _record(0), _record(1), _record(2, error=ValueError("x")), _record(3, value=None), _record(4, topic=None),
        _record(5, partition=1),
    ]
    chosen, skipped = select(records, DlqSelection(), marks={0: 1})
    assert [r.offset for r in chosen] == [1, 2, 5]
    assert [(r.offset, why.split(" ")[0]) for r, why in skipped] == [(0, "already"), (3, "no"), (4, "no")]
    again, _ = select(records, DlqSelection(again=True), marks={0: 1})
    assert [r.offset for r in again] == [0, 1, 2, 5]
    to_topic, _ = select(records, DlqSelection(from_offset=4), marks={}, target="elsewhere")
    assert [r.offset for r in to_topic] == [4, 5]
    ranged, _ = select(records, DlqSelection(partition=0, from_offset=1, to_offset=2, error_code="schema_error"),
                       marks={})
    assert [r.offset for r in ranged] == [1]


def test_replay_headers_say_where_from_and_why() -> None:
    headers = replay_headers(_record(4, partition=2), replayed_at_ms=1234)
    assert [k for k, _ in headers] == list(REPLAY_HEADERS)
    assert dict(headers) == {"replayed_from": b"p.chunks.dlq:2:4", "replayed_at": b"1234",
                             "replayed_error_code": b"schema_error"}


def test_marks_only_move_forward() -> None:
    sent = [_record(3), _record(9), _record(1, partition=1), _record(2, partition=2)]
    assert advance_marks({0: 5, 1: 7}, sent) == {0: 10, 2: 3}
    assert advance_marks({}, []) == {}


def _chunk(text: str) -> ChunkCreated:
    at = datetime(2024, 5, 17, tzinfo=UTC)
    return ChunkCreated(job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="ab" * 32,
                        text=text, page_start=1, page_end=1, char_start=0, char_end=len(text), token_count=3,
                        chunker_settings="s", created_at=at)


def test_preview_decodes_and_shortens_or_shows_hex() -> None:
    serde = AvroSerde(Settings().kafka)
    value = serde.serialize(_chunk("word " * 500), "p.chunks")
    shown = preview(value, lambda b: serde.deserialize(b, "p.chunks"))
    assert shown.startswith("ChunkCreated {") and "(2500 chars)" in shown and len(shown) < 1000
    junk = bytes(range(200))
    hexed = preview(junk, lambda b: serde.deserialize(b, "p.chunks"), max_bytes=4)
    assert hexed == "undecodable: 00 01 02 03 … (200 bytes)"
    assert preview(b"\x01\x02", None) == "undecodable: 01 02 (2 bytes)"
    assert preview(None, None) == "(no value)"
    listed = preview(b"x", lambda _: {"embedding": [0.5] * 384, "raw": b"abc"})
    assert "… (384 items)" in listed and "<3 bytes>" in listed
    # a decoded vector (a Float32Vector, not a list) is shortened as a list is, a short one shown whole
    vectors = preview(b"x", lambda _: {"embedding": Float32Vector([0.5] * 384), "short": Float32Vector([0.5])})
    assert "… (384 items)" in vectors and '"short": [0.5]' in vectors


def _render(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(renderable)
    return out.getvalue()


def test_tables_render_counts_headers_and_values() -> None:
    text = _render(summary_table(DLQ, summarize([_record(0), _record(1)])))
    assert "p.chunks.dlq: 2 records" in text and "0: 0-1" in text and "schema_error" in text
    shown = _render(records_table([_record(0, value=b"\xff" * 100)], None, max_bytes=8))
    assert "0:0" in shown and "original_topic=p.chunks" in shown and "(100 bytes)" in shown
