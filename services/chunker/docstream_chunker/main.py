"""`docstream chunker`: intake topic → extract + chunk (child process) → chunks topic. Wiring only."""

from __future__ import annotations

import signal
import threading

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError
from docstream.kafka.loop import ConsumeLoop
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics, MetricsServer
from docstream.settings import Settings
from docstream.store import open_store
from docstream.topics import Topics
from docstream_chunker.handler import ChunkerHandler, max_poll_interval_ms
from docstream_chunker.worker import ProcessExtractor

__all__ = ["main"]


def main(settings: Settings) -> int:
    """Run the chunker until SIGTERM/SIGINT; 0 on a clean stop, 1 on a fatal error."""
    configure_logging(level=settings.log.level, fmt=settings.log.format, service="chunker")
    log = get_logger(__name__)
    settings = settings.with_overrides(kafka={"max_poll_interval_ms": max_poll_interval_ms(settings)})
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = Metrics()
    server = MetricsServer(metrics, host=settings.metrics.host, port=settings.metrics.port).start() if (
        settings.metrics.port
    ) else None
    store = open_store(settings)
    try:
        with ProcessExtractor(settings) as extractor:
            handler = ChunkerHandler(settings, store, extractor, metrics=metrics)
            topics = Topics(settings.kafka.topic_prefix)
            ConsumeLoop(
                settings,
                group_id=topics.group("chunker"),
                topics=[topics.submitted],
                handler=handler,
                serde=AvroSerde(settings.kafka),
                service="chunker",
                metrics=metrics,
                stop=stop,
            ).run()
    except DocstreamError as exc:
        log.error("chunker_failed", error_code=exc.code, error=exc.message)
        return 1
    except Exception as exc:  # main: log once, exit non-zero
        log.error("chunker_crashed", error=str(exc)[:500], exc_info=exc)
        return 1
    finally:
        store.close()
        if server is not None:
            server.stop()
    log.info("chunker_stopped")
    return 0
