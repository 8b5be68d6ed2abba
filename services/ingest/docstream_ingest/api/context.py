"""What the routes share: settings sections, clients (built on first use when not given), metrics, auth."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import Counter, Histogram

from docstream.avro.serde import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.metrics import Metrics
from docstream.objectstore import ObjectStore
from docstream.settings import (
    ApiSettings,
    CassandraSettings,
    ChunkerSettings,
    FairnessSettings,
    InferenceSettings,
    IngestSettings,
    KafkaSettings,
    ObjectStoreSettings,
    ReducerSettings,
    StoreSettings,
    TasksSettings,
)
from docstream.store import ResultStore, open_store
from docstream.topics import Topics
from docstream_ingest.api.auth import ApiKeyAuthenticator
from docstream_ingest.intake import IntakeContext

__all__ = ["ApiContext", "ApiSections", "HttpMetrics"]

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


@dataclass(frozen=True, slots=True)
class ApiSections:
    """What the API reads of the settings: the sections of the same names.

    Attributes:
        api: the API's own (limits, timeouts, key cache).
        kafka: the topics and the producer.
        ingest: the intake's limits (``max_files_per_job`` capped by ``api.max_files_per_job``).
        chunker: a job's default chunk size.
        tasks: the default classify labels and the user tasks.
        fairness: the tenants' priorities, quotas and the lanes' shares.
        reducer: whether a webhook may reach a private address.
        object_store: where uploads go and source URIs may point.
        inference: a job's default ``model_id`` and the inference group of its standing.
        store: which result store the API opens when it is given none.
        cassandra: the connection of the cassandra store.
    """

    api: ApiSettings
    kafka: KafkaSettings
    ingest: IngestSettings
    chunker: ChunkerSettings
    tasks: TasksSettings
    fairness: FairnessSettings
    reducer: ReducerSettings
    object_store: ObjectStoreSettings
    inference: InferenceSettings
    store: StoreSettings
    cassandra: CassandraSettings


class ApiContext:
    """The API's clients and settings sections; clients not given are built on first use and closed by ``close``.

    Args:
        sections: the settings sections the API reads (``sections.api`` for its own).
        store: the result store (default: ``open_store(sections.store, sections.cassandra)``; migrated by whoever
            runs the API).
        producer: the shared producer (default: a ``ReliableProducer`` built on first use).
        serde: the Avro serde (default: ``AvroSerde(sections.kafka)``).
        objects: the object store (default: ``ObjectStore(sections.object_store)``).
        metrics: the registry /metrics serves (default: a new one).
        clock: now, UTC.
    """

    def __init__(
        self,
        sections: ApiSections,
        *,
        store: ResultStore | None,
        producer: ReliableProducer | None,
        serde: AvroSerde | None,
        objects: ObjectStore | None,
        metrics: Metrics | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.sections = sections
        limit = min(sections.api.max_files_per_job, sections.ingest.max_files_per_job)
        self.intake = IntakeContext(
            kafka=sections.kafka, ingest=sections.ingest.model_copy(update={"max_files_per_job": limit}),
            chunker=sections.chunker, tasks=sections.tasks, fairness=sections.fairness, reducer=sections.reducer,
            object_store=sections.object_store,
        )
        self.topics = Topics(sections.kafka.topic_prefix)
        self.metrics = metrics or Metrics()
        self.http = HttpMetrics(self.metrics)
        self.clock = clock
        self.objects = objects or ObjectStore(sections.object_store)
        self.serde = serde or AvroSerde(sections.kafka)
        self._owns_store = store is None
        self.store: ResultStore = store if store is not None else open_store(sections.store, sections.cassandra)
        self.auth = ApiKeyAuthenticator(self.store, cache_s=sections.api.auth_cache_s)
        self._owns_producer = producer is None
        self._producer = producer
        self._lock = threading.Lock()

    @property
    def producer(self) -> ReliableProducer:
        """The shared producer (built on first use)."""
        if self._producer is None:
            with self._lock:
                if self._producer is None:
                    self._producer = ReliableProducer(self.sections.kafka, client_id="docstream-api")
        return self._producer

    def close(self) -> None:
        """Flush and close the producer and close the store, where this context built them."""
        if self._owns_producer:
            with self._lock:
                producer, self._producer = self._producer, None
            if producer is not None:
                producer.close(self.sections.api.flush_timeout_s)
        if self._owns_store:
            self.store.close()
