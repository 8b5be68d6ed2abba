"""Chunker benchmark: pages/s against raw PyMuPDF, and peak memory on a 1,000-page PDF.

    .venv/bin/python benchmarks/chunker.py [--pages 240] [--rounds 3] [--big-pages 1000] [--json]

1. Speed. The same generated PDFs (text, headings, two-column pages, non-ASCII words) go
   through raw ``page.get_text()`` and through the chunker's path (``chunk_bytes``: open,
   extract in reading order, headings, paragraph/sentence/word packing, token counts with the
   model tokenizer), round after round in one process; pages/s are totals over the rounds,
   the ratio is chunker / raw (target >= 0.7), by wall clock and by this process's CPU time
   (the steadier figure on a shared machine). The child-process extractor the service uses
   (``ProcessExtractor``: object-store read, hash check, pickling back) is timed too.
2. Memory. A fresh process loads the tokenizer (its "idle" RSS), then chunks a 1,000-page PDF;
   peak RSS (ru_maxrss) above idle is the figure (target < 300 MB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402

from docstream.chunking import ChunkingConfig  # noqa: E402
from docstream.extraction import chunk_bytes  # noqa: E402
from docstream.ids import content_sha256  # noqa: E402
from docstream.objectstore import ObjectStore  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream.tokenization import load_token_counter  # noqa: E402
from tests.fixtures.documents import make_pdf  # noqa: E402

MODEL_ID = "all-MiniLM-L6-v2"
_MEMORY_CHILD = """
import resource, sys, time
import psutil
from docstream.chunking import ChunkingConfig
from docstream.extraction import chunk_bytes
from docstream.tokenization import load_token_counter
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
    per_doc = max(1, total_pages // 4)
    documents = [
        make_pdf(per_doc, seed=1, toc=True).data,
        make_pdf(per_doc, seed=2, two_column_every=2).data,
        make_pdf(per_doc, seed=3, non_ascii=True).data,
        make_pdf(per_doc, seed=4, non_ascii=True, two_column_every=3).data,
    ]
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


def _child_process(documents: list[bytes]) -> float:
    """Pages/s through ProcessExtractor (the service's path), after the child has started."""
    from docstream_chunker.worker import ChunkRequest, ProcessExtractor

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings().with_overrides(object_store={"url": folder}, log={"level": "WARNING"})
        objects = ObjectStore(settings.object_store)
        requests = []
        for data in documents:
            sha = content_sha256(data)
            requests.append(ChunkRequest(objects.put(data, sha), sha, 256, 32, "bench.pdf"))
        with ProcessExtractor(settings) as extractor:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=240, help="pages in the speed test (4 PDFs)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the speed test")
    parser.add_argument("--big-pages", type=int, default=1000, help="pages of the memory test PDF")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = {"speed": speed(args.pages, args.rounds), "memory": memory(args.big_pages)}
    if args.json:
        print(json.dumps(results))
        return
    s, m = results["speed"], results["memory"]
    print(f"pages: {s['pages']} x {s['rounds']} rounds   wall-clock pages/s   CPU-time pages/s")
    print(f"raw get_text():          {s['raw_pages_per_s']:10.1f}   {s['raw_pages_per_cpu_s']:10.1f}")
    print(f"chunker (in process):    {s['chunker_pages_per_s']:10.1f}   {s['chunker_pages_per_cpu_s']:10.1f}")
    print(f"ratio (target >= 0.7):   {s['ratio']:10.2f}   {s['cpu_ratio']:10.2f}")
    print(f"chunker (child process): {s['child_process_pages_per_s']:10.1f}   (wall; object store read + IPC included)")
    print(
        f"{m['pages']}-page PDF ({m['pdf_mb']} MB, {m['chunks']} chunks, {m['seconds']} s): "
        f"idle {m['idle_rss_mb']} MB, peak {m['peak_rss_mb']} MB, "
        f"above idle {m['peak_above_idle_mb']} MB (target < 300)"
    )

if __name__ == "__main__":
    main()
