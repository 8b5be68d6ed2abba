"""docstream.service: the start-up and shut-down of every service process, without a broker or a store."""

from __future__ import annotations

import gc
import json
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from docstream.errors import ConfigError, FatalError
from docstream.service import EXIT_FAILED, EXIT_OK, GC_YOUNG_THRESHOLD, ServiceHost, run_service
from docstream.settings import CassandraSettings, Settings, StoreSettings
from docstream.store import ResultStore
from tests.fixtures.services import free_port, http_status


class FakeStore:
    """Records what the host did to it."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def migrate(self) -> None:
        self.calls.append("store.migrate")

    def close(self) -> None:
        self.calls.append("store.close")


class StoppableRun:
    """A service's run that blocks until ``stop()``, as a consume loop does."""

    def __init__(self, on_start: Callable[[], None] = lambda: None) -> None:
        self.stopped = threading.Event()
        self.stops = 0
        self._on_start = on_start

    def run(self) -> None:
        self._on_start()
        assert self.stopped.wait(10), "stop() was not called"

    def stop(self) -> None:
        self.stops += 1
        self.stopped.set()


@pytest.fixture
def settings() -> Settings:
    return Settings().with_overrides(log={"format": "json", "level": "INFO"}, metrics={"port": 0})


@pytest.fixture(autouse=True)
def _unbind_service() -> Iterator[None]:
    yield
    structlog.contextvars.unbind_contextvars("service")  # run_service binds it for its process


def _events(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]


def _factory(calls: list[str]) -> Callable[[StoreSettings, CassandraSettings], ResultStore]:
    def open_fake(_store: StoreSettings, _cassandra: CassandraSettings) -> ResultStore:
        calls.append("store.open")
        return cast(ResultStore, FakeStore(calls))

    return open_fake


def test_a_clean_stop_exits_0_and_closes_what_was_opened_last_first(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def body(host: ServiceHost) -> None:
        host.open_store()
        host.on_exit(lambda: calls.append("service.close"))
        host.serve(lambda: calls.append("run") and None)

    assert run_service(settings, "svc", body, stopped_event="svc_stopped",
                       store_factory=_factory(calls)) == EXIT_OK
    assert calls == ["store.open", "run", "service.close", "store.close"]
    events = _events(capsys)
    assert [e["event"] for e in events] == ["svc_stopped"]
    assert events[0]["service"] == "svc" and events[0]["level"] == "info"


def test_what_run_returns_is_the_exit_code(settings: Settings) -> None:
    assert run_service(settings, "svc", lambda host: host.serve(lambda: 3)) == 3


def test_a_body_without_serve_exits_0(settings: Settings) -> None:
    assert run_service(settings, "svc", lambda host: None) == EXIT_OK


def test_a_service_collects_its_young_garbage_less_often_and_the_older_generations_as_before(
    settings: Settings,
) -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    try:
        gc.set_threshold(700, 10, 10)  # CPython's default
        assert run_service(settings, "svc", lambda host: seen.append(gc.get_threshold())) == EXIT_OK
    finally:
        gc.set_threshold(*before)
    assert seen == [(GC_YOUNG_THRESHOLD, 10, 10)] and GC_YOUNG_THRESHOLD > 700


def test_open_store_migrates_when_asked(settings: Settings) -> None:
    calls: list[str] = []
    assert run_service(settings, "svc", lambda host: host.open_store(migrate=True) and None,
                       store_factory=_factory(calls)) == EXIT_OK
    assert calls == ["store.open", "store.migrate", "store.close"]


def test_a_docstream_error_exits_1_logged_once_and_the_store_is_closed(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def body(host: ServiceHost) -> None:
        host.open_store()
        raise FatalError("the broker is gone", code="broker_unavailable")

    code = run_service(settings, "svc", body, stopped_event="svc_stopped",
                       store_factory=_factory(calls))
    assert code == EXIT_FAILED
    assert calls == ["store.open", "store.close"]
    [event] = _events(capsys)  # no svc_stopped after a failure
    assert event["event"] == "svc_failed" and event["level"] == "error"
    assert event["error_code"] == "broker_unavailable" and event["error"] == "the broker is gone"


def test_the_failed_event_can_be_named(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    def body(_: ServiceHost) -> None:
        raise ConfigError("no topics", code="topics_missing")

    assert run_service(settings, "ingest", body, failed_event="ingest_prepare_failed") == EXIT_FAILED
    assert [e["event"] for e in _events(capsys)] == ["ingest_prepare_failed"]


def test_any_other_error_exits_1_as_a_crash_with_its_traceback(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def body(host: ServiceHost) -> None:
        host.open_store()
        host.serve(lambda: 1 // 0)

    assert run_service(settings, "svc", body, store_factory=_factory(calls)) == EXIT_FAILED
    assert calls == ["store.open", "store.close"]
    [event] = _events(capsys)
    assert event["event"] == "svc_crashed" and event["error"] == "integer division or modulo by zero"
    assert event["exception"][0]["exc_type"] == "ZeroDivisionError"


def test_keyboard_interrupt_is_not_an_error_of_the_service_it_propagates_after_closing(settings: Settings) -> None:
    calls: list[str] = []

    def body(host: ServiceHost) -> None:
        host.open_store()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_service(settings, "svc", body, store_factory=_factory(calls))
    assert calls == ["store.open", "store.close"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_call_the_stop_callback_and_the_handlers_are_restored(
    settings: Settings, signum: signal.Signals
) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    service = StoppableRun(on_start=lambda: signal.raise_signal(signum))

    service_run = run_service(settings, "svc", lambda host: host.serve(service.run, stop=service.stop))
    assert service_run == EXIT_OK
    assert service.stops == 1
    assert {s: signal.getsignal(s) for s in before} == before


def test_without_a_stop_callback_the_signals_are_left_alone(settings: Settings) -> None:
    seen: list[Any] = []

    def body(host: ServiceHost) -> None:
        host.serve(lambda: seen.append(signal.getsignal(signal.SIGTERM)) and None)

    before = signal.getsignal(signal.SIGTERM)
    assert run_service(settings, "svc", body) == EXIT_OK
    assert seen == [before]


def test_readiness_is_the_services_own_and_only_while_it_runs(settings: Settings) -> None:
    says = {"ready": False}
    seen: list[tuple[str, bool]] = []

    def run(host: ServiceHost) -> None:
        seen.append(("starting", host.ready()))
        says["ready"] = True
        seen.append(("subscribed", host.ready()))
        says["ready"] = False
        seen.append(("stopping", host.ready()))
        says["ready"] = True  # a service that still says ready after its run: /readyz does not

    def body(host: ServiceHost) -> None:
        seen.append(("before", host.ready()))
        host.serve(lambda: run(host), ready=lambda: says["ready"])
        seen.append(("after", host.ready()))

    assert run_service(settings, "svc", body) == EXIT_OK
    assert seen == [("before", False), ("starting", False), ("subscribed", True), ("stopping", False),
                    ("after", False)]


def test_a_service_without_a_ready_callable_is_ready_while_it_runs(settings: Settings) -> None:
    seen: list[bool] = []

    def body(host: ServiceHost) -> None:
        host.serve(lambda: seen.append(host.ready()) and None)
        seen.append(host.ready())

    run_service(settings, "svc", body)
    assert seen == [True, False]


def test_the_metrics_endpoint_serves_readiness_during_the_run_and_closes_last(settings: Settings) -> None:
    port = free_port()
    settings = settings.with_overrides(metrics={"port": port, "host": "127.0.0.1"})
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, tuple[int, int]] = {}

    def probe(when: str) -> None:
        seen[when] = (http_status(f"{base}/healthz"), http_status(f"{base}/readyz"))

    def body(host: ServiceHost) -> None:
        host.on_exit(lambda: probe("closing"))
        probe("before")
        host.serve(lambda: probe("running"))
        probe("after")

    assert run_service(settings, "svc", body) == EXIT_OK
    assert seen == {"before": (200, 503), "running": (200, 200), "after": (200, 503), "closing": (200, 503)}
    assert http_status(f"{base}/healthz") == 0, "the endpoint is closed when the process ends"


def test_a_one_shot_command_serves_no_endpoint(settings: Settings) -> None:
    port = free_port()
    settings = settings.with_overrides(metrics={"port": port, "host": "127.0.0.1"})
    seen: list[int] = []
    assert run_service(settings, "svc",
                       lambda host: seen.append(http_status(f"http://127.0.0.1:{port}/healthz")),
                       metrics_endpoint=False) == EXIT_OK
    assert seen == [0]


def test_the_api_that_cannot_prepare_its_store_exits_1_with_api_start_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from docstream_ingest.main import serve

    (tmp_path / "a-file").write_text("not a folder")
    settings = Settings().with_overrides(log={"format": "json", "level": "INFO"},
                                         store={"backend": "sqlite", "sqlite_path": str(tmp_path / "a-file" / "x.db")})

    assert serve(settings) == EXIT_FAILED

    events = _events(capsys)
    assert [e["event"] for e in events] == ["api_start_failed"]
    assert events[0]["service"] == "api" and events[0]["error_code"]
