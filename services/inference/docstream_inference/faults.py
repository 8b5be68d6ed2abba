"""Fault injection for chaos tests (settings.faults); everything off by default.

* ``inference_delay_ms``: every forward pass sleeps this long first (a slow model).
* ``fail_chunk_text``: a forward pass raises ``InjectedModelError`` when any of its texts contains it.
* ``crash_after_write`` (+ ``crash_after_batches``): ``CrashSwitch.after_write`` ends the
  process with ``os._exit`` right after a store write, before its produce and commit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from docstream.embedding import Embedder, PreparedBatch, Runtime
from docstream.logging import get_logger
from docstream.settings import FaultSettings

__all__ = ["CRASH_EXIT_CODE", "CrashSwitch", "FaultyEmbedder", "InjectedModelError", "with_faults"]

CRASH_EXIT_CODE = 86
"""Exit status of a process ended by ``crash_after_write``."""

_log = get_logger(__name__)


class InjectedModelError(RuntimeError):
    """The injected model failure (``faults.fail_chunk_text``)."""


class FaultyEmbedder:
    """An Embedder that delays and fails as ``FaultSettings`` say, else the wrapped one."""

    def __init__(self, inner: Embedder, faults: FaultSettings) -> None:
        self._inner = inner
        self._delay_s = faults.inference_delay_ms / 1000
        self._fail_text = faults.fail_chunk_text

    @property
    def model_id(self) -> str:
        """The wrapped model id."""
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        """The wrapped dimension."""
        return self._inner.dimension

    @property
    def max_tokens(self) -> int:
        """The wrapped max_tokens."""
        return self._inner.max_tokens

    @property
    def runtime(self) -> Runtime:
        """The wrapped runtime."""
        return self._inner.runtime

    @property
    def device(self) -> str:
        """The wrapped device."""
        return self._inner.device

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Tokenize with the wrapped embedder."""
        return self._inner.prepare(texts)

    def embed(self, batch: PreparedBatch) -> npt.NDArray[np.float32]:
        """Sleep, fail on the marked text, else embed.

        Raises:
            InjectedModelError: a text of the batch contains ``fail_chunk_text``.
        """
        if self._delay_s:
            time.sleep(self._delay_s)
        if self._fail_text and any(self._fail_text in text for text in batch.texts):
            raise InjectedModelError("injected model failure (faults.fail_chunk_text)")
        return self._inner.embed(batch)

    def encode(self, texts: Sequence[str], *, batch_size: int) -> npt.NDArray[np.float32]:
        """The wrapped encode (no faults)."""
        return self._inner.encode(texts, batch_size=batch_size)

    def warm_up(self) -> None:
        """The wrapped warm-up."""
        self._inner.warm_up()


def with_faults(embedder: Embedder, faults: FaultSettings) -> Embedder:
    """``embedder`` wrapped in a FaultyEmbedder when a model fault is configured."""
    if faults.inference_delay_ms or faults.fail_chunk_text:
        return FaultyEmbedder(embedder, faults)
    return embedder


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
