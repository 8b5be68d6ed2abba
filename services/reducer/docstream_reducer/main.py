"""`docstream reducer`: settings → logging → topics, store → Faust worker. Wiring only."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from docstream.avro import AvroSerde
from docstream.kafka.admin import create_topics, ensure_topics
from docstream.logging import get_logger
from docstream.service import ServiceHost, run_service
from docstream.settings import Settings
from docstream.topics import Topics
from docstream_reducer.agents import SERVICE, StoreCalls
from docstream_reducer.app import (
    Reducer,
    ReducerWorker,
    build_reducer,
    check_partitions,
    exit_watchdog,
    internal_topic_specs,
    resolve_producer_idempotence,
)
from docstream_reducer.faults import keep_partition_paused
from docstream_reducer.watch import Stall
from docstream_reducer.webhook import WebhookNotifier

__all__ = ["RESTARTS_ENV", "main", "restart_process"]

RESTARTS_ENV = "DOCSTREAM_REDUCER_RESTARTS"
"""How many times this reducer process replaced itself (``restart_process``); absent at first."""

_STOP_TIMEOUT_S = 60.0  # a stop under exactly-once commits transactions; slow on a loaded 2-core box


def main(settings: Settings) -> int:
    """Run the reducer until SIGTERM/SIGINT (0) or a fatal fault (1); Faust handles the signals."""
    restarts = int(os.environ.get(RESTARTS_ENV, "0") or 0)

    def serve(host: ServiceHost) -> None:
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        create_topics(settings.kafka, internal_topic_specs(settings.kafka, settings.reducer))
        check_partitions(settings.kafka)
        store = host.open_store(migrate=True)
        executor = ThreadPoolExecutor(max_workers=settings.reducer.store_threads,
                                      thread_name_prefix="reducer-store")
        host.on_exit(lambda: executor.shutdown(wait=False, cancel_futures=True))
        settings.reducer.data_dir.mkdir(parents=True, exist_ok=True)
        reducer = build_reducer(
            settings.kafka, settings.reducer, custom_tasks=settings.tasks.custom,
            store=StoreCalls(store, settings.retry, executor), serde=AvroSerde(settings.kafka),
            webhooks=WebhookNotifier(settings.reducer, settings.retry), metrics=host.metrics, clock=time.monotonic,
            on_stuck=lambda stall: restart_process(stall, restarts),
            idempotent_producer=resolve_producer_idempotence(settings.kafka, settings.reducer),
            limited=settings.fairness.limited,
        )
        if settings.faults.reducer_stall_partition is not None and restarts == 0:  # chaos tests only
            keep_partition_paused(reducer, Topics(settings.kafka.topic_prefix).results,
                                  settings.faults.reducer_stall_partition, settings.reducer.stall_timeout_s / 4)
        host.serve(lambda: _run_worker(settings, reducer, restarts), ready=reducer.ready)

    return run_service(settings, SERVICE, serve)


def _run_worker(settings: Settings, reducer: Reducer, restarts: int) -> int:
    """Run the Faust worker on this thread until it stops (its own SIGTERM/SIGINT handlers); its exit code."""
    log = get_logger(__name__)
    log.info("reducer_starting", exactly_once=settings.kafka.transactions, app_id=settings.reducer.app_id,
             restarts=restarts, stall_timeout_s=settings.reducer.stall_timeout_s)
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


def restart_process(stall: Stall, restarts: int) -> None:
    """Replace this process by a fresh reducer (same command, same environment, same pid).

    The last resort of the partition watch (app.py): faust stopped delivering a partition and a
    re-fetch did not help, while a new process resumes it (docs/reducer.md "Partition watch").
    Like a kill -9 and a restart, nothing is lost: input offsets are committed only with their
    effects, open transactions are aborted by the broker when the new process fences them, and
    the tables are rebuilt from their changelogs.
    """
    get_logger(__name__).error("reducer_restarting", reason="partition_stuck", topic=stall.topic,
                               partition=stall.partition, committed=stall.committed, end=stall.end,
                               restarts=restarts + 1)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, *sys.orig_argv[1:]]  # the interpreter and its arguments, as this process started
    os.execve(sys.executable, argv, {**os.environ, RESTARTS_ENV: str(restarts + 1)})  # noqa: S606 - no shell wanted
