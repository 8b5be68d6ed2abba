"""Fault injection for chaos tests (settings.faults); everything off by default.

* ``inference_delay_ms``: every forward pass sleeps this long first (a slow model).
* ``fail_chunk_text``: a forward pass raises ``InjectedModelError`` when any of its texts contains it.
* ``crash_after_write`` (+ ``crash_after_batches``): ``CrashSwitch.after_write`` ends the
  process with ``os._exit`` right after a store write, before its produce and commit.
* ``embed_log``: ``EmbedLog`` appends the chunk_id of every chunk the model ran to a file.

``stage_hooks`` turns the last two into the pipeline's ``StageHooks``; production runs none.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import FaultSettings
from docstream.tasks.base import (
    ChunkOutput,
    PreparedTexts,
    Task,
    TaskRequest,
    always_reuses_stored,
    bind_task_metrics,
    close_task,
    has_document_step,
    token_ids_accepted,
)
from docstream_inference.stages import StageHooks

__all__ = ["CRASH_EXIT_CODE", "CrashSwitch", "EmbedLog", "FaultyTask", "InjectedModelError", "stage_hooks",
           "with_faults"]

CRASH_EXIT_CODE = 86
"""Exit status of a process ended by ``crash_after_write``."""

_log = get_logger(__name__)


class InjectedModelError(RuntimeError):
    """The injected model failure (``faults.fail_chunk_text``)."""


class FaultyTask:
    """A task runner that delays and fails as ``FaultSettings`` say, else the wrapped one."""

    def __init__(self, inner: Task, faults: FaultSettings) -> None:
        self._inner = inner
        self._delay_s = faults.inference_delay_ms / 1000
        self._fail_text = faults.fail_chunk_text

    @property
    def inner(self) -> Task:
        """The wrapped runner."""
        return self._inner

    @property
    def name(self) -> str:
        """The wrapped task's name."""
        return self._inner.name

    @property
    def model_id(self) -> str:
        """The wrapped model id."""
        return self._inner.model_id

    @property
    def max_tokens(self) -> int:
        """The wrapped max_tokens."""
        return self._inner.max_tokens

    @property
    def runtime(self) -> str:
        """The wrapped runtime label."""
        return self._inner.runtime

    @property
    def device(self) -> str:
        """The wrapped device."""
        return self._inner.device

    @property
    def document_step(self) -> bool:
        """The wrapped task's declaration (``has_document_step``)."""
        return has_document_step(self._inner)

    @property
    def always_reuse_stored(self) -> bool:
        """The wrapped task's declaration (``always_reuses_stored``)."""
        return always_reuses_stored(self._inner)

    def model_id_for(self, request: TaskRequest) -> str:
        """The wrapped task's model id for ``request``."""
        return self._inner.model_id_for(request)

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Prepare with the wrapped runner."""
        return self._inner.prepare(texts, requests)

    @property
    def token_ids_of(self) -> str | None:
        """The wrapped runner's (``token_ids_accepted``)."""
        return token_ids_accepted(self._inner)

    def prepare_token_ids(self, texts: Sequence[str], requests: Sequence[TaskRequest],
                          token_ids: Sequence[bytes | None]) -> PreparedTexts:
        """Prepare with the wrapped runner, from token ids."""
        return self._inner.prepare_token_ids(texts, requests, token_ids)  # type: ignore[attr-defined,no-any-return]

    def run(self, batch: PreparedTexts) -> Sequence[ChunkOutput]:
        """Sleep, fail on the marked text, else run.

        Raises:
            InjectedModelError: a text of the batch contains ``fail_chunk_text``.
        """
        if self._delay_s:
            time.sleep(self._delay_s)
        if self._fail_text and any(self._fail_text in text for text in batch.texts):
            raise InjectedModelError("injected model failure (faults.fail_chunk_text)")
        return self._inner.run(batch)

    def warm_up(self) -> None:
        """The wrapped warm-up."""
        self._inner.warm_up()

    def bind_metrics(self, metrics: Metrics, service: str) -> None:
        """The wrapped task's, when it has one."""
        bind_task_metrics(self._inner, metrics, service)

    def close(self) -> None:
        """The wrapped task's, when it has one."""
        close_task(self._inner)


def with_faults(task: Task, faults: FaultSettings) -> Task:
    """``task`` wrapped in a FaultyTask when a model fault is configured."""
    if faults.inference_delay_ms or faults.fail_chunk_text:
        return FaultyTask(task, faults)
    return task


class CrashSwitch:
    """Ends the process after the configured number of store writes (``crash_after_write``)."""

    def __init__(self, faults: FaultSettings) -> None:
        self._armed = faults.crash_after_write
        self._batches_before = faults.crash_after_batches
        self._writes = 0

    def after_write(self) -> None:
        """Count a batch write; past ``crash_after_batches`` writes, exit now (no produce, no commit)."""
        if not self._armed:
            return
        self._writes += 1
        if self._writes > self._batches_before:
            _log.warning("fault_crash_after_write", batches_written=self._writes)
            os._exit(CRASH_EXIT_CODE)


class EmbedLog:
    """Appends the chunk_id of every chunk the model ran to a file (``faults.embed_log``)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def __call__(self, chunk_ids: Sequence[str]) -> None:
        with self._lock, self._path.open("a", encoding="utf-8") as out:
            out.writelines(f"{chunk_id}\n" for chunk_id in chunk_ids)


def stage_hooks(faults: FaultSettings) -> StageHooks:
    """The stage callbacks of the configured faults (none when every fault is off)."""
    return StageHooks(
        after_write=CrashSwitch(faults).after_write if faults.crash_after_write else None,
        on_embedded=EmbedLog(faults.embed_log) if faults.embed_log else None,
    )
