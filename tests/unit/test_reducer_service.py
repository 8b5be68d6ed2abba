"""ReducerService's worker: the mode-streaming behaviour its quick loop close relies on (no broker)."""

from __future__ import annotations

import asyncio
import inspect

import mode

from docstream_reducer.service import _ThreadWorker


def test_mode_still_ends_a_worker_with_the_sentinel_task_that_the_thread_worker_shortens() -> None:
    # _ThreadWorker overrides a private coroutine of mode's Worker; a mode that no longer calls it
    # (or calls it differently) makes the override dead code: review docstream_reducer/service.py.
    assert inspect.iscoroutinefunction(mode.Worker._sentinel_task)
    assert "self._sentinel_task()" in inspect.getsource(mode.Worker._shutdown_loop)
    assert "self._shutdown_loop()" in inspect.getsource(mode.Worker.stop_and_shutdown)
    assert _ThreadWorker._sentinel_task is not mode.Worker._sentinel_task


def test_the_thread_worker_sentinel_lets_the_loop_run_once_more_and_returns_at_once() -> None:
    loop = asyncio.new_event_loop()
    ran: list[str] = []
    try:
        loop.call_soon(ran.append, "late callback")
        worker = object.__new__(_ThreadWorker)  # the coroutine uses nothing of the worker
        loop.run_until_complete(asyncio.wait_for(_ThreadWorker._sentinel_task(worker), timeout=0.5))
    finally:
        loop.close()
    assert ran == ["late callback"]
