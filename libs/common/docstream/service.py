"""The start-up and shut-down every service process shares, written once: ``run_service()``.

A service's ``main(settings)`` hands ``run_service`` its settings (read through ``ServiceContext``: the sections it
uses), its name and a body that wires its parts (``docs/operations.md`` "Start-up and shut-down").
``run_service`` owns, in this order:

1. logging: ``configure_logging`` with the service's name bound into every line; and the garbage collector's
   young generation made larger (``collect_garbage_less_often``);
2. the metrics endpoint (``/metrics``, ``/healthz``, ``/readyz`` on ``metrics.port`` when > 0),
   up before the body runs, so liveness answers during a slow start (a model load);
3. the body: it opens the store through ``ServiceHost.open_store`` and runs the service through
   ``ServiceHost.serve``, which installs SIGTERM/SIGINT → the service's stop callback and makes
   ``/readyz`` follow the service's ``ready`` callable while (and only while) it runs;
4. the exit code: 0 on a clean stop (or what the service's run returned), 1 on a
   ``DocstreamError`` (logged once as ``<service>_failed``) or any other error (``<service>_crashed``);
   a ``KeyboardInterrupt`` or ``SystemExit`` is not an error of the service and propagates;
5. closing, however the body ended: what the body registered (``on_exit``, last first), the
   store, the metrics endpoint; then the signal handlers in place before ``serve`` come back;
   and, after a clean stop, the service's own ``stopped_event`` when it has one.

No service is imported here: the library knows only the shape of a service (run, stop, ready).
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from docstream.errors import DocstreamError
from docstream.logging import configure_logging, get_logger
from docstream.metrics import Metrics, MetricsServer
from docstream.settings import CassandraSettings, LogSettings, MetricsSettings, StoreSettings
from docstream.store import ResultStore, open_store

__all__ = ["EXIT_FAILED", "EXIT_OK", "GC_YOUNG_THRESHOLD", "ServiceContext", "ServiceHost",
           "collect_garbage_less_often", "run_service"]

EXIT_OK, EXIT_FAILED = 0, 1
"""Exit codes of a service process: a clean stop, and a failure (logged once)."""

GC_YOUNG_THRESHOLD = 10_000
"""Allocations of container objects between two collections of the garbage collector's young generation (CPython's
default: 700)."""


def collect_garbage_less_often() -> None:
    """Collect the young generation every ``GC_YOUNG_THRESHOLD`` allocations, not every 700 (the older generations'
    thresholds stay). For every service process and ``docstream run``.

    A service's records are freed by their reference counts as each batch moves on; the cyclic collector finds no
    garbage in them, yet at CPython's default it walks the objects in flight (a batch of records, their fields) every
    700 allocations. With the model out of the way (docs/performance.md "Plumbing capacity") that walk was a fifth of
    the inference service's CPU a chunk, and a model load's objects cost a short ``docstream run`` half a second of
    its start. Cycles are still collected, a few thousand objects later.
    """
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)

_log = get_logger(__name__)
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _not_ready() -> bool:
    return False


def _always_ready() -> bool:
    return True


class ServiceContext(Protocol):
    """What ``run_service`` reads of the settings: the sections of the same names (a service's ``main`` passes its
    ``Settings``, which has them).

    Attributes:
        log: the level and format of the process's logs.
        metrics: where ``/metrics``, ``/healthz`` and ``/readyz`` are served (``port`` 0: nowhere).
        store: which result store ``ServiceHost.open_store`` opens.
        cassandra: the connection of the cassandra store.
    """

    @property
    def log(self) -> LogSettings: ...

    @property
    def metrics(self) -> MetricsSettings: ...

    @property
    def store(self) -> StoreSettings: ...

    @property
    def cassandra(self) -> CassandraSettings: ...


class ServiceHost:
    """What a service's body gets from ``run_service``: metrics, the store, signals, readiness.

    Attributes:
        context: the settings sections the process runs with.
        metrics: the process's registry, served on ``/metrics``.
        exit_code: the process's exit status so far (``serve`` sets what the run returned).
    """

    def __init__(
        self, context: ServiceContext, *,
        store_factory: Callable[[StoreSettings, CassandraSettings], ResultStore] = open_store,
    ) -> None:
        self.context = context
        self.metrics = Metrics()
        self._store_factory = store_factory
        self._ready: Callable[[], bool] = _not_ready
        self._closers: list[Callable[[], None]] = []
        self._saved_handlers: dict[int, _SignalHandler] = {}
        self.exit_code = EXIT_OK

    def ready(self) -> bool:
        """Whether the service runs and says it is ready: what ``/readyz`` answers."""
        return self._ready()

    def open_store(self, *, migrate: bool = False) -> ResultStore:
        """The result store of ``context.store``, closed when the process ends; ``migrate`` applies the schema.

        Raises:
            StoreError: ``migrate`` could not reach the store or apply the schema.
        """
        store = self._store_factory(self.context.store, self.context.cassandra)
        self.on_exit(store.close)
        if migrate:
            store.migrate()
        return store

    def on_exit(self, close: Callable[[], None]) -> None:
        """Call ``close`` when the process ends, however; later registrations close first."""
        self._closers.append(close)

    def serve(
        self, run: Callable[[], int | None], *, stop: Callable[[], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """Run the service until it returns; its return value (None: 0) becomes the exit code.

        Args:
            run: blocks until the service stops; returns an exit code, or None for 0.
            stop: what SIGTERM and SIGINT call (from the main thread's signal handler); None
                leaves the signals alone (a framework that handles them itself: Faust).
            ready: what ``/readyz`` reports while ``run`` runs (default: ready as soon as it runs);
                ``/readyz`` is false before ``run`` starts and after it returns, whatever this says.
        """
        if stop is not None:
            self._handle_signals(stop)
        self._ready = ready if ready is not None else _always_ready
        try:
            code = run()
        finally:
            self._ready = _not_ready
        self.exit_code = EXIT_OK if code is None else code

    def _handle_signals(self, stop: Callable[[], None]) -> None:
        for signum in _SIGNALS:
            previous = signal.signal(signum, lambda *_: stop())
            self._saved_handlers.setdefault(signum, previous)

    def _close(self) -> None:
        """Close what was registered (last first), then restore the signal handlers ``serve`` replaced."""
        try:
            while self._closers:
                self._closers.pop()()
        finally:
            for signum, previous in self._saved_handlers.items():
                if previous is not None:  # None: installed outside Python; nothing to put back
                    signal.signal(signum, previous)
            self._saved_handlers.clear()


def run_service(
    context: ServiceContext,
    name: str,
    body: Callable[[ServiceHost], None],
    *,
    metrics_endpoint: bool = True,
    failed_event: str | None = None,
    stopped_event: str | None = None,
    store_factory: Callable[[StoreSettings, CassandraSettings], ResultStore] = open_store,
) -> int:
    """Run one service process: logging, metrics endpoint, ``body(host)``, exit code, closing.

    Args:
        context: the process's logging, metrics and store sections (read once, by the caller).
        name: the service, bound as ``service`` into every log line and used in event names.
        body: wires the service on the host and calls ``host.serve(...)`` (or just does its work).
        metrics_endpoint: serve ``/metrics``, ``/healthz``, ``/readyz`` when ``metrics.port`` > 0
            (off for a one-shot command).
        failed_event: the event logged on a ``DocstreamError`` (default ``<name>_failed``).
        stopped_event: an event logged after a clean stop, once everything is closed (default: none).
        store_factory: opens the store from ``context.store`` and ``context.cassandra`` (tests pass a fake).

    Returns:
        0 on a clean stop (or the code ``run`` returned), 1 on an error, which is logged once.
    """
    configure_logging(level=context.log.level, fmt=context.log.format, service=name)
    collect_garbage_less_often()
    host = ServiceHost(context, store_factory=store_factory)
    try:
        if metrics_endpoint and context.metrics.port:
            server = MetricsServer(host.metrics, host=context.metrics.host, port=context.metrics.port,
                                   ready=host.ready, tenant_label=context.metrics.tenant_label).start()
            host.on_exit(server.stop)  # registered first: closed last, so /healthz answers to the end
        body(host)
    except DocstreamError as exc:
        _log.error(failed_event or f"{name}_failed", error_code=exc.code, error=exc.message)
        host.exit_code = EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - main: log once, exit non-zero
        _log.error(f"{name}_crashed", error=str(exc)[:500], exc_info=exc)
        host.exit_code = EXIT_FAILED
    finally:
        host._close()
    if stopped_event is not None and host.exit_code == EXIT_OK:
        _log.info(stopped_event)
    return host.exit_code
