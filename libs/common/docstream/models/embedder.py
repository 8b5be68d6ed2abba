"""The contract every embedder fulfils: texts in, one vector each, in a prepare step and a forward step.

The in-process backends (``docstream.models.embedding``) and the OpenAI-compatible endpoint
(``docstream.models.endpoint``) both implement ``Embedder``; the inference service, the tasks and the CLI depend on
this module alone, so neither backend imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from docstream.models.runtime import Runtime

__all__ = ["Embedder", "PreparedBatch", "Vectors"]

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """Texts tokenized for one forward pass.

    Attributes:
        texts: the texts, in the order the embeddings come back.
        features: the model's input tensors (opaque to callers).
    """

    texts: tuple[str, ...]
    features: Any


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors, one per text, of ``dimension`` floats."""

    @property
    def model_id(self) -> str:
        """The model name (and revision) recorded with every result."""

    @property
    def dimension(self) -> int:
        """Length of every vector."""

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens; longer texts are truncated."""

    @property
    def runtime(self) -> Runtime:
        """Backend, device, precision and threads the model runs with (its ``label`` goes with every result)."""

    @property
    def device(self) -> str:
        """The device the forward pass runs on, as torch names it: ``cpu``, ``cuda:0``, ``mps`` (job accounting)."""

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Tokenize ``texts`` for one forward pass."""

    def embed(self, batch: PreparedBatch) -> Vectors:
        """Run the model: a float32 array of shape (len(batch.texts), dimension).

        It returns once the device is done (the vectors are on the host), so that timing the call
        times the forward pass on a GPU too.
        """

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """The model library's own one-call encode, with the same device, precision and normalization."""

    def warm_up(self) -> None:
        """Run one small batch so the first real batch pays no start-up cost."""
