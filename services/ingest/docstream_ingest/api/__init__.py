"""The HTTP intake API (`docstream api`): FastAPI app factory, routes, auth (docs/api.md)."""

from docstream_ingest.api.app import create_app, openapi_spec
from docstream_ingest.api.context import ApiSections

__all__ = ["ApiSections", "create_app", "openapi_spec"]
