"""schemathesis against the committed OpenAPI spec (docs/openapi.json): no 5xx, and every answer conforms.

The app runs in process (ASGI) on the real Kafka and the real Cassandra; a bounded number of
generated requests per operation (MAX_EXAMPLES), authenticated with a real API key. Refusals
of valid-looking input (a source URI outside the allowed roots) are fine; server errors,
undocumented status codes, content types or bodies are not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from docstream.kafka.admin import ensure_topics
from docstream.settings import CassandraSettings
from docstream.store.base import ApiKeyRow, JobRow, ResultStore
from docstream.topics import Topics
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key
from tests.fixtures.contexts import api_sections
from tests.fixtures.kafka import kafka_settings

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 25
SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def api_app(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FastAPI, str]]:
    root = tmp_path_factory.mktemp("api-schema")
    prefix = f"api-schema-{uuid.uuid4().hex}"
    app_settings = kafka_settings(kafka_bootstrap, topic_prefix=prefix, partitions=1).with_overrides(
        object_store={"url": str(root / "objects")},
        store={"backend": "cassandra"},
        cassandra=cassandra_settings.model_dump(),
        api={"max_upload_bytes": 256 * 1024, "max_files_per_job": 8},
    )
    ensure_topics(app_settings.kafka, Topics(prefix), include_dlq=False)
    tenant = f"fuzz-{uuid.uuid4().hex[:12]}"
    new = generate_api_key()
    cassandra_store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, datetime.now(UTC)))
    now = datetime.now(UTC)
    for job_id in ("job-1", "a", "0"):  # ids the generator likes to try: some exist, most do not
        cassandra_store.upsert_job(JobRow(f"{job_id}", tenant, now, "running", 1, updated_at=now))
    app = create_app(api_sections(app_settings), store=cassandra_store)
    yield app, new.key
    app.state.context.close()


SCHEMA = schemathesis.openapi.from_dict(json.loads(SPEC.read_text(encoding="utf-8")))
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # schemathesis internals
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.label)
def test_no_server_errors_and_answers_conform(operation: Any, api_app: tuple[FastAPI, str]) -> None:
    app, key = api_app
    headers = {"Authorization": f"Bearer {key}"}
    # valid and invalid requests both; the committed spec drives generation
    # (test_api_openapi.py holds it equal to the served one)
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE, headers=headers),
        operation.as_strategy(GenerationMode.NEGATIVE, headers=headers),
    )

    statuses: list[int] = []

    @given(case=cases)
    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    def call(case: Any) -> None:
        statuses.append(case.call_and_validate(app=app, headers=headers, checks=CHECKS).status_code)

    call()
    assert statuses, "no request was made"
    assert any(status != 401 for status in statuses), "the key was never accepted"
