"""The ``classify`` task: a score per label for every chunk, folded into the document's (docs/tasks.md).

Two runners, chosen by ``tasks.classify.model_path``:

* unset: **zero-shot** with the embedding model (``inference.model_path``, the bundled MiniLM by default).
  A chunk's scores are ``softmax(cos(chunk, label) / temperature)`` over the labels of its request (else
  ``tasks.classify.labels``), a label embedded by its ``Label.text`` (description, else name). Label
  embeddings are computed once per distinct label set and kept in a small LRU.
* set: a local Hugging Face **sequence-classification folder**: softmax over its ``config.id2label``.

Importing this module loads no model and imports neither torch nor transformers: the reducer imports it
for ``ClassifyTask.fold``. Its fold is ``docstream.tasks.fold_classify.ClassifyFold``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from docstream.errors import ConfigError, InputError, PartialBatchError
from docstream.logging import get_logger
from docstream.metrics import EndpointMetrics, Metrics
from docstream.models.embedder import Embedder
from docstream.models.endpoint import close_embedder, observe_embedder
from docstream.models.runtime import Runtime
from docstream.tasks.base import (
    CLASSIFY,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    ChunkOutput,
    Label,
    PreparedTexts,
    TaskContext,
    TaskFold,
    TaskRequest,
)
from docstream.tasks.fold_classify import ClassifyFold

__all__ = ["LABEL_CACHE_SIZE", "ClassifyTask", "FolderClassifyTask", "zero_shot_model_id"]

LABEL_CACHE_SIZE = 64
"""Distinct label sets whose embeddings a zero-shot runner keeps."""

_HASH_CHARS = 12
_WARMUP_TEXTS = ("docstream warm-up: a short sentence.", "A second, slightly longer sentence to classify.")
_log = get_logger(__name__)
Matrix = npt.NDArray[np.float32]


def zero_shot_model_id(embedding_model_id: str, labels: Sequence[Label], temperature: float) -> str:
    """``classify/<embedding model_id>/<12 hex of sha256 of the canonical JSON of (labels, temperature)>``.

    The labels are sorted by name (their order changes no score); a label's description is part of it
    (it is the text embedded). Two label sets, or two temperatures, never share a ``model_id``.
    """
    canonical = json.dumps({"labels": sorted([label.name, label.description] for label in labels),
                            "temperature": float(temperature)}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{CLASSIFY}/{embedding_model_id}/{digest}"


def _softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    result: npt.NDArray[np.float64] = shifted / shifted.sum(axis=1, keepdims=True)
    return result


def _unit_rows(vectors: Matrix) -> npt.NDArray[np.float64]:
    rows = vectors.astype(np.float64)
    result: npt.NDArray[np.float64] = rows / np.clip(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12, None)
    return result


class ClassifyTask:
    """Zero-shot classification with an ``Embedder``: one ``ChunkOutput(label_scores=...)`` per chunk.

    ``load`` returns this runner, or a ``FolderClassifyTask`` when ``tasks.classify.model_path`` is set.
    """

    name: ClassVar[str] = CLASSIFY
    fold: ClassVar[TaskFold] = ClassifyFold()

    def __init__(self, embedder: Embedder, *, labels: Sequence[Label] = (), temperature: float = 0.05,
                 cache_size: int = LABEL_CACHE_SIZE) -> None:
        """Wrap ``embedder``.

        Args:
            embedder: the embedding model chunks and labels are embedded with.
            labels: the labels of a request that carries none (``tasks.classify.labels``).
            temperature: the softmax temperature over the cosines (> 0).
            cache_size: distinct label sets whose embeddings are kept.

        Raises:
            ConfigError: ``config_invalid``: a temperature <= 0 or invalid default labels.
        """
        if not temperature > 0:
            raise ConfigError(f"tasks.classify.temperature must be > 0, got {temperature}")
        try:
            TaskRequest(CLASSIFY, tuple(labels))
        except InputError as exc:
            raise ConfigError(f"tasks.classify.labels: {exc.message}", code=exc.code) from exc
        self._embedder = embedder
        self._labels = tuple(labels)
        self._temperature = float(temperature)
        self._cache_size = max(1, cache_size)
        self._cache: OrderedDict[tuple[str, ...], npt.NDArray[np.float64]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, context: TaskContext) -> ClassifyTask | FolderClassifyTask:
        """The runner ``context.tasks.classify`` describes.

        Zero-shot loads ``docstream.models.embedding.load_embedder(context.inference)``. It starts without
        configured labels (each job brings its own, checked at submission), except with
        ``tasks.run_unrequested``: chunks of jobs that did not ask for classify carry no labels, so every
        one of them would fail.

        Raises:
            ConfigError: ``labels_invalid`` or ``labels_missing`` (above); the model's own errors
                (``model_unavailable``, ``cuda_unavailable``).
        """
        options = context.tasks.classify
        if options.model_path:
            return FolderClassifyTask.load(context)
        try:
            labels = tuple(Label.parse(text) for text in options.labels)
        except InputError as exc:
            raise ConfigError(f"tasks.classify.labels: {exc.message}", code=exc.code) from exc
        if context.tasks.run_unrequested and not labels:
            raise ConfigError("tasks.run_unrequested runs classify on chunks whose job gave no labels: set "
                              "tasks.classify.labels (DOCSTREAM_TASKS__CLASSIFY__LABELS)", code="labels_missing")
        from docstream.models.embedding import load_embedder

        return cls(load_embedder(context.inference), labels=labels, temperature=options.temperature)

    @property
    def embedder(self) -> Embedder:
        """The wrapped embedder."""
        return self._embedder

    @property
    def labels(self) -> tuple[Label, ...]:
        """The labels of a request that carries none."""
        return self._labels

    @property
    def model_id(self) -> str:
        """The ``model_id`` of the configured labels (``zero_shot_model_id``)."""
        return zero_shot_model_id(self._embedder.model_id, self._labels, self._temperature)

    @property
    def max_tokens(self) -> int:
        """The embedding model's longest input."""
        return self._embedder.max_tokens

    @property
    def runtime(self) -> str:
        """The embedder's runtime label."""
        return self._embedder.runtime.label

    @property
    def device(self) -> str:
        """The embedder's device."""
        return self._embedder.device

    def labels_for(self, request: TaskRequest) -> tuple[Label, ...]:
        """The labels a request is scored over: its own, else the configured ones (possibly none)."""
        return request.labels or self._labels

    def model_id_for(self, request: TaskRequest) -> str:
        """The ``model_id`` of the request's label set: results of two label sets never overwrite each other."""
        return zero_shot_model_id(self._embedder.model_id, self.labels_for(request), self._temperature)

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Tokenize the chunk texts (the embedder's own ``prepare``)."""
        return PreparedTexts(tuple(texts), tuple(requests), self._embedder.prepare(texts))

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """Embed the chunks, then score each over its request's labels.

        Raises:
            InputError: ``labels_missing``: a request without labels and none configured (the batch fails,
                and the pipeline isolates that record by splitting the batch).
        """
        label_sets = [self.labels_for(request) for request in batch.requests]
        if len(label_sets) != len(batch.texts):
            raise ValueError(f"{len(batch.texts)} texts but {len(label_sets)} requests")
        if any(not labels for labels in label_sets):
            raise InputError("classify needs labels: the job gave none and tasks.classify.labels is empty",
                             code="labels_missing")
        if not batch.texts:
            return []
        failures: dict[int, BaseException] = {}
        try:
            embedded = self._embedder.embed(batch.features)
        except PartialBatchError as exc:  # an endpoint refused some texts alone: they fail, the rest is scored
            failures = dict(exc.failures)
            answered = [np.asarray(out, dtype=np.float32) for out in exc.outputs if not isinstance(out, BaseException)]
            if not answered:
                raise
            blank = np.zeros_like(answered[0])
            embedded = np.vstack([blank if isinstance(out, BaseException) else np.asarray(out, dtype=np.float32)
                                  for out in exc.outputs])
        chunks = _unit_rows(embedded)
        outputs: list[ChunkOutput | None] = [None] * len(batch.texts)
        groups: dict[tuple[Label, ...], list[int]] = {}
        for row, labels in enumerate(label_sets):
            groups.setdefault(labels, []).append(row)
        for labels, rows in groups.items():
            scores = _softmax(chunks[rows] @ self._label_matrix(labels).T / self._temperature)
            for row, values in zip(rows, scores, strict=True):
                outputs[row] = ChunkOutput(label_scores={label.name: float(v) for label, v in
                                                         zip(labels, values, strict=True)})
        if failures:
            raise PartialBatchError([failures.get(i, out) for i, out in enumerate(outputs)])
        return [output for output in outputs if output is not None]

    def warm_up(self) -> None:
        """One small batch through the embedder."""
        self._embedder.warm_up()

    def bind_metrics(self, metrics: Metrics, service: str) -> None:
        """Count an endpoint's requests into ``metrics`` (``docstream_endpoint_*``); a local model makes none."""
        observe_embedder(self._embedder, EndpointMetrics(metrics, service))

    def close(self) -> None:
        """Close an endpoint's connections (the pipeline calls it when it stops)."""
        close_embedder(self._embedder)

    def _label_matrix(self, labels: Sequence[Label]) -> npt.NDArray[np.float64]:
        key = tuple(label.text for label in labels)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        matrix = _unit_rows(self._embedder.embed(self._embedder.prepare(key)))
        with self._lock:
            self._cache[key] = matrix
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return matrix


class FolderClassifyTask:
    """A local Hugging Face sequence-classification folder: softmax over its ``config.id2label`` per chunk.

    The labels are the model's. A request that names labels must name exactly those (descriptions aside);
    one that names others fails with ``labels_mismatch`` rather than being scored over labels it did not
    ask for. Results are keyed by one ``model_id`` whatever the request.
    """

    name: ClassVar[str] = CLASSIFY
    fold: ClassVar[TaskFold] = ClassifyFold()

    def __init__(self, model: Any, tokenizer: Any, *, model_id: str, runtime: Runtime) -> None:
        """Wrap a loaded ``AutoModelForSequenceClassification`` and its tokenizer (``load`` builds them).

        Raises:
            ConfigError: ``model_unavailable``: the model's labels are not 1..MAX_LABELS distinct names.
        """
        import torch

        config = model.config
        count = int(config.num_labels)
        names = [str(config.id2label.get(i, f"LABEL_{i}")) for i in range(count)]
        if not 1 <= count <= MAX_LABELS or len(set(names)) != count or \
                any(not n.strip() or len(n) > MAX_LABEL_CHARS for n in names):
            raise ConfigError(f"the classifier's labels must be 1..{MAX_LABELS} distinct names of at most "
                              f"{MAX_LABEL_CHARS} characters, got {names[:8]}", code="model_unavailable")
        self._torch = torch
        self._model = model
        self._tokenizer = tokenizer
        self._model_id = model_id
        self._runtime = runtime
        self._label_names = tuple(names)
        limits = [int(getattr(config, "max_position_embeddings", 512) or 512)]
        if 0 < int(getattr(tokenizer, "model_max_length", 0) or 0) < 1_000_000:
            limits.append(int(tokenizer.model_max_length))
        self._max_tokens = min(limits)

    @classmethod
    def load(cls, context: TaskContext) -> FolderClassifyTask:
        """Load ``context.tasks.classify.model_path`` (local files only) on ``context.inference``'s device.

        The runtime is not timed: CUDA runs fp16 and the CPU fp32 under ``inference.runtime`` auto, and
        ``fp32``/``bf16``/``fp16`` force theirs.

        Raises:
            ConfigError: ``model_unavailable`` (no such folder, or not a sequence classifier),
                ``cuda_unavailable``, ``runtime_unavailable``.
        """
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from docstream.models.embedding import read_cpu_flags
        from docstream.models.runtime import runtime_candidates

        options = context.tasks.classify
        if options.model_path is None:
            raise ConfigError("tasks.classify.model_path is not set", code="model_unavailable")
        path = Path(options.model_path).expanduser()
        if not path.is_dir():
            raise ConfigError(f"tasks.classify.model_path {str(path)!r} is not a folder", code="model_unavailable")
        inference = context.inference
        candidates = runtime_candidates(inference.runtime, device=inference.device,
                                        cuda_available=bool(torch.cuda.is_available()), cpu_flags=read_cpu_flags(),
                                        cpu_count=inference.threads or torch.get_num_threads())
        runtime = candidates[-1] if candidates[0].device == "cuda" else candidates[0]
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no progress bars in logs
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot load a sequence classifier from {path}: {exc}",
                              code="model_unavailable") from exc
        if runtime.device == "cpu":
            torch.set_num_threads(runtime.threads)
        model.to(runtime.device)
        if runtime.precision == "fp16":
            model.half()
        model.eval()
        task = cls(model, tokenizer, model_id=options.model_id or f"{CLASSIFY}/{path.name}", runtime=runtime)
        _log.info("classifier_loaded", model_path=str(path), labels=list(task.label_names), runtime=runtime.label)
        if inference.warmup:
            task.warm_up()
        return task

    @property
    def label_names(self) -> tuple[str, ...]:
        """The model's labels, by class index."""
        return self._label_names

    @property
    def model_id(self) -> str:
        """``tasks.classify.model_id``, else ``classify/<folder name>``."""
        return self._model_id

    @property
    def max_tokens(self) -> int:
        """The model's longest input (its position embeddings, or the tokenizer's limit when lower)."""
        return self._max_tokens

    @property
    def runtime(self) -> str:
        """The runtime label (``torch/cpu/fp32/2t``, ``torch/cuda/fp16``)."""
        return self._runtime.label

    @property
    def device(self) -> str:
        """The device the weights are on."""
        return str(self._model.device)

    def model_id_for(self, request: TaskRequest) -> str:
        """One ``model_id`` for every request: the labels are the model's."""
        return self._model_id

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Tokenize, padded to the batch's longest and truncated to ``max_tokens``."""
        features = self._tokenizer(list(texts), padding=True, truncation=True, max_length=self._max_tokens,
                                   return_tensors="pt") if texts else None
        return PreparedTexts(tuple(texts), tuple(requests), features)

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """The forward pass: softmax over the model's labels per text.

        Raises:
            InputError: ``labels_mismatch``: a request names labels other than the model's.
        """
        own = set(self._label_names)
        for request in batch.requests:
            if request.labels and {label.name for label in request.labels} != own:
                raise InputError(f"the job's labels {[label.name for label in request.labels]} are not the "
                                 f"classifier's {list(self._label_names)}", code="labels_mismatch")
        if not batch.texts:
            return []
        torch = self._torch
        with self._scope():
            features = {key: value.to(self._model.device) for key, value in batch.features.items()}
            probabilities = torch.softmax(self._model(**features).logits.float(), dim=-1).cpu().numpy()
        return [ChunkOutput(label_scores={name: float(p) for name, p in zip(self._label_names, row, strict=True)})
                for row in probabilities.astype(np.float64)]

    def warm_up(self) -> None:
        """One small batch through tokenizer and model."""
        self.run(self.prepare(_WARMUP_TEXTS, [TaskRequest(CLASSIFY)] * len(_WARMUP_TEXTS)))

    @contextlib.contextmanager
    def _scope(self) -> Iterator[None]:
        torch = self._torch
        with torch.inference_mode():
            if self._runtime.precision == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    yield
            else:
                yield
