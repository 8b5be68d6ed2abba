"""The HTTP intake API (`docstream api`): FastAPI app factory, routes, auth (docs/api.md)."""

from docstream_ingest.api.app import create_app, openapi_spec

__all__ = ["create_app", "openapi_spec"]
