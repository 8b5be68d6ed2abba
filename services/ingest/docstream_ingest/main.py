"""`docstream ingest` and `docstream api`: prepare intake (store schema, topics), and serve the HTTP intake API.

Wiring only. Documents arrive through `docstream submit`, `docstream.client`, the HTTP API or any producer
of DocumentSubmitted (docs/intake.md); `ingest` makes sure what they write to exists, and `api` does that too
before it serves. Typer parsing stays in docstream_cli.app.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from docstream.kafka.admin import ensure_topics
from docstream.logging import get_logger
from docstream.service import EXIT_OK, ServiceHost, run_service
from docstream.settings import Settings
from docstream.store import open_store
from docstream.topics import Topics
from docstream_ingest.intake import IntakeContext

if TYPE_CHECKING:
    from docstream_ingest.api.context import ApiSections

__all__ = ["api_command", "api_sections", "dump_openapi", "intake_context", "main", "prepare_intake", "serve"]

_log = get_logger(__name__)


def prepare_intake(settings: Settings) -> None:
    """Create the store schema and the topics where missing (idempotent)."""
    store = open_store(settings.store, settings.cassandra)
    try:
        store.migrate()
    finally:
        store.close()
    ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))


def main(settings: Settings) -> int:
    """Create the store schema and the topics where missing; 0 when ready, 1 otherwise."""

    def prepare(_: ServiceHost) -> None:
        prepare_intake(settings)
        _log.info("ingest_ready", topic_prefix=settings.kafka.topic_prefix,
                                  object_store=settings.object_store.url)

    # one-shot: no metrics endpoint, and prepare_intake opens (and closes) the store itself
    return run_service(settings, "ingest", prepare, metrics_endpoint=False, failed_event="ingest_prepare_failed")


def intake_context(settings: Settings) -> IntakeContext:
    """The sections of ``settings`` a submission reads (``IntakeClients``)."""
    return IntakeContext(kafka=settings.kafka, ingest=settings.ingest, chunker=settings.chunker, tasks=settings.tasks,
                         fairness=settings.fairness, reducer=settings.reducer, object_store=settings.object_store)


def api_sections(settings: Settings) -> ApiSections:
    """The sections of ``settings`` the API reads (``create_app``)."""
    from docstream_ingest.api.context import ApiSections

    return ApiSections(api=settings.api, kafka=settings.kafka, ingest=settings.ingest, chunker=settings.chunker,
                       tasks=settings.tasks, fairness=settings.fairness, reducer=settings.reducer,
                       object_store=settings.object_store, inference=settings.inference, store=settings.store,
                       cassandra=settings.cassandra)


def dump_openapi(settings: Settings, target: str) -> None:
    """Write the OpenAPI spec as JSON to ``target`` (``-``: stdout); needs no broker or store."""
    from docstream_ingest.api.app import create_app, openapi_spec

    text = json.dumps(openapi_spec(create_app(api_sections(settings))), indent=2, ensure_ascii=False) + "\n"
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")


def serve(settings: Settings) -> int:
    """Prepare the store schema and topics, then serve the API until SIGTERM/SIGINT (uvicorn's signals)."""
    import uvicorn

    from docstream_ingest.api.app import create_app

    def body(_: ServiceHost) -> None:
        prepare_intake(settings)
        app = create_app(api_sections(settings))
        _log.info("api_starting", host=settings.api.host, port=settings.api.port)
        # uvicorn's own logging is left off: every request is logged once, by the app, through structlog
        uvicorn.run(app, host=settings.api.host, port=settings.api.port, log_config=None, access_log=False)

    # the app serves its own /metrics, /healthz and /readyz on the API port
    return run_service(settings, "api", body, metrics_endpoint=False, failed_event="api_start_failed",
                       stopped_event="api_stopped")


def api_command(settings: Settings, *, dump: str | None = None) -> int:
    """Run `docstream api` with ``settings`` (the CLI's options already applied); with ``dump`` write
    the OpenAPI spec there and exit."""
    if dump is not None:
        dump_openapi(settings, dump)
        return EXIT_OK
    return serve(settings)
