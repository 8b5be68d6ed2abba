"""OCR engines compared: character error rate and pages/s on generated scans (docs/chunking.md "OCR engines").

    .venv/bin/python benchmarks/ocr.py [--pages 12] [--dpi 200,300] [--engines tesseract,rapidocr] [--json]

The scans come from ``tests.fixtures.documents.make_scanned_pdf``: pages of known text drawn in
several fonts and sizes (English: helv, tiro, cour, DejaVu Sans at 10, 12, 14 pt; Russian: DejaVu
Sans, Serif, Mono; Chinese: the built-in china-s), rendered grey at 300 dpi and kept as images
only. Each engine reads every page through ``docstream_chunker.ocr`` (``open_engine`` +
``recognize``) at each OCR resolution; the CER is ``docstream_chunker.text_layout.character_error_rate``
against the drawn text (Chinese without spaces). Pages/s by wall clock and by this process's
CPU time (Tesseract inside MuPDF runs on the calling thread; ONNX Runtime uses every core).
A language an engine does not read is left out of its rows.

The CPU model and the load average are printed first: on a shared machine, read the CPU figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402
from machine import cpu_banner, load_average  # noqa: E402

from docstream.errors import ConfigError  # noqa: E402
from docstream.settings import OcrSettings  # noqa: E402
from docstream_chunker.ocr import open_engine  # noqa: E402
from docstream_chunker.text_layout import character_error_rate  # noqa: E402
from tests.fixtures.documents import ScannedPdf, make_scanned_pdf  # noqa: E402

_SCRIPTS = {
    "eng": {"fonts": ("helv", "tiro", "cour", "dejavu-sans"), "spaces": True},
    "rus": {"fonts": ("dejavu-sans", "dejavu-serif", "dejavu-mono"), "spaces": True},
    "chi_sim": {"fonts": ("china-s",), "spaces": False},
}


@dataclass(frozen=True)
class Row:
    """One engine on one language's scans at one OCR resolution."""

    engine: str
    language: str
    dpi: int
    pages: int
    cer_mean: float
    cer_max: float
    pages_per_s_wall: float
    pages_per_s_cpu: float


def _scans(language: str, pages: int) -> ScannedPdf:
    fonts = _SCRIPTS[language]["fonts"]
    return make_scanned_pdf(pages, seed=18, language=language, fonts=fonts, sizes=(10, 12, 14), dpi=300)


def _measure(engine_name: str, language: str, scans: ScannedPdf, dpi: int) -> Row | None:
    try:
        engine = open_engine(OcrSettings(engine=engine_name, languages=[language]))  # type: ignore[arg-type]
    except ConfigError as exc:
        print(f"  {engine_name} {language}: left out ({exc.message})", flush=True)
        return None
    doc = pymupdf.open(stream=scans.data)
    rates: list[float] = []
    wall = cpu = 0.0
    for page, reference in zip(doc, scans.page_texts, strict=True):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = engine.recognize(page, languages=[language], dpi=dpi)
        wall += time.perf_counter() - started
        cpu += time.process_time() - started_cpu
        rates.append(character_error_rate(result.text, reference, spaces=bool(_SCRIPTS[language]["spaces"])))
    doc.close()
    return Row(
        engine_name, language, dpi, len(rates), statistics.fmean(rates), max(rates),
        len(rates) / wall, len(rates) / cpu,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=12, help="scanned pages per language")
    parser.add_argument("--dpi", default="200,300", help="OCR resolutions, comma-separated")
    parser.add_argument("--engines", default="tesseract,rapidocr")
    parser.add_argument("--languages", default="eng,rus,chi_sim")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    print(cpu_banner(), flush=True)
    rows: list[Row] = []
    for language in args.languages.split(","):
        scans = _scans(language, args.pages)
        for engine_name in args.engines.split(","):
            for dpi in (int(d) for d in args.dpi.split(",")):
                row = _measure(engine_name, language, scans, dpi)
                if row is not None:
                    rows.append(row)
                    print(f"  {row.engine} {row.language} {row.dpi} dpi: CER {row.cer_mean:.2%} "
                          f"(max {row.cer_max:.2%}), {row.pages_per_s_wall:.2f} pages/s", flush=True)
    print(f"\nload average after: {load_average()}")
    print("| engine | language | OCR dpi | pages | CER mean | CER worst page | pages/s (wall) | pages/s (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.engine} | {r.language} | {r.dpi} | {r.pages} | {r.cer_mean:.2%} | {r.cer_max:.2%} "
              f"| {r.pages_per_s_wall:.2f} | {r.pages_per_s_cpu:.2f} |")
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
