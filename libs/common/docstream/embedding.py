"""The Embedder role and its sentence-transformers implementation (docs/inference.md).

An ``Embedder`` turns texts into one vector each, in two steps the inference pipeline runs
on different threads: ``prepare`` (tokenize, cheap, CPU) and ``embed`` (the model forward).
``encode`` is the plain one-call path, the model library's own ``encode``, used as the
reference the service is measured and tested against.

Runtime choice (``choose_runtime``, pure): CUDA when asked or found, in fp16 under
``torch.inference_mode``; otherwise the CPU with every core, under bf16 autocast when
``cpu_bf16`` is on and the CPU has bf16 instructions (``avx512_bf16`` or ``amx_bf16``),
else fp32. Models load from a local folder only; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from docstream.errors import ConfigError
from docstream.models import resolve_model_path
from docstream.settings import InferenceSettings

__all__ = [
    "BF16_CPU_FLAGS",
    "Embedder",
    "Precision",
    "PreparedBatch",
    "Runtime",
    "SentenceTransformerEmbedder",
    "choose_runtime",
    "cpu_supports_bf16",
    "load_embedder",
    "read_cpu_flags",
]

Precision = Literal["fp32", "bf16", "fp16"]
Vectors = npt.NDArray[np.float32]

BF16_CPU_FLAGS: frozenset[str] = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo flags that mean bf16 matrix instructions (AVX-512 BF16 or AMX)."""

_WARMUP_TEXTS = ("docstream warm-up: a short sentence.", "A second, slightly longer sentence to embed at start.")


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
        """Device and precision the model runs with."""

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Tokenize ``texts`` for one forward pass."""

    def embed(self, batch: PreparedBatch) -> Vectors:
        """Run the model: a float32 array of shape (len(batch.texts), dimension)."""

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """The model library's own one-call encode, with the same device, precision and normalization."""

    def warm_up(self) -> None:
        """Run one small batch so the first real batch pays no start-up cost."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """Where and how the model runs.

    Attributes:
        device: "cpu" or "cuda".
        precision: fp32, bf16 (CPU autocast) or fp16 (CUDA weights).
        threads: torch intra-op threads on the CPU (0: leave torch's default, on CUDA).
    """

    device: Literal["cpu", "cuda"]
    precision: Precision
    threads: int


def cpu_supports_bf16(flags: Iterable[str]) -> bool:
    """Whether CPU ``flags`` (as in /proc/cpuinfo) include bf16 matrix instructions."""
    return not BF16_CPU_FLAGS.isdisjoint(flags)


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags of this machine; empty where /proc/cpuinfo is absent (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def choose_runtime(
    settings: InferenceSettings, *, cuda_available: bool, cpu_flags: Iterable[str], cpu_count: int
) -> Runtime:
    """Pick device and precision from the settings and what the machine has. Pure.

    Raises:
        ConfigError: ``device`` is "cuda" but no CUDA device is present.
    """
    if settings.device == "cuda" and not cuda_available:
        raise ConfigError("inference.device is cuda but no CUDA device is available", code="cuda_unavailable")
    if settings.device == "cuda" or (settings.device == "auto" and cuda_available):
        return Runtime(device="cuda", precision="fp16", threads=0)
    bf16 = settings.cpu_bf16 and cpu_supports_bf16(cpu_flags)
    return Runtime(device="cpu", precision="bf16" if bf16 else "fp32", threads=max(1, cpu_count))


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class SentenceTransformerEmbedder:
    """An ``Embedder`` over a local sentence-transformers model folder, on torch."""

    def __init__(self, path: Path, *, model_id: str, runtime: Runtime, normalize: bool = True) -> None:
        """Load the model from ``path`` (never from a hub).

        Raises:
            ConfigError: the folder holds no loadable sentence-transformers model.
        """
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no progress bars in logs
        if runtime.device == "cpu":
            torch.set_num_threads(runtime.threads)
        try:
            model = SentenceTransformer(str(path), device=runtime.device, local_files_only=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"cannot load the model in {path}: {exc}", code="model_unavailable") from exc
        if runtime.precision == "fp16":
            model.half()
        model.eval()
        self._torch = torch
        self._model = model
        self._model_id = model_id
        self._runtime = runtime
        self._normalize = normalize
        dimension: Any = model.get_embedding_dimension()
        max_tokens: Any = model.max_seq_length
        if dimension is None or max_tokens is None:
            raise ConfigError(f"the model in {path} has no fixed embedding size or length", code="model_unavailable")
        self._dimension = int(dimension)
        self._max_tokens = int(max_tokens)

    @property
    def model_id(self) -> str:
        """The model name (and revision) recorded with every result."""
        return self._model_id

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        return self._dimension

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens (the model's max_seq_length)."""
        return self._max_tokens

    @property
    def runtime(self) -> Runtime:
        """Device and precision the model runs with."""
        return self._runtime

    @property
    def model(self) -> Any:
        """The underlying ``SentenceTransformer`` (benchmarks compare against its ``encode``)."""
        return self._model

    @contextlib.contextmanager
    def precision_scope(self) -> Iterator[None]:
        """Inference mode, plus bf16 autocast when the runtime says bf16."""
        torch = self._torch
        with torch.inference_mode():
            if self._runtime.precision == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    yield
            else:
                yield

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Tokenize ``texts`` (truncated to ``max_tokens``) for one forward pass."""
        features = self._model.preprocess(list(texts)) if texts else {}
        return PreparedBatch(texts=tuple(texts), features=features)

    def embed(self, batch: PreparedBatch) -> Vectors:
        """Run the model on a prepared batch: float32, shape (n, dimension)."""
        if not batch.texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        from sentence_transformers.util import batch_to_device

        torch = self._torch
        with self.precision_scope():
            features = batch_to_device(dict(batch.features), self._model.device)
            out = self._model(features)["sentence_embedding"].float()
            if self._normalize:
                out = torch.nn.functional.normalize(out, p=2, dim=1)
            result: Vectors = out.cpu().numpy().astype(np.float32, copy=False)
        return result

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """``SentenceTransformer.encode`` with this runtime's precision and normalization."""
        with self.precision_scope():
            out = self._model.encode(
                list(texts),
                batch_size=batch_size,
                normalize_embeddings=self._normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)

    def warm_up(self) -> None:
        """Run one small batch through tokenizer and model."""
        self.embed(self.prepare(_WARMUP_TEXTS))


def load_embedder(settings: InferenceSettings) -> Embedder:
    """The embedder ``settings`` describe: backend, model folder, device and precision.

    ``backend`` "torch" runs sentence-transformers on torch; "onnx" and "onnx-int8" run an
    ONNX export of the same folder on onnxruntime, CPU only (``docstream.onnx_backend``).

    Raises:
        ConfigError: an unimplemented backend, a missing model folder, cuda asked but absent (or asked
            of an onnx backend), or an onnx backend without the ``onnx`` package for its first export.
    """
    if settings.backend in ("onnx", "onnx-int8"):
        return _load_onnx_embedder(settings)
    if settings.backend != "torch":
        raise ConfigError(
            f"inference.backend {settings.backend!r} is not implemented yet (use 'torch')", code="backend_unavailable"
        )
    import torch

    runtime = choose_runtime(
        settings,
        cuda_available=bool(torch.cuda.is_available()),
        cpu_flags=read_cpu_flags(),
        cpu_count=_usable_cpus(),
    )
    path = resolve_model_path(settings.model_path)
    embedder = SentenceTransformerEmbedder(
        path, model_id=settings.model_id, runtime=runtime, normalize=settings.normalize
    )
    if settings.warmup:
        embedder.warm_up()
    return embedder


def _load_onnx_embedder(settings: InferenceSettings) -> Embedder:
    from docstream.onnx_backend import OnnxEmbedder

    if settings.device == "cuda":
        raise ConfigError(f"inference.backend {settings.backend!r} runs on the CPU only", code="backend_unavailable")
    embedder = OnnxEmbedder(
        resolve_model_path(settings.model_path),
        model_id=settings.model_id,
        variant="int8" if settings.backend == "onnx-int8" else "fp32",
        threads=_usable_cpus(),
        normalize=settings.normalize,
    )
    if settings.warmup:
        embedder.warm_up()
    return embedder
