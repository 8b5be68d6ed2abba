"""Thread split on a small CPU: torch's intra-op threads and the tokenizer's, in `docstream run`.

    .venv/bin/python benchmarks/threads.py [--pages 160] [--rounds 2] [--splits torch2,torch1,...]

In `docstream run` three things share the cores: torch's intra-op threads (the model
forward, ``inference.threads``; 0 = every usable core), the chunker's extraction child
process (PyMuPDF, one process) and the Hugging Face tokenizer (Rust, rayon threads, in the
extraction child for token counts and in the inference service for ``prepare``;
``TOKENIZERS_PARALLELISM=false`` makes it serial). One folder of generated PDFs
(``compare.make_folder``) goes through ``docstream run`` (fresh ``--state-dir``, defaults
otherwise) once per split and round; every round runs the splits in turn, the next round in
the reverse order, so that each split sees the same drift of a shared machine.

Per run: wall seconds, chunks/s, CPU seconds of the whole process tree (RUSAGE_CHILDREN:
the run, its extraction child and the embedded broker) and, from the run's run.log, whether
extraction overlapped inference: the first document's DocumentCompleted (its chunks embedded)
against the last document's ``document_chunked``. CPU model and flags and the load average
are printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from compare import DOCSTREAM, make_folder  # noqa: E402
from machine import cpu_banner, load_average  # noqa: E402

SPLITS: dict[str, dict[str, str]] = {
    "torch2": {"DOCSTREAM_INFERENCE__THREADS": "2"},
    "torch1": {"DOCSTREAM_INFERENCE__THREADS": "1"},
    "torch2-tok1": {"DOCSTREAM_INFERENCE__THREADS": "2", "TOKENIZERS_PARALLELISM": "false"},
    "torch1-tok1": {"DOCSTREAM_INFERENCE__THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
}
"""Split name → environment of its `docstream run` (torchN: N intra-op threads; tok1: serial tokenizer)."""


def _env(extra: dict[str, str]) -> dict[str, str]:
    drop = ("DOCSTREAM_", "TOKENIZERS_PARALLELISM", "RAYON_", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _overlap(log: Path) -> dict[str, Any]:
    """From run.log: when documents were chunked and completed, seconds after the first chunked one."""
    chunked: list[float] = []
    completed: list[float] = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        at = event.get("timestamp")
        if not isinstance(at, str):
            continue
        seconds = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
        if event.get("event") == "document_chunked":
            chunked.append(seconds)
        elif event.get("event") == "document_completed":
            completed.append(seconds)
    if not chunked or not completed:
        return {}
    origin = min(chunked)
    return {
        "last_chunked_s": round(max(chunked) - origin, 1),
        "first_completed_s": round(min(completed) - origin, 1),
        "completed_before_last_chunked": sum(1 for c in completed if c < max(chunked)),
        "documents": len(chunked),
    }


def run_split(folder: Path, name: str, work: Path, keep_log: Path | None, runtime: str) -> dict[str, Any]:
    """One `docstream run` of ``folder`` with split ``name``; its figures."""
    state = Path(tempfile.mkdtemp(prefix=f"threads-{name}-", dir=work))
    command = [DOCSTREAM, "run", str(folder), "--out", str(state / "out.jsonl"), "--state-dir", str(state),
               "--timeout", "1800"]
    load = os.getloadavg()[0]
    cpu, started = _children_cpu(), time.perf_counter()
    env = _env({**SPLITS[name], "DOCSTREAM_INFERENCE__RUNTIME": runtime})
    proc = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=1900)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    with sqlite3.connect(state / "docstream.db") as db:
        chunks = int(db.execute("SELECT count(*) FROM chunks WHERE status = 'ok'").fetchone()[0])
    overlap = _overlap(state / "run.log")
    if keep_log is not None:
        shutil.copy(state / "run.log", keep_log)
    shutil.rmtree(state, ignore_errors=True)
    return {"split": name, "chunks": chunks, "seconds": round(seconds, 1), "chunks_per_s": round(chunks / seconds, 2),
            "cpu_s": round(cpu, 1), "load_before": round(load, 2), **overlap}


def raw_model(rounds: int, runtime: str, count: int = 64) -> None:
    """The model alone, in this process: encode ``count`` chunks with 1 and with 2 torch threads, alternating."""
    import torch

    from docstream.models.embedding import load_embedder
    from docstream.settings import InferenceSettings

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from inference import _texts

    embedder = load_embedder(InferenceSettings(device="cpu", runtime=runtime))  # type: ignore[arg-type]
    texts = _texts(count, 170)
    totals: dict[int, list[float]] = {1: [0.0, 0.0], 2: [0.0, 0.0]}
    for round_no in range(rounds):
        for threads in (1, 2) if round_no % 2 == 0 else (2, 1):
            torch.set_num_threads(threads)
            started, cpu = time.perf_counter(), time.process_time()
            embedder.embed(embedder.prepare(texts[:16]))
            for i in range(16, count, 16):
                embedder.embed(embedder.prepare(texts[i:i + 16]))
            totals[threads][0] += time.perf_counter() - started
            totals[threads][1] += time.process_time() - cpu
    for threads, (wall, cpu) in totals.items():
        done = count * rounds
        print(f"raw model ({runtime}), torch {threads} thread(s): {done / wall:6.1f} chunks/s, "
              f"{cpu * 1000 / done:6.1f} CPU ms/chunk "
              f"({rounds} rounds of {count} chunks of ~200 tokens, batch 16)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=160, help="pages in the folder (20-page PDFs)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--splits", default=",".join(SPLITS), help=f"comma-separated, of {', '.join(SPLITS)}")
    parser.add_argument("--keep-log", type=Path, help="copy the first run's run.log here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--raw", type=int, metavar="ROUNDS", help="only the model alone, 1 vs 2 torch threads")
    parser.add_argument("--runtime", default="auto", help="inference.runtime of every run (--raw: fp32 if auto)")
    args = parser.parse_args()
    if args.raw:
        print(cpu_banner(), flush=True)
        raw_model(args.raw, "fp32" if args.runtime == "auto" else args.runtime)
        print(f"load average after: {load_average()}")
        return
    splits = args.splits.split(",")
    unknown = set(splits) - set(SPLITS)
    if unknown:
        parser.error(f"unknown splits: {sorted(unknown)}")
    print(cpu_banner(), flush=True)
    print(f"{'round':>5} {'split':<12} {'chunks':>6} {'s':>7} {'chunks/s':>9} {'CPU s':>7} {'load':>5} "
          f"{'last chunked s':>15} {'1st completed s':>16} {'docs done before last chunked':>30}", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        work = Path(tmp)
        folder = work / "pdfs"
        make_folder(folder, args.pages)
        for round_no in range(1, args.rounds + 1):
            order = splits if round_no % 2 else list(reversed(splits))
            for name in order:
                keep = args.keep_log if args.keep_log is not None and not results else None
                row = {"round": round_no, **run_split(folder, name, work, keep, args.runtime)}
                results.append(row)
                print(f"{round_no:>5} {name:<12} {row['chunks']:>6} {row['seconds']:>7.1f} {row['chunks_per_s']:>9.2f} "
                      f"{row['cpu_s']:>7.1f} {row['load_before']:>5.2f} {row.get('last_chunked_s', '-'):>15} "
                      f"{row.get('first_completed_s', '-'):>16} "
                      f"{row.get('completed_before_last_chunked', '-'):>24}/{row.get('documents', '-')}", flush=True)
    print("mean over rounds:")
    for name in splits:
        rows = [r for r in results if r["split"] == name]
        mean_s = sum(r["seconds"] for r in rows) / len(rows)
        mean_cpu = sum(r["cpu_s"] for r in rows) / len(rows)
        print(f"  {name:<12} {mean_s:7.1f} s  {sum(r['chunks'] for r in rows) / len(rows) / mean_s:6.2f} chunks/s  "
              f"CPU {mean_cpu:6.1f} s")
    print(f"load average after: {load_average()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
