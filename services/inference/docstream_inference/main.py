"""`docstream inference`: settings → logging → model → topics, store → pipeline. Wiring only."""

from __future__ import annotations

import signal

from docstream.avro.serde import AvroSerde
from docstream.embedding import Embedder, load_embedder
from docstream.errors import DocstreamError
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics, MetricsServer
from docstream.settings import Settings
from docstream.store import ResultStore, open_store
from docstream.topics import Topics
from docstream_inference.faults import with_faults
from docstream_inference.pipeline import SERVICE, InferencePipeline

__all__ = ["build_inference", "load_model", "main"]

_log = get_logger(__name__)


def load_model(settings: Settings) -> Embedder:
    """Load (and warm up) the model of ``settings.inference``, with the fault injection of ``settings.faults``."""
    embedder = with_faults(load_embedder(settings.inference), settings.faults)
    runtime = embedder.runtime
    _log.info("model_loaded", model_id=embedder.model_id, runtime=runtime.label, device=runtime.device,
              precision=runtime.precision, threads=runtime.threads, dimension=embedder.dimension)
    return embedder


def build_inference(
    settings: Settings, *, store: ResultStore, metrics: Metrics, embedder: Embedder | None = None,
    static_assignment: bool = False, producer: ReliableProducer | None = None,
) -> InferencePipeline:
    """The pipeline on ``store`` (migrated, topics ensured) with ``embedder``, or the model loaded here.

    ``static_assignment`` takes every partition without a group join (``docstream run`` only);
    ``producer`` (not closed by the pipeline) replaces the pipeline's own.
    """
    return InferencePipeline(settings, embedder=embedder if embedder is not None else load_model(settings),
                             store=store, serde=AvroSerde(settings.kafka), metrics=metrics, producer=producer,
                             static_assignment=static_assignment)


def main(settings: Settings) -> int:
    """Run the inference service until SIGTERM/SIGINT (0) or a fatal fault (1)."""
    configure_logging(level=settings.log.level, fmt=settings.log.format, service=SERVICE)
    metrics = Metrics()
    pipeline: list[InferencePipeline] = []
    server = None
    if settings.metrics.port:
        ready = lambda: bool(pipeline) and pipeline[0].ready  # noqa: E731
        server = MetricsServer(metrics, host=settings.metrics.host, port=settings.metrics.port, ready=ready).start()
    store: ResultStore | None = None
    try:
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        store = open_store(settings)
        store.migrate()
        pipeline.append(build_inference(settings, store=store, metrics=metrics))
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: pipeline[0].stop())
        pipeline[0].run()
        return 0
    except DocstreamError as exc:
        _log.error("inference_failed", error_code=exc.code, error=exc.message)
        return 1
    except Exception:  # noqa: BLE001 - main: log once, exit non-zero
        _log.exception("inference_crashed")
        return 1
    finally:
        if store is not None:
            store.close()
        if server is not None:
            server.stop()
