"""The reducer as an object with a lifecycle, for running it inside another process (`docstream run`).

``main.py`` runs the Faust worker on the main thread with signal handlers; here the worker runs
on a thread of its own with a fresh event loop and no signal handlers, and ``stop()`` may be
called from any thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from docstream.avro import AvroSerde
from docstream.kafka.admin import create_topics
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import Settings
from docstream.store import ResultStore
from docstream_reducer.agents import StoreCalls
from docstream_reducer.app import build_reducer, internal_topic_specs, resolve_producer_idempotence
from docstream_reducer.faust_shim import ThreadWorker
from docstream_reducer.webhook import WebhookNotifier

__all__ = ["ReducerService", "build_reducer_service"]

_log = get_logger(__name__)


class ReducerService:
    """A Faust reducer worker on a thread: ``run_in_thread()`` blocks, ``stop()`` ends it."""

    def __init__(self, settings: Settings, *, store: ResultStore, metrics: Metrics) -> None:
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="reducer-store")
        self._worker: ThreadWorker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()

    def run_in_thread(self) -> None:
        """Build the app on a new event loop in this thread and run it until ``stop()``."""
        settings = self._settings
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        settings.reducer.data_dir.mkdir(parents=True, exist_ok=True)
        create_topics(settings.kafka, internal_topic_specs(settings.kafka, settings.reducer))
        reducer = build_reducer(
            settings.kafka, settings.reducer, custom_tasks=settings.tasks.custom,
            store=StoreCalls(self._store, settings.retry, self._executor),
            serde=AvroSerde(settings.kafka), webhooks=WebhookNotifier(settings.reducer, settings.retry),
            metrics=self._metrics, clock=time.monotonic,
            idempotent_producer=resolve_producer_idempotence(settings.kafka, settings.reducer),
            limited=settings.fairness.limited,
        )
        self._worker = ThreadWorker(reducer.app, loglevel=settings.log.level, override_logging=False, quiet=True,
                                    redirect_stdouts=False, loop=self._loop)
        self._worker.spinner = None
        if self._stop_requested.is_set():  # stopped while starting: stop() found no worker to tell
            self._loop.close()
            return
        try:
            self._worker.execute_from_commandline()
        except SystemExit as exc:
            _log.info("reducer_stopped", exit_code=exc.code)

    def stop(self) -> None:
        """Ask the worker to shut down (thread-safe; before the worker runs, it does not start)."""
        self._stop_requested.set()
        if self._worker is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._worker.request_stop)

    def close(self) -> None:
        """Release the store executor."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def build_reducer_service(settings: Settings, *, store: ResultStore, metrics: Metrics) -> ReducerService:
    """A reducer for ``store`` (migrated) to run on a thread."""
    return ReducerService(settings, store=store, metrics=metrics)
