"""OCR beside the model: the model's throughput while Tesseract OCRs in a child process, by the child's niceness.

    .venv/bin/python benchmarks/ocr_contention.py [--seconds 20] [--nice 0,10,19] [--fp32]

What ``docstream run`` and a chunker beside an inference process do on one machine: the model
encodes ~230-token chunks with every core (``torch.get_num_threads()``) while the chunker's
extraction child OCRs scanned pages. The child here is a spawned process that calls
``docstream_chunker.worker.lower_priority(nice)`` (what the extraction child does with
``chunker.extraction_nice``) and then OCRs pages through ``docstream_chunker.ocr`` in a loop.

Printed per niceness: the model's chunks/s alone and while the OCR runs (alternating windows of
``--seconds``, solo first, so drift hits both), their ratio, and the OCR's pages/s meanwhile.
The CPU model, its flags and the load come first. The model runs in fp32 (``--fp32`` is the
default and the only precision here: a CPU where bf16 pays must not hide the contention).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import cpu_line  # noqa: E402


def _ocr_loop(conn: Connection, nice: int, scan: bytes) -> None:
    import pymupdf

    from docstream.settings import OcrSettings
    from docstream_chunker.ocr import open_engine
    from docstream_chunker.worker import lower_priority

    lower_priority(nice)
    engine = open_engine(OcrSettings())
    doc = pymupdf.open(stream=scan, filetype="pdf")
    conn.send("ready")
    pages = 0
    started = time.perf_counter()
    while not conn.poll(0):
        engine.recognize(doc[pages % doc.page_count], languages=["eng"], dpi=200)
        pages += 1
    conn.send(pages / (time.perf_counter() - started))


def _rate(model: object, texts: list[str], seconds: float) -> float:
    encoded, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        model.encode(texts, batch_size=16, show_progress_bar=False)  # type: ignore[attr-defined]
        encoded += len(texts)
    return encoded / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measuring window")
    parser.add_argument("--nice", default="0,10,19", help="niceness levels of the OCR child")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from docstream.models.files import resolve_model_path
    from tests.fixtures.documents import make_scanned_copy, paragraphs

    print(cpu_line())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, fp32")
    model = SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)
    texts = [" ".join(paragraphs(seed, 3))[:1200] for seed in range(32)]  # ~230 tokens each
    scan = make_scanned_copy(4, seed=3).data
    context = multiprocessing.get_context("spawn")
    rows = []
    with torch.inference_mode():
        _rate(model, texts, 3.0)  # warm up
        for nice in (int(n) for n in args.nice.split(",")):
            solo = _rate(model, texts, args.seconds)
            parent, child = context.Pipe()
            process = context.Process(target=_ocr_loop, args=(child, nice, scan), daemon=True)
            process.start()
            parent.recv()
            during = _rate(model, texts, args.seconds)
            parent.send("stop")
            ocr_pages_s = float(parent.recv())
            process.join(30)
            row = {"nice": nice, "solo_chunks_s": round(solo, 1), "with_ocr_chunks_s": round(during, 1),
                   "ratio": round(during / solo, 3), "ocr_pages_s": round(ocr_pages_s, 3)}
            rows.append(row)
            print(f"OCR child at nice {nice:2d}: model {solo:6.1f} chunks/s alone, {during:6.1f} with OCR "
                  f"({during / solo:.2f}x); OCR {ocr_pages_s:.2f} pages/s meanwhile")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_line(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
