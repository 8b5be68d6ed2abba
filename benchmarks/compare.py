"""Side by side on one folder of generated PDFs: a plain script, bf16, Ray Data, `docstream run`, the real stack.

Variants, each in its own process tree, one after the other, in one run (the ratios are what
count on a machine shared with other work):

* (a) plain: benchmarks/plain_pipeline.py, PyMuPDF → docstream chunker → SentenceTransformer.encode, fp32;
* (b) plain under ``torch.autocast("cpu", bfloat16)`` (emulated, slower, where the CPU lacks avx512_bf16/AMX);
* (c) Ray Data (skipped unless ``ray`` is installed: ``pip install '.[bench]'``);
* (d) ``docstream run`` (the embedded Kafka broker + SQLite, one process), fresh state dir;
* (f) ``docstream run`` with ``chunker.ocr.mode = off``: against (d), what `auto` OCR costs on
  born-digital PDFs (nothing, when no page's layer is unusable);
* (e) the real stack: ``docstream chunker|inference|reducer`` as separate processes on Kafka +
  Cassandra (deploy/local), driven by ``docstream submit --wait`` (skipped when
  ``deploy/local/stack status`` does not show both running).

``docstream run`` uses the runtime it measures at start (``inference.runtime=auto``, cached per
machine; docs/inference.md); the model alone, candidate by candidate: benchmarks/runtimes.py.

Every time is wall clock of the whole variant, process start (imports, model load) to the last
embedding stored. Peak RSS is the sum over the variant's process tree, sampled every 0.2 s.

    .venv/bin/python benchmarks/compare.py                 # ~300 pages
    .venv/bin/python benchmarks/compare.py --pages 100 --only a,d
    .venv/bin/python benchmarks/compare.py --scale 10      # also 10x the documents: time(10x)/(10*time(1x))
    .venv/bin/python benchmarks/compare.py --sweep 4,8,16,32,64   # raw-model batch-size sweep only
    .venv/bin/python benchmarks/compare.py --corpus scripts --fp32 --only a,d,f
        # born-digital PDFs in ten scripts (tests/fixtures/scripts.py) and examples/*.pdf; the
        # runtime forced to fp32 in docstream run, as in the plain script (a CPU where bf16 pays
        # must not hide a slower pipeline)
    .venv/bin/python benchmarks/compare.py --corpus tables --fp32 --only a,d --rounds 2
        # table-heavy PDFs: tables on most pages (ruled, booktabs, shaded, HTML-drawn, long, continued,
        # a header of two rows; Latin, Cyrillic and Japanese cells, tests/fixtures/tables.py) and the
        # pdfTeX-typeset pages of tests/fixtures/typeset
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
DOCSTREAM = str(BIN / "docstream")
PAGES_PER_DOC = 20


@dataclass
class Result:
    """One variant's outcome."""

    name: str
    chunks: int | None = None
    seconds: float | None = None
    peak_rss: int | None = None
    note: str = ""


class _RssSampler:
    """Samples the summed RSS of a process and its descendants until stopped."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self._pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                root = psutil.Process(self._pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            total = 0
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    env["DOCSTREAM_LOG__LEVEL"] = "WARNING"
    env["DOCSTREAM_LOG__FORMAT"] = "json"
    env.update(extra)
    return env


def _timed(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[float, int, str]:
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = _RssSampler(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        sampler.stop()
        raise RuntimeError(f"timed out after {timeout} s: {' '.join(command)}\n{out[-2000:]}") from None
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(command)}\n{out[-2000:]}")
    return seconds, peak, out


def make_folder(folder: Path, pages: int, corpus: str = "latin") -> None:
    """``pages`` pages of generated PDFs, ``PAGES_PER_DOC`` pages each.

    ``corpus="scripts"``: born-digital PDFs in the ten scripts of tests/fixtures/scripts.py, in
    turn, and the PDFs of examples/ (English), until ``pages`` pages. ``corpus="tables"``: table-heavy PDFs
    (``_tables_folder``).
    """
    from tests.fixtures.documents import make_pdf

    folder.mkdir(parents=True, exist_ok=True)
    if corpus == "scripts":
        _scripts_folder(folder, pages)
        return
    if corpus == "tables":
        _tables_folder(folder, pages)
        return
    index = 0
    while pages > 0:
        count = min(PAGES_PER_DOC, pages)
        (folder / f"doc-{index:04d}.pdf").write_bytes(make_pdf(count, seed=index).data)
        pages -= count
        index += 1


def _scripts_folder(folder: Path, pages: int) -> None:
    import pymupdf

    from tests.fixtures.scripts import SCRIPTS, make_script_pdf

    for example in sorted((ROOT / "examples").glob("*.pdf")):
        shutil.copy(example, folder / example.name)
        with pymupdf.open(example) as doc:
            pages -= doc.page_count
    index = 0
    while pages > 0:
        count = min(PAGES_PER_DOC // 2, pages)
        script = SCRIPTS[index % len(SCRIPTS)]
        (folder / f"{script}-{index:04d}.pdf").write_bytes(make_script_pdf(script, count, seed=index).data)
        pages -= count
        index += 1


def _tables_folder(folder: Path, pages: int) -> None:
    """The pdfTeX-typeset table pages of tests/fixtures/typeset, then documents of ten pages, tables on seven of
    them (one continued over two pages), the tables' kinds and scripts in turn, until ``pages`` pages."""
    from dataclasses import replace

    import pymupdf

    from tests.fixtures.tables import TableSpec, long_table, make_continued_table_pdf, make_mixed_pdf, table_rows

    for typeset in sorted((ROOT / "tests" / "fixtures" / "typeset").glob("*.pdf")):
        shutil.copy(typeset, folder / typeset.name)
        with pymupdf.open(typeset) as doc:
            pages -= doc.page_count
    scripts = ("latin", "cyrillic", "japanese")
    styles = ("grid", "rules", "shaded", "html")
    two_rows = (("Name", "Counts", "", "Notes"), ("", "in", "out", ""))
    index = 0
    while pages > 0:
        script, style = scripts[index % len(scripts)], styles[index % len(styles)]
        spec = TableSpec(table_rows(index, 8, 4, script=script), caption=f"Table {index + 1}: Figures", style=style,
                         script=script)
        banded = TableSpec((*two_rows, *table_rows(index, 8, 4)[1:]), spans=((0, 0, 2, 1), (0, 1, 1, 2), (0, 3, 2, 1)),
                           caption=f"Table {index + 1}b: Two header rows", style="rules")
        parts = [make_mixed_pdf(spec, pages=3, seed=index).data, make_mixed_pdf(banded, pages=3, seed=index).data,
                 make_continued_table_pdf(long_table(index, rows=24), 12, seed=index).data,
                 make_mixed_pdf(replace(spec, caption=None), pages=2, seed=index + 1).data]
        with pymupdf.open() as doc:
            for data in parts:
                with pymupdf.open(stream=data, filetype="pdf") as part:
                    doc.insert_pdf(part)
            (folder / f"tables-{index:04d}.pdf").write_bytes(doc.tobytes(garbage=3, deflate=True))
            pages -= doc.page_count
        index += 1


def run_plain(folder: Path, *, bf16: bool, work: Path) -> Result:
    command = [sys.executable, str(ROOT / "benchmarks" / "plain_pipeline.py"), str(folder)]
    command += ["--bf16"] if bf16 else []
    seconds, peak, out = _timed(command, _clean_env(), work, 1800)
    info = json.loads(out.strip().splitlines()[-1])
    note = f"encode {info['embed_s']} s"
    if bf16 and not info["native_bf16"]:
        note += "; no avx512_bf16/amx: autocast emulated (the service measures it and keeps fp32)"
    return Result("b plain bf16 autocast" if bf16 else "a plain fp32 script", info["chunks"], seconds, peak, note)


FP32: dict[str, str] = {}
"""Extra settings of every docstream variant (``--fp32``: ``DOCSTREAM_INFERENCE__RUNTIME=fp32``)."""


def run_docstream(folder: Path, *, work: Path, ocr: str = "auto") -> Result:
    state = Path(tempfile.mkdtemp(prefix="state-", dir=work))
    out_file = state / "out.jsonl"
    env = _clean_env(DOCSTREAM_CHUNKER__OCR__MODE=ocr, **FP32)
    command = [DOCSTREAM, "run", str(folder), "--out", str(out_file), "--state-dir", str(state), "--timeout", "1800"]
    seconds, peak, _ = _timed(command, env, work, 1900)
    with sqlite3.connect(state / "docstream.db") as db:
        chunks = int(db.execute("SELECT count(*) FROM chunks WHERE status = 'ok'").fetchone()[0])
    shutil.rmtree(state, ignore_errors=True)
    name = "d docstream run" if ocr == "auto" else f"f docstream run, ocr {ocr}"
    return Result(name + (" (fp32)" if FP32 else ""), chunks, seconds, peak)


def _stack_running() -> str | None:
    try:
        status = subprocess.run([str(ROOT / "deploy" / "local" / "stack"), "status"], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"deploy/local/stack status failed: {exc}"
    lines = status.stdout.splitlines()
    for name in ("kafka", "cassandra"):
        if not any(line.split()[:2] == [name, "running"] for line in lines if line.split()):
            return f"{name} not running (deploy/local/stack status)"
    return None


def run_stack(folder: Path, *, work: Path) -> Result:
    why = _stack_running()
    if why is not None:
        return Result("e real stack (Kafka+Cassandra)", note=f"skipped: {why}; start it with make stack-up")
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    # a keyspace of its own: in a store that holds the folder's documents already (an earlier round), each is a new
    # version of its source, whose chunks reuse the results of the version before (docs/intake.md "Versions of a
    # document"), and the round would time no model
    keyspace = f"docstream_{prefix}"
    root = Path(tempfile.mkdtemp(prefix="stack-", dir=work))
    env = _clean_env(
        DOCSTREAM_KAFKA__TOPIC_PREFIX=prefix, DOCSTREAM_STORE__BACKEND="cassandra", DOCSTREAM_CASSANDRA__PORT="19042",
        DOCSTREAM_CASSANDRA__KEYSPACE=keyspace, DOCSTREAM_OBJECT_STORE__URL=str(root / "objects"),
        DOCSTREAM_REDUCER__APP_ID=f"{prefix}-reducer", DOCSTREAM_REDUCER__DATA_DIR=str(root / "reducer"),
        DOCSTREAM_KAFKA__CLIENT_OPTIONS=json.dumps({"compression.type": "gzip"}),
    )
    # topics and schema first (not timed), so services never start on a missing topic
    prepare = "from docstream.settings import load_settings; from docstream_ingest.main import prepare_intake; " \
              "prepare_intake(load_settings())"
    subprocess.run([sys.executable, "-c", prepare], env=env, cwd=work, check=True, capture_output=True, timeout=300)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100000)"], cwd=work)
    services = []
    started = time.perf_counter()
    sampler = _RssSampler(holder.pid)
    try:
        for name in ("chunker", "inference", "reducer"):
            log = (root / f"{name}.log").open("wb")
            proc = subprocess.Popen([DOCSTREAM, name], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
            services.append(proc)
        sums = _ServiceRss([s.pid for s in services])
        submit = subprocess.run([DOCSTREAM, "submit", str(folder), "--wait", "--timeout", "1800"], cwd=work, env=env,
                                capture_output=True, text=True, timeout=1900)
        seconds = time.perf_counter() - started
        peak = sums.stop()
        if submit.returncode != 0:
            raise RuntimeError(f"submit exit {submit.returncode}: {submit.stdout[-1500:]}{submit.stderr[-1500:]}")
        chunks = _stack_chunks(env, submit.stdout)
    finally:
        sampler.stop()
        for proc in services:
            proc.terminate()
        for proc in services:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        holder.kill()
        holder.wait()
        drop = ("from cassandra.cluster import Cluster; import sys; c = Cluster(['127.0.0.1'], port=19042); "
                "c.connect().execute(f'DROP KEYSPACE IF EXISTS {sys.argv[1]}', timeout=120); c.shutdown()")
        subprocess.run([sys.executable, "-c", drop, keyspace], cwd=work, capture_output=True, timeout=300, check=False)
    return Result("e real stack (Kafka+Cassandra)", chunks, seconds, peak,
                  "3 service processes; includes their start and model load")


class _ServiceRss(_RssSampler):
    """Sums RSS over several independent process trees."""

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids
        super().__init__(pids[0])

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            total = 0
            for pid in self._pids:
                try:
                    root = psutil.Process(pid)
                    for proc in [root, *root.children(recursive=True)]:
                        total += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            self.peak = max(self.peak, total)


def _stack_chunks(env: dict[str, str], submit_out: str) -> int | None:
    job_id = next((line.split()[1].rstrip(":") for line in submit_out.splitlines()
                   if line.startswith("job ") and "documents in total" in line), None)
    if job_id is None:
        return None
    code = (
        "import sys; from docstream.settings import load_settings; from docstream.store import open_store\n"
        "s = load_settings(); st = open_store(s.store, s.cassandra)\n"
        "print(sum(st.count_chunks(d.doc_id, 'all-MiniLM-L6-v2') for d in st.iter_job_documents(sys.argv[1])))\n"
        "st.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, job_id], env=env, capture_output=True, text=True, timeout=120)
    try:
        return int(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def run_ray(folder: Path, *, work: Path) -> Result:
    if importlib.util.find_spec("ray") is None:
        return Result("c Ray Data", note="skipped: ray not installed (pip install '.[bench]')")
    # the script's own deadline comes first, so it shuts Ray down itself: a killed driver leaves Ray's agents behind
    command = [sys.executable, str(ROOT / "benchmarks" / "ray_pipeline.py"), str(folder), "--timeout", "1700"]
    seconds, peak, out = _timed(command, _clean_env(RAY_USAGE_STATS_ENABLED="0"), work, 1800)
    last = next((line for line in reversed(out.strip().splitlines()) if line.startswith("{")), None)
    if last is None:
        raise RuntimeError(f"no JSON line from ray_pipeline.py\n{out[-2000:]}")
    info = json.loads(last)
    note = (f"ray {info['ray']}, init {info['init_s']} s, torch {info['torch_threads']} threads; "
            f"RSS: driver + {info['ray_processes']} Ray processes (GCS, raylet, workers; shared object-store "
            f"pages count once per process)")
    if info["outside_tree"]:
        note += f"; {info['outside_tree']} Ray processes outside the tree not counted"
    return Result("c Ray Data", info["chunks"], seconds, peak, note)


def _fmt_rss(value: int | None) -> str:
    return "-" if not value else f"{value / 2**20:,.0f} MiB"


def print_table(results: list[Result], pages: int) -> None:
    base = next((r for r in results if r.name.startswith("a ") and r.seconds), None)
    print(f"\n{pages} pages, load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    print(f"{'variant':<34}{'chunks':>8}{'seconds':>10}{'chunks/s':>10}{'vs (a)':>8}{'peak RSS':>12}  note")
    for r in results:
        if r.seconds is None:
            print(f"{r.name:<34}{'-':>8}{'-':>10}{'-':>10}{'-':>8}{'-':>12}  {r.note}")
            continue
        rate = (r.chunks or 0) / r.seconds
        ratio = f"{rate / (base.chunks / base.seconds):.2f}" if base and base.chunks else "-"
        print(f"{r.name:<34}{r.chunks if r.chunks is not None else '?':>8}{r.seconds:>10.1f}{rate:>10.1f}{ratio:>8}"
              f"{_fmt_rss(r.peak_rss):>12}  {r.note}")
    auto = next((r for r in results if r.name.startswith("d ") and r.seconds), None)
    off = next((r for r in results if r.name.startswith("f ") and r.seconds), None)
    if auto and off and auto.seconds and off.seconds:
        print(f"OCR auto against off: {auto.seconds / off.seconds:.3f}x the time "
              f"({auto.seconds:.1f} s / {off.seconds:.1f} s)")


def _medians(rounds: list[list[Result]]) -> list[Result]:
    """Each variant's result of median time over the rounds (the first round's failures as they were)."""
    out = []
    for first in rounds[0]:
        runs = sorted((r for run in rounds for r in run if r.name == first.name and r.seconds),
                      key=lambda r: r.seconds or 0.0)
        out.append(runs[len(runs) // 2] if runs else first)
    return out


def run_all(pages: int, only: set[str], work: Path, corpus: str = "latin") -> list[Result]:
    folder = work / f"pdfs-{pages}"
    make_folder(folder, pages, corpus)
    results: list[Result] = []
    steps = [
        ("a", lambda: run_plain(folder, bf16=False, work=work)),
        ("b", lambda: run_plain(folder, bf16=True, work=work)),
        ("c", lambda: run_ray(folder, work=work)),
        ("d", lambda: run_docstream(folder, work=work)),
        ("f", lambda: run_docstream(folder, work=work, ocr="off")),
        ("e", lambda: run_stack(folder, work=work)),
    ]
    for key, step in steps:
        if key not in only:
            continue
        print(f"running ({key}) on {pages} pages, load {os.getloadavg()[0]:.2f} ...", flush=True)
        try:
            results.append(step())
        except (RuntimeError, subprocess.SubprocessError, OSError, sqlite3.Error) as exc:
            results.append(Result(f"{key} (failed)", note=str(exc).splitlines()[0][:160]))
            print(str(exc)[-2000:], file=sys.stderr)
        done = results[-1]
        print(f"  ({key}) {done.chunks} chunks in {done.seconds and round(done.seconds, 1)} s {done.note}", flush=True)
    return results


def batch_sweep(sizes: list[int], count: int) -> None:
    """Raw model (fp32, this CPU) chunks/s at each batch size on ``count`` chunks of about 250 tokens."""
    import torch
    from sentence_transformers import SentenceTransformer

    from docstream.models.files import resolve_model_path
    from tests.fixtures.documents import paragraphs

    model = SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)
    tokenizer = model.tokenizer
    texts = []
    seed = 0
    while len(texts) < count:
        words: list[str] = []
        while len(tokenizer.tokenize(" ".join(words))) < 250:
            words.extend(" ".join(paragraphs(seed, 1)).split())
            seed += 1
        ids = tokenizer.tokenize(" ".join(words))[:250]
        texts.append(tokenizer.convert_tokens_to_string(ids))
    lengths = [len(tokenizer.tokenize(t)) for t in texts]
    print(f"batch sweep: {count} chunks of {min(lengths)}-{max(lengths)} tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")
    with torch.inference_mode():
        model.encode(texts[:8], batch_size=8, show_progress_bar=False)
        for size in sizes:
            started = time.perf_counter()
            model.encode(texts, batch_size=size, show_progress_bar=False)
            seconds = time.perf_counter() - started
            load = os.getloadavg()[0]
            print(f"  batch {size:>3}: {count / seconds:6.1f} chunks/s ({seconds:.1f} s), load {load:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300, help="total pages of the folder (20-page PDFs)")
    parser.add_argument("--scale", type=int, default=0, help="also run N x the pages and print time(Nx)/(N*time(1x))")
    parser.add_argument("--only", default="a,b,c,d,e", help="comma-separated variants to run (f: d with OCR off)")
    parser.add_argument("--corpus", choices=("latin", "scripts", "tables"), default="latin",
                        help="latin: generated English PDFs; scripts: ten scripts' PDFs and examples/; tables: "
                             "table-heavy PDFs")
    parser.add_argument("--fp32", action="store_true", help="force docstream's runtime to fp32, as the plain script")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the variants this many times in turn (a, d, f, a, d, f, ...) and report each one's "
                             "median: drift on a shared machine then hits every variant alike")
    parser.add_argument("--sweep", default="", help="only the raw-model batch sweep, e.g. 4,8,16,32,64")
    parser.add_argument("--sweep-chunks", type=int, default=128, help="chunks per batch size in the sweep")
    args = parser.parse_args()
    if args.sweep:
        batch_sweep([int(x) for x in args.sweep.split(",")], args.sweep_chunks)
        return
    only = set(args.only.split(","))
    if args.fp32:
        FP32["DOCSTREAM_INFERENCE__RUNTIME"] = "fp32"
    from machine import cpu_line

    print(cpu_line(), f"corpus {args.corpus}, docstream runtime {'fp32 (forced)' if args.fp32 else 'auto'}")
    with tempfile.TemporaryDirectory(prefix="docstream-bench-") as tmp:
        work = Path(tmp)
        rounds = [run_all(args.pages, only, work, args.corpus) for _ in range(max(1, args.rounds))]
        results = _medians(rounds)
        if len(rounds) > 1:
            for name in (r.name for r in results):
                times = [r.seconds for run in rounds for r in run if r.name == name and r.seconds]
                print(f"  {name}: {', '.join(f'{t:.1f}' for t in times)} s")
        print_table(results, args.pages)
        if args.scale > 1:
            scaled = run_all(args.pages * args.scale, only, work, args.corpus)
            print_table(scaled, args.pages * args.scale)
            print(f"\nscaling {args.scale}x: time({args.scale}x) / ({args.scale} x time(1x))")
            small = {r.name: r for r in results}
            for r in scaled:
                one = small.get(r.name)
                if r.seconds and one and one.seconds:
                    print(f"  {r.name:<34}{r.seconds / (args.scale * one.seconds):.2f}")


if __name__ == "__main__":
    main()
