"""The intake API's app factory: ``create_app(sections, ...)`` → a FastAPI app (docs/api.md)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import docstream
from docstream.avro.serde import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.objectstore import ObjectStore
from docstream.records import utc_now
from docstream.store import ResultStore
from docstream_ingest.api.context import ApiContext, ApiSections, HttpMetrics
from docstream_ingest.api.dashboard import dashboard_router
from docstream_ingest.api.errors import install_error_handlers
from docstream_ingest.api.routes import health_router, jobs_router

__all__ = ["create_app", "openapi_spec"]

_log = get_logger(__name__)
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})

_DESCRIPTION = """\
HTTP intake of docstream: submit documents as jobs, follow them, read their results.

Every /v1 call needs `Authorization: Bearer <API key>` (`docstream apikey create --tenant T`);
a key sees only its tenant's jobs. The job dashboard at /ui asks for a key too. Every refusal
is a 4xx with a JSON body `{"error_code": ..., "message": ...}`. See docs/api.md.
"""


class _RequestMetrics:
    """Counts and times every request by route template (not by path: ids would explode the labels)."""

    def __init__(self, app: ASGIApp, http: HttpMetrics) -> None:
        self._app = app
        self._http = http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._record(scope, status, started)
            await send(message)

        try:
            await self._app(scope, receive, send_status)
        except BaseException:
            self._record(scope, status, started)
            raise

    def _record(self, scope: Scope, status: int, started: float) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")
        method = str(scope.get("method", ""))
        elapsed = time.monotonic() - started
        self._http.requests.labels(route, method, str(status)).inc()
        self._http.latency.labels(route, method).observe(elapsed)
        log = _log.debug if route in _QUIET_ROUTES else _log.info  # probes and scrapes would drown the rest
        log("http_request", method=method, route=route, status=status, duration_s=round(elapsed, 4))


def create_app(
    sections: ApiSections,
    *,
    store: ResultStore | None = None,
    producer: ReliableProducer | None = None,
    serde: AvroSerde | None = None,
    objects: ObjectStore | None = None,
    metrics: Metrics | None = None,
    clock: Callable[[], datetime] = utc_now,
) -> FastAPI:
    """The intake API.

    Clients not given are built from ``sections`` (the store and the producer on first use,
    without connecting here) and closed when the app shuts down; given ones are left to their
    owner. The store must be migrated and the topics must exist (``docstream api`` does both
    before it serves).

    Args:
        sections: the settings sections the API reads; ``sections.api`` holds its own.
        store: the result store (jobs, documents, results, API keys).
        producer: the producer shared by all requests.
        serde: the Avro serde of the intake records.
        objects: the object store uploads go to and source URIs are confined to.
        metrics: the registry /metrics serves (the API adds docstream_http_* to it).
        clock: now, UTC.

    Raises:
        ConfigError: the object store or the serde cannot be built from the settings.
    """
    ctx = ApiContext(
        sections, store=store, producer=producer, serde=serde, objects=objects, metrics=metrics, clock=clock
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            ctx.close()

    app = FastAPI(
        title="docstream intake API",
        version=docstream.__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.context = ctx
    install_error_handlers(app)
    app.include_router(jobs_router)
    app.include_router(health_router)
    app.include_router(dashboard_router())
    app.add_middleware(_RequestMetrics, http=ctx.http)
    return app


def openapi_spec(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (what docs/openapi.json holds)."""
    spec: dict[str, Any] = app.openapi()
    return spec
