"""AvroSerde: every record type in both wire formats, cross-format reading, schema evolution, poison bytes."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from docstream.avro import AvroSchema, AvroSerde, SchemaSet, find_schemas_dir, frame_confluent, frame_single_object
from docstream.errors import SchemaError
from docstream.records import ChunkCreated, ChunkEmbedded, DocumentCompleted, DocumentSubmitted, JobStatus
from docstream.settings import KafkaSettings
from tests.fixtures.kafka import records_of_every_type

_TOPIC = "docstream.test"


def _registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


@pytest.fixture
def single() -> AvroSerde:
    return AvroSerde(KafkaSettings())


@pytest.fixture
def confluent() -> AvroSerde:
    return AvroSerde(KafkaSettings(), registry=_registry())


@pytest.mark.parametrize("record", records_of_every_type(), ids=lambda r: type(r).__name__)
def test_single_object_round_trip(single: AvroSerde, record: object) -> None:
    data = single.serialize(record, _TOPIC)  # type: ignore[arg-type]
    assert single.wire_format == "single_object"
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == single.schemas.get(record.schema_name).fingerprint  # type: ignore[attr-defined]
    assert single.deserialize(data, _TOPIC) == record


@pytest.mark.parametrize("record", records_of_every_type(), ids=lambda r: type(r).__name__)
def test_confluent_round_trip(confluent: AvroSerde, record: object) -> None:
    data = confluent.serialize(record, _TOPIC)  # type: ignore[arg-type]
    assert confluent.wire_format == "confluent"
    assert data[0] == 0
    assert confluent.deserialize(data, _TOPIC) == record


def test_timestamps_come_back_aware_utc(single: AvroSerde) -> None:
    record = records_of_every_type()[0]
    back = single.deserialize(single.serialize(record, _TOPIC), _TOPIC)
    assert isinstance(back, DocumentSubmitted)
    assert back.submitted_at.utcoffset() is not None and back.submitted_at.utcoffset().total_seconds() == 0


def test_each_reader_accepts_both_formats() -> None:
    registry = _registry()
    confluent = AvroSerde(KafkaSettings(), registry=registry)
    single = AvroSerde(KafkaSettings(), registry=None)
    reader = AvroSerde(KafkaSettings(), registry=registry)
    record = records_of_every_type()[1]
    assert reader.deserialize(confluent.serialize(record, _TOPIC), _TOPIC) == record
    assert reader.deserialize(single.serialize(record, _TOPIC), _TOPIC) == record
    assert single.deserialize(single.serialize(record, _TOPIC), _TOPIC) == record


def test_confluent_schema_is_registered_under_the_topic_value_subject() -> None:
    registry = _registry()
    serde = AvroSerde(KafkaSettings(), registry=registry)
    data = serde.serialize(records_of_every_type()[-1], "docstream.jobs")
    latest = registry.get_latest_version("docstream.jobs-value")
    assert latest.schema_id == int.from_bytes(data[1:5], "big")
    assert json.loads(latest.schema.schema_str)["name"] == "JobStatus"


def test_settings_url_selects_the_confluent_format() -> None:
    serde = AvroSerde(KafkaSettings(schema_registry_url=f"mock://{uuid.uuid4().hex}"))
    record = records_of_every_type()[-1]
    data = serde.serialize(record, _TOPIC)
    assert data[0] == 0
    assert serde.deserialize(data, _TOPIC) == record


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "schema_unknown_format"),
        (b"\xff\xfe garbage", "schema_unknown_format"),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", "schema_unknown_fingerprint"),
        (frame_confluent(7, b"body"), "schema_registry_missing"),
    ],
)
def test_undecodable_bytes_raise_schema_error_with_raw_bytes(single: AvroSerde, data: bytes, code: str) -> None:
    with pytest.raises(SchemaError) as info:
        single.deserialize(data, _TOPIC)
    assert info.value.code == code
    assert info.value.raw == data


def test_unknown_registry_id_is_a_schema_error(confluent: AvroSerde) -> None:
    with pytest.raises(SchemaError) as info:
        confluent.deserialize(frame_confluent(4242, b"\x00"), _TOPIC)
    assert info.value.code == "schema_unknown_id"


def test_corrupt_or_trailing_body_is_a_schema_error(single: AvroSerde) -> None:
    good = single.serialize(records_of_every_type()[-1], _TOPIC)
    for data in (good[:-3], good + b"\x01\x02", good[:10] + b"\xff" * 40):
        with pytest.raises(SchemaError) as info:
            single.deserialize(data, _TOPIC)
        assert info.value.code == "schema_corrupt_body"
        assert info.value.raw == data


def test_record_that_violates_its_schema_is_refused(single: AvroSerde) -> None:
    at = records_of_every_type()[-1].updated_at  # type: ignore[union-attr]
    bad = JobStatus(job_id="j", state="exploded", document_count=1, updated_at=at)  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        single.serialize(bad, _TOPIC)


def test_records_of_an_older_schema_version_are_read_through_schema_resolution(tmp_path: Path) -> None:
    schemas = tmp_path / "schemas"
    shutil.copytree(find_schemas_dir(), schemas)
    current = json.loads((schemas / "ChunkCreated.avsc").read_text())
    older = {**current, "fields": [f for f in current["fields"] if f["name"] not in ("heading", "model_id")]}
    (schemas / "history").mkdir(exist_ok=True)
    (schemas / "history" / "ChunkCreated.v0.avsc").write_text(json.dumps(older))
    old_schema = AvroSchema.from_json(older, schemas / "history" / "ChunkCreated.v0.avsc")
    assert SchemaSet.load(schemas).by_fingerprint(old_schema.fingerprint) == old_schema
    serde = AvroSerde(KafkaSettings(), schemas_dir=schemas)
    record = records_of_every_type()[1]
    assert isinstance(record, ChunkCreated)
    body = io.BytesIO()
    values = {k: v for k, v in record.to_record().items() if k not in ("heading", "model_id")}
    fastavro.schemaless_writer(body, old_schema.parsed, values)

    back = serde.deserialize(frame_single_object(old_schema.fingerprint, body.getvalue()), _TOPIC)

    assert isinstance(back, ChunkCreated)
    assert back.heading is None and back.model_id is None
    assert back.text == record.text and back.created_at == record.created_at


def _decoded_from_history(single: AvroSerde, name: str, history: str) -> tuple[Any, Any]:
    """The example ``name`` record written with its old schema ``schemas/history/<name>.<history>.avsc`` (only
    the fields that version had), and what the current serde decodes from it: (record, decoded)."""
    path = find_schemas_dir() / "history" / f"{name}.{history}.avsc"
    old = AvroSchema.from_json(json.loads(path.read_text()), path)
    record = next(r for r in records_of_every_type() if type(r).__name__ == name)
    known = {f["name"] for f in old.parsed["fields"]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old.parsed, {k: v for k, v in record.to_record().items() if k in known})
    return record, single.deserialize(frame_single_object(old.fingerprint, body.getvalue()), _TOPIC)


@pytest.mark.parametrize("name", ["ChunkEmbedded", "DocumentCompleted"])
def test_records_written_before_chunker_settings_read_with_its_default(single: AvroSerde, name: str) -> None:
    """v1 of ChunkEmbedded and DocumentCompleted (schemas/history) had no chunker_settings: such records,
    on a topic being replayed, still decode, with "" and None."""
    record, back = _decoded_from_history(single, name, "v1")

    assert isinstance(back, ChunkEmbedded | DocumentCompleted)
    assert back.chunker_settings == ("" if name == "ChunkEmbedded" else None)
    assert back.doc_id == record.doc_id


@pytest.mark.parametrize("name", ["ChunkEmbedded", "DocumentCompleted"])
def test_records_written_before_runtime_read_with_none(single: AvroSerde, name: str) -> None:
    """v2 of ChunkEmbedded and DocumentCompleted (schemas/history) had no runtime: such records decode
    with None and keep their chunker_settings."""
    record, back = _decoded_from_history(single, name, "v2")
    assert record.runtime is not None

    assert isinstance(back, ChunkEmbedded | DocumentCompleted)
    assert back.runtime is None
    assert back.chunker_settings == record.chunker_settings


@pytest.mark.parametrize(("name", "history"), [("ChunkCreated", "v1"), ("ChunkEmbedded", "v3"),
                                               ("DocumentCompleted", "v3"), ("JobStatus", "v1")])
def test_records_written_before_accounting_read_with_empty_figures(single: AvroSerde, name: str,
                                                                     history: str) -> None:
    """The schema versions before job accounting (schemas/history) had no model_us, stage_us, device, pages,
    chunks or tokens: such records decode with 0, {} and None."""
    _, back = _decoded_from_history(single, name, history)

    assert type(back).__name__ == name and back.stage_us == {}  # type: ignore[union-attr]
    if isinstance(back, ChunkEmbedded):
        assert (back.model_us, back.device) == (0, None)
    if isinstance(back, DocumentCompleted | JobStatus):
        assert back.model_us == {}
    if isinstance(back, JobStatus):
        assert (back.pages, back.chunks, back.tokens) == (0, 0, 0)


@pytest.mark.parametrize(("name", "history"), [("ChunkCreated", "v2"), ("DocumentCompleted", "v4")])
def test_records_written_before_provenance_read_as_text_layer(single: AvroSerde, name: str, history: str) -> None:
    """ChunkCreated v2 and DocumentCompleted v4 (schemas/history) had no provenance: such records decode as
    text-layer chunks with no verdicts, and documents with no page counts."""
    _, back = _decoded_from_history(single, name, history)

    if isinstance(back, ChunkCreated):
        assert (back.text_source, back.ocr_engine, back.page_verdicts) == ("text_layer", None, [])
    else:
        assert isinstance(back, DocumentCompleted)
        assert (back.pages_by_verdict, back.pages_by_source) == ({}, {})
