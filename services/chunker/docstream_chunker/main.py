"""`docstream chunker`: intake topic → extract + chunk (child process) → chunks topic. Wiring only."""

from __future__ import annotations

from dataclasses import dataclass

from docstream.avro.serde import AvroSerde
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop
from docstream.metrics import Metrics
from docstream.service import ServiceHost, run_service
from docstream.settings import Settings
from docstream.store import ResultStore
from docstream.tenants.tenancy import tenant_intakes_pattern
from docstream.topics import Topics
from docstream_chunker.handler import ChunkerHandler, max_poll_interval_ms
from docstream_chunker.worker import ExtractorSettings, ProcessExtractor

__all__ = ["ChunkerService", "build_chunker", "main"]

_PREFETCH = {"queued.min.messages": 8}
"""Documents librdkafka keeps fetched ahead per partition: an interactive document waits behind at most these."""


@dataclass
class ChunkerService:
    """The chunker's consume loop and its extraction child; ``run()`` blocks until ``stop()``."""

    loop: ConsumeLoop
    extractor: ProcessExtractor

    def run(self) -> None:
        self.loop.run()

    def stop(self) -> None:
        self.loop.stop()

    @property
    def ready(self) -> bool:
        """The loop consumes: subscribed and running, not stopping (for /readyz)."""
        return self.loop.ready

    def close(self) -> None:
        self.extractor.close()


def build_chunker(
    settings: Settings, *, store: ResultStore, metrics: Metrics, static_assignment: bool = False,
    poll_timeout_s: float = 1.0, producer: ReliableProducer | None = None,
) -> ChunkerService:
    """The chunker service on ``store``; ``static_assignment`` skips the group join (embedded run).

    ``poll_timeout_s`` bounds how long a ``stop()`` waits for the loop to notice it; ``producer``
    (not closed by the service) replaces the loop's own.
    """
    kafka = settings.kafka.model_copy(
        update={"max_poll_interval_ms": max_poll_interval_ms(settings.kafka, settings.chunker)})
    extractor = ProcessExtractor(
        ExtractorSettings.of(settings.chunker, settings.object_store, settings.inference, settings.log))
    topics = Topics(kafka.topic_prefix)
    handler = ChunkerHandler(settings.chunker, topics, store, extractor, metrics=metrics,
                             limited=settings.fairness.limited)
    loop = ConsumeLoop(
        kafka, settings.retry,
        group_id=settings.chunker.group_id or topics.group("chunker"),
        # with a group, every tenant's own intake topic too (docs/security.md "Intake records"); the embedded run
        # assigns its partitions and has no tenants of its own topic
        topics=[*topics.intakes(), *(() if static_assignment else (tenant_intakes_pattern(topics.prefix),))],
        handler=handler,
        on_tombstone=handler.on_tombstone,
        serde=AvroSerde(kafka),
        service="chunker",
        metrics=metrics,
        static_assignment=static_assignment,
        poll_timeout_s=poll_timeout_s,
        producer=producer,
        # each document takes the chunker milliseconds to minutes: a prefetch of librdkafka's default (100,000
        # records a partition) would put a batch lane's backlog ahead of an interactive document fetched later
        consumer_options=_PREFETCH,
    )
    return ChunkerService(loop, extractor)


def main(settings: Settings) -> int:
    """Run the chunker until SIGTERM/SIGINT; 0 on a clean stop, 1 on a fatal error."""

    def serve(host: ServiceHost) -> None:
        service = build_chunker(settings, store=host.open_store(), metrics=host.metrics)
        host.on_exit(service.close)
        host.serve(service.run, stop=service.stop, ready=lambda: service.ready)

    return run_service(settings, "chunker", serve, stopped_event="chunker_stopped")
