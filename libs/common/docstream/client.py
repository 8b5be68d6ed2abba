"""DocstreamClient: put documents that already live in object storage on docstream's intake topic.

For producers outside docstream (a crawler, an upload service) whose documents are already
in a bucket or a shared folder: instead of `docstream submit`, they produce one
DocumentSubmitted per document, keyed by doc_id, in docstream's Avro format. The chunker
reads ``source_uri`` only when it lies under its object store or one of
``object_store.allowed_roots`` (see docs/intake.md, "External producers").

Example::

    from docstream.client import DocstreamClient

    with DocstreamClient("kafka-1:9092", schema_registry_url="http://registry:8081") as client:
        doc_id = client.submit_uri(
            "s3://incoming/reports/q3.pdf",
            job_id="crawl-2024-09-30",
            content_sha256="9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            size_bytes=482_113,
            filename="q3.pdf",
            media_type="application/pdf",
        )
    # leaving the block flushed every record and raised if any was not delivered

Extra keyword arguments are librdkafka options; underscores stand for dots
(``security_protocol="SASL_SSL"`` is ``security.protocol``); option names with dots can also
be passed as ``**{"sasl.mechanism": "PLAIN"}``.
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException

from docstream.avro.serde import AvroSerde
from docstream.errors import ConfigError, InputError
from docstream.ids import check_source_key, validate_id
from docstream.ids import doc_id as make_doc_id
from docstream.kafka.clients import ReliableProducer
from docstream.records import DocumentSubmitted, utc_now
from docstream.settings import KafkaSettings
from docstream.topics import Topics

__all__ = ["DocstreamClient", "validate_id"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
def _option_name(name: str) -> str:
    return name if "." in name else name.replace("_", ".")


class DocstreamClient:
    """A producer of DocumentSubmitted records for docstream's intake topic.

    Args:
        bootstrap_servers: Kafka brokers, ``host:port[,host:port...]``.
        topic_prefix: docstream's topic prefix (intake topic: ``<prefix>.documents.submitted``).
        schema_registry_url: set: Confluent wire format through this registry; unset: Avro
            single-object encoding (docstream reads both).
        **client_options: librdkafka options (see the module docstring).

    Raises:
        ConfigError: the schemas cannot be loaded or the options are invalid.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic_prefix: str = "docstream",
        schema_registry_url: str | None = None,
        **client_options: Any,
    ) -> None:
        try:
            kafka = KafkaSettings(
                bootstrap_servers=bootstrap_servers,
                topic_prefix=topic_prefix,
                schema_registry_url=schema_registry_url,
                client_options={_option_name(k): str(v) for k, v in client_options.items()},
            )  # type: ignore[call-arg]
        except ValueError as exc:
            raise ConfigError(f"invalid client settings: {exc}") from exc
        self._topic = Topics(topic_prefix).submitted
        self._serde = AvroSerde(kafka)
        try:
            self._producer = ReliableProducer(kafka, client_id="docstream-client")
        except KafkaException as exc:
            raise ConfigError(f"invalid client options: {exc.args[0].str()}") from exc

    @property
    def topic(self) -> str:
        """The intake topic records go to."""
        return self._topic

    def submit_uri(
        self,
        source_uri: str,
        *,
        job_id: str,
        content_sha256: str,
        size_bytes: int,
        filename: str | None = None,
        media_type: str | None = None,
        tenant: str = "default",
        model_id: str | None = None,
        source_key: str | None = None,
    ) -> str:
        """Queue one DocumentSubmitted; returns its doc_id (the same for the same job and content).

        Delivery is asynchronous: call ``flush`` (or leave the ``with`` block) to know it arrived.

        Args:
            source_uri: where the chunker reads the bytes (``s3://...``, ``file:///...``).
            job_id: the job the document belongs to.
            content_sha256: hex SHA-256 of the bytes (64 lowercase hex digits).
            size_bytes: size of the bytes.
            filename: original file name, for humans.
            media_type: MIME type if known; None lets the chunker sniff it.
            tenant: tenant owning the job.
            model_id: model requested; None means the service default.
            source_key: the document's identity across versions (``source_uri`` is a good one when it stays the
                same when the document changes); the chunker makes it the source's next version, reusing the
                earlier version's unchanged chunks (docs/intake.md "Versions of a document"). None: no versions.
                At most ``MAX_SOURCE_KEY_BYTES`` UTF-8 bytes, no control character (``check_source_key``).

        Raises:
            InputError: an argument is malformed (``invalid_*`` codes; ``invalid_source_key``).
            RetryableError | FatalError: an earlier record was not delivered.
        """
        self._check(source_uri, job_id, content_sha256, size_bytes, tenant)
        if source_key is not None:
            check_source_key(source_key)
        record = DocumentSubmitted(
            job_id=job_id,
            doc_id=make_doc_id(job_id, content_sha256),
            source_uri=source_uri,
            content_sha256=content_sha256,
            size_bytes=size_bytes,
            submitted_at=utc_now(),
            tenant=tenant,
            filename=filename,
            media_type=media_type,
            model_id=model_id,
            source_key=source_key,
        )
        self._producer.produce(self._topic, record.doc_id, self._serde.serialize(record, self._topic))
        self._producer.poll(0)
        return record.doc_id

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued record is delivered.

        Raises:
            RetryableError | FatalError: a record was not delivered, or some are still in
                flight after ``timeout`` seconds.
        """
        self._producer.flush(timeout)

    def close(self) -> None:
        """Flush (see ``flush``)."""
        self.flush()

    def __enter__(self) -> DocstreamClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()

    @staticmethod
    def _check(source_uri: str, job_id: str, content_sha256: str, size_bytes: int, tenant: str) -> None:
        if not source_uri or "://" not in source_uri:
            raise InputError("source_uri must be a URL such as s3://bucket/key", code="invalid_source_uri")
        validate_id(job_id)
        validate_id(tenant, "tenant")
        if not _SHA256.fullmatch(content_sha256):
            raise InputError("content_sha256 must be 64 lowercase hex digits", code="invalid_sha256")
        if size_bytes < 0:
            raise InputError("size_bytes must not be negative", code="invalid_size")
