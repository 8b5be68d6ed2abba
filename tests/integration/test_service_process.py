"""tests.fixtures.services.ServiceProcess, the one process wrapper of the tests: its own process group,
SIGTERM then SIGKILL to the whole group, output in a log file shown on failure. Plain Python processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fixtures.kafka import wait_until
from tests.fixtures.services import ServiceProcess

pytestmark = pytest.mark.integration

# a parent that starts a child (same process group) and leaves it behind when SIGTERM ends the parent
_PARENT = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("child", child.pid, flush=True)
time.sleep(600)
"""
_DEAF = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""
_FAILS = """
import sys
print("to stdout", flush=True)
print("to stderr: it went wrong", file=sys.stderr, flush=True)
sys.exit(3)
"""


def _python(name: str, script: str, folder: Path) -> ServiceProcess:
    return ServiceProcess(name, dict(os.environ), folder / "logs", argv=[sys.executable, "-c", script])


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _child_pid(service: ServiceProcess) -> int:
    line = wait_until(lambda: next((x for x in service.log_text().splitlines() if x.startswith("child ")), None),
                      30, "the child's pid in the log")
    return int(line.split()[1])


def test_stop_signals_the_whole_group_so_a_child_left_behind_goes_too(tmp_path: Path) -> None:
    service = _python("parent", _PARENT, tmp_path)
    service.start()
    child = _child_pid(service)
    assert os.getpgid(child) == service.pid  # its own group, the child in it
    assert os.getpgid(child) != os.getpgid(0)

    assert service.stop(timeout_s=30) == 0

    assert not service.alive()
    wait_until(lambda: _gone(child), 10, "the child to be killed with its group")


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    service = _python("deaf", _DEAF, tmp_path)
    service.start()
    wait_until(lambda: "ready" in service.log_text(), 30, "the process to start")

    started = time.monotonic()
    code = service.stop(timeout_s=0.5)

    assert code == -9 and time.monotonic() - started < 10


def test_output_goes_to_a_log_per_run_and_a_bad_exit_shows_its_tail(tmp_path: Path) -> None:
    service = _python("fails", _FAILS, tmp_path)
    service.start()
    wait_until(lambda: service.returncode() is not None, 30, "the process to exit")

    with pytest.raises(AssertionError, match="fails exited with 3") as failed:
        service.stop_cleanly()
    assert "to stdout" in str(failed.value) and "to stderr: it went wrong" in str(failed.value)
    service.restart()
    wait_until(lambda: service.returncode() is not None, 30, "the second run to exit")
    assert service.log.name == "fails-2.log" and service.log_text(all_runs=True).count("to stdout") == 2
    service.reap()


def test_kill9_kills_the_group_at_once(tmp_path: Path) -> None:
    service = _python("parent", _PARENT, tmp_path)
    service.start()
    child = _child_pid(service)

    service.kill9()

    assert service.returncode() == -9
    wait_until(lambda: _gone(child), 10, "the child to be killed with its group")
