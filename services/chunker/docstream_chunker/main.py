"""`docstream chunker`: intake topic → extract + chunk (child process) → chunks topic. Wiring only."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics, MetricsServer
from docstream.settings import Settings
from docstream.store import ResultStore, open_store
from docstream.topics import Topics
from docstream_chunker.handler import ChunkerHandler, max_poll_interval_ms
from docstream_chunker.worker import ProcessExtractor

__all__ = ["ChunkerService", "build_chunker", "main"]


@dataclass
class ChunkerService:
    """The chunker's consume loop and its extraction child; ``run()`` blocks until ``stop()``."""

    loop: ConsumeLoop
    extractor: ProcessExtractor

    def run(self) -> None:
        self.loop.run()

    def stop(self) -> None:
        self.loop.stop()

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
    settings = settings.with_overrides(kafka={"max_poll_interval_ms": max_poll_interval_ms(settings)})
    extractor = ProcessExtractor(settings)
    topics = Topics(settings.kafka.topic_prefix)
    loop = ConsumeLoop(
        settings,
        group_id=settings.chunker.group_id or topics.group("chunker"),
        topics=[topics.submitted],
        handler=ChunkerHandler(settings, store, extractor, metrics=metrics),
        serde=AvroSerde(settings.kafka),
        service="chunker",
        metrics=metrics,
        static_assignment=static_assignment,
        poll_timeout_s=poll_timeout_s,
        producer=producer,
    )
    return ChunkerService(loop, extractor)


def main(settings: Settings) -> int:
    """Run the chunker until SIGTERM/SIGINT; 0 on a clean stop, 1 on a fatal error."""
    configure_logging(level=settings.log.level, fmt=settings.log.format, service="chunker")
    log = get_logger(__name__)
    metrics = Metrics()
    server = MetricsServer(metrics, host=settings.metrics.host, port=settings.metrics.port).start() if (
        settings.metrics.port
    ) else None
    store = open_store(settings)
    service: ChunkerService | None = None
    try:
        service = build_chunker(settings, store=store, metrics=metrics)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: service.stop() if service else None)
        service.run()
    except DocstreamError as exc:
        log.error("chunker_failed", error_code=exc.code, error=exc.message)
        return 1
    except Exception as exc:  # main: log once, exit non-zero
        log.error("chunker_crashed", error=str(exc)[:500], exc_info=exc)
        return 1
    finally:
        if service is not None:
            service.close()
        store.close()
        if server is not None:
            server.stop()
    log.info("chunker_stopped")
    return 0
