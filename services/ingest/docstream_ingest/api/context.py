"""What the routes share: settings, clients (built on first use when not given), metrics, auth."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from prometheus_client import Counter, Histogram

from docstream.avro.serde import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.metrics import Metrics
from docstream.objectstore import ObjectStore
from docstream.settings import Settings
from docstream.store import ResultStore, open_store
from docstream.topics import Topics
from docstream_ingest.api.auth import ApiKeyAuthenticator

__all__ = ["ApiContext", "HttpMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class HttpMetrics:
    """docstream_http_* metrics, in the process's registry beside the others."""

    def __init__(self, metrics: Metrics) -> None:
        registry = metrics.registry
        self.requests = Counter(
            "docstream_http_requests", "HTTP requests answered.", ["route", "method", "status"], registry=registry
        )
        self.latency = Histogram(
            "docstream_http_request_seconds",
            "Time to answer an HTTP request (to the first byte of a streamed body).",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )


class ApiContext:
    """The API's clients and settings; clients not given are built on first use and closed by ``close``.

    Args:
        settings: all settings (``settings.api`` for the API's own).
        store: the result store (default: ``open_store(settings)``; migrated by whoever runs the API).
        producer: the shared producer (default: a ``ReliableProducer`` built on first use).
        serde: the Avro serde (default: ``AvroSerde(settings.kafka)``).
        objects: the object store (default: ``ObjectStore(settings.object_store)``).
        metrics: the registry /metrics serves (default: a new one).
        clock: now, UTC.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ResultStore | None,
        producer: ReliableProducer | None,
        serde: AvroSerde | None,
        objects: ObjectStore | None,
        metrics: Metrics | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        limit = min(settings.api.max_files_per_job, settings.ingest.max_files_per_job)
        self.intake_settings = settings.with_overrides(ingest={"max_files_per_job": limit})
        self.topics = Topics(settings.kafka.topic_prefix)
        self.metrics = metrics or Metrics()
        self.http = HttpMetrics(self.metrics)
        self.clock = clock
        self.objects = objects or ObjectStore(settings.object_store)
        self.serde = serde or AvroSerde(settings.kafka)
        self._owns_store = store is None
        self.store: ResultStore = store if store is not None else open_store(settings)
        self.auth = ApiKeyAuthenticator(self.store, cache_s=settings.api.auth_cache_s)
        self._owns_producer = producer is None
        self._producer = producer
        self._lock = threading.Lock()

    @property
    def producer(self) -> ReliableProducer:
        """The shared producer (built on first use)."""
        if self._producer is None:
            with self._lock:
                if self._producer is None:
                    self._producer = ReliableProducer(self.settings.kafka, client_id="docstream-api")
        return self._producer

    def close(self) -> None:
        """Flush and close the producer and close the store, where this context built them."""
        if self._owns_producer:
            with self._lock:
                producer, self._producer = self._producer, None
            if producer is not None:
                producer.close(self.settings.api.flush_timeout_s)
        if self._owns_store:
            self.store.close()
