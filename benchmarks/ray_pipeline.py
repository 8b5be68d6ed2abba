"""The Ray Data pipeline (compare.py variant (c)): the job of plain_pipeline.py, written as a Ray Data user would.

Same steps and settings as benchmarks/plain_pipeline.py (a): every PDF in FOLDER is extracted
and chunked with ``docstream_chunker.extraction.chunk_bytes`` (model tokenizer, 256 tokens, overlap 32),
then the chunk texts go through ``SentenceTransformer(<bundled model>).encode(texts,
batch_size=16)`` in fp32 under ``torch.inference_mode()``. The difference is the plumbing, Ray
Data with mostly default settings on a local one-node Ray (no dashboard, no usage stats, logs in
a temp dir removed at the end, bound to 127.0.0.1):

    ray.data.from_items([{"path": ...}, ...])           # one row per PDF, sorted like (a)
      .flat_map(_ExtractChunks, concurrency=1)         # actor: tokenizer loaded once, one PDF -> its chunk rows
      .map_batches(_Embed, batch_size=16, concurrency=1, num_cpus=1)   # actor: model loaded once
      .iter_batches()                                  # driver counts the embedding rows

Both stages are callable classes so the tokenizer and the model load once per actor (each takes
Ray's default 1 CPU: the two fit the ``num_cpus=os.cpu_count()`` of a 2-core box). Ray pins
``OMP_NUM_THREADS`` of an actor to its ``num_cpus`` (1), so the encode actor sets torch to the
physical core count, which is torch's own default in (a); ``--torch-threads`` overrides. Heavy
imports (torch, sentence-transformers, PyMuPDF) happen in the actors only, not in the driver.

It prints one JSON line, after ``ray.shutdown()``:
``{"chunks": N, "seconds": S, "init_s": I, "pipeline_s": P, "shutdown_s": D, "torch_threads": T,
"ray": "2.x", "ray_processes": R, "outside_tree": O}``; ``ray_processes`` counts the driver's
descendants (GCS, raylet, workers, ...) just before shutdown, ``outside_tree`` the processes of
this Ray session that are not (0 expected: compare.py sums RSS over the driver's tree).

``--timeout`` (default 1700 s) raises in the driver, so ``ray.shutdown()`` still runs: a SIGKILLed
driver takes GCS, raylet and the workers with it but leaves Ray's two agent processes behind.

    .venv/bin/python benchmarks/ray_pipeline.py /tmp/pdfs [--batch-size 16] [--torch-threads 0] [--timeout 1700]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

__all__ = ["main"]

_MODEL_ID = "all-MiniLM-L6-v2"


class _ExtractChunks:
    """flat_map stage: one PDF row → one row per chunk; the tokenizer is loaded once per actor."""

    def __init__(self) -> None:
        from docstream.models.tokenization import load_token_counter
        from docstream_chunker.chunking import ChunkingConfig
        from docstream_chunker.extraction import chunk_bytes

        self._chunk_bytes = chunk_bytes
        self._config = ChunkingConfig(256, 32)
        self._counter = load_token_counter(None, _MODEL_ID)

    def __call__(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        path = Path(row["path"])
        doc = self._chunk_bytes(path.read_bytes(), config=self._config, counter=self._counter, max_pages=5000,
                                max_bytes=1 << 30, filename=path.name)
        return [{"path": row["path"], "index": index, "text": chunk.text} for index, chunk in enumerate(doc.chunks)]


class _Embed:
    """map_batches stage: SentenceTransformer loaded once per actor, fp32, one encode call per batch."""

    def __init__(self, batch_size: int, threads: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        from docstream.models.files import resolve_model_path

        torch.set_num_threads(threads)
        self._torch = torch
        self._batch_size = batch_size
        self._model = SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(text) for text in batch["text"]]
        with self._torch.inference_mode():
            vectors = self._model.encode(texts, batch_size=self._batch_size, show_progress_bar=False)
        vectors = np.asarray(vectors, dtype=np.float32)
        assert vectors.shape[0] == len(texts)
        return {"path": batch["path"], "index": batch["index"], "embedding": vectors}


def _session_processes(temp_dir: Path) -> tuple[int, int]:
    """(descendants of this process, processes naming ``temp_dir`` that are not among them)."""
    me = psutil.Process()
    tree = {proc.pid for proc in me.children(recursive=True)}
    outside = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(temp_dir) in cmdline and proc.pid not in tree and proc.pid != me.pid:
            outside += 1
    return len(tree), outside


def _on_alarm(signum: int, frame: object) -> None:
    raise TimeoutError("ray_pipeline: --timeout reached")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch threads in the encode actor (0: physical cores, torch's default in (a))")
    parser.add_argument("--timeout", type=int, default=1700, help="seconds before the driver stops and shuts Ray down")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(args.timeout)
    threads = args.torch_threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    started = time.perf_counter()
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths live under it
    try:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="warning",
                 _temp_dir=str(temp_dir), _node_ip_address="127.0.0.1")
        initialised = time.perf_counter()
        try:
            ray.data.DataContext.get_current().enable_progress_bars = False
            paths = [{"path": str(path)} for path in sorted(args.folder.glob("*.pdf"))]
            dataset = (
                ray.data.from_items(paths)
                .flat_map(_ExtractChunks, concurrency=1)
                .map_batches(_Embed, batch_size=args.batch_size, concurrency=1, num_cpus=1,
                             fn_constructor_kwargs={"batch_size": args.batch_size, "threads": threads})
            )
            chunks = 0
            for batch in dataset.iter_batches(batch_format="numpy"):
                embeddings = batch["embedding"]
                assert embeddings.ndim == 2
                chunks += int(embeddings.shape[0])
            processed = time.perf_counter()
            ray_processes, outside = _session_processes(temp_dir)
        finally:
            signal.alarm(0)
            ray.shutdown()
        done = time.perf_counter()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    print(json.dumps({
        "chunks": chunks, "seconds": round(done - started, 3), "init_s": round(initialised - started, 3),
        "pipeline_s": round(processed - initialised, 3), "shutdown_s": round(done - processed, 3),
        "torch_threads": threads, "ray": ray.__version__, "ray_processes": ray_processes, "outside_tree": outside,
    }), flush=True)


if __name__ == "__main__":
    main()
