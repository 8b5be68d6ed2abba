"""The embedder: runtime choice (pure) and the real bundled model (no mocks of the model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docstream.embedding import (
    Embedder,
    Runtime,
    SentenceTransformerEmbedder,
    choose_runtime,
    cpu_supports_bf16,
    load_embedder,
    read_cpu_flags,
)
from docstream.errors import ConfigError
from docstream.models import resolve_model_path
from docstream.settings import InferenceSettings

REAL_TEXT = [
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little.",
    "A consumer commits an offset only after every effect of that record is done.",
    "Cassandra 5 vector type and an SAI index on chunk embeddings give similarity search.",
    "The quick brown fox jumps over the lazy dog.",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Kafka",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


# --- runtime choice (pure) ---------------------------------------------------------------


def test_bf16_flags_are_recognised() -> None:
    assert cpu_supports_bf16({"avx2", "avx512_bf16"})
    assert cpu_supports_bf16({"amx_bf16", "amx_tile"})
    assert not cpu_supports_bf16({"avx2", "avx512f", "fma"})


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 avx2\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert read_cpu_flags(cpuinfo) == frozenset({"fpu", "sse", "avx512_bf16", "avx2"})
    assert read_cpu_flags(tmp_path / "absent") == frozenset()


def test_auto_picks_cuda_in_fp16_when_present() -> None:
    runtime = choose_runtime(InferenceSettings(), cuda_available=True, cpu_flags=(), cpu_count=8)
    assert runtime == Runtime(device="cuda", precision="fp16", threads=0)


def test_cpu_uses_every_core_and_bf16_where_supported() -> None:
    settings = InferenceSettings(device="cpu")
    assert choose_runtime(settings, cuda_available=True, cpu_flags={"avx512_bf16"}, cpu_count=12) == Runtime(
        "cpu", "bf16", 12
    )
    assert choose_runtime(settings, cuda_available=False, cpu_flags={"avx2"}, cpu_count=2) == Runtime("cpu", "fp32", 2)


def test_cpu_bf16_off_means_fp32_even_where_supported() -> None:
    settings = InferenceSettings(cpu_bf16=False)
    runtime = choose_runtime(settings, cuda_available=False, cpu_flags={"avx512_bf16"}, cpu_count=4)
    assert runtime.precision == "fp32"


def test_cuda_asked_but_absent_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        choose_runtime(InferenceSettings(device="cuda"), cuda_available=False, cpu_flags=(), cpu_count=1)
    assert info.value.code == "cuda_unavailable"


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_onnx_backends_refuse_cuda(backend: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_embedder(InferenceSettings(backend=backend, device="cuda"))  # type: ignore[arg-type]
    assert info.value.code == "backend_unavailable"


def test_a_folder_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never downloaded"):
        load_embedder(InferenceSettings(model_path=str(tmp_path), warmup=False))


# --- the real model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_embedder() -> Embedder:
    return load_embedder(InferenceSettings(device="cpu"))


@pytest.fixture(scope="module")
def fp32_embedder() -> SentenceTransformerEmbedder:
    runtime = choose_runtime(InferenceSettings(device="cpu", cpu_bf16=False), cuda_available=False,
                             cpu_flags=(), cpu_count=2)
    return SentenceTransformerEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2", runtime=runtime)


def test_bundled_model_gives_normalized_384_dim_vectors(default_embedder: Embedder) -> None:
    vectors = default_embedder.embed(default_embedder.prepare(REAL_TEXT))
    assert default_embedder.model_id == "all-MiniLM-L6-v2"
    assert default_embedder.dimension == 384
    assert vectors.shape == (len(REAL_TEXT), 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_prepare_and_embed_match_model_encode(fp32_embedder: SentenceTransformerEmbedder) -> None:
    piecewise = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    reference = np.asarray(fp32_embedder.model.encode(REAL_TEXT, batch_size=3, normalize_embeddings=True))
    assert np.abs(piecewise - reference).max() < 1e-4


def test_batch_order_and_padding_do_not_change_a_vector(fp32_embedder: SentenceTransformerEmbedder) -> None:
    together = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    alone = np.vstack([fp32_embedder.embed(fp32_embedder.prepare([t])) for t in reversed(REAL_TEXT)])[::-1]
    assert np.abs(together - alone).max() < 1e-4


def test_texts_longer_than_the_model_are_truncated(fp32_embedder: SentenceTransformerEmbedder) -> None:
    long_text = " ".join(REAL_TEXT * 20)
    prepared = fp32_embedder.prepare([long_text])
    assert prepared.features["input_ids"].shape[1] == fp32_embedder.max_tokens
    assert fp32_embedder.embed(prepared).shape == (1, 384)


def test_bf16_where_supported_else_fp32_fallback(
    default_embedder: Embedder, fp32_embedder: SentenceTransformerEmbedder
) -> None:
    fp32 = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    default = default_embedder.embed(default_embedder.prepare(REAL_TEXT))
    if cpu_supports_bf16(read_cpu_flags()):
        assert default_embedder.runtime.precision == "bf16"
        assert _cosines(default, fp32).min() >= 0.9999
    else:
        # This CPU has no bf16 instructions: cpu_bf16=True (the default) must fall back to fp32.
        assert InferenceSettings().cpu_bf16 is True
        assert default_embedder.runtime.precision == "fp32"
        assert np.abs(default - fp32).max() < 1e-5


def test_bf16_autocast_stays_within_cosine_of_fp32(fp32_embedder: SentenceTransformerEmbedder) -> None:
    # The numeric claim of DESIGN.md, checked on every CPU (emulated, slower, where bf16 is not native).
    bf16 = SentenceTransformerEmbedder(
        resolve_model_path(None), model_id="all-MiniLM-L6-v2", runtime=Runtime("cpu", "bf16", 2)
    )
    texts = REAL_TEXT[:3]
    assert _cosines(bf16.embed(bf16.prepare(texts)), fp32_embedder.embed(fp32_embedder.prepare(texts))).min() >= 0.9999
