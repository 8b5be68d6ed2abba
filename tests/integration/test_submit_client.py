"""docstream.client.DocstreamClient: an external producer's records on the real Kafka."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from docstream import ids
from docstream.avro.serde import AvroSerde
from docstream.client import DocstreamClient
from docstream.errors import ConfigError, InputError
from docstream.records import DocumentSubmitted
from docstream.settings import KafkaSettings
from docstream.topics import Topics
from tests.fixtures.kafka import read_topic

pytestmark = pytest.mark.integration

SHA = ids.content_sha256(b"an external document")


def _records(bootstrap: str, topic: str, expected: int) -> list[tuple[str, DocumentSubmitted]]:
    serde = AvroSerde(KafkaSettings(bootstrap_servers=bootstrap))  # type: ignore[call-arg]
    found: list[tuple[str, DocumentSubmitted]] = []
    for received in read_topic(bootstrap, topic, expected=expected, serde=serde).received:
        assert isinstance(received.record, DocumentSubmitted)
        found.append(((received.message.key() or b"").decode(), received.record))
    return found


def test_submit_uri_produces_a_document_submitted_keyed_by_doc_id(
    kafka_bootstrap: str, unique_name: Callable[[str], str], create_topics: Callable[..., list[str]]
) -> None:
    prefix = unique_name("client")
    topic = Topics(prefix).submitted
    create_topics(kafka_bootstrap, topic)
    job_id = f"crawl-{uuid.uuid4().hex}"

    with DocstreamClient(kafka_bootstrap, topic_prefix=prefix, linger_ms=0) as client:
        doc_id = client.submit_uri(
            "s3://incoming/q3.pdf",
            job_id=job_id,
            content_sha256=SHA,
            size_bytes=20,
            filename="q3.pdf",
            media_type="application/pdf",
            tenant="crawler",
            source_key="s3://incoming/q3.pdf",
        )
        again = client.submit_uri("s3://incoming/copy-of-q3.pdf", job_id=job_id, content_sha256=SHA, size_bytes=20)
        assert client.topic == topic

    assert doc_id == again == ids.doc_id(job_id, SHA)
    [(key, record), (second_key, _)] = _records(kafka_bootstrap, topic, 2)
    assert key == second_key == doc_id
    assert (record.job_id, record.source_uri, record.content_sha256, record.size_bytes) == (
        job_id,
        "s3://incoming/q3.pdf",
        SHA,
        20,
    )
    assert (record.filename, record.media_type, record.tenant) == ("q3.pdf", "application/pdf", "crawler")
    assert (record.source_key, record.previous_doc_id) == ("s3://incoming/q3.pdf", None)  # the chunker finds it


@pytest.mark.parametrize(
    ("uri", "options", "code"),
    [
        ("q3.pdf", {}, "invalid_source_uri"),
        ("s3://b/q3.pdf", {"content_sha256": "abc"}, "invalid_sha256"),
        ("s3://b/q3.pdf", {"job_id": ""}, "invalid_job_id"),
        ("s3://b/q3.pdf", {"tenant": "no spaces"}, "invalid_tenant"),
        ("s3://b/q3.pdf", {"size_bytes": -1}, "invalid_size"),
        ("s3://b/q3.pdf", {"source_key": ""}, "invalid_source_key"),
    ],
)
def test_submit_uri_refuses_malformed_arguments(
    kafka_bootstrap: str, uri: str, options: dict[str, object], code: str
) -> None:
    client = DocstreamClient(kafka_bootstrap, topic_prefix="never-produced")
    arguments: dict[str, object] = {"job_id": "job-1", "content_sha256": SHA, "size_bytes": 1, **options}
    with pytest.raises(InputError) as caught:
        client.submit_uri(uri, **arguments)  # type: ignore[arg-type]
    assert caught.value.code == code


def test_unknown_client_option_is_a_config_error(kafka_bootstrap: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DocstreamClient(kafka_bootstrap, no_such_option="1")
    assert "no.such.option" in caught.value.message
