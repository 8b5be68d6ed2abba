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
from dataclasses import dataclass

from docstream.avro import AvroSerde
from docstream.errors import FatalError
from docstream.kafka.admin import create_topics
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import (
    FairnessSettings,
    KafkaSettings,
    LogSettings,
    ReducerSettings,
    RetrySettings,
    TasksSettings,
)
from docstream.store import ResultStore
from docstream_reducer.agents import StoreCalls
from docstream_reducer.app import build_reducer, internal_topic_specs, resolve_producer_idempotence
from docstream_reducer.faust_shim import ThreadWorker
from docstream_reducer.webhook import WebhookNotifier

__all__ = ["ReducerContext", "ReducerService", "build_reducer_service"]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReducerContext:
    """What the reducer reads of the settings: the sections of the same names (``tasks.custom`` for the user
    tasks' folds, ``fairness`` for which tenants have quotas, ``log.level`` for the worker's)."""

    kafka: KafkaSettings
    reducer: ReducerSettings
    retry: RetrySettings
    tasks: TasksSettings
    fairness: FairnessSettings
    log: LogSettings


class ReducerService:
    """A Faust reducer worker on a thread: ``run_in_thread()`` blocks, ``stop()`` ends it."""

    def __init__(self, context: ReducerContext, *, store: ResultStore, metrics: Metrics) -> None:
        self._context = context
        self._store = store
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=context.reducer.store_threads,
                                            thread_name_prefix="reducer-store")
        self._worker: ThreadWorker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()

    def run_in_thread(self) -> None:
        """Build the app on a new event loop in this thread and run it until ``stop()``.

        Raises:
            FatalError: ``reducer_crashed``, the worker ended with an error before ``stop()`` asked it to.
        """
        context = self._context
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        context.reducer.data_dir.mkdir(parents=True, exist_ok=True)
        create_topics(context.kafka, internal_topic_specs(context.kafka, context.reducer))
        reducer = build_reducer(
            context.kafka, context.reducer, custom_tasks=context.tasks.custom,
            store=StoreCalls(self._store, context.retry, self._executor),
            serde=AvroSerde(context.kafka), webhooks=WebhookNotifier(context.reducer, context.retry),
            metrics=self._metrics, clock=time.monotonic,
            idempotent_producer=resolve_producer_idempotence(context.kafka, context.reducer),
            limited=context.fairness.limited,
        )
        self._worker = ThreadWorker(reducer.app, loglevel=context.log.level, override_logging=False, quiet=True,
                                    redirect_stdouts=False, loop=self._loop)
        self._worker.spinner = None
        if self._stop_requested.is_set():  # stopped while starting: stop() found no worker to tell
            self._loop.close()
            return
        try:
            self._worker.execute_from_commandline()
        except SystemExit as exc:
            _log.info("reducer_stopped", exit_code=exc.code)
            if exc.code not in (None, 0) and not self._stop_requested.is_set():
                raise FatalError(f"the reducer's worker crashed (exit code {exc.code}); its log says why",
                                 code="reducer_crashed") from exc

    def stop(self) -> None:
        """Ask the worker to shut down (thread-safe; before the worker runs, it does not start)."""
        self._stop_requested.set()
        if self._worker is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._worker.request_stop)

    def close(self) -> None:
        """Release the store executor."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def build_reducer_service(context: ReducerContext, *, store: ResultStore, metrics: Metrics) -> ReducerService:
    """A reducer for ``store`` (migrated) to run on a thread."""
    return ReducerService(context, store=store, metrics=metrics)
