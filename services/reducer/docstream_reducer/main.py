"""`docstream reducer`: settings → logging → topics, store → Faust worker. Wiring only."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from docstream.avro import AvroSerde
from docstream.errors import DocstreamError
from docstream.kafka.admin import create_topics, ensure_topics
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics, MetricsServer
from docstream.settings import Settings
from docstream.store import ResultStore, open_store
from docstream.topics import Topics
from docstream_reducer.agents import SERVICE, StoreCalls
from docstream_reducer.app import ReducerWorker, build_reducer, check_partitions, exit_watchdog, internal_topic_specs
from docstream_reducer.webhook import WebhookNotifier

__all__ = ["main"]

_STOP_TIMEOUT_S = 60.0  # a stop under exactly-once commits transactions; slow on a loaded 2-core box


def main(settings: Settings) -> int:
    """Run the reducer until SIGTERM/SIGINT (0) or a fatal fault (1)."""
    configure_logging(level=settings.log.level, fmt=settings.log.format, service=SERVICE)
    log = get_logger(__name__)
    metrics = Metrics()
    store: ResultStore | None = None
    server: MetricsServer | None = None
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="reducer-store")
    try:
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        create_topics(settings.kafka, internal_topic_specs(settings))
        check_partitions(settings)
        store = open_store(settings)
        store.migrate()
        settings.reducer.data_dir.mkdir(parents=True, exist_ok=True)
        reducer = build_reducer(
            settings, store=StoreCalls(store, settings.retry, executor), serde=AvroSerde(settings.kafka),
            webhooks=WebhookNotifier(settings.reducer, settings.retry), metrics=metrics, clock=time.monotonic,
        )
        if settings.metrics.port:
            server = MetricsServer(metrics, host=settings.metrics.host, port=settings.metrics.port,
                                   ready=reducer.ready).start()
        log.info("reducer_starting", exactly_once=settings.kafka.transactions, app_id=settings.reducer.app_id)
        worker = ReducerWorker(reducer.app, loglevel=settings.log.level, override_logging=False, quiet=True,
                              redirect_stdouts=False)
        worker.spinner = None  # a terminal spinner: escape codes in a service's log
        worker.stop_timeout_s = _STOP_TIMEOUT_S
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            log.info("reducer_stopped", exit_code=code)
            exit_watchdog(_STOP_TIMEOUT_S, code)  # threads left behind must not keep the process alive
            return code
        return 0
    except DocstreamError as exc:
        log.error("reducer_failed", error_code=exc.code, error=exc.message)
        return 1
    except Exception:  # main: log once, exit non-zero
        log.exception("reducer_crashed")
        return 1
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        if store is not None:
            store.close()
        if server is not None:
            server.stop()
