"""AvroSerde: docstream records to bytes and back, in both wire formats.

Writing picks the format from the settings: Confluent wire format through a Schema Registry
when ``kafka.schema_registry_url`` is set (or a registry client is given), Avro single-object
encoding otherwise. Reading accepts both, whatever the settings, and resolves the writer's
schema against the current one (Avro schema resolution), so records of older producers read
as today's records, records written under a name the current schema has as an alias included
(ChunkEmbedded reads as ChunkResult).
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException

from docstream.avro.schemas import AvroSchema, SchemaSet
from docstream.avro.segments import SegmentPlan, read_body, segment_plan, write_body
from docstream.avro.wire import WireFormat, frame_confluent, frame_single_object, parse_frame
from docstream.errors import ConfigError, DocstreamError, FatalError, RetryableError, SchemaError
from docstream.records import RECORD_TYPES, AnyRecord
from docstream.settings import KafkaSettings

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

__all__ = ["AvroSerde", "registry_client", "subject_name"]

# The registry client (confluent_kafka.schema_registry, httpx, authlib: ~0.2 s) is imported only
# where a registry is used, not by every process that encodes single-object records.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, EOFError, OverflowError, UnicodeDecodeError,
                  StopIteration, AttributeError)


def subject_name(topic: str) -> str:
    """Registry subject of a topic's values (TopicNameStrategy)."""
    return f"{topic}-value"


def registry_client(kafka: KafkaSettings) -> SchemaRegistryClient | None:
    """A Schema Registry client from the settings, or None when no registry URL is set.

    ``mock://<name>`` URLs give confluent-kafka's in-memory registry (one per client).
    """
    if not kafka.schema_registry_url:
        return None
    conf: dict[str, Any] = {"url": kafka.schema_registry_url}
    if kafka.schema_registry_basic_auth is not None:
        conf["basic.auth.credentials.source"] = "USER_INFO"
        conf["basic.auth.user.info"] = kafka.schema_registry_basic_auth.get_secret_value()
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient.new_client(conf)


def _registry_failures() -> tuple[type[BaseException], ...]:
    import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return (SchemaRegistryError, httpx.HTTPError, OSError)


def _registry_error(exc: BaseException, what: str, raw: bytes | None = None) -> DocstreamError:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        if status == 404:
            return SchemaError(f"{what}: not in the schema registry", code="schema_unknown_id", raw=raw)
        if status in (401, 403):
            return ConfigError(f"{what}: schema registry refused the credentials (HTTP {status})",
                               code="schema_registry_auth")
        if status in (408, 429) or status >= 500 or status < 0:
            return RetryableError(f"{what}: schema registry unavailable (HTTP {status})",
                                  code="schema_registry_unavailable")
        return FatalError(f"{what}: schema registry rejected the request: {exc}", code="schema_registry_rejected")
    return RetryableError(f"{what}: schema registry unreachable: {type(exc).__name__}",
                          code="schema_registry_unavailable")


class AvroSerde:
    """Serialize docstream records to Avro and back.

    Args:
        kafka: Kafka settings; ``schema_registry_url`` selects the Confluent wire format.
        schemas_dir: folder of ``*.avsc``; default: the repository's ``schemas/``.
        registry: a Schema Registry client to use instead of one built from the settings
            (tests pass ``SchemaRegistryClient.new_client({"url": "mock://..."})``).

    Raises:
        ConfigError: the schemas cannot be loaded.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        schemas_dir: Path | None = None,
        registry: SchemaRegistryClient | None = None,
    ) -> None:
        self._schemas = SchemaSet.load(schemas_dir)
        self._registry = registry if registry is not None else registry_client(kafka)
        self._ids: dict[tuple[str, str], int] = {}
        self._writers_by_id: dict[int, AvroSchema] = {}
        self._lock = threading.Lock()
        self._plans: dict[bytes, SegmentPlan | None] = {}
        self._same_body: dict[tuple[bytes, bytes], bool] = {}
        missing = [name for name in RECORD_TYPES if name not in self._schemas]
        if missing:
            raise ConfigError(f"no schema for record types {missing}", code="schemas_missing")

    @property
    def wire_format(self) -> WireFormat:
        """The format ``serialize`` writes."""
        return "confluent" if self._registry is not None else "single_object"

    @property
    def schemas(self) -> SchemaSet:
        """The loaded schemas."""
        return self._schemas

    def serialize(self, record: AnyRecord, topic: str) -> bytes:
        """Encode ``record`` (its class picks the schema) for ``topic``.

        Raises:
            SchemaError: the record does not fit its schema.
            RetryableError: the schema registry is unavailable.
            FatalError: the schema registry refused the schema or the credentials.
        """
        schema = self._schemas.get(record.schema_name)
        plan = self._plan(schema)
        out = io.BytesIO()
        try:
            if plan is None:
                schemaless_writer(out, schema.parsed, record.to_record(), strict_allow_default=True)
            else:
                write_body(plan, record.to_record(), out)
        except _DECODE_ERRORS as exc:
            raise SchemaError(f"{record.schema_name} does not fit its schema: {exc}", code="schema_mismatch") from exc
        body = out.getvalue()
        if self._registry is None:
            return frame_single_object(schema.fingerprint, body)
        return frame_confluent(self._schema_id(topic, schema), body)

    def deserialize(self, data: bytes, topic: str) -> AnyRecord:
        """Decode bytes in either wire format into a docstream record.

        Raises:
            SchemaError: the bytes are undecodable (unknown format, fingerprint or schema id,
                corrupt body, unknown record type); ``raw`` keeps the bytes.
            RetryableError: the schema registry is unavailable.
            FatalError: the schema registry refused the credentials.
        """
        frame = parse_frame(data)
        if frame.fingerprint is not None:
            writer = self._schemas.by_fingerprint(frame.fingerprint)
            if writer is None:
                raise SchemaError("unknown schema fingerprint " + frame.fingerprint.hex(),
                                  code="schema_unknown_fingerprint", raw=data)
        else:
            writer = self._writer_by_id(int(frame.schema_id or 0), data)
        return self._decode(writer, frame.body, data)

    def _decode(self, writer: AvroSchema, body: bytes, raw: bytes) -> AnyRecord:
        try:
            reader = self._schemas.reader_for(writer)
        except KeyError:
            raise SchemaError(f"no local schema for record {writer.full_name}", code="schema_unknown_record",
                              raw=raw) from None
        cls = RECORD_TYPES.get(reader.name)
        if cls is None:
            raise SchemaError(f"no record class for {reader.name}", code="schema_unknown_record", raw=raw)
        stream = io.BytesIO(body)
        try:
            same = self._same_body_layout(writer, reader)
            plan = self._plan(reader) if same else None
            values: Any = (read_body(plan, stream) if plan is not None
                           else schemaless_reader(stream, writer.parsed, None if same else reader.parsed))
            record = cls.from_record(values)
        except _DECODE_ERRORS as exc:
            raise SchemaError(f"corrupt {writer.name} body: {type(exc).__name__}", code="schema_corrupt_body",
                              raw=raw) from exc
        except SchemaParseException as exc:
            raise SchemaError(f"{writer.name} cannot be read as {reader.name}: {exc}", code="schema_incompatible",
                              raw=raw) from exc
        if stream.tell() != len(body):
            raise SchemaError(f"{len(body) - stream.tell()} trailing bytes after a {writer.name} body",
                              code="schema_corrupt_body", raw=raw)
        return record  # type: ignore[return-value]

    def _same_body_layout(self, writer: AvroSchema, reader: AvroSchema) -> bool:
        """Whether ``writer``'s bodies are ``reader``'s as they are: the same schema, or one that differs only in
        the record's own name (a renamed record's older writer: names are not in the binary encoding), so the
        reader's segment plan reads them without a resolution."""
        if writer.fingerprint == reader.fingerprint:
            return True
        key = (writer.fingerprint, reader.fingerprint)
        same = self._same_body.get(key)
        if same is None:
            renamed = writer.canonical_form.replace(json.dumps(writer.full_name), json.dumps(reader.full_name), 1)
            same = writer.full_name != reader.full_name and renamed == reader.canonical_form
            with self._lock:
                self._same_body[key] = same
        return same

    def _plan(self, schema: AvroSchema) -> SegmentPlan | None:
        """The segment plan of ``schema`` (float arrays written by numpy), made once per schema."""
        try:
            return self._plans[schema.fingerprint]
        except KeyError:
            plan = segment_plan(schema.raw)
            with self._lock:
                self._plans[schema.fingerprint] = plan
            return plan

    def _schema_id(self, topic: str, schema: AvroSchema) -> int:
        key = (topic, schema.name)
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        assert self._registry is not None
        from confluent_kafka.schema_registry import Schema

        try:
            schema_id = self._registry.register_schema(subject_name(topic), Schema(json.dumps(schema.raw), "AVRO"))
        except _registry_failures() as exc:
            raise _registry_error(exc, f"registering {schema.name} for {topic}") from exc
        with self._lock:
            self._ids[key] = schema_id
            self._writers_by_id.setdefault(schema_id, schema)
        return schema_id

    def _writer_by_id(self, schema_id: int, raw: bytes) -> AvroSchema:
        cached = self._writers_by_id.get(schema_id)
        if cached is not None:
            return cached
        if self._registry is None:
            raise SchemaError("Confluent wire format but no schema registry is configured",
                              code="schema_registry_missing", raw=raw)
        try:
            registered = self._registry.get_schema(schema_id)
        except _registry_failures() as exc:
            error = _registry_error(exc, f"schema id {schema_id}", raw)
            raise error from exc
        try:
            raw_schema = json.loads(registered.schema_str or "")
            writer = AvroSchema.from_json(raw_schema, Path(f"registry:{schema_id}"))
        except (ValueError, ConfigError) as exc:
            raise SchemaError(f"schema id {schema_id} is not an Avro record schema", code="schema_unknown_id",
                              raw=raw) from exc
        with self._lock:
            self._writers_by_id[schema_id] = writer
        return writer
