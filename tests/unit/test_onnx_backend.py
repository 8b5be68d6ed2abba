"""The ONNX Runtime embedder against the torch fp32 embedder, on real text (no mocks of the model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docstream.embedding import Embedder, Runtime, SentenceTransformerEmbedder, load_embedder
from docstream.errors import ConfigError
from docstream.models import resolve_model_path
from docstream.onnx_backend import OnnxEmbedder, export_onnx, model_cache_key
from docstream.settings import InferenceSettings
from tests.fixtures.documents import paragraphs

pytest.importorskip("onnx", reason="the onnx backends export with the 'onnx' package: pip install '.[onnx]'")

TEXTS = [*paragraphs(11, 12), *paragraphs(12, 4, non_ascii=True), "Kafka", "A consumer commits an offset."]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    torch_embedder = SentenceTransformerEmbedder(
        resolve_model_path(None),
        model_id="all-MiniLM-L6-v2",
        runtime=Runtime(device="cpu", precision="fp32", threads=2),
    )
    return torch_embedder.encode(TEXTS, batch_size=8)


@pytest.fixture(scope="module")
def fp32(cache_dir: Path) -> OnnxEmbedder:
    return OnnxEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2", variant="fp32", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def int8(cache_dir: Path) -> OnnxEmbedder:
    return OnnxEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2", variant="int8", cache_dir=cache_dir)


def test_onnx_fp32_agrees_with_torch_fp32(fp32: OnnxEmbedder, reference: np.ndarray) -> None:
    vectors = fp32.encode(TEXTS, batch_size=8)
    assert vectors.shape == reference.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    assert _cosines(vectors, reference).min() >= 0.999


def test_onnx_int8_agrees_with_torch_fp32(int8: OnnxEmbedder, reference: np.ndarray) -> None:
    vectors = int8.encode(TEXTS, batch_size=8)
    assert int8.onnx_file.name == "model_int8.onnx"
    assert _cosines(vectors, reference).min() >= 0.99


def test_prepare_then_embed_matches_encode_and_is_unit_length(fp32: OnnxEmbedder) -> None:
    assert isinstance(fp32, Embedder)
    stepwise = fp32.embed(fp32.prepare(TEXTS[:5]))
    assert np.allclose(stepwise, fp32.encode(TEXTS[:5], batch_size=2), atol=1e-5)
    assert np.allclose(np.linalg.norm(stepwise, axis=1), 1.0, atol=1e-5)
    assert fp32.embed(fp32.prepare([])).shape == (0, 384)
    assert fp32.max_tokens == 256 and fp32.dimension == 384 and fp32.runtime.device == "cpu"


def test_long_text_is_truncated_to_max_tokens(fp32: OnnxEmbedder) -> None:
    batch = fp32.prepare([" ".join(paragraphs(3, 40))])
    assert batch.features["input_ids"].shape[1] == fp32.max_tokens


def test_export_is_cached_by_model_key(fp32: OnnxEmbedder, cache_dir: Path) -> None:
    path = resolve_model_path(None)
    first = export_onnx(path, cache_dir=cache_dir)
    stamp = first.stat().st_mtime_ns
    assert first == fp32.onnx_file
    assert first.parent.name == model_cache_key(path)
    assert export_onnx(path, cache_dir=cache_dir).stat().st_mtime_ns == stamp


def test_load_embedder_builds_the_onnx_backend() -> None:
    embedder = load_embedder(InferenceSettings(backend="onnx", warmup=True))
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.model_id == "all-MiniLM-L6-v2"


def test_onnx_backend_refuses_cuda() -> None:
    with pytest.raises(ConfigError) as info:
        load_embedder(InferenceSettings(backend="onnx-int8", device="cuda"))
    assert info.value.code == "backend_unavailable"
