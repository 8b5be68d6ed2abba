"""The fixed cost of `docstream run`: a 1-page run's wall time minus model load and model time.

In one run: a warm-up ``docstream run`` (discarded: page cache, and the chunk texts for (a)), then
``--runs`` times (default 3) (a), (b), (a) again, one after the other; each run's model load and
model time are the mean of the (a) before and the (a) after its (b), so that a load average that
moves during the benchmark (a shared machine) weighs on both sides alike:

* (a) the plain model load a user's script pays, in a fresh process: ``import torch,
  sentence_transformers`` and ``SentenceTransformer(<bundled model>)``, then the model time:
  ``encode`` of the 1-page document's chunks (the texts docstream stored), first call, fp32, as
  the plain script (benchmarks/plain_pipeline.py) runs it;
* (b) ``docstream run`` on a 1-page PDF (tests/fixtures/documents.py ``make_pdf(1, seed=...)``)
  in a fresh ``--state-dir``: its wall time from spawn to exit, and where each second went,
  from the timestamps of the JSON lines in ``<state-dir>/run.log`` (``run_phase`` events of the
  runner and the services' own events: ``model_loaded``, ``document_chunked``, ...).

fixed cost = wall(b) - model load(a) - model time(a). The CPU model and flags and the load
average come first; each run's figures follow, then the medians and the breakdown of the median
run: the milestones in time order, each row the seconds since the one before (what the run was
waiting for), beside the spans that ran in parallel (model load, reducer start).

    .venv/bin/python benchmarks/fixed_cost.py [--runs 3] [--seed 11] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOCSTREAM = str(Path(sys.executable).with_name("docstream"))

_PLAIN_LOAD = r"""
import json, sys, time
texts = json.load(open(sys.argv[1]))
t0 = time.perf_counter()
import torch, sentence_transformers
from docstream.models.files import resolve_model_path
model = sentence_transformers.SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)
t1 = time.perf_counter()
with torch.inference_mode():
    model.encode(texts, batch_size=16, show_progress_bar=False)
t2 = time.perf_counter()
with torch.inference_mode():
    model.encode(texts, batch_size=16, show_progress_bar=False)
t3 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "encode_s": t2 - t1, "warm_encode_s": t3 - t2, "chunks": len(texts)}))
"""

Match = Callable[[dict[str, Any]], bool]


def _event(name: str, **fields: str) -> Match:
    return lambda e: e.get("event") == name and all(e.get(k) == v for k, v in fields.items())


def _phase(name: str) -> Match:
    return _event("run_phase", phase=name)


# Milestones of a run, in the order a sequential run reaches them; the report sorts them by time.
MILESTONES: list[tuple[str, Match]] = [
    ("run entered (process start + imports)", _phase("run_started")),
    ("broker started", _phase("broker_started")),
    ("topics created", _phase("topics_created")),
    ("store migrated", _phase("store_migrated")),
    ("documents submitted", _phase("submitted")),
    ("services starting", _phase("services_starting")),
    ("chunker consuming", _event("loop_started", service="chunker")),
    ("first chunk produced", _event("document_chunked")),
    ("model load started", _phase("model_load_started")),
    ("model loaded", _phase("model_loaded")),
    ("inference consuming", _event("partitions_assigned", logger="docstream_inference.pipeline")),
    ("reducer starting", _phase("reducer_starting")),
    ("reducer ready", _event("reducer_state_recovered")),
    ("services started", _phase("services_started")),
    ("first chunk embedded (seen by the run)", _phase("first_chunk_embedded")),
    ("document completed (reducer)", _event("document_completed")),
    ("all documents completed (seen by the run)", _phase("documents_completed")),
    ("services stopped", _phase("services_stopped")),
    ("results exported", _phase("exported")),
    ("broker stopped", _phase("broker_stopped")),
    ("run returned", _phase("run_finished")),
]
SPANS = [
    ("model load (docstream)", "model load started", "model loaded"),
    ("reducer start to ready", "reducer starting", "reducer ready"),
    ("drain and stop", "all documents completed (seen by the run)", "services stopped"),
]


@dataclass
class RunFigures:
    """One (a)+(b) pair."""

    wall_s: float
    load_s: float
    encode_s: float
    warm_encode_s: float
    chunks: int
    milestones: dict[str, float] = field(default_factory=dict)  # label → seconds since spawn

    @property
    def fixed_s(self) -> float:
        return self.wall_s - self.load_s - self.encode_s


def cpu_summary() -> tuple[str, str]:
    """The CPU model name and its flags, from /proc/cpuinfo."""
    model, flags = platform.processor() or "unknown", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("unknown", "", "x86_64"):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.strip()
    except OSError:
        pass
    return model, flags


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}


def _timestamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def read_milestones(log: Path, spawned_at: float) -> dict[str, float]:
    """Seconds from spawn to the first event of each milestone in ``log``."""
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip().startswith("{")]
    found: dict[str, float] = {}
    for label, match in MILESTONES:
        for event in events:
            if match(event):
                found[label] = _timestamp(event) - spawned_at
                break
    return found


def run_docstream(pdf: Path, state: Path) -> tuple[float, dict[str, float]]:
    """``docstream run PDF`` in a fresh state dir: wall seconds (spawn to exit) and its milestones."""
    shutil.rmtree(state, ignore_errors=True)
    command = [DOCSTREAM, "run", str(pdf), "--state-dir", str(state), "--out", str(state / "results.jsonl")]
    spawned_at, started = time.time(), time.perf_counter()
    proc = subprocess.run(command, cwd=state.parent, env=_env(), capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"docstream run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    milestones = read_milestones(state / "run.log", spawned_at)
    milestones["process exited"] = wall
    return wall, milestones


def chunk_texts(state: Path) -> list[str]:
    """The chunk texts the run stored, in order."""
    with sqlite3.connect(state / "docstream.db") as conn:
        return [row[0] for row in conn.execute("SELECT text FROM chunks ORDER BY doc_id, chunk_index")]


def plain_model(texts: list[str], work: Path) -> dict[str, Any]:
    """(a) in a fresh process: import + load, then encode of ``texts``."""
    path = work / "texts.json"
    path.write_text(json.dumps(texts))
    proc = subprocess.run([sys.executable, "-c", _PLAIN_LOAD, str(path)], env=_env(), capture_output=True,
                          text=True, timeout=600, check=True)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def breakdown(figures: RunFigures) -> list[str]:
    """Markdown rows: each milestone in time order with the seconds since the previous one."""
    rows = ["| # | milestone | at s | + s |", "|---:|---|---:|---:|"]
    previous = 0.0
    ordered = sorted(figures.milestones.items(), key=lambda kv: kv[1])
    for i, (label, at) in enumerate(ordered, 1):
        rows.append(f"| {i} | {label} | {at:.2f} | {at - previous:.2f} |")
        previous = at
    rows.append("")
    rows.append("| span (in parallel with the rows above) | from s | to s | s |")
    rows.append("|---|---:|---:|---:|")
    for name, start, end in SPANS:
        if start in figures.milestones and end in figures.milestones:
            a, b = figures.milestones[start], figures.milestones[end]
            rows.append(f"| {name} | {a:.2f} | {b:.2f} | {b - a:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="(a)+(b) pairs; medians are reported")
    parser.add_argument("--seed", type=int, default=11, help="seed of the generated 1-page PDF")
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: a temp folder)")
    args = parser.parse_args()

    from tests.fixtures.documents import make_pdf

    model, flags = cpu_summary()
    print(f"cpu: {model} ({os.cpu_count()} logical CPUs)")
    print(f"flags: {flags}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="docstream-fixed-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    pdf = work / "one-page.pdf"
    pdf.write_bytes(make_pdf(1, seed=args.seed).data)
    runs: list[RunFigures] = []
    try:
        run_docstream(pdf, work / "state-warm-up")
        texts = chunk_texts(work / "state-warm-up")
        before = plain_model(texts, work)
        for i in range(args.runs):
            state = work / f"state-{i}"
            wall, milestones = run_docstream(pdf, state)
            after = plain_model(texts, work)
            plain = {key: (before[key] + after[key]) / 2 for key in ("load_s", "encode_s", "warm_encode_s")}
            before = after
            figures = RunFigures(wall, plain["load_s"], plain["encode_s"], plain["warm_encode_s"], len(texts),
                                 milestones)
            runs.append(figures)
            print(f"run {i + 1}: wall {wall:.2f} s, plain model load {figures.load_s:.2f} s, model time "
                  f"{figures.encode_s:.2f} s ({figures.chunks} chunks; warm {figures.warm_encode_s:.2f} s) → "
                  f"fixed cost {figures.fixed_s:.2f} s; load average {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    median = sorted(runs, key=lambda r: r.fixed_s)[len(runs) // 2]
    print()
    med = {name: statistics.median(getattr(r, name) for r in runs) for name in ("wall_s", "load_s", "encode_s",
                                                                                 "fixed_s")}
    print(f"median of {len(runs)}: wall {med['wall_s']:.2f} s, model load {med['load_s']:.2f} s, model time "
          f"{med['encode_s']:.2f} s, fixed cost {med['fixed_s']:.2f} s (target ≤ 2 s)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(f"breakdown of the median run (wall {median.wall_s:.2f} s, fixed cost {median.fixed_s:.2f} s):")
    print("\n".join(breakdown(median)))


if __name__ == "__main__":
    main()
