"""The sentence-transformers embedder and the runtime measurement (docs/inference.md).

An ``Embedder`` (``docstream.models.embedder``) turns texts into one vector each, in two steps the inference
pipeline runs on different threads: ``prepare`` (tokenize, cheap, CPU) and ``embed`` (the model forward).
``encode`` is the plain one-call path, the model library's own ``encode``, used as the
reference the service is measured and tested against.

Runtime choice: ``docstream.models.runtime`` (pure) lists the candidates the machine allows and
picks among measurements; this module is its edge. ``load_embedder`` reads /proc/cpuinfo,
and, when there is more than one candidate and no cached choice, times each on a few
real-length batches against fp32, logs ``runtime_chosen`` and caches the choice in
``$XDG_CACHE_HOME/docstream/runtime/<key>.json``. Models load from a local folder only;
nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docstream.errors import ConfigError
from docstream.logging import get_logger
from docstream.models.embedder import Embedder, PreparedBatch, Vectors
from docstream.models.files import resolve_model_path
from docstream.models.runtime import (
    BF16_CPU_FLAGS,
    Measurement,
    Precision,
    Runtime,
    cache_entry,
    cached_runtime,
    choose_runtime,
    cpu_supports_bf16,
    runtime_cache_key,
    runtime_candidates,
)
from docstream.models.tokenization import (
    ModelTokenCounter,
    SpecialTokens,
    load_token_counter,
    model_inputs,
    valid_token_ids,
)
from docstream.settings import InferenceSettings, user_dir

__all__ = [
    "BF16_CPU_FLAGS",
    "Embedder",
    "Precision",
    "PreparedBatch",
    "Runtime",
    "SentenceTransformerEmbedder",
    "cpu_supports_bf16",
    "default_runtime_cache_dir",
    "load_embedder",
    "measure_runtimes",
    "model_fingerprint",
    "read_cpu_flags",
    "read_cpu_model",
]

_log = get_logger(__name__)

_WARMUP_TEXTS = ("docstream warm-up: a short sentence.", "A second, slightly longer sentence to embed at start.")
_MEASURE_BATCHES = 2
_MEASURE_MAX_BATCH = 32
_MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "sentence_bert_config.json", "modules.json")
_PROSE = (
    "The committee reviewed the quarterly figures and found that shipping costs had risen for the third time",
    "while the warehouse in the north handled twice the orders it was built for, so the board asked for a plan",
    "Photosynthesis converts light energy into chemical energy that plants store as glucose in their leaves",
    "A consumer commits an offset only after every effect of the record is written and acknowledged",
    "Die Verordnung gilt für alle Mitgliedstaaten und tritt zwanzig Tage nach ihrer Veröffentlichung in Kraft",
    "Le rapport annuel présente les résultats financiers, les risques principaux et la stratégie du groupe",
    "Patients in the treatment arm reported fewer side effects, although the difference was not significant",
    "The bridge was closed for repairs after engineers found cracks in two of the steel supports near the river",
)


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


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class SentenceTransformerEmbedder:
    """An ``Embedder`` over a local sentence-transformers model folder, on torch."""

    def __init__(
        self, path: Path, *, model_id: str, runtime: Runtime, normalize: bool = True, shared: Any = None
    ) -> None:
        """Load the model from ``path`` (never from a hub).

        Args:
            path: a local sentence-transformers folder.
            model_id: the name recorded with results.
            runtime: a torch runtime (fp32, CPU bf16 autocast, CUDA fp16).
            normalize: L2-normalize the output.
            shared: an already loaded fp32 ``SentenceTransformer`` on the same device to reuse
                (CPU fp32 and bf16 autocast differ only in the autocast scope); None loads one.

        Raises:
            ConfigError: the folder holds no loadable sentence-transformers model, or the runtime is not torch.
        """
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        if runtime.backend != "torch":
            raise ConfigError(f"runtime {runtime.label} is not a torch runtime", code="runtime_unavailable")
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no progress bars in logs
        if runtime.device == "cpu":
            torch.set_num_threads(runtime.threads)
        try:
            model = shared or SentenceTransformer(str(path), device=runtime.device, local_files_only=True)
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
        self._from_ids = _TokenIdInputs.checked(path, model)

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
        """Backend, device, precision and threads the model runs with."""
        return self._runtime

    @property
    def device(self) -> str:
        """The device the model's weights are on: ``cpu``, ``cuda:0``, ``mps``."""
        return str(self._model.device)

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

    @property
    def token_ids_of(self) -> str | None:
        """The tokenizer fingerprint whose token ids ``prepare_token_ids`` takes; None: it takes none (the model's
        inputs built from ids did not match its own tokenizer's at load)."""
        return self._from_ids.fingerprint if self._from_ids is not None else None

    def prepare_token_ids(self, texts: Sequence[str], token_ids: Sequence[bytes | None]) -> PreparedBatch:
        """``prepare`` for texts whose token ids (``pack_token_ids``, under ``token_ids_of``) are given: the same
        inputs, with no tokenizing but of the texts whose ids are None (by the same tokenizer, here).

        Raises:
            ValueError: no ids are taken (``token_ids_of`` is None), or a row is not packed ids.
        """
        if self._from_ids is None:
            raise ValueError("this model takes no token ids")
        return PreparedBatch(texts=tuple(texts), features=self._from_ids.features(token_ids, texts))

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
            # .cpu() waits for the device's kernels: a timer around embed() sees the whole forward pass
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


def load_embedder(settings: InferenceSettings, *, cache_dir: Path | None = None) -> Embedder:
    """The embedder ``settings`` describe, on the runtime measured fastest here (or the one forced).

    ``inference.runtime`` "auto" lists the candidates this machine allows
    (``docstream.models.runtime.runtime_candidates``); with one, or with a cached choice for this
    machine and model, nothing is timed; else each is timed on a few real-length batches
    (``measure_runtimes``) and the choice cached. Every path logs ``runtime_chosen``.

    Args:
        settings: the inference settings.
        cache_dir: where choices are cached (default ``inference.runtime_cache_dir``, else
            ``default_runtime_cache_dir()``).

    With ``inference.endpoint.url`` set, the model is that endpoint (``docstream.models.endpoint``): nothing
    is loaded or timed here.

    Raises:
        ConfigError: a missing model folder, cuda asked but absent, or a runtime the device cannot run.
        EndpointRefused: the endpoint refuses the key, URL or model name at warm-up.
    """
    if settings.endpoint.url is not None:
        from docstream.models.endpoint import load_endpoint_embedder

        return load_endpoint_embedder(settings)
    import torch

    path = resolve_model_path(settings.model_path)
    flags = read_cpu_flags()
    candidates = runtime_candidates(settings.runtime, device=settings.device,
                                    cuda_available=bool(torch.cuda.is_available()), cpu_flags=flags,
                                    cpu_count=settings.threads or _usable_cpus())
    if len(candidates) == 1:
        embedder = _build(candidates[0], path, settings)
        _log.info("runtime_chosen", runtime=embedder.runtime.label, source="forced" if settings.runtime != "auto"
                  else "only_candidate", mode=settings.runtime, candidates=[candidates[0].label])
    else:
        folder = cache_dir or settings.runtime_cache_dir or default_runtime_cache_dir()
        embedder = _chosen_embedder(candidates, path, settings, flags, folder)
    if settings.warmup:
        embedder.warm_up()
    return embedder


def default_runtime_cache_dir() -> Path:
    """Where runtime choices are cached: ``$XDG_CACHE_HOME/docstream/runtime`` (``~/.cache`` when unset)."""
    return user_dir("cache") / "runtime"


def read_cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from /proc/cpuinfo; "" where it is absent."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return ""


def model_fingerprint(model_path: Path) -> str:
    """A short hash of the model folder's config and weight files (names, sizes, first MiB of each).

    Raises:
        ConfigError: the folder cannot be read.
    """
    digest = hashlib.sha256()
    try:
        for name in _MODEL_FILES:
            file = model_path / name
            if not file.is_file():
                continue
            digest.update(name.encode())
            digest.update(str(file.stat().st_size).encode())
            with file.open("rb") as handle:
                digest.update(handle.read(1 << 20))
    except OSError as exc:
        raise ConfigError(f"cannot read the model in {model_path}: {exc}", code="model_unavailable") from exc
    return digest.hexdigest()[:16]


def measure_runtimes(embedders: Sequence[Embedder], *, batch_size: int) -> list[Measurement]:
    """Time each embedder's forward pass on the same real-length batches, fp32 (the first) as reference.

    Each embedder runs one untimed warm-up batch, then ``_MEASURE_BATCHES`` timed ones, taking
    turns batch by batch (a load swing on a shared machine falls on all of them). Texts are
    about ``max_tokens`` long, as real chunks are. Agreement: the lowest cosine of a
    candidate's vectors to the reference's, text by text.
    """
    max_tokens = embedders[0].max_tokens
    size = max(1, min(batch_size, _MEASURE_MAX_BATCH))
    texts = _measurement_texts(size * _MEASURE_BATCHES, max_tokens)
    batches = [texts[i : i + size] for i in range(0, len(texts), size)]
    prepared = [[e.prepare(b) for b in batches] for e in embedders]
    for embedder, own in zip(embedders, prepared, strict=True):
        embedder.embed(own[0])
    seconds = [0.0] * len(embedders)
    vectors: list[list[Vectors]] = [[] for _ in embedders]
    for number in range(len(batches)):
        for i, embedder in enumerate(embedders):
            started = time.perf_counter()
            vectors[i].append(embedder.embed(prepared[i][number]))
            seconds[i] += time.perf_counter() - started
    reference = np.vstack(vectors[0])
    measurements = []
    for embedder, took, got in zip(embedders, seconds, vectors, strict=True):
        worst = float(_cosines(np.vstack(got), reference).min())
        measurements.append(Measurement(embedder.runtime, took, len(texts), round(min(worst, 1.0), 6)))
    return measurements


def _measurement_texts(count: int, max_tokens: int) -> list[str]:
    texts = []
    for i in range(count):
        words: list[str] = [f"Section {i + 1}."]
        j = i
        while len(words) < max_tokens:  # at least one token a word: the tokenizer truncates to max_tokens
            words.extend(_PROSE[j % len(_PROSE)].split())
            j += 3
        texts.append(" ".join(words))
    return texts


def _cosines(a: Vectors, b: Vectors) -> Vectors:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    result: Vectors = ((a * b).sum(axis=1) / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result


def _chosen_embedder(
    candidates: Sequence[Runtime], path: Path, settings: InferenceSettings, flags: frozenset[str], cache_dir: Path
) -> Embedder:
    import torch

    key = runtime_cache_key(cpu_model=read_cpu_model(), cpu_flags=flags, torch_version=str(torch.__version__),
                            device=candidates[0].device, threads=candidates[0].threads,
                            model_hash=model_fingerprint(path), candidates=candidates)
    file = cache_dir / f"{key}.json"
    cached = _read_cache(file, candidates)
    if cached is not None:
        embedder = _build(cached, path, settings)
        _log.info("runtime_chosen", runtime=cached.label, source="cache", mode=settings.runtime,
                  candidates=[c.label for c in candidates], cache_file=str(file))
        return embedder
    built: list[Embedder] = []
    for runtime in candidates:
        shared = getattr(built[0], "model", None) if built and runtime.device == "cpu" else None
        built.append(_build(runtime, path, settings, shared=shared))
    measurements = measure_runtimes(built, batch_size=settings.max_batch_size)
    chosen = choose_runtime(measurements)
    _write_cache(file, cache_entry(chosen, measurements))
    _log.info("runtime_chosen", runtime=chosen.label, source="measured", mode=settings.runtime,
              candidates=[{"runtime": m.runtime.label, "chunks_per_s": round(m.chunks_per_s, 1),
                           "worst_cosine": m.worst_cosine} for m in measurements],
              chunks=measurements[0].chunks, cache_file=str(file))
    return built[candidates.index(chosen)]


def _read_cache(file: Path, candidates: Sequence[Runtime]) -> Runtime | None:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        _log.warning("runtime_cache_unreadable", cache_file=str(file), error=str(exc))
        return None
    runtime = cached_runtime(text, candidates)
    if runtime is None:
        _log.warning("runtime_cache_ignored", cache_file=str(file), reason="corrupt or not a candidate")
    return runtime


def _write_cache(file: Path, entry: dict[str, Any]) -> None:
    import json

    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=file.name + ".", suffix=".tmp", dir=file.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(entry, handle, indent=1)
        os.replace(name, file)
    except OSError as exc:  # a read-only home only costs the next start a measurement
        _log.warning("runtime_cache_unwritable", cache_file=str(file), error=str(exc))


_CHECK_TEXTS = (
    "  The quick brown fox, jumps over the lazy dog: 42 times!  ",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. 東京は日本の首都です。北京是中国的首都。",
    "UPPER and lower CASE, naïve café, e-mail@example.org, x86_64 " * 40,
    "",
)
"""Texts the inputs built from token ids are checked on against the model's own tokenizer at load: scripts, case,
edges, one too long for any model here (cut), and an empty one."""


class _TokenIdInputs:
    """The model's inputs built from token ids (``tokenization.model_inputs``), the way its own tokenizer builds them
    from texts: ``checked`` makes one only when the two agree on ``_CHECK_TEXTS``."""

    def __init__(self, counter: ModelTokenCounter, fingerprint: str, special: SpecialTokens, max_length: int,
                 names: tuple[str, ...], extras: dict[str, Any]) -> None:
        self._counter = counter
        self.fingerprint = fingerprint
        self._special = special
        self._max_length = max_length
        self._names = names
        self._extras = extras

    @classmethod
    def checked(cls, path: Path, model: Any) -> _TokenIdInputs | None:
        """None, logged as ``token_ids_refused``, when the folder's tokenizer cannot make ids or the inputs built
        from them differ from the model's own."""
        import torch

        try:
            counter = load_token_counter(str(path), "check")
            pad = getattr(model.tokenizer, "pad_token_id", None)
            special = counter.special_tokens_around(int(pad) if pad is not None else 0)
        except (ConfigError, OSError, ValueError) as exc:
            _log.info("token_ids_refused", reason=str(exc)[:200])
            return None
        if counter.fingerprint is None or special is None:
            _log.info("token_ids_refused", reason="no fingerprint or no special-token template")
            return None
        own = dict(model.preprocess(list(_CHECK_TEXTS)))
        tensors = {name: value for name, value in own.items() if isinstance(value, torch.Tensor)}
        names = tuple(name for name in ("input_ids", "attention_mask", "token_type_ids") if name in tensors)
        found = cls(counter, counter.fingerprint, special, int(model.max_seq_length), names,
                    {name: value for name, value in own.items() if name not in tensors})
        built = found.features(counter.token_ids(_CHECK_TEXTS), _CHECK_TEXTS)
        if set(tensors) != set(names) or any(not torch.equal(built[name], tensors[name]) for name in names):
            _log.warning("token_ids_refused", reason="the inputs built from token ids differ from the tokenizer's",
                         inputs=sorted(tensors))
            return None
        return found

    def features(self, token_ids: Sequence[bytes | None], texts: Sequence[str]) -> dict[str, Any]:
        """The model's input tensors of texts given as packed token ids; a text whose ids are None, or not ids this
        tokenizer makes (``valid_token_ids``: a corrupt or foreign record), is tokenized."""
        import torch

        size = self._counter.vocabulary_size
        missing = [at for at, ids in enumerate(token_ids) if ids is None or not valid_token_ids(ids, size)]
        rows = list(token_ids)
        for at, ids in zip(missing, self._counter.token_ids([texts[at] for at in missing]), strict=True):
            rows[at] = ids
        inputs = model_inputs([row or b"" for row in rows], self._special, self._max_length)
        return {**{name: torch.from_numpy(getattr(inputs, name)) for name in self._names}, **self._extras}


def _build(runtime: Runtime, path: Path, settings: InferenceSettings, *, shared: Any = None) -> Embedder:
    return SentenceTransformerEmbedder(path, model_id=settings.model_id, runtime=runtime,
                                       normalize=settings.normalize, shared=shared)
