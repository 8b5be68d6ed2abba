"""The ONNX Runtime embedder: the same ``Embedder`` role on onnxruntime, fp32 or int8 (docs/performance.md).

The model folder's transformer is exported once with ``torch.onnx.export`` (TorchScript
exporter, opset 17, dynamic batch and sequence axes) into a cache folder keyed by the model
files (``~/.cache/docstream/onnx/<key>/model.onnx``); ``onnx-int8`` adds a dynamically
quantized copy (``onnxruntime.quantization.quantize_dynamic``: int8 weights per channel on the
projection MatMuls; attention-score MatMuls and the feed-forward down-projections stay fp32). Pooling
(mean or CLS, from the folder's ``1_Pooling/config.json``) and L2 normalization run in
numpy. Nothing is downloaded: the export reads the local folder only. The export needs the
``onnx`` package (the ``[onnx]`` extra); running needs only ``onnxruntime``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from docstream.embedding import PreparedBatch, Runtime
from docstream.errors import ConfigError

__all__ = [
    "OnnxEmbedder",
    "OnnxVariant",
    "default_cache_dir",
    "export_onnx",
    "model_cache_key",
]

OnnxVariant = Literal["fp32", "int8"]
Vectors = npt.NDArray[np.float32]

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OPSET = 17
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "sentence_bert_config.json")
_WARMUP_TEXTS = ("docstream warm-up: a short sentence.", "A second, slightly longer sentence to embed at start.")


def default_cache_dir() -> Path:
    """Where exported models are kept: ``$XDG_CACHE_HOME/docstream/onnx`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "docstream" / "onnx"


def model_cache_key(model_path: Path) -> str:
    """A short key for the model folder: a hash of its weight and config files' names, sizes and contents' heads.

    Raises:
        ConfigError: the folder cannot be read.
    """
    digest = hashlib.sha256()
    try:
        for name in _WEIGHT_FILES:
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


def _atomic_target(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    return Path(name)


def _export_fp32(model_path: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(model_path), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)

    class _Encoder(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    sample = tokenizer(list(_WARMUP_TEXTS), padding=True, return_tensors="pt")
    if "token_type_ids" not in sample:
        sample["token_type_ids"] = torch.zeros_like(sample["input_ids"])
    axes = {name: {0: "batch", 1: "sequence"} for name in (*_INPUTS, "last_hidden_state")}
    tmp = _atomic_target(target)
    try:
        with torch.inference_mode():
            torch.onnx.export(
                _Encoder(model),
                tuple(sample[name] for name in _INPUTS),
                str(tmp),
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                dynamo=False,
            )
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)


def _sensitive_matmuls(source: Path) -> list[str]:
    """MatMul nodes left in fp32: activation-by-activation (attention scores) and down-projections.

    Quantizing every MatMul (the onnxruntime default) costs all-MiniLM-L6-v2 cosine 0.89 against
    fp32 on this project's text; int8 weights per channel on the other MatMuls keep it above 0.99.
    """
    import onnx

    graph = onnx.load(str(source)).graph
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    keep: list[str] = []
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weights = [shapes[name] for name in node.input if name in shapes]
        if not weights or (len(weights[0]) == 2 and weights[0][0] > weights[0][1]):
            keep.append(node.name)
    return keep


def _quantize(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = _atomic_target(target)
    try:
        quantize_dynamic(
            str(source),
            str(tmp),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            reduce_range=True,
            nodes_to_exclude=_sensitive_matmuls(source),
        )
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)


def export_onnx(model_path: Path, *, variant: OnnxVariant = "fp32", cache_dir: Path | None = None) -> Path:
    """The ONNX file of the model in ``model_path``, exported (and quantized) on first use, then cached.

    Args:
        model_path: a local sentence-transformers folder.
        variant: "fp32" (plain export) or "int8" (dynamic int8 quantization of the fp32 export).
        cache_dir: where exports are kept (default ``default_cache_dir()``).

    Raises:
        ConfigError: the ``onnx`` package is missing (``pip install '.[onnx]'``) or the export fails.
    """
    folder = (cache_dir or default_cache_dir()) / model_cache_key(model_path)
    fp32 = folder / "model.onnx"
    target = fp32 if variant == "fp32" else folder / "model_int8.onnx"
    if target.is_file():
        return target
    if importlib.util.find_spec("onnx") is None:  # the exporter and the quantizer both need it
        raise ConfigError(
            "the onnx backends need the 'onnx' package to export the model: pip install '.[onnx]'",
            code="backend_unavailable",
        )
    try:
        if not fp32.is_file():
            _export_fp32(model_path, fp32)
        if variant == "int8":
            _quantize(fp32, target)
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot export the model in {model_path} to ONNX: {exc}", code="model_unavailable") from exc
    return target


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", code="model_unavailable") from exc
    return data


def _has_normalize_module(model_path: Path) -> bool:
    try:
        modules: Any = json.loads((model_path / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(modules, list) and any("Normalize" in str(m.get("type", "")) for m in modules)


class OnnxEmbedder:
    """An ``Embedder`` over an ONNX export of a local sentence-transformers folder, on onnxruntime (CPU)."""

    def __init__(
        self,
        model_path: Path,
        *,
        model_id: str,
        variant: OnnxVariant = "fp32",
        threads: int = 0,
        normalize: bool = True,
        cache_dir: Path | None = None,
    ) -> None:
        """Export (first time) and load the model.

        Args:
            model_path: a local sentence-transformers folder (never a hub name).
            model_id: the name recorded with results.
            variant: "fp32" or "int8".
            threads: onnxruntime intra-op threads (0: onnxruntime's default, every core).
            normalize: L2-normalize the output (always done when the folder has a Normalize module).
            cache_dir: where exports are kept.

        Raises:
            ConfigError: missing package, unsupported pooling, or a model that cannot be exported or loaded.
        """
        import onnxruntime as ort
        from transformers import AutoTokenizer

        pooling = _read_json(model_path / "1_Pooling" / "config.json")
        if pooling.get("pooling_mode_cls_token"):
            self._pooling = "cls"
        elif pooling.get("pooling_mode_mean_tokens", True):
            self._pooling = "mean"
        else:
            raise ConfigError(
                f"the onnx backend supports mean or CLS pooling only ({model_path})", code="model_unavailable"
            )
        has_normalize = _has_normalize_module(model_path)
        st_config = _read_json(model_path / "sentence_bert_config.json")
        self._file = export_onnx(model_path, variant=variant, cache_dir=cache_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(str(self._file), options, providers=["CPUExecutionProvider"])
            self._tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"cannot load the ONNX model {self._file}: {exc}", code="model_unavailable") from exc
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._model_id = model_id
        self._variant = variant
        self._normalize = normalize or has_normalize
        self._max_tokens = int(st_config.get("max_seq_length") or self._tokenizer.model_max_length)
        self._dimension = int(pooling.get("word_embedding_dimension") or self._session.get_outputs()[0].shape[-1])
        self._runtime = Runtime(device="cpu", precision="fp32", threads=threads)

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
        """Longest input in tokens (the folder's max_seq_length)."""
        return self._max_tokens

    @property
    def runtime(self) -> Runtime:
        """Device and precision of the activations (int8 quantizes weights; activations stay fp32)."""
        return self._runtime

    @property
    def variant(self) -> OnnxVariant:
        """fp32 or int8 weights."""
        return self._variant

    @property
    def onnx_file(self) -> Path:
        """The ONNX file the session runs."""
        return self._file

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Tokenize ``texts`` (padded, truncated to ``max_tokens``) into int64 numpy arrays."""
        if not texts:
            return PreparedBatch(texts=(), features={})
        encoded = self._tokenizer(
            list(texts), padding=True, truncation=True, max_length=self._max_tokens, return_tensors="np"
        )
        features = {name: np.asarray(encoded[name], dtype=np.int64) for name in _INPUTS if name in encoded}
        if "token_type_ids" in self._inputs and "token_type_ids" not in features:
            features["token_type_ids"] = np.zeros_like(features["input_ids"])
        return PreparedBatch(texts=tuple(texts), features=features)

    def embed(self, batch: PreparedBatch) -> Vectors:
        """Run the model on a prepared batch and pool: float32, shape (n, dimension)."""
        if not batch.texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        feeds = {name: value for name, value in batch.features.items() if name in self._inputs}
        hidden = np.asarray(self._session.run(["last_hidden_state"], feeds)[0], dtype=np.float32)
        if self._pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            mask = batch.features["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        if self._normalize:
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        result: Vectors = pooled.astype(np.float32, copy=False)
        return result

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """All of ``texts`` in batches of ``batch_size``, longest first (as sentence-transformers does), in order."""
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(order), max(1, batch_size)):
            picked = order[start : start + batch_size]
            out[picked] = self.embed(self.prepare([texts[i] for i in picked]))
        return out

    def warm_up(self) -> None:
        """Run one small batch through tokenizer and session."""
        self.embed(self.prepare(_WARMUP_TEXTS))
