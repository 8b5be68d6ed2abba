"""The services of `docstream run` on their threads: a service that fails, or ends before the run stops it, fails
the run; one the run stops does not (docstream_cli.runner._Services, with services that do no I/O)."""

from __future__ import annotations

import threading
import time

import pytest

from docstream.errors import FatalError
from docstream_cli.runner import _Phases, _Service, _Services

_WAIT_S = 30.0


def _failure(services: _Services) -> FatalError:
    """The run's failure, once a service's thread has recorded it (the run is not stopping)."""
    deadline = time.monotonic() + _WAIT_S
    while not services.errors and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(FatalError) as caught:
        services.raise_if_failed()
    return caught.value


def test_a_service_that_ends_by_itself_fails_the_run_instead_of_leaving_it_to_wait_forever() -> None:
    def _run() -> None:
        return  # at once, as the reducer's worker did when it crashed

    services = _Services(_Phases())
    services.start("reducer", lambda: _Service(_run, lambda: None))
    failure = _failure(services)
    services.stop(timeout_s=_WAIT_S)
    assert failure.code == "service_stopped"
    assert "the reducer failed: the reducer stopped before the run ended" in failure.message


def test_a_service_that_raises_fails_the_run_with_its_own_code() -> None:
    def _run() -> None:
        raise FatalError("the reducer's worker crashed (exit code 1)", code="reducer_crashed")

    services = _Services(_Phases())
    services.start("reducer", lambda: _Service(_run, lambda: None))
    assert _failure(services).code == "reducer_crashed"
    services.stop(timeout_s=_WAIT_S)


def test_a_service_the_run_stops_is_no_failure() -> None:
    running, stopped = threading.Event(), threading.Event()

    def _run() -> None:
        running.set()
        stopped.wait(_WAIT_S)

    services = _Services(_Phases())
    services.start("chunker", lambda: _Service(_run, stopped.set))
    assert running.wait(_WAIT_S)
    services.stop(timeout_s=_WAIT_S)
    assert stopped.is_set()
    services.raise_if_failed()
    assert services.errors == []
