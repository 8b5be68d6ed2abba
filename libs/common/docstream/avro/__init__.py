"""docstream.avro: schemas by name from ``schemas/``, both Avro wire formats, fingerprints and serde."""

from docstream.avro.fingerprint import crc64_avro, fingerprint_bytes
from docstream.avro.schemas import AvroSchema, SchemaSet, find_schemas_dir
from docstream.avro.serde import AvroSerde, registry_client, subject_name
from docstream.avro.wire import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    Frame,
    WireFormat,
    frame_confluent,
    frame_single_object,
    parse_frame,
)

__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "AvroSchema",
    "AvroSerde",
    "Frame",
    "SchemaSet",
    "WireFormat",
    "crc64_avro",
    "find_schemas_dir",
    "fingerprint_bytes",
    "frame_confluent",
    "frame_single_object",
    "parse_frame",
    "registry_client",
    "subject_name",
]
