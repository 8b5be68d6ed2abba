"""Benchmark: every model runtime candidate against torch fp32, side by side, on real chunks, with the quality gate.

The verdicts of docs/performance.md "Runtime choice" come from this script. In one process,
the candidates take turns (the order rotates every round, so a load swing on a shared machine
falls on all of them): each round every candidate encodes the same slice of chunks, in
batches of ``--batch-size``, tokenization included. Candidates:

* torch fp32 (the reference, what a user's plain script runs);
* torch bf16 autocast, only where the CPU flags allow it (avx512_bf16 / amx_bf16);
* torch dynamic int8 (``torch.ao.quantization.quantize_dynamic`` on every nn.Linear, fbgemm);
* onnx fp32: ``torch.onnx.export`` of the transformer on onnxruntime (graph optimizations on);
* onnx fp32 + the onnxruntime transformer optimizer (fused attention, LayerNorm, GELU);
* onnx int8, dynamic (per-channel int8 weights, activations quantized per batch):
  every MatMul of the optimized graph in U8S8 (the format for VNNI CPUs); the weight MatMuls without
  reduce_range; the same with the FFN down-projections kept fp32; and with the attention output
  projections kept fp32 too; and the removed ``onnx-int8`` backend's choice (reduce_range, down-projections fp32);
* onnx int8, static: activations calibrated on ``--calibration`` real chunks that the measured set does not
  hold (``quantize_static``, QDQ, MinMax), on the weight MatMuls, and without the FFN down-projections.

The chunks are real text: the descriptions of the Python packages installed beside docstream (their METADATA),
cut into windows of ``--words`` words (nothing is downloaded); ``--texts synthetic`` takes generated prose instead.

The gate, per candidate, against fp32 over every measured chunk:

* worst cosine >= 0.99;
* top-10 neighbour overlap >= 0.95: for each of the first ``--queries`` chunks, its 10 nearest chunks
  (cosine) among all the others by the candidate's vectors, against those by fp32's, averaged.

A candidate passes the gate with both; it meets the goal with >= 1.5 times fp32 as well. Printed: CPU model
and flags, torch and onnxruntime versions, threads, load, then per candidate chunks/s, ratio to fp32, CPU per
chunk, the cosines, the overlap and the verdict.

The ONNX candidates need ``onnx`` and ``onnxruntime``, the [bench] extra (``make bench`` installs it); without them
they are skipped.

    .venv/bin/python benchmarks/runtimes.py --chunks 1000 --queries 100
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from machine import cpu_line
from sentence_transformers import SentenceTransformer

from docstream.models.embedding import BF16_CPU_FLAGS, read_cpu_flags
from docstream.models.files import resolve_model_path

_VOCABULARY = (
    "the of and to in is was for on that with as by at from are this be or an which it have not has were "
    "document stream kafka cassandra partition offset consumer producer batch model embedding vector token "
    "chunk latency throughput replica broker schema record commit write read index search cluster node "
    "failure retry backoff jitter queue thread process memory cache network disk storage page text section "
    "Überprüfung des résumé naïve coöperation façade año straße Zürich déjà"
).split()

Encode = Callable[[Sequence[str]], np.ndarray]

GATE_WORST_COSINE = 0.99
GATE_OVERLAP = 0.95
GOAL_RATIO = 1.5


def _texts(count: int, words: int, seed: int = 11) -> list[str]:
    import random

    rng = random.Random(seed)
    return [
        f"Section {i}. " + " ".join(rng.choice(_VOCABULARY) for _ in range(words)).capitalize() + "."
        for i in range(count)
    ]


def _package_texts(words: int) -> list[str]:
    """Windows of ``words`` words over the descriptions of the installed Python packages, in a fixed shuffle.

    Real prose that every machine with docstream installed holds: each ``*.dist-info/METADATA`` after its
    headers, without links, markup and image lines; windows overlap by a sixth (as chunks cut at sentence
    ends do not, but neighbours then exist, as they do in a real corpus).
    """
    import random
    import sysconfig

    found: list[str] = []
    site = Path(sysconfig.get_paths()["purelib"])
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        body = meta.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[-1]
        kept = [w for w in body.split() if not w.startswith(("http", "[![", "<", "!["))]
        step = max(1, words * 5 // 6)
        found.extend(" ".join(kept[i:i + words]) for i in range(0, len(kept) - words // 2, step))
    random.Random(1).shuffle(found)
    return found


def _weight_matmuls(source: Path) -> tuple[list[str], list[str], list[str]]:
    """The graph's MatMuls: those of two activations (attention), the FFN down-projections, the attention outputs."""
    import onnx

    graph = onnx.load(str(source)).graph
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    activations, down, attention_out = [], [], []
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weights = [shapes[n] for n in node.input if n in shapes]
        if not weights:
            activations.append(node.name)
        elif len(weights[0]) == 2 and weights[0][0] > weights[0][1]:
            down.append(node.name)
        elif "attention/output" in node.name:
            attention_out.append(node.name)
    return activations, down, attention_out


def _quantize_dynamic(source: Path, name: str, exclude: Sequence[str], *, reduce_range: bool = False) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = source.with_name(f"{name}.onnx")
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=True, reduce_range=reduce_range, nodes_to_exclude=list(exclude))
    return target


def _quantize_static(source: Path, name: str, exclude: Sequence[str], calibration: Sequence[str],
                     model_path: Path) -> Path:
    """Static int8 (QDQ): activation ranges from the calibration chunks (MinMax), weights per channel."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)

    class _Chunks(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._batches = iter([list(calibration[i:i + 16]) for i in range(0, len(calibration), 16)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self._batches, None)
            if batch is None:
                return None
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="np")
            return {key: np.asarray(value, dtype=np.int64) for key, value in encoded.items()}

    prepared = source.with_name("model_pre.onnx")
    if not prepared.exists():
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    target = source.with_name(f"{name}.onnx")
    quantize_static(str(prepared), str(target), _Chunks(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                    calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=list(exclude))
    return target


def top10_overlap(got: np.ndarray, reference: np.ndarray, queries: int, k: int = 10) -> float:
    """Mean share of each query's ``k`` nearest chunks (cosine, itself left out) on which ``got`` and
    ``reference`` agree."""
    def nearest(vectors: np.ndarray) -> np.ndarray:
        unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        sims = unit[:queries] @ unit.T
        sims[np.arange(queries), np.arange(queries)] = -np.inf
        return np.argsort(-sims, axis=1, kind="stable")[:, :k]

    mine, theirs = nearest(got), nearest(reference)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(mine, theirs, strict=True)]))


def _torch_encoder(model: SentenceTransformer, batch_size: int, *, bf16: bool = False) -> Encode:
    def encode(texts: Sequence[str]) -> np.ndarray:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)

    return encode


def _export(model_path: Path, folder: Path) -> Path:
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(model_path), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)

    class _Encoder(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    names = ("input_ids", "attention_mask", "token_type_ids")
    sample = tokenizer(["a warm-up sentence", "another, longer warm-up sentence"], padding=True, return_tensors="pt")
    target = folder / "model.onnx"
    with torch.inference_mode():
        torch.onnx.export(_Encoder(model), tuple(sample[n] for n in names), str(target), input_names=list(names),
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in (*names, "last_hidden_state")})
    return target


def _optimize(source: Path, hidden: int, heads: int) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model

    target = source.with_name("model_opt.onnx")
    optimize_model(str(source), model_type="bert", num_heads=heads, hidden_size=hidden).save_model_to_file(str(target))
    return target


def _quantize_like_backend(source: Path) -> Path:
    """What the removed onnx-int8 backend did: reduce_range, attention and down-projection MatMuls fp32."""
    activations, down, _ = _weight_matmuls(source)
    return _quantize_dynamic(source, "model_int8_backend", activations + down, reduce_range=True)


def _quantize_vnni(source: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = source.with_name("model_int8_vnni.onnx")
    import onnx

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return target


def _ort_encoder(file: Path, model_path: Path, threads: int, batch_size: int) -> Encode:
    import onnxruntime as ort
    from transformers import AutoTokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
    inputs = {i.name for i in session.get_inputs()}

    def embed(texts: list[str]) -> np.ndarray:
        enc = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
        feeds = {k: np.asarray(v, dtype=np.int64) for k, v in enc.items() if k in inputs}
        if "token_type_ids" in inputs and "token_type_ids" not in feeds:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        hidden = session.run(["last_hidden_state"], feeds)[0]
        mask = feeds["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def encode(texts: Sequence[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            picked = order[start:start + batch_size]
            out[picked] = embed([texts[i] for i in picked])
        return out

    return encode


def _candidates(
    model_path: Path, threads: int, batch_size: int, work: Path, flags: frozenset[str], calibration: Sequence[str]
) -> dict[str, Encode]:
    fp32 = SentenceTransformer(str(model_path), device="cpu", local_files_only=True).eval()
    found: dict[str, Encode] = {"torch fp32": _torch_encoder(fp32, batch_size)}
    if BF16_CPU_FLAGS & flags:
        found["torch bf16 autocast"] = _torch_encoder(fp32, batch_size, bf16=True)
    torch.backends.quantized.engine = "fbgemm"
    quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(fp32), {torch.nn.Linear}, dtype=torch.qint8)
    found["torch dynamic int8"] = _torch_encoder(quantized, batch_size)
    if not all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime")):
        print("onnx / onnxruntime not installed: the ONNX candidates are skipped (pip install onnx onnxruntime)")
        return found
    exported = _export(model_path, work)
    config = fp32[0].auto_model.config
    optimized = _optimize(exported, config.hidden_size, config.num_attention_heads)
    found["onnx fp32 (backend onnx)"] = _ort_encoder(exported, model_path, threads, batch_size)
    found["onnx fp32 + transformer optimizer"] = _ort_encoder(optimized, model_path, threads, batch_size)
    activations, down, attention_out = _weight_matmuls(exported)
    quantized = {
        "onnx int8 dynamic, optimized graph, every MatMul U8S8 (VNNI)": _quantize_vnni(optimized),
        "onnx int8 dynamic, weight MatMuls": _quantize_dynamic(exported, "dyn_weights", activations),
        "onnx int8 dynamic, down-projections fp32": _quantize_dynamic(exported, "dyn_nodown", activations + down),
        "onnx int8 dynamic, down-projections and attention outputs fp32":
            _quantize_dynamic(exported, "dyn_nodown_noout", activations + down + attention_out),
        "onnx int8 dynamic, removed backend's choice (reduce_range)": _quantize_like_backend(exported),
        "onnx int8 static (calibrated), weight MatMuls":
            _quantize_static(exported, "static_weights", activations, calibration, model_path),
        "onnx int8 static (calibrated), down-projections fp32":
            _quantize_static(exported, "static_nodown", activations + down, calibration, model_path),
    }
    for name, file in quantized.items():
        found[name] = _ort_encoder(file, model_path, threads, batch_size)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=1000, help="chunks in all (agreement is over every one)")
    parser.add_argument("--words", type=int, default=180, help="words per chunk (~1.3 tokens each in package texts)")
    parser.add_argument("--texts", choices=("packages", "synthetic"), default="packages",
                        help="real prose from the installed packages' descriptions, or generated prose")
    parser.add_argument("--calibration", type=int, default=128,
                        help="chunks (not among the measured ones) that calibrate the static int8 candidates")
    parser.add_argument("--queries", type=int, default=100, help="query chunks of the top-10 neighbour overlap")
    parser.add_argument("--round", type=int, default=32, help="chunks each candidate encodes per round")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    flags = read_cpu_flags()
    model_path = resolve_model_path(None)
    if args.texts == "packages":
        pool = _package_texts(args.words)
        if len(pool) < args.chunks + args.calibration:
            raise SystemExit(f"the installed packages give {len(pool)} chunks of {args.words} words, fewer than "
                             f"--chunks {args.chunks} + --calibration {args.calibration}")
        calibration, texts = pool[: args.calibration], pool[args.calibration : args.calibration + args.chunks]
    else:
        calibration, texts = _texts(args.calibration, args.words, seed=12), _texts(args.chunks, args.words)
    queries = min(args.queries, len(texts))
    # in the work folder: onnxruntime's shape inference leaves its failed model (sym_shape_infer_temp.onnx and a
    # ~90 MB weights file) in the working directory
    with tempfile.TemporaryDirectory(prefix="docstream-runtimes-") as work, contextlib.chdir(work):
        candidates = _candidates(model_path, args.threads, args.batch_size, Path(work), flags, calibration)
        tokens = [len(ids) for ids in SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
                  .tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
        print(cpu_line())
        print(f"flags: {' '.join(sorted(flags))}")
        amx = sorted(f for f in flags if "amx" in f) or "none"
        print(f"bf16 flags present: {sorted(BF16_CPU_FLAGS & flags) or 'none'}; amx: {amx}")
        ort = importlib.util.find_spec("onnxruntime") and __import__("onnxruntime").__version__
        print(f"torch {torch.__version__}, onnxruntime {ort or 'absent'}, threads {args.threads}, "
              f"batch {args.batch_size}, {len(texts)} {args.texts} chunks of {min(tokens)}-{max(tokens)} tokens "
              f"(mean {np.mean(tokens):.0f}), {len(calibration)} calibration chunks, {queries} queries")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for encode in candidates.values():  # one warm-up batch each
            encode(texts[: args.batch_size])
        seconds: dict[str, list[float]] = {name: [] for name in candidates}
        cpu: dict[str, float] = dict.fromkeys(candidates, 0.0)
        vectors: dict[str, list[np.ndarray]] = {name: [] for name in candidates}
        names = list(candidates)
        for number, start in enumerate(range(0, len(texts), args.round)):
            part = texts[start:start + args.round]
            shift = number % len(names)
            for name in names[shift:] + names[:shift]:
                began, began_cpu = time.perf_counter(), time.process_time()
                vectors[name].append(candidates[name](part))
                seconds[name].append(time.perf_counter() - began)
                cpu[name] += time.process_time() - began_cpu
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    reference = np.concatenate(vectors["torch fp32"])
    base = np.asarray(seconds["torch fp32"])
    print(f"\n{len(base)} rounds of {args.round} chunks; ratio = median over rounds of fp32's time / the candidate's "
          "time in the same round (robust to load swings); CPU ms = process CPU per chunk")
    print(f"gate: worst cosine >= {GATE_WORST_COSINE} and top-10 overlap >= {GATE_OVERLAP}; "
          f"goal: the gate and >= {GOAL_RATIO}x fp32")
    print("\n| runtime | chunks/s | vs torch fp32 (median of rounds) | CPU ms/chunk | worst cosine | p1 cosine "
          "| mean cosine | top-10 overlap | verdict |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in names:
        got = np.concatenate(vectors[name])
        cos = np.sum(got * reference, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
        rate = len(texts) / sum(seconds[name])
        ratio = float(np.median(base / np.asarray(seconds[name])))
        overlap = top10_overlap(got, reference, queries)
        gate = cos.min() >= GATE_WORST_COSINE and overlap >= GATE_OVERLAP
        verdict = ("reference" if name == "torch fp32" else "meets the goal" if gate and ratio >= GOAL_RATIO
                   else "passes the gate, too slow" if gate else "fails the gate")
        print(f"| {name} | {rate:.1f} | {ratio:.2f} | {1000 * cpu[name] / len(texts):.0f} | {cos.min():.4f} | "
              f"{np.percentile(cos, 1):.4f} | {cos.mean():.4f} | {overlap:.3f} | {verdict} |")

if __name__ == "__main__":
    main()
