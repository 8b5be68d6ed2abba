"""AvroSerde: every record type in both wire formats, cross-format reading, schema evolution, a renamed record's
older writers (ChunkEmbedded → ChunkResult), poison bytes."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from docstream.avro import AvroSchema, AvroSerde, SchemaSet, find_schemas_dir, frame_confluent, frame_single_object
from docstream.errors import ConfigError, SchemaError
from docstream.records import (
    ChunkCreated,
    ChunkEmbedded,
    ChunkResult,
    DocumentCompleted,
    DocumentSubmitted,
    JobStatus,
)
from docstream.settings import KafkaSettings
from docstream.topics import Topics
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


def _history(name: str, history: str) -> AvroSchema:
    path = find_schemas_dir() / "history" / f"{name}.{history}.avsc"
    return AvroSchema.from_json(json.loads(path.read_text()), path)


def _decoded_from_history(single: AvroSerde, name: str, history: str) -> tuple[Any, Any]:
    """The example record of the schema that reads ``schemas/history/<name>.<history>.avsc`` today (``name``'s, or
    the one whose alias it is: ChunkResult for ChunkEmbedded), written with that old schema (only the fields that
    version had), and what the current serde decodes from it: (record, decoded)."""
    old = _history(name, history)
    current = single.schemas.reader_for(old).name
    record = next(r for r in records_of_every_type() if r.schema_name == current)
    known = {f["name"] for f in old.parsed["fields"]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old.parsed, {k: v for k, v in record.to_record().items() if k in known})
    return record, single.deserialize(frame_single_object(old.fingerprint, body.getvalue()), _TOPIC)


@pytest.mark.parametrize("name", ["ChunkEmbedded", "DocumentCompleted"])
def test_records_written_before_chunker_settings_read_with_its_default(single: AvroSerde, name: str) -> None:
    """v1 of ChunkEmbedded and DocumentCompleted (schemas/history) had no chunker_settings: such records,
    on a topic being replayed, still decode, with "" and None."""
    record, back = _decoded_from_history(single, name, "v1")

    assert isinstance(back, ChunkResult | DocumentCompleted)
    assert back.chunker_settings == ("" if name == "ChunkEmbedded" else None)
    assert back.doc_id == record.doc_id


@pytest.mark.parametrize("name", ["ChunkEmbedded", "DocumentCompleted"])
def test_records_written_before_runtime_read_with_none(single: AvroSerde, name: str) -> None:
    """v2 of ChunkEmbedded and DocumentCompleted (schemas/history) had no runtime: such records decode
    with None and keep their chunker_settings."""
    record, back = _decoded_from_history(single, name, "v2")
    assert record.runtime is not None

    assert isinstance(back, ChunkResult | DocumentCompleted)
    assert back.runtime is None
    assert back.chunker_settings == record.chunker_settings


@pytest.mark.parametrize(("name", "history"), [("ChunkCreated", "v1"), ("ChunkEmbedded", "v3"),
                                               ("DocumentCompleted", "v3"), ("JobStatus", "v1")])
def test_records_written_before_accounting_read_with_empty_figures(single: AvroSerde, name: str,
                                                                     history: str) -> None:
    """The schema versions before job accounting (schemas/history) had no model_us, stage_us, device, pages,
    chunks or tokens: such records decode with 0, {} and None."""
    record, back = _decoded_from_history(single, name, history)

    assert type(back) is type(record) and back.stage_us == {}
    if isinstance(back, ChunkResult):
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


_LAST_CHUNK_EMBEDDED = "881e025b86f16313"
"""CRC-64-AVRO fingerprint of the last ChunkEmbedded (schemas/history/ChunkEmbedded.v5.avsc, the
schemas/ChunkEmbedded.avsc of the release before the rename): what its single-object records carry."""


def _chunk_results() -> list[ChunkResult]:
    return [r for r in records_of_every_type() if isinstance(r, ChunkResult)]


def _written_as_chunk_embedded(record: ChunkResult) -> tuple[AvroSchema, bytes]:
    """``record``'s Avro body as the release before wrote it: with the last ChunkEmbedded schema, by fastavro."""
    old = _history("ChunkEmbedded", "v5")
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old.parsed, record.to_record())
    return old, body.getvalue()


def test_the_last_chunk_embedded_schema_is_the_one_released(single: AvroSerde) -> None:
    old = _history("ChunkEmbedded", "v5")
    current = single.schemas.get("ChunkResult")
    assert old.full_name == "io.docstream.v1.ChunkEmbedded" and old.fingerprint.hex() == _LAST_CHUNK_EMBEDDED
    assert current.full_name == "io.docstream.v1.ChunkResult" and current.aliases == (old.full_name,)
    assert current.fingerprint != old.fingerprint  # the name is in the canonical form: a new fingerprint
    assert [f["name"] for f in current.raw["fields"]] == [f["name"] for f in old.raw["fields"]]


@pytest.mark.parametrize("record", _chunk_results(), ids=lambda r: r.status)
def test_a_chunk_embedded_record_in_single_object_encoding_decodes_as_a_chunk_result(
        single: AvroSerde, record: ChunkResult) -> None:
    """A record an inference instance of the release before wrote (chunks.embedded, no registry): its fingerprint
    is the last ChunkEmbedded's, found in schemas/history, and the reader's alias resolves its name."""
    old, body = _written_as_chunk_embedded(record)

    back = single.deserialize(frame_single_object(old.fingerprint, body), Topics().legacy_results)

    assert type(back) is ChunkResult and back == record
    assert isinstance(back, ChunkEmbedded)  # the deprecated Python name: the same class


@pytest.mark.parametrize("record", _chunk_results(), ids=lambda r: r.status)
def test_a_chunk_embedded_record_in_confluent_wire_format_decodes_as_a_chunk_result(record: ChunkResult) -> None:
    """The same through a Schema Registry: the old producer registered ChunkEmbedded under the old topic's
    subject; its id gives the writer schema, resolved into ChunkResult. Today's records register under the new
    topic's subject, a subject of its own (no compatibility check against ChunkEmbedded's)."""
    registry = _registry()
    topics = Topics()
    old, body = _written_as_chunk_embedded(record)
    old_id = registry.register_schema(f"{topics.legacy_results}-value", Schema(json.dumps(old.raw), "AVRO"))
    serde = AvroSerde(KafkaSettings(), registry=registry)

    back = serde.deserialize(frame_confluent(old_id, body), topics.legacy_results)

    assert type(back) is ChunkResult and back == record
    new = serde.serialize(record, topics.results)
    new_id = int.from_bytes(new[1:5], "big")
    assert new_id != old_id and serde.deserialize(new, topics.results) == record
    assert sorted(registry.get_subjects()) == [f"{topics.legacy_results}-value", f"{topics.results}-value"]
    assert json.loads(registry.get_latest_version(f"{topics.results}-value").schema.schema_str)["name"] == "ChunkResult"


def test_a_renamed_records_older_writer_with_the_same_fields_is_read_without_a_resolution(
        single: AvroSerde, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names are not in Avro's binary encoding: a body of the last ChunkEmbedded is a ChunkResult body, read by
    ChunkResult's segment plan (numpy for the embedding) as fastavro's resolution reads it, without it."""
    record = _chunk_results()[0]
    old, body = _written_as_chunk_embedded(record)
    resolved = fastavro.schemaless_reader(io.BytesIO(body), old.parsed, single.schemas.get("ChunkResult").parsed)

    def no_resolution(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read through fastavro's schema resolution")

    monkeypatch.setattr("docstream.avro.serde.schemaless_reader", no_resolution)
    back = single.deserialize(frame_single_object(old.fingerprint, body), _TOPIC)
    assert back == ChunkResult.from_record(resolved) == record


def test_an_alias_resolves_only_the_name_it_gives(tmp_path: Path) -> None:
    """Avro's alias rule: a current schema reads the writer whose full name one of its aliases is (a relative
    alias is in the schema's namespace); a writer of another namespace or name is no record of ours."""
    schemas = tmp_path / "schemas"
    shutil.copytree(find_schemas_dir(), schemas)
    current = json.loads((schemas / "JobStatus.avsc").read_text())
    (schemas / "JobStatus.avsc").write_text(json.dumps({**current, "aliases": ["JobProgress"]}))
    serde = AvroSerde(KafkaSettings(), schemas_dir=schemas)
    record = records_of_every_type()[-1]
    assert serde.schemas.get("JobStatus").aliases == ("io.docstream.v1.JobProgress",)
    for name, known in (("JobProgress", True), ("io.other.JobProgress", False), ("JobProgres", False)):
        writer = AvroSchema.from_json({**current, "name": name}, tmp_path / f"{name}.avsc")
        body = io.BytesIO()
        fastavro.schemaless_writer(body, writer.parsed, record.to_record())
        registry = _registry()
        schema_id = registry.register_schema("x-value", Schema(json.dumps(writer.raw), "AVRO"))
        data = frame_confluent(schema_id, body.getvalue())
        if known:
            assert AvroSerde(KafkaSettings(), schemas_dir=schemas, registry=registry).deserialize(data, "x") == record
            continue
        with pytest.raises(SchemaError) as info:
            AvroSerde(KafkaSettings(), schemas_dir=schemas, registry=registry).deserialize(data, "x")
        assert info.value.code == "schema_unknown_record"


def test_an_alias_that_names_another_schema_is_refused(tmp_path: Path) -> None:
    schemas = tmp_path / "schemas"
    shutil.copytree(find_schemas_dir(), schemas)
    current = json.loads((schemas / "JobStatus.avsc").read_text())
    (schemas / "JobStatus.avsc").write_text(json.dumps({**current, "aliases": ["io.docstream.v1.ChunkEmbedded"]}))
    with pytest.raises(ConfigError, match="ChunkEmbedded"):
        SchemaSet.load(schemas)
