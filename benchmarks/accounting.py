"""Job accounting checked against the benchmark's own count of the same job (docs/operations.md).

One real job: ``docstream run`` over generated PDFs (tests/fixtures/documents.py ``make_pdf``) in a fresh
``--state-dir``, with the bundled model. Then, from that run's SQLite store:

* the job's figures: the jobs row's pages, chunks, tokens, model-seconds (with the device) and stage
  seconds, as ``docstream status`` shows them;
* the benchmark's own count of the same job: the documents' page counts; the chunk texts of the job's
  chunk rows, tokenized again here by the model's own tokenizer (transformers, without special tokens,
  untruncated: what docstream counts) and summed; and the time of ``SentenceTransformer.encode`` of the
  same texts in this process, on the CPU with the precision and threads of the job's runtime (bf16
  autocast when docstream chose bf16; ``--fp32`` forces fp32), batches of ``inference.max_batch_size``,
  after one warm-up pass; the median of ``--repeat`` passes. ``encode`` tokenizes as well as runs the
  model; the job's model-seconds are the forward pass alone, so the time of tokenizing the texts
  (``model.preprocess``) is shown too, and the forward-pass estimate is the difference.

Printed: the CPU model and flags (benchmarks/machine.py), the job's figures, the benchmark's, and
their ratios. Tokens must agree exactly (the exit status is 1 when they do not); the time ratio is a
measurement, not a test: the job's model ran beside the broker, the chunker and the reducer, in
micro-batches cut by its batcher, while the benchmark runs alone.

    .venv/bin/python benchmarks/accounting.py [--documents 8] [--pages 2-6] [--repeat 3] [--fp32] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
DOCSTREAM = str(Path(sys.executable).with_name("docstream"))

from machine import cpu_banner, load_average  # noqa: E402

from docstream.models.files import resolve_model_path  # noqa: E402
from docstream.models.runtime import Runtime  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream.store import SqliteStore  # noqa: E402
from docstream.tenants.usage import Usage  # noqa: E402
from tests.fixtures.documents import make_pdf  # noqa: E402


def _run_job(folder: Path, state: Path) -> tuple[str, float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")} | {"COLUMNS": "200"}
    started = time.perf_counter()
    proc = subprocess.run([DOCSTREAM, "run", str(folder), "--state-dir", str(state)], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"docstream run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = next((line for line in proc.stdout.splitlines() if line.startswith("usage:")), "(no usage line)")
    with sqlite3.connect(state / "docstream.db") as conn:
        (job_id,) = conn.execute("SELECT job_id FROM jobs").fetchone()
    return str(job_id), wall, summary


def _job_rows(state: Path, job_id: str, model_id: str) -> tuple[Usage, list[str], int, str]:
    store = SqliteStore(state / "docstream.db")
    try:
        job = store.get_job(job_id)
        assert job is not None and job.usage is not None, "the job has no usage"
        texts: list[str] = []
        pages = 0
        runtimes = set()
        for row in store.iter_job_documents(job_id):
            document = store.get_document(row.doc_id)
            pages += (document.page_count or 0) if document else 0
            result = store.get_document_result(row.doc_id, model_id)
            if result is not None and result.runtime:
                runtimes.add(result.runtime)
            texts += [c.text for c in store.iter_chunks(row.doc_id, model_id) if c.status == "ok"]
        return job.usage, texts, pages, ", ".join(sorted(runtimes)) or "?"
    finally:
        store.close()


def _own_count(texts: list[str], batch_size: int, repeat: int, runtime: Runtime | None) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if runtime is not None and runtime.threads:
        torch.set_num_threads(runtime.threads)
    bf16 = runtime is not None and runtime.precision == "bf16"
    model = SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)
    tokenizer = model.tokenizer
    tokens = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"])

    def encode() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model.encode(texts, batch_size=batch_size, show_progress_bar=False)

    encode_s, tokenize_s = [], []
    with torch.inference_mode():
        encode()  # warm-up
        for _ in range(repeat):
            started = time.perf_counter()
            encode()
            encode_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in range(0, len(texts), batch_size):
                model.preprocess(texts[i:i + batch_size])
            tokenize_s.append(time.perf_counter() - started)
    return {"tokens": tokens, "encode_s": statistics.median(encode_s), "tokenize_s": statistics.median(tokenize_s),
            "threads": torch.get_num_threads(), "precision": "bf16 autocast" if bf16 else "fp32"}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--pages", default="2-6", help="pages per document: LOW-HIGH, spread over the documents")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fp32", action="store_true", help="time encode in fp32, whatever the job's runtime")
    parser.add_argument("--keep", type=Path, help="keep the inputs and the state dir here")
    args = parser.parse_args()
    low, high = (int(x) for x in args.pages.split("-"))
    settings = Settings()
    print(cpu_banner(), flush=True)

    work = args.keep or Path(tempfile.mkdtemp(prefix="docstream-accounting-"))
    try:
        folder, state = work / "inputs", work / "state"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(args.documents):
            pages = low + (i * (high - low + 1)) // max(args.documents, 1)
            (folder / f"doc-{i:02d}.pdf").write_bytes(make_pdf(pages, seed=700 + i).data)
        job_id, wall, summary = _run_job(folder, state)
        usage, texts, pages, runtime = _job_rows(state, job_id, settings.inference.model_id)
        job_runtime = None if args.fp32 or "," in runtime or runtime == "?" else Runtime.from_label(runtime)
        own = _own_count(texts, settings.inference.max_batch_size, args.repeat, job_runtime)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    forward_s = own["encode_s"] - own["tokenize_s"]
    print(f"job {job_id}: {args.documents} documents, docstream run {wall:.1f} s wall, runtime {runtime}")
    print(f"  its summary: {summary}")
    print(f"  job:        pages {usage.pages}, chunks {usage.chunks}, tokens {usage.tokens}, "
          f"model-seconds {usage.model_seconds:.3f} on {usage.device}, stages "
          + ", ".join(f"{k} {v:.3f} s" for k, v in usage.stage_seconds.items()))
    print(f"  benchmark:  pages {pages}, chunks {len(texts)}, tokens {own['tokens']} (model tokenizer, no special "
          f"tokens), encode {own['encode_s']:.3f} s ({own['precision']}, batch {settings.inference.max_batch_size}, "
          f"{own['threads']} threads, median of {args.repeat}), of which tokenize {own['tokenize_s']:.3f} s: "
          f"forward ≈ {forward_s:.3f} s")
    print(f"  ratios job / benchmark: tokens {_ratio(usage.tokens, own['tokens'])}, pages "
          f"{_ratio(usage.pages, pages)}, chunks {_ratio(usage.chunks, len(texts))}, model-seconds / encode "
          f"{_ratio(usage.model_seconds, own['encode_s'])}, model-seconds / forward "
          f"{_ratio(usage.model_seconds, forward_s)}")
    print(f"load average after: {load_average()}")
    agree = (usage.tokens, usage.pages, usage.chunks) == (own["tokens"], pages, len(texts))
    print("tokens, pages and chunks agree" if agree else "MISMATCH between the job's figures and the benchmark's")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
