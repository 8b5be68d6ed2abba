"""Chunker benchmark: pages/s against raw PyMuPDF, and peak memory on a 1,000-page PDF.

    .venv/bin/python benchmarks/chunker.py [--pages 240] [--rounds 3] [--big-pages 1000] [--verdicts] [--json]
    .venv/bin/python benchmarks/chunker.py --against main [--pages 240] [--rounds 6]

1. Speed. The same generated PDFs (text, headings, two-column pages, non-ASCII words) go
   through raw ``page.get_text()`` and through the chunker's path (``chunk_bytes``: open,
   extract in reading order, headings, paragraph/sentence/word packing, token counts with the
   model tokenizer), round after round in one process; pages/s are totals over the rounds,
   the ratio is chunker / raw (target >= 0.7), by wall clock and by this process's CPU time
   (the steadier figure on a shared machine). The child-process extractor the service uses
   (``ProcessExtractor``: object-store read, hash check, pickling back) is timed too.
   With ``--verdicts``, the page verdict's cost is timed on the same PDFs, interleaved too:
   ``page_facts(page, text=...)`` + ``assess_page`` per page, right after the page's text was
   extracted (as ``extract_pages`` will call them), against the chunker path, in CPU microseconds per page;
   the overhead is their ratio (target <= 5 %) and the projected chunker pages/s with it.
2. Memory. A fresh process loads the tokenizer (its "idle" RSS), then chunks a 1,000-page PDF;
   peak RSS (ru_maxrss) above idle is the figure (target < 300 MB).
3. The chunker service (``--service embedded,kafka``): 20-page generated PDFs are submitted (not
   timed: object store, rows, DocumentSubmitted) to a fresh topic prefix; then the service's own
   consume loop (``build_chunker``, as ``docstream run`` runs it: intake topic → extraction child
   → rows → ChunkCreated produced → offsets committed) runs on a thread while the chunks topic
   is read. Pages/s over the window from the first document's last chunk to the last one's (the
   loop start and the extraction child's spawn left out), and CPU ms per page of this process
   (the service, and the reader of the chunks topic) and its extraction child over the same
   window (not the broker's, nor Cassandra's). The embedded Kafka broker + SQLite, and real Kafka +
   Cassandra (127.0.0.1:19092 / 127.0.0.1:19042, keyspace docstream_bench).

4. Old against new (``--against REF``, only this): the chunker path of git ``REF`` (its
   libs/common and services/chunker, from ``git archive``) and of this tree, each in its own process over the same
   generated PDFs, round by round in turns so both see the same machine load; this tree's side
   runs with ``chunker.ocr`` as configured (verdicts on every page, OCR where they ask; normal
   PDFs need none). Pages/s by wall clock and by CPU time, and new / old.

The CPU model and its flags, and the load average, are printed first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402

from docstream.ids import content_sha256  # noqa: E402
from docstream.logging import configure_logging  # noqa: E402
from docstream.models.tokenization import load_token_counter  # noqa: E402
from docstream.objectstore import ObjectStore  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream_chunker.chunking import ChunkingConfig  # noqa: E402
from docstream_chunker.extraction import block_flags, chunk_bytes, page_facts  # noqa: E402
from docstream_chunker.page_quality import assess_page  # noqa: E402
from tests.fixtures.documents import make_pdf  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_banner, load_average  # noqa: E402

MODEL_ID = "all-MiniLM-L6-v2"
_MEMORY_CHILD = """
import resource, sys, time
import psutil
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes
from docstream.models.tokenization import load_token_counter
counter = load_token_counter(None, "all-MiniLM-L6-v2")
counter.count(["warm", "up"])
idle = psutil.Process().memory_info().rss
data = open(sys.argv[1], "rb").read()
started = time.perf_counter()
result = chunk_bytes(data, config=ChunkingConfig(), counter=counter, max_pages=5000, max_bytes=1 << 31)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(idle, peak, result.page_count, len(result.chunks), seconds)
"""


_AGAINST_CHILD = """
import inspect, json, sys, time
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes
from docstream.models.tokenization import load_token_counter
counter = load_token_counter(None, "all-MiniLM-L6-v2")
documents = [open(path, "rb").read() for path in sys.argv[1:]]
options = {}
if "ocr" in inspect.signature(chunk_bytes).parameters:
    from docstream_chunker.extraction import PageOcr
    from docstream.settings import Settings
    options["ocr"] = PageOcr(Settings().chunker.ocr)
def run():
    return sum(chunk_bytes(d, config=ChunkingConfig(), counter=counter, max_pages=5000, max_bytes=1 << 31,
                           **options).page_count for d in documents)
run()
print("ready", flush=True)
for _ in sys.stdin:
    started, cpu = time.perf_counter(), time.process_time()
    pages = run()
    print(json.dumps([pages, time.perf_counter() - started, time.process_time() - cpu]), flush=True)
"""


def _table_documents(total_pages: int) -> list[bytes]:
    """The table-heavy PDFs of ``compare.py --corpus tables`` (tables on seven of every ten pages, every kind)."""
    from compare import make_folder

    with tempfile.TemporaryDirectory() as tmp:
        make_folder(Path(tmp), total_pages, "tables")
        return [path.read_bytes() for path in sorted(Path(tmp).glob("*.pdf"))]


def against(ref: str, total_pages: int, rounds: int, *, tables: bool = False) -> dict[str, Any]:
    """The chunker path of git ``ref`` and of this tree, in turns on the same PDFs (one process each): the
    generated text-only ones, or with ``tables`` the table-heavy ones."""
    import os

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = folder / "old"
        old.mkdir()
        # the library, and the chunker service where the tree has one (its code left libs/common later)
        service = subprocess.run(["git", "cat-file", "-e", f"{ref}:services/chunker"], cwd=ROOT).returncode == 0
        archive = subprocess.run(["git", "archive", ref, "libs/common", *(["services/chunker"] if service else [])],
                                 cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        paths = []
        for i, data in enumerate(_table_documents(total_pages) if tables else _speed_documents(total_pages)):
            paths.append(folder / f"doc-{i}.pdf")
            paths[-1].write_bytes(data)
        sides = {}
        for name, top in (("old", old), ("new", ROOT)):
            paths_of = [str(top / "libs" / "common"), str(top / "services" / "chunker")]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths_of, os.environ.get("PYTHONPATH", "")])}
            sides[name] = subprocess.Popen([sys.executable, "-c", _AGAINST_CHILD, *map(str, paths)], env=env,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            for proc in sides.values():
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            totals = {name: [0, 0.0, 0.0] for name in sides}
            for round_number in range(rounds):
                order = ("old", "new") if round_number % 2 == 0 else ("new", "old")
                for name in order:
                    proc = sides[name]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    pages, wall, cpu = json.loads(proc.stdout.readline())
                    totals[name] = [totals[name][0] + pages, totals[name][1] + wall, totals[name][2] + cpu]
        finally:
            for proc in sides.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(30)
    result: dict[str, Any] = {"ref": ref, "pages": totals["new"][0] // rounds, "rounds": rounds}
    for name, (pages, wall, cpu) in totals.items():
        result[f"{name}_pages_per_s"] = round(pages / wall, 1)
        result[f"{name}_pages_per_cpu_s"] = round(pages / cpu, 1)
    result["ratio"] = round(totals["old"][1] / totals["new"][1], 3)
    result["cpu_ratio"] = round(totals["old"][2] / totals["new"][2], 3)
    return result


def _raw(documents: list[bytes]) -> int:
    pages = 0
    for data in documents:
        doc = pymupdf.open(stream=data, filetype="pdf")
        for page in doc:
            page.get_text()
            pages += 1
        doc.close()
    return pages


def _chunker(documents: list[bytes], counter: Any) -> int:
    pages = 0
    for data in documents:
        result = chunk_bytes(data, config=ChunkingConfig(), counter=counter, max_pages=5000, max_bytes=1 << 31)
        pages += result.page_count
    return pages


def speed(total_pages: int, rounds: int) -> dict[str, float]:
    """Raw get_text() and chunker pages/s on the same PDFs, interleaved round by round."""
    documents = _speed_documents(total_pages)
    counter = load_token_counter(None, MODEL_ID)
    _raw(documents[:1])  # warm both paths (fonts, tokenizer) before timing
    _chunker(documents[:1], counter)
    wall = {"raw": 0.0, "chunker": 0.0}
    cpu = {"raw": 0.0, "chunker": 0.0}
    pages = 0
    for _ in range(rounds):  # alternate document by document, so both paths see the same machine load
        for document in documents:
            for name in ("raw", "chunker"):
                started, started_cpu = time.perf_counter(), time.process_time()
                done_pages = _raw([document]) if name == "raw" else _chunker([document], counter)
                wall[name] += time.perf_counter() - started
                cpu[name] += time.process_time() - started_cpu
            pages += done_pages
    pages //= rounds
    done = pages * rounds
    return {
        "pages": pages,
        "rounds": rounds,
        "raw_pages_per_s": round(done / wall["raw"], 1),
        "chunker_pages_per_s": round(done / wall["chunker"], 1),
        "ratio": round(wall["raw"] / wall["chunker"], 3),
        "raw_pages_per_cpu_s": round(done / cpu["raw"], 1),
        "chunker_pages_per_cpu_s": round(done / cpu["chunker"], 1),
        "cpu_ratio": round(cpu["raw"] / cpu["chunker"], 3),
        "child_process_pages_per_s": round(_child_process(documents), 1),
    }


def _speed_documents(total_pages: int) -> list[bytes]:
    per_doc = max(1, total_pages // 4)
    return [
        make_pdf(per_doc, seed=1, toc=True).data,
        make_pdf(per_doc, seed=2, two_column_every=2).data,
        make_pdf(per_doc, seed=3, non_ascii=True).data,
        make_pdf(per_doc, seed=4, non_ascii=True, two_column_every=3).data,
    ]


def _verdict_cpu(data: bytes) -> tuple[float, int]:
    """CPU seconds of page_facts + assess_page over a document's pages, each right after its text.

    As ``extract_pages`` is to call them: on the loaded page whose blocks (image blocks kept)
    and text were just extracted, with both. The extraction itself is not counted.
    """
    flags = block_flags()
    doc = pymupdf.open(stream=data, filetype="pdf")
    spent = 0.0
    for number in range(doc.page_count):
        page = doc.load_page(number)
        blocks = page.get_text("blocks", sort=True, flags=flags)
        text = "\n\n".join(" ".join(b[4].split()) for b in blocks if b[6] == 0)
        started = time.process_time()
        assess_page(page_facts(page, text=text, blocks=blocks), languages=("eng",))
        spent += time.process_time() - started
    pages = doc.page_count
    doc.close()
    return spent, pages


def verdicts(total_pages: int, rounds: int) -> dict[str, float]:
    """CPU per page of the page verdict against the chunker path, on the speed test's PDFs."""
    documents = _speed_documents(total_pages)
    counter = load_token_counter(None, MODEL_ID)
    _chunker(documents[:1], counter)
    _verdict_cpu(documents[0])
    chunker_cpu = verdict_cpu = 0.0
    pages = 0
    for _ in range(rounds):
        for document in documents:
            started = time.process_time()
            done = _chunker([document], counter)
            chunker_cpu += time.process_time() - started
            spent, _ = _verdict_cpu(document)
            verdict_cpu += spent
            pages += done
    chunker_us, verdict_us = chunker_cpu * 1e6 / pages, verdict_cpu * 1e6 / pages
    return {
        "pages": pages,
        "chunker_cpu_us_per_page": round(chunker_us, 1),
        "verdict_cpu_us_per_page": round(verdict_us, 1),
        "overhead": round(verdict_us / chunker_us, 4),
        "chunker_pages_per_cpu_s": round(1e6 / chunker_us, 1),
        "with_verdicts_pages_per_cpu_s": round(1e6 / (chunker_us + verdict_us), 1),
    }


def _child_process(documents: list[bytes]) -> float:
    """Pages/s through ProcessExtractor (the service's path), after the child has started."""
    from docstream_chunker.worker import ChunkRequest, ExtractorSettings, ProcessExtractor

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings().with_overrides(object_store={"url": folder}, log={"level": "WARNING"})
        objects = ObjectStore(settings.object_store)
        requests = []
        for data in documents:
            sha = content_sha256(data)
            requests.append(ChunkRequest(objects.put(data, sha), sha, 256, 32, "bench.pdf"))
        with ProcessExtractor(ExtractorSettings.of(settings.chunker, settings.object_store, settings.inference,
                                                   settings.log)) as extractor:
            extractor.extract(requests[0])
            started = time.perf_counter()
            pages = sum(extractor.extract(r).page_count for r in requests)
            return pages / (time.perf_counter() - started)


def memory(pages: int) -> dict[str, float]:
    """Peak RSS above idle of a fresh process chunking a ``pages``-page PDF."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.pdf"
        # distinct text on every page: 100 generated pages, then more generated in blocks of 100
        doc = pymupdf.open()
        for block in range((pages + 99) // 100):
            part = pymupdf.open(stream=make_pdf(min(100, pages - 100 * block), seed=1000 + block).data, filetype="pdf")
            doc.insert_pdf(part)
            part.close()
        doc.save(path, garbage=3, deflate=True)
        doc.close()
        size = path.stat().st_size
        out = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, str(path)], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.split()
    idle, peak, page_count, chunks, seconds = int(out[0]), int(out[1]), int(out[2]), int(out[3]), float(out[4])
    return {
        "pages": page_count,
        "pdf_mb": round(size / 2**20, 1),
        "chunks": chunks,
        "seconds": round(seconds, 2),
        "idle_rss_mb": round(idle / 2**20, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "peak_above_idle_mb": round((peak - idle) / 2**20, 1),
    }


@contextlib.contextmanager
def _service_stack(stack: str, folder: Path) -> Iterator[tuple[Settings, int | None]]:
    """The settings of a service run on ``stack``, and the embedded broker's process id (None on real Kafka)."""
    from docstream_cli.embedded_kafka import EmbeddedKafka

    prefix = f"benchc-{uuid.uuid4().hex[:10]}"
    overrides: dict[str, dict[str, Any]] = {
        "kafka": {"topic_prefix": prefix, "bootstrap_servers": "127.0.0.1:19092"},
        "object_store": {"url": str(folder / "objects")}, "log": {"level": "WARNING"},
    }
    broker_pid: int | None = None
    with contextlib.ExitStack() as exits:
        if stack == "embedded":
            broker = exits.enter_context(EmbeddedKafka(folder / "broker"))
            broker_pid = broker.pid
            overrides["kafka"].update(bootstrap_servers=broker.bootstrap_servers, partitions=2)
            overrides["store"] = {"backend": "sqlite", "sqlite_path": str(folder / "bench.db")}
        else:
            overrides["store"] = {"backend": "cassandra"}
            overrides["cassandra"] = {"contact_points": ["127.0.0.1"], "port": 19042, "keyspace": "docstream_bench"}
        yield Settings().with_overrides(**overrides), broker_pid


def _cpu_with_children(broker_pid: int | None) -> float:
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in (me, *me.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.pid == broker_pid:  # the embedded broker is a child too: count only the chunker's side
                continue
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def service(stack: str, docs: int) -> dict[str, float]:
    """Pages/s of the chunker service's loop on ``stack`` (embedded or kafka), documents submitted first."""
    from confluent_kafka import Consumer, TopicPartition

    from docstream.avro import AvroSerde
    from docstream.kafka.admin import ensure_topics
    from docstream.kafka.clients import ReliableProducer
    from docstream.metrics import Metrics
    from docstream.records import ChunkCreated
    from docstream.store import open_store
    from docstream.topics import Topics
    from docstream_chunker.main import build_chunker
    from docstream_ingest.intake import IntakeClients, IntakeContext, submit_paths
    from docstream_ingest.request import JobRequest

    with tempfile.TemporaryDirectory() as tmp, _service_stack(stack, Path(tmp)) as (settings, broker_pid):
        folder = Path(tmp) / "pdfs"
        folder.mkdir()
        for i in range(docs):
            (folder / f"doc-{i:03d}.pdf").write_bytes(make_pdf(20, seed=100 + i, two_column_every=3).data)
        topics = Topics(settings.kafka.topic_prefix)
        ensure_topics(settings.kafka, topics)
        store = open_store(settings.store, settings.cassandra)
        store.migrate()
        serde = AvroSerde(settings.kafka)
        producer = ReliableProducer(settings.kafka, client_id="bench-chunker")
        try:
            intake = IntakeContext(kafka=settings.kafka, ingest=settings.ingest, chunker=settings.chunker,
                                   tasks=settings.tasks, fairness=settings.fairness, reducer=settings.reducer,
                                   object_store=settings.object_store)
            submitted = submit_paths([folder], JobRequest(), IntakeClients(intake, store, producer, serde))
        finally:
            producer.close()
        reader = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": f"r-{uuid.uuid4()}",
                           "enable.auto.commit": False})
        reader.assign([TopicPartition(topics.chunks, p, -2) for p in range(settings.kafka.partitions)])
        chunker = build_chunker(settings, store=store, metrics=Metrics(), static_assignment=True)
        runner = threading.Thread(target=chunker.run, name="bench-chunker")
        seen: dict[str, int] = {}
        done: list[tuple[float, float, str]] = []  # (time, CPU, doc_id) of each document's last chunk
        pages = {d.doc_id: 20 for d in submitted.documents}
        runner.start()
        try:
            deadline = time.monotonic() + 600
            while len(done) < len(pages):
                if time.monotonic() > deadline or not runner.is_alive():
                    raise RuntimeError(f"chunker: {len(done)}/{len(pages)} documents")
                for msg in reader.consume(num_messages=500, timeout=0.05):
                    if msg.error() is not None:
                        continue
                    record = serde.deserialize(msg.value(), topics.chunks)
                    if isinstance(record, ChunkCreated):
                        seen[record.doc_id] = seen.get(record.doc_id, 0) + 1
                        if seen[record.doc_id] == record.chunk_count:
                            done.append((time.perf_counter(), _cpu_with_children(broker_pid), record.doc_id))
        finally:
            chunker.stop()
            runner.join(60)
            chunker.close()
            reader.close()
            store.close()
    window = done[-1][0] - done[0][0]
    window_pages = sum(pages[doc_id] for _, _, doc_id in done[1:])
    return {"stack": stack, "documents": len(done), "pages": sum(pages.values()), "window_s": round(window, 2),
            "pages_per_s": round(window_pages / window, 1),
            "cpu_ms_per_page": round((done[-1][1] - done[0][1]) * 1000 / window_pages, 2),
            "chunks": sum(seen.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=240, help="pages in the speed test (4 PDFs)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the speed test")
    parser.add_argument("--big-pages", type=int, default=1000, help="pages of the memory test PDF (0: skip)")
    parser.add_argument("--service", default="embedded,kafka",
                        help="service run stacks, comma-separated: embedded, kafka ('': skip)")
    parser.add_argument("--service-docs", type=int, default=100, help="20-page PDFs of the service run")
    parser.add_argument("--verdicts", action="store_true", help="also time the page verdict (page_facts + assess_page)")
    parser.add_argument("--against", metavar="REF", help="only: the chunker path of git REF against this tree's")
    parser.add_argument("--table-heavy", action="store_true",
                        help="with --against: compare.py's table-heavy PDFs instead of the text-only ones")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    configure_logging(level="WARNING", fmt="console")
    if not args.json:
        print(cpu_banner(), flush=True)
    if args.against:
        row = against(args.against, args.pages, args.rounds, tables=args.table_heavy)
        if args.json:
            print(json.dumps(row))
            return
        print(f"pages: {row['pages']} x {row['rounds']} rounds   wall-clock pages/s   CPU-time pages/s")
        print(f"chunker at {row['ref']}:  {row['old_pages_per_s']:10.1f}   {row['old_pages_per_cpu_s']:10.1f}")
        print(f"chunker, this tree:  {row['new_pages_per_s']:10.1f}   {row['new_pages_per_cpu_s']:10.1f}")
        print(f"new / old:           {row['ratio']:10.3f}   {row['cpu_ratio']:10.3f}")
        print(f"load average after: {load_average()}")
        return
    results: dict[str, Any] = {"speed": speed(args.pages, args.rounds)}
    results["verdicts"] = verdicts(args.pages, args.rounds) if args.verdicts else None
    results["memory"] = memory(args.big_pages) if args.big_pages else None
    results["service"] = [service(stack, args.service_docs) for stack in args.service.split(",") if stack]
    if args.json:
        print(json.dumps(results))
        return
    s, m = results["speed"], results["memory"]
    print(f"pages: {s['pages']} x {s['rounds']} rounds   wall-clock pages/s   CPU-time pages/s")
    print(f"raw get_text():          {s['raw_pages_per_s']:10.1f}   {s['raw_pages_per_cpu_s']:10.1f}")
    print(f"chunker (in process):    {s['chunker_pages_per_s']:10.1f}   {s['chunker_pages_per_cpu_s']:10.1f}")
    print(f"ratio (target >= 0.7):   {s['ratio']:10.2f}   {s['cpu_ratio']:10.2f}")
    print(f"chunker (child process): {s['child_process_pages_per_s']:10.1f}   (wall; object store read + IPC included)")
    if (v := results["verdicts"]) is not None:
        print(f"page verdict: {v['verdict_cpu_us_per_page']} CPU us/page against the chunker's "
              f"{v['chunker_cpu_us_per_page']}: overhead {v['overhead']:.1%} (target <= 5 %), "
              f"{v['chunker_pages_per_cpu_s']} -> {v['with_verdicts_pages_per_cpu_s']} pages per CPU-s")
    if m is not None:
        print(
            f"{m['pages']}-page PDF ({m['pdf_mb']} MB, {m['chunks']} chunks, {m['seconds']} s): "
            f"idle {m['idle_rss_mb']} MB, peak {m['peak_rss_mb']} MB, "
            f"above idle {m['peak_above_idle_mb']} MB (target < 300)"
        )
    for row in results["service"]:
        name = "embedded Kafka + SQLite" if row["stack"] == "embedded" else "Kafka + Cassandra"
        print(f"chunker service, {name}: {row['pages_per_s']:.1f} pages/s, {row['cpu_ms_per_page']:.2f} CPU ms/page "
              f"(process + extraction child, not the broker; {row['documents']} documents, {row['pages']} pages, "
              f"{row['chunks']} chunks, window {row['window_s']} s)")
    print(f"load average after: {load_average()}")

if __name__ == "__main__":
    main()
