"""DLQ headers: why and where from, truncated, in a fixed order."""

from __future__ import annotations

from docstream.errors import SchemaError
from docstream.kafka.dlq import DLQ_HEADERS, dlq_headers, error_code_of


def test_headers_carry_error_origin_attempts_service_and_time() -> None:
    headers = dict(dlq_headers(topic="docstream.chunks", partition=2, offset=41, error=SchemaError("bad bytes"),
                               attempts=1, service="chunker", timestamp_ms=1_700_000_000_000))
    assert list(headers) == list(DLQ_HEADERS)
    assert headers == {
        "error": b"bad bytes",
        "error_code": b"schema_error",
        "error_type": b"SchemaError",
        "original_topic": b"docstream.chunks",
        "original_partition": b"2",
        "original_offset": b"41",
        "attempts": b"1",
        "service": b"chunker",
        "timestamp": b"1700000000000",
    }


def test_long_messages_are_truncated_and_foreign_errors_get_a_generic_code() -> None:
    headers = dict(dlq_headers(topic="t", partition=0, offset=0, error=ValueError("x" * 10_000), attempts=3,
                               service="s", timestamp_ms=0))
    assert len(headers["error"]) == 2000 and headers["error"].endswith(b"...")
    assert headers["error_code"] == b"unhandled_error"
    assert headers["error_type"] == b"ValueError"
    assert error_code_of(ValueError()) == "unhandled_error"


def test_string_errors_and_empty_messages() -> None:
    assert dict(dlq_headers(topic="t", partition=0, offset=0, error="gave up", attempts=1, service="s",
                            timestamp_ms=0))["error"] == b"gave up"
    assert dict(dlq_headers(topic="t", partition=0, offset=0, error=KeyError(), attempts=1, service="s",
                            timestamp_ms=0))["error"] == b"KeyError"
