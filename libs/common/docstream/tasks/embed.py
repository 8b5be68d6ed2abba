"""The ``embed`` task: a sentence-transformers model's vector per chunk, the token-weighted mean per document.

The runner wraps an ``docstream.models.embedding.Embedder`` (which loads, measures and caches its runtime);
its fold is ``docstream.tasks.fold_embed.EmbedFold``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from docstream.avro.segments import Float32Vector
from docstream.errors import PartialBatchError
from docstream.metrics import EndpointMetrics, Metrics
from docstream.models.embedder import Embedder
from docstream.models.endpoint import close_embedder, observe_embedder
from docstream.tasks.base import EMBED, ChunkOutput, PreparedTexts, TaskContext, TaskFold, TaskRequest
from docstream.tasks.fold_embed import EmbedFold

__all__ = ["EmbedTask"]


def _floats(row: Any) -> list[float]:
    return [float(x) for x in row]


class EmbedTask:
    """Runs an ``Embedder``: one ``ChunkOutput(embedding=...)`` per chunk."""

    name: ClassVar[str] = EMBED
    fold: ClassVar[TaskFold] = EmbedFold()

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    @classmethod
    def load(cls, context: TaskContext) -> EmbedTask:
        """The embedder ``context.inference`` describes (``docstream.models.embedding.load_embedder``)."""
        from docstream.models.embedding import load_embedder

        return cls(load_embedder(context.inference))

    @property
    def embedder(self) -> Embedder:
        """The wrapped embedder."""
        return self._embedder

    @property
    def model_id(self) -> str:
        """The embedding model's id."""
        return self._embedder.model_id

    @property
    def max_tokens(self) -> int:
        """The model's longest input."""
        return self._embedder.max_tokens

    @property
    def runtime(self) -> str:
        """The embedder's runtime label."""
        return self._embedder.runtime.label

    @property
    def device(self) -> str:
        """The embedder's device."""
        return self._embedder.device

    def model_id_for(self, request: TaskRequest) -> str:
        """Every request's results are keyed by the model's id."""
        return self._embedder.model_id

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Tokenize."""
        return PreparedTexts(tuple(texts), tuple(requests), self._embedder.prepare(texts))

    @property
    def token_ids_of(self) -> str | None:
        """The tokenizer fingerprint whose token ids ``prepare_token_ids`` takes (the embedder's); None: none (an
        endpoint, or a model whose inputs from ids did not check out at load)."""
        accepted: str | None = getattr(self._embedder, "token_ids_of", None)
        return accepted

    def prepare_token_ids(self, texts: Sequence[str], requests: Sequence[TaskRequest],
                          token_ids: Sequence[bytes | None]) -> PreparedTexts:
        """``prepare`` from the chunks' token ids (``ChunkCreated.token_ids`` of ``token_ids_of``), tokenizing only
        the texts whose ids are None.

        Raises:
            ValueError: the embedder takes no token ids.
        """
        prepare = getattr(self._embedder, "prepare_token_ids", None)
        if prepare is None:
            raise ValueError("the embedder takes no token ids")
        return PreparedTexts(tuple(texts), tuple(requests), prepare(texts, token_ids))

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """The forward pass: a vector per text.

        Raises:
            PartialBatchError: the endpoint refused some texts alone (their exceptions; the others' outputs).
        """
        try:
            rows = self._embedder.embed(batch.features)
        except PartialBatchError as exc:
            raise PartialBatchError([out if isinstance(out, BaseException) else ChunkOutput(embedding=_floats(out))
                                     for out in exc.outputs]) from None
        # each vector keeps its float32 bytes: the row and the record are written from them, never packed again
        return [ChunkOutput(embedding=vector) for vector in Float32Vector.rows(rows)]

    def warm_up(self) -> None:
        """One small batch through the embedder."""
        self._embedder.warm_up()

    def bind_metrics(self, metrics: Metrics, service: str) -> None:
        """Count an endpoint's requests into ``metrics`` (``docstream_endpoint_*``); a local model makes none."""
        observe_embedder(self._embedder, EndpointMetrics(metrics, service))

    def close(self) -> None:
        """Close an endpoint's connections (the pipeline calls it when it stops)."""
        close_embedder(self._embedder)
