"""The OpenAPI spec: served by the app, committed as docs/openapi.json, and the two must not differ.

Regenerate the committed file with `docstream api --dump-openapi docs/openapi.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from docstream.settings import Settings
from docstream_ingest.api import ApiSections, create_app, openapi_spec
from docstream_ingest.main import dump_openapi
from tests.fixtures.contexts import api_sections

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "openapi.json"


def _settings(tmp_path: Path, **api: object) -> Settings:
    return Settings().with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
        api=dict(api),
    )


def _sections(tmp_path: Path, **api: object) -> ApiSections:
    return api_sections(_settings(tmp_path, **api))


def test_the_committed_spec_is_the_served_spec(tmp_path: Path) -> None:
    served = openapi_spec(create_app(_sections(tmp_path)))
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed == served, "docs/openapi.json is stale: run `docstream api --dump-openapi docs/openapi.json`"


def test_the_spec_does_not_depend_on_settings(tmp_path: Path) -> None:
    one = openapi_spec(create_app(_sections(tmp_path)))
    other = openapi_spec(create_app(_sections(tmp_path, max_upload_bytes=4096, max_files_per_job=3, port=9999)))
    assert one == other


def test_the_app_serves_its_spec(tmp_path: Path) -> None:
    app = create_app(_sections(tmp_path))
    with TestClient(app) as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json() == openapi_spec(app)


def test_every_operation_documents_its_refusals_as_error_bodies(tmp_path: Path) -> None:
    spec = openapi_spec(create_app(_sections(tmp_path)))
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith("4"):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
            if path.startswith("/v1/"):
                assert operation["security"] == [{"HTTPBearer": []}], (method, path)
                assert "401" in operation["responses"], (method, path)


def test_dump_writes_the_committed_format(tmp_path: Path) -> None:
    target = tmp_path / "openapi.json"
    dump_openapi(_settings(tmp_path), str(target))
    assert json.loads(target.read_text(encoding="utf-8")) == json.loads(COMMITTED.read_text(encoding="utf-8"))
