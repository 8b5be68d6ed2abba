"""Prometheus metrics, named docstream_*, and the /metrics /healthz /readyz endpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from docstream.tenants.usage import Usage, seconds

__all__ = ["HIDDEN_TENANT", "EndpointMetrics", "Metrics", "MetricsServer", "tenant_label_value", "without_tenants"]

HIDDEN_TENANT = "_"
"""The tenant label of every series with ``metrics.tenant_label`` off."""

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_STAGE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class Metrics:
    """The metrics of docs/operations.md "Observability", in one registry per process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records_in = Counter("docstream_records_in", "Records consumed.", ["service", "topic"], registry=r)
        self.records_out = Counter("docstream_records_out", "Records produced.", ["service", "topic"], registry=r)
        self.records_failed = Counter(
            "docstream_records_failed", "Records that failed.", ["service", "error_code"], registry=r
        )
        self.dlq = Counter("docstream_dlq", "Records sent to a DLQ.", ["service", "topic"], registry=r)
        self.intake_refused = Counter(
            "docstream_intake_refused", "Intake records sent to the DLQ for naming what their tenant does not own, "
            "by reason (their DLQ error code; docs/security.md \"Intake records\").", ["service", "reason"], registry=r,
        )
        self.retries = Counter(
            "docstream_retries", "Retries of transient faults.", ["service", "operation"], registry=r
        )
        self.consumer_lag = Gauge(
            "docstream_consumer_lag", "Records behind the high watermark.", ["service", "topic", "partition"],
            registry=r,
        )
        self.batch_size = Histogram(
            "docstream_batch_size", "Records per model batch.", ["service"], buckets=_SIZE_BUCKETS, registry=r
        )
        self.batch_wait = Histogram(
            "docstream_batch_wait_seconds", "Wait of a batch's oldest record.", ["service"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.model_latency = Histogram(
            "docstream_model_latency_seconds", "Model forward time per batch.", ["service"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.reused_chunks = Counter(
            "docstream_reused_chunks", "Chunk results served from the store instead of the model, by how they were "
            "found: chunk_id (the chunk's own row) or version (the same text in the source's earlier version).",
            ["service", "by"], registry=r,
        )
        self.prepared_chunks = Counter(
            "docstream_prepared_chunks", "Chunks the inference service made ready for its model, by how: token_ids "
            "(built from the token ids the chunker carried) or text (tokenized here).",
            ["service", "by"], registry=r,
        )
        self.sink_documents = Counter(
            "docstream_sink_documents", "Completed documents a sink handled, by outcome: written, removed (a "
            "deleted source), or why it skipped one (failed, no_vectors, not_current, unknown_document, retired).",
            ["service", "outcome"], registry=r,
        )
        self.sink_points = Counter(
            "docstream_sink_points", "Points a sink upserted or deleted in its engine.", ["service", "op"], registry=r,
        )
        self.sink_write_latency = Histogram(
            "docstream_sink_write_latency_seconds", "Time of one write to a sink's engine (a batch of points).",
            ["service"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.write_latency = Histogram(
            "docstream_write_latency_seconds", "Store write time per batch.", ["service"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.paused = Gauge("docstream_consumer_paused", "1 while partitions are paused.", ["service"], registry=r)
        self.lane_waiting_tokens = Gauge(
            "docstream_lane_waiting_tokens", "Tokens of the chunks an inference process has read ahead and not batched "
            "yet, by lane and tenant (docs/operations.md \"Sharing the service\").", ["service", "lane", "tenant"],
            registry=r,
        )
        self.queued_tokens = Gauge(
            "docstream_queued_tokens", "Tokens of the documents chunked and not ended yet, by lane and tenant, of the "
            "jobs a reducer process counts (sum over the processes; docs/operations.md \"Where a job stands\").",
            ["service", "lane", "tenant"], registry=r,
        )
        self.lane_paused = Gauge(
            "docstream_lane_paused", "1 while a lane's partitions are paused (its read-ahead is full).",
            ["service", "lane"], registry=r,
        )
        self.pauses = Counter(
            "docstream_consumer_pauses", "Times the partitions were paused (backpressure; short pauses too).",
            ["service"], registry=r,
        )

        # the model behind an endpoint (docstream.models.endpoint), counted by the inference service
        self.backend_up = Gauge(
            "docstream_model_backend_up", "0 while the model's backend (an endpoint) does not answer and "
            "consumption waits for it.", ["service"], registry=r,
        )
        self.endpoint_requests = Counter(
            "docstream_endpoint_requests", "Requests to the model endpoint, by outcome (HTTP status, timeout, "
            "connection).", ["service", "outcome"], registry=r,
        )
        self.endpoint_latency = Histogram(
            "docstream_endpoint_request_seconds", "Time of one endpoint request.", ["service"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.endpoint_retries = Counter(
            "docstream_endpoint_retries", "Endpoint requests sent again, by reason.", ["service", "reason"], registry=r,
        )
        self.endpoint_throttled = Counter(
            "docstream_endpoint_throttled", "429 answers of the endpoint.", ["service"], registry=r,
        )
        self.endpoint_tokens = Counter(
            "docstream_endpoint_tokens", "Tokens of answered endpoint requests.", ["service"], registry=r,
        )
        self.endpoint_inputs = Counter(
            "docstream_endpoint_inputs", "Inputs sent to the endpoint (retries included).", ["service"], registry=r,
        )
        self.endpoint_in_flight = Gauge(
            "docstream_endpoint_in_flight", "Endpoint requests in flight.", ["service"], registry=r,
        )

        # extraction quality, counted by the chunker per chunked document (its extraction child has no registry)
        self.ocr_pages = Counter("docstream_ocr_pages", "Pages OCR ran on.", ["service", "engine"], registry=r)
        self.ocr_pages_started = Counter(
            "docstream_ocr_pages_started", "Pages OCR started on, counted as each starts (OCR progress).", ["service"],
            registry=r,
        )
        self.page_verdicts = Counter(
            "docstream_page_verdicts", "Pages of chunked documents by quality verdict.", ["service", "verdict"],
            registry=r,
        )

        # job accounting, counted by the reducer's jobs agent as documents become terminal; per job: the store
        self.pages = Counter("docstream_pages", "Pages of terminal documents.", ["service", "tenant"], registry=r)
        self.chunks = Counter("docstream_chunks", "Chunks of terminal documents.", ["service", "tenant"], registry=r)
        self.tokens = Counter("docstream_tokens", "Tokens of embedded chunks of terminal documents.",
                              ["service", "tenant"], registry=r)
        self.model_seconds = Counter(
            "docstream_model_seconds", "Forward-pass seconds spent on terminal documents.",
            ["service", "tenant", "device"], registry=r,
        )
        self.stage_seconds = Counter(
            "docstream_stage_seconds", "Busy seconds per stage spent on terminal documents.",
            ["service", "tenant", "stage"], registry=r,
        )
        self.document_stage_seconds = Histogram(
            "docstream_document_stage_seconds", "Busy seconds of one document in a stage.", ["service", "stage"],
            buckets=_STAGE_BUCKETS, registry=r,
        )

    def count_usage(self, service: str, tenant: str, added: Usage, *, new_document: bool) -> None:
        """Add what a document cost to its tenant's counters (only what grew: counters never go down).

        Args:
            service: the service counting (the reducer).
            tenant: the job's tenant.
            added: the document's usage, or what it grew by when it was counted before.
            new_document: the document is counted for the first time (its stage times go in the histogram).
        """
        for counter, value in ((self.pages, added.pages), (self.chunks, added.chunks), (self.tokens, added.tokens)):
            if value > 0:
                counter.labels(service, tenant).inc(value)
        for device, micros in added.model_us.items():
            if micros > 0:
                self.model_seconds.labels(service, tenant, device).inc(seconds(micros))
        for stage, micros in added.stage_us.items():
            if micros > 0:
                self.stage_seconds.labels(service, tenant, stage).inc(seconds(micros))
                if new_document:
                    self.document_stage_seconds.labels(service, stage).observe(seconds(micros))

    def render(self, *, tenant_label: bool = True) -> bytes:
        """The registry in Prometheus text format; with ``tenant_label`` False, every tenant shows as
        ``HIDDEN_TENANT`` (``without_tenants``)."""
        if tenant_label:
            return generate_latest(self.registry)
        return generate_latest(_Collected(without_tenants(self.registry.collect())))


def tenant_label_value(tenant: str, *, tenant_label: bool) -> str:
    """The value of a series' ``tenant`` label: the tenant's name, or ``HIDDEN_TENANT`` with the label off."""
    return tenant if tenant_label else HIDDEN_TENANT


def without_tenants(families: Iterable[Metric]) -> list[Metric]:
    """``families`` with every ``tenant`` label set to ``HIDDEN_TENANT`` and the samples that then share their labels
    summed (counters, additive gauges, histogram buckets, sums and counts; a ``_created`` time: the earliest).
    Families without a tenant label are returned as they are."""
    found: list[Metric] = []
    for family in families:
        if not any("tenant" in sample.labels for sample in family.samples):
            found.append(family)
            continue
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for sample in family.samples:
            labels = {k: tenant_label_value(v, tenant_label=False) if k == "tenant" else v
                      for k, v in sample.labels.items()}
            key = (sample.name, tuple(labels.items()))
            earlier = merged.get(key)
            if earlier is None:
                merged[key] = sample.value
            else:
                merged[key] = min(earlier, sample.value) if sample.name.endswith("_created") else earlier + sample.value
        hidden = Metric(family.name, family.documentation, family.type, family.unit)
        hidden.samples = [Sample(name, dict(labels), value) for (name, labels), value in merged.items()]
        found.append(hidden)
    return found


class _Collected:
    """Families already collected, in the shape ``generate_latest`` reads."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class EndpointMetrics:
    """The ``docstream.models.endpoint.EndpointObserver`` that counts into ``Metrics`` (docstream_endpoint_*)."""

    def __init__(self, metrics: Metrics, service: str) -> None:
        self._metrics = metrics
        self._service = service

    def requested(self, outcome: str, seconds: float, inputs: int) -> None:
        """One exchange: its outcome, time and inputs."""
        m, service = self._metrics, self._service
        m.endpoint_requests.labels(service, outcome).inc()
        m.endpoint_latency.labels(service).observe(seconds)
        m.endpoint_inputs.labels(service).inc(inputs)
        if outcome == "429":
            m.endpoint_throttled.labels(service).inc()

    def tokens(self, count: int) -> None:
        """Tokens of an answered request."""
        self._metrics.endpoint_tokens.labels(self._service).inc(count)

    def retried(self, reason: str) -> None:
        """A request sent again."""
        self._metrics.endpoint_retries.labels(self._service, reason).inc()

    def in_flight(self, count: int) -> None:
        """Requests in flight now."""
        self._metrics.endpoint_in_flight.labels(self._service).set(count)


class MetricsServer:
    """/metrics, /healthz and /readyz on a background thread."""

    def __init__(self, metrics: Metrics, *, host: str, port: int, ready: Callable[[], bool] | None = None,
                 tenant_label: bool = True) -> None:
        self._metrics = metrics
        self._tenant_label = tenant_label
        self._ready = ready or (lambda: True)
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server names the handler
                if self.path == "/metrics":
                    self._send(200, outer._metrics.render(tenant_label=outer._tenant_label), CONTENT_TYPE_LATEST)
                elif self.path == "/healthz":
                    self._send(200, b'{"status":"ok"}', "application/json")
                elif self.path == "/readyz":
                    ok = outer._ready()
                    self._send(200 if ok else 503, b'{"ready":%s}' % (b"true" if ok else b"false"), "application/json")
                else:
                    self._send(404, b'{"error_code":"not_found"}', "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
