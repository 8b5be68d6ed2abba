"""The model runtime and how it is chosen: by measurement, not by CPU flags (docs/inference.md "Runtime").

Pure: no torch, no clock, no files. The edge (``docstream.models.embedding``) reads the machine, times
the candidates this module lists on a few real-length batches, and hands the timings and
agreements back to ``choose_runtime``. Flags say what is *possible* (``runtime_candidates``);
the measurement says what is *fast*.

A runtime's ``label`` is what results record about how they were made:
``<backend>/<device>/<precision>[/<threads>t]``, for example ``torch/cpu/fp32/2t``,
``torch/cpu/bf16/16t``, ``torch/cuda/fp16`` (threads only on the CPU). The backend part is
there for any backend that earns its place later (docs/performance.md "Runtime choice").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from docstream.errors import ConfigError

__all__ = [
    "AUTO_MIN_COSINE",
    "BF16_CPU_FLAGS",
    "TIE_MARGIN",
    "Backend",
    "Measurement",
    "Precision",
    "Runtime",
    "RuntimeMode",
    "cache_entry",
    "cached_runtime",
    "choose_runtime",
    "cpu_supports_bf16",
    "runtime_cache_key",
    "runtime_candidates",
]

Backend = Literal["torch", "openai"]
Device = Literal["cpu", "cuda", "remote"]
Precision = Literal["fp32", "bf16", "fp16"]
RuntimeMode = Literal["auto", "fp32", "bf16", "fp16"]
DeviceSetting = Literal["auto", "cpu", "cuda"]

BF16_CPU_FLAGS: frozenset[str] = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo flags that make bf16 autocast a candidate (AVX-512 BF16 or AMX): possible, not necessarily fast."""

AUTO_MIN_COSINE = 0.999
"""Worst cosine to fp32, over the measurement texts, a runtime needs to be chosen automatically."""

TIE_MARGIN = 1.05
"""A candidate replaces fp32 only when this many times faster: within the margin, the timings are noise."""

_LABEL = re.compile(r"^(torch)/(cpu|cuda)/(fp32|bf16|fp16)(?:/(\d+)t)?$")
_ENDPOINT_LABEL = "openai/remote"
_CACHE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Runtime:
    """Where and how the model runs.

    Attributes:
        device: "cpu" or "cuda"; "remote" for a model behind an endpoint.
        precision: fp32; bf16 (CPU autocast); fp16 (CUDA weights).
        threads: intra-op threads on the CPU (0 on CUDA: not ours to set).
        backend: "torch" (sentence-transformers, in the process), or "openai" (an OpenAI-compatible
            endpoint, ``docstream.models.endpoint``: label ``openai/remote``).
    """

    device: Device
    precision: Precision
    threads: int
    backend: Backend = "torch"

    @property
    def label(self) -> str:
        """The short name results carry, e.g. ``torch/cpu/fp32/2t`` or ``torch/cuda/fp16``."""
        if self.backend == "openai":
            return _ENDPOINT_LABEL  # a model behind an endpoint: its precision and threads are not ours to know
        base = f"{self.backend}/{self.device}/{self.precision}"
        return f"{base}/{self.threads}t" if self.device == "cpu" else base

    @classmethod
    def from_label(cls, label: str) -> Runtime:
        """The runtime a ``label`` names.

        Raises:
            ValueError: not a runtime label.
        """
        if label == _ENDPOINT_LABEL:
            return cls(device="remote", precision="fp32", threads=0, backend="openai")
        match = _LABEL.match(label)
        if match is None:
            raise ValueError(f"not a runtime label: {label!r}")
        backend, device, precision, threads = match.groups()
        if (device == "cpu") != (threads is not None):
            raise ValueError(f"not a runtime label: {label!r} (threads on the CPU only)")
        return cls(device=device, precision=precision, threads=int(threads or 0), backend=backend)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One candidate timed on the measurement texts.

    Attributes:
        runtime: the candidate.
        seconds: wall time of its timed batches.
        chunks: texts in its timed batches.
        worst_cosine: lowest cosine of its vectors to fp32's, text by text (1.0 for fp32 itself).
    """

    runtime: Runtime
    seconds: float
    chunks: int
    worst_cosine: float

    @property
    def chunks_per_s(self) -> float:
        """Throughput; 0 when nothing was timed."""
        return self.chunks / self.seconds if self.seconds > 0 else 0.0


def cpu_supports_bf16(flags: Iterable[str]) -> bool:
    """Whether CPU ``flags`` (as in /proc/cpuinfo) include bf16 matrix instructions."""
    return not BF16_CPU_FLAGS.isdisjoint(flags)


def runtime_candidates(
    mode: RuntimeMode,
    *,
    device: DeviceSetting,
    cuda_available: bool,
    cpu_flags: Iterable[str],
    cpu_count: int,
) -> tuple[Runtime, ...]:
    """The runtimes worth timing, fp32 (the reference) first; one only when ``mode`` forces it.

    ``auto`` on CUDA: fp16 and fp32 on the GPU; on the CPU: fp32, and bf16 autocast when the
    flags allow it. An explicit mode is that runtime alone, never timed.

    Raises:
        ConfigError: CUDA asked but absent (``cuda_unavailable``), or a mode the device cannot run
            (``runtime_unavailable``: fp16 on the CPU, bf16 on CUDA).
    """
    if device == "cuda" and not cuda_available:
        raise ConfigError("inference.device is cuda but no CUDA device is available", code="cuda_unavailable")
    threads = max(1, cpu_count)
    on_cuda = device == "cuda" or (device == "auto" and cuda_available and mode != "bf16")
    if mode == "fp16" and not on_cuda:
        if device == "cpu":
            raise ConfigError("inference.runtime fp16 runs on CUDA only", code="runtime_unavailable")
        raise ConfigError("inference.runtime fp16 needs a CUDA device; none is available", code="cuda_unavailable")
    if on_cuda and mode == "bf16":
        raise ConfigError("inference.runtime bf16 (autocast) runs on the CPU only", code="runtime_unavailable")
    if on_cuda:
        gpu = {p: Runtime(device="cuda", precision=p, threads=0) for p in ("fp32", "fp16")}
        return (gpu["fp32"], gpu["fp16"]) if mode == "auto" else (gpu[mode],)
    fp32 = Runtime(device="cpu", precision="fp32", threads=threads)
    bf16 = Runtime(device="cpu", precision="bf16", threads=threads)
    if mode == "fp32":
        return (fp32,)
    if mode == "bf16":
        return (bf16,)
    return (fp32, bf16) if cpu_supports_bf16(cpu_flags) else (fp32,)


def choose_runtime(
    measurements: Sequence[Measurement], *, min_cosine: float = AUTO_MIN_COSINE, tie_margin: float = TIE_MARGIN
) -> Runtime:
    """The fastest measured runtime whose output agrees with fp32 (the first measurement).

    A candidate counts only with ``worst_cosine >= min_cosine``; it replaces the reference only
    when more than ``tie_margin`` times as fast, and another candidate only when faster.

    Raises:
        ValueError: no measurements.
    """
    if not measurements:
        raise ValueError("choose_runtime needs at least the fp32 measurement")
    reference = measurements[0]
    best = reference
    for candidate in measurements[1:]:
        if candidate.worst_cosine < min_cosine:
            continue
        bar = reference.chunks_per_s * tie_margin if best is reference else best.chunks_per_s
        if candidate.chunks_per_s > bar:
            best = candidate
    return best.runtime


def runtime_cache_key(
    *,
    cpu_model: str,
    cpu_flags: Iterable[str],
    torch_version: str,
    device: str,
    threads: int,
    model_hash: str,
    candidates: Sequence[Runtime],
) -> str:
    """A file-name-safe key of everything a cached choice depends on (machine, torch, model, candidates)."""
    parts = [f"v{_CACHE_VERSION}", cpu_model, " ".join(sorted(set(cpu_flags))), torch_version, device, str(threads),
             model_hash, ",".join(c.label for c in candidates)]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:24]


def cache_entry(chosen: Runtime, measurements: Sequence[Measurement]) -> dict[str, Any]:
    """The JSON-ready cache record of a choice and the measurements it was made from."""
    return {
        "version": _CACHE_VERSION,
        "runtime": chosen.label,
        "measurements": [
            {"runtime": m.runtime.label, "chunks_per_s": round(m.chunks_per_s, 2), "worst_cosine": m.worst_cosine}
            for m in measurements
        ],
    }


def cached_runtime(text: str, candidates: Sequence[Runtime]) -> Runtime | None:
    """The runtime a cache file's ``text`` holds, if it is well formed and one of ``candidates``; else None."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
            return None
        runtime = Runtime.from_label(str(data["runtime"]))
    except (ValueError, KeyError, TypeError):
        return None
    return runtime if runtime in candidates else None

