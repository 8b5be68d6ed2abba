"""Table benchmark: cell-level recovery on generated PDFs of known cells, what the finder misses, what it costs.

    .venv/bin/python benchmarks/tables.py [--seeds 4] [--rounds 6] [--pages 120] [--layout] [--json]

1. Recovery. For each kind of table (tests/fixtures/tables.py: ruled grids drawn cell by cell or laid
   out from HTML with CSS borders, merged cells, Cyrillic and Japanese cells, a 41-row table, tight
   rows, a grid ruled between groups of rows only with each group's label over its rows, the unruled
   kinds: three rules only, row shading, plain columns, and headers of two rows, ruled, booktabs and
   shaded), ``--seeds`` tables of several sizes, one a page, go through the shipped path:
   ``find_page_tables`` on the page's text blocks (both cheap checks, then PyMuPDF's finder, then
   the cells laid out). A cell is recovered when a found cell has its row, column, spans and text
   (whitespace aside); precision is over the cells found, recall over the cells written. The same pages
   go through the finder without the cheap checks ("ungated": what the checks cost in recall) and, with
   ``--layout``, through the finder gated by PyMuPDF's layout model (``pymupdf_layout``), at its price.
   Tables continued over two pages (``make_continued_table_pdf``: 14 rows, 8 on the first page, the header
   drawn again on the second) go through the chunker path (``chunk_bytes``), where the parts are joined: a
   table counts as joined when it comes out as one table of all its rows; its cells are scored the same way.
2. Cost. Milliseconds of ``find_page_tables`` per table page; microseconds per page on text-only
   pages, where the first check ends it.
3. Speed on text-only PDFs: the chunker path (``chunk_bytes``) with ``chunker.tables`` auto and
   off on the chunker benchmark's four generated PDFs and examples/*.pdf, interleaved document by
   document over ``--rounds``; pages/s by wall clock and by CPU time, and auto / off.

The CPU model, its flags and the load average are printed first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402

from docstream.models.tokenization import load_token_counter  # noqa: E402
from docstream_chunker.chunking import ChunkingConfig  # noqa: E402
from docstream_chunker.extraction import block_flags, chunk_bytes, find_page_tables  # noqa: E402
from docstream_chunker.ort_sessions import quiet_sessions  # noqa: E402
from tests.fixtures.documents import make_pdf  # noqa: E402
from tests.fixtures.tables import (  # noqa: E402
    KnownTable,
    TableSpec,
    long_table,
    make_continued_table_pdf,
    make_table_pdf,
    table_rows,
)

sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_banner  # noqa: E402

_FLAGS = block_flags()
_SPANS = ((0, 1, 1, 2), (2, 0, 2, 1))
_TWO_ROWS = (("Name", "Counts", "", "Notes"), ("", "in", "out", ""))
_HEADER_SPANS = ((0, 0, 2, 1), (0, 1, 1, 2), (0, 3, 2, 1))
"""A header of two rows: "Name" and "Notes" span both, "Counts" the two columns "in" and "out" name."""
Cell = tuple[int, int, int, int, str]


def _kinds(seed: int) -> dict[str, TableSpec]:
    """One table of each kind for ``seed`` (sizes vary with it)."""
    rows, columns = 4 + seed % 5, 3 + seed % 3
    caption = f"Table {seed + 1}: figures"
    return {
        "grid": TableSpec(table_rows(seed, rows, columns), caption=caption),
        "grid, merged cells": TableSpec(table_rows(seed, 6, 4), spans=_SPANS, caption=caption),
        "html": TableSpec(table_rows(seed, rows, columns), caption=caption, style="html"),
        "html, merged cells": TableSpec(table_rows(seed, 6, 4), spans=_SPANS, caption=caption, style="html"),
        "grid, Cyrillic": TableSpec(table_rows(seed, rows, columns, script="cyrillic"), caption=f"Таблица {seed + 1}",
                                    script="cyrillic"),
        "grid, Japanese": TableSpec(table_rows(seed, rows, columns, script="japanese"), caption=f"表{seed + 1}: 一覧",
                                    script="japanese"),
        "grid, 41 rows": long_table(seed, 41),
        "grid, tight rows": TableSpec(table_rows(seed, rows + 4, columns), caption=caption, row_height=1.25),
        "rules only (booktabs)": TableSpec(table_rows(seed, rows, columns), caption=caption, style="rules"),
        "shaded rows, no rules": TableSpec(table_rows(seed, rows, columns), caption=caption, style="shaded"),
        "plain columns": TableSpec(table_rows(seed, rows, columns), caption=caption, style="plain"),
        "grid, groups of rows": TableSpec(
            table_rows(seed, 7 + seed % 3, columns + 1), spans=((1, 0, 3, 1), (4, 0, 3 + seed % 3, 1)),
            caption=caption, style="groups"),
        **{f"{name}, two-row header": TableSpec((*_TWO_ROWS, *table_rows(seed, rows + 1, 4)[1:]), spans=_HEADER_SPANS,
                                               caption=caption, style=style)
           for name, style in (("grid", "grid"), ("booktabs", "rules"), ("shaded", "shaded"))},
    }


@dataclass
class _Tally:
    tables: int = 0
    detected: int = 0
    found: int = 0
    written: int = 0
    matched: int = 0
    captions: int = 0
    captions_found: int = 0
    seconds: float = 0.0

    def add(self, known: KnownTable, found: list[set[Cell]], captions: list[str | None], seconds: float) -> None:
        written = {(c.row, c.col, c.row_span, c.col_span, _norm(c.text)) for c in known.cells}
        best = max(found, key=lambda cells: len(cells & written), default=set())
        self.tables += 1
        self.detected += bool(best & written)
        self.found += sum(len(cells) for cells in found)
        self.written += len(written)
        self.matched += len(best & written)
        self.captions += known.caption is not None
        self.captions_found += known.caption is not None and known.caption in captions
        self.seconds += seconds

    def row(self) -> dict[str, float]:
        return {
            "tables": self.tables,
            "detected": self.detected,
            "precision": round(self.matched / self.found, 3) if self.found else 0.0,
            "recall": round(self.matched / self.written, 3) if self.written else 0.0,
            "captions": f"{self.captions_found}/{self.captions}",
            "ms_per_page": round(self.seconds * 1000 / max(self.tables, 1), 1),
        }


def _norm(text: str) -> str:
    return " ".join(text.split())


def _found(page: pymupdf.Page, **options: bool) -> tuple[list[set[Cell]], list[str | None], float]:
    blocks = page.get_text("blocks", sort=True, flags=_FLAGS)
    started = time.perf_counter()
    tables = find_page_tables(page, page.number + 1, blocks, **options)
    seconds = time.perf_counter() - started
    cells = [{(c.row, c.col, c.row_span, c.col_span, _norm(c.text)) for c in t.table.cells} for t in tables]
    return cells, [t.table.caption for t in tables], seconds


def recovery(seeds: int, variants: dict[str, dict[str, bool]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per variant, per kind of table: tables detected, cell precision and recall, captions, ms per page."""
    tallies: dict[str, dict[str, _Tally]] = {v: {} for v in variants}
    for seed in range(seeds):
        kinds = _kinds(seed)
        pdf = make_table_pdf(list(kinds.values()), seed=seed)
        with pymupdf.open(stream=pdf.data, filetype="pdf") as doc:
            for kind, known in zip(kinds, pdf.tables, strict=True):
                for variant, options in variants.items():
                    found, captions, seconds = _found(doc[known.page - 1], **options)
                    tallies[variant].setdefault(kind, _Tally()).add(known, found, captions, seconds)
    return {v: {kind: t.row() for kind, t in by_kind.items()} for v, by_kind in tallies.items()}


_CONTINUED = {
    "grid": ("grid", "latin"), "grid, Cyrillic": ("grid", "cyrillic"), "grid, Japanese": ("grid", "japanese"),
    "booktabs": ("rules", "latin"), "booktabs, Cyrillic": ("rules", "cyrillic"), "shaded rows": ("shaded", "latin"),
    "plain columns": ("plain", "latin"),
}
"""The continued tables' kinds: a style and a script each."""


def continued(seeds: int) -> dict[str, dict[str, Any]]:
    """Per kind, tables of 14 rows over two pages (8 on the first, the header drawn again on the second) through the
    chunker path (``chunk_bytes``): those that come out as one table of all 14 rows, and their cells' precision and
    recall against the table as written (the repeated header counted once)."""
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    rows: dict[str, dict[str, Any]] = {}
    for kind, (style, script) in _CONTINUED.items():
        joined, tally = 0, _Tally()
        for seed in range(seeds):
            spec = TableSpec(table_rows(seed, 14, 4, script=script), caption=f"Table {seed + 1}: continued",
                             style=style, script=script)
            pdf = make_continued_table_pdf(spec, 8, seed=seed)
            started = time.perf_counter()
            result = chunk_bytes(pdf.data, config=ChunkingConfig(), counter=counter, max_pages=10, max_bytes=1 << 28)
            seconds = time.perf_counter() - started
            parts = [c.table for c in result.chunks if c.table is not None]
            joined += bool(parts) and {t.rows for t in parts} == {14} and {t.page for t in parts} == {1}
            cells = {(c.row, c.col, c.row_span, c.col_span, _norm(c.text)) for t in parts if t.page == 1
                     for c in t.cells}
            tally.add(pdf.tables[0], [cells], [t.caption for t in parts], seconds)
        rows[kind] = {**tally.row(), "joined": joined}
    return rows


def _text_documents(total_pages: int) -> dict[str, bytes]:
    per_doc = max(1, total_pages // 4)
    documents = {
        "generated 1 (outline)": make_pdf(per_doc, seed=1, toc=True).data,
        "generated 2 (two columns)": make_pdf(per_doc, seed=2, two_column_every=2).data,
        "generated 3 (non-ASCII)": make_pdf(per_doc, seed=3, non_ascii=True).data,
        "generated 4 (non-ASCII, columns)": make_pdf(per_doc, seed=4, non_ascii=True, two_column_every=3).data,
    }
    documents |= {f"examples/{p.name}": p.read_bytes() for p in sorted((ROOT / "examples").glob("*.pdf"))}
    return documents


def text_page_cost(documents: Iterable[bytes], rounds: int = 5) -> float:
    """Microseconds of ``find_page_tables`` per text-only page (after the page's blocks are extracted)."""
    spent, pages = 0.0, 0
    for data in documents:
        with pymupdf.open(stream=data, filetype="pdf") as doc:
            for page in doc:
                blocks = page.get_text("blocks", sort=True, flags=_FLAGS)
                height = page.rect.height  # extract_pages has it already
                started = time.process_time()
                for _ in range(rounds):
                    find_page_tables(page, page.number + 1, blocks, height=height)
                spent += time.process_time() - started
                pages += rounds
    return spent * 1e6 / pages


def speed(documents: dict[str, bytes], rounds: int) -> dict[str, float]:
    """chunk_bytes pages/s with chunker.tables auto and off, in turns document by document."""
    counter = load_token_counter(None, "all-MiniLM-L6-v2")

    def run(data: bytes, tables: str) -> int:
        return chunk_bytes(data, config=ChunkingConfig(), counter=counter, max_pages=5000, max_bytes=1 << 31,
                           tables=tables).page_count  # type: ignore[arg-type]

    for data in documents.values():  # warm fonts and the tokenizer's cache on both paths
        run(data, "auto")
        run(data, "off")
    wall = {"auto": 0.0, "off": 0.0}
    cpu = {"auto": 0.0, "off": 0.0}
    pages = 0
    for round_number in range(rounds):
        for data in documents.values():
            for mode in ("auto", "off") if round_number % 2 == 0 else ("off", "auto"):
                started, started_cpu = time.perf_counter(), time.process_time()
                done = run(data, mode)
                wall[mode] += time.perf_counter() - started
                cpu[mode] += time.process_time() - started_cpu
            pages += done
    return {
        "pages": pages // rounds,
        "rounds": rounds,
        "auto_pages_per_s": round(pages / wall["auto"], 1),
        "off_pages_per_s": round(pages / wall["off"], 1),
        "auto_pages_per_cpu_s": round(pages / cpu["auto"], 1),
        "off_pages_per_cpu_s": round(pages / cpu["off"], 1),
        "ratio": round(wall["off"] / wall["auto"], 3),
        "cpu_ratio": round(cpu["off"] / cpu["auto"], 3),
    }


def _print_recovery(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    for variant, by_kind in results.items():
        print(f"\n{variant}")
        print(f"{'table kind':24s} {'tables':>6s} {'found':>6s} {'precision':>9s} {'recall':>7s} {'captions':>8s} "
              f"{'ms/page':>8s}")
        for kind, row in by_kind.items():
            print(f"{kind:24s} {row['tables']:6d} {row['detected']:6d} {row['precision']:9.3f} {row['recall']:7.3f} "
                  f"{row['captions']:>8s} {row['ms_per_page']:8.1f}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=4, help="tables of each kind")
    parser.add_argument("--rounds", type=int, default=6, help="speed rounds")
    parser.add_argument("--pages", type=int, default=120, help="pages of the four generated text-only PDFs")
    parser.add_argument("--layout", action="store_true", help="also run the finder gated by the layout model")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    banner = cpu_banner()
    print(banner.splitlines()[0], flush=True)
    quiet_sessions()  # the layout model's sessions as the chunker makes them: no spin-waiting
    variants: dict[str, dict[str, bool]] = {"shipped (both checks, then the lines finder or the layout model)": {},
                                            "ungated (the lines finder on every page)": {"gated": False}}
    if args.layout:
        variants["layout model (pymupdf_layout gates the finder)"] = {"gated": False, "layout": True}
    found = recovery(args.seeds, variants)
    over_pages = continued(args.seeds)
    documents = _text_documents(args.pages)
    cost = text_page_cost(documents.values())
    timed = speed(documents, args.rounds)
    if args.json:
        print(json.dumps({"recovery": found, "continued": over_pages, "text_page_us": round(cost, 1), "speed": timed},
                         indent=2))
        return 0
    _print_recovery(found)
    print("\ncontinued over two pages (the chunker path; ms a document)")
    print(f"{'table kind':24s} {'tables':>6s} {'joined':>6s} {'precision':>9s} {'recall':>7s} {'captions':>8s} "
          f"{'ms/doc':>8s}")
    for kind, row in over_pages.items():
        print(f"{kind:24s} {row['tables']:6d} {row['joined']:6d} {row['precision']:9.3f} {row['recall']:7.3f} "
              f"{row['captions']:>8s} {row['ms_per_page']:8.1f}")
    print(f"\nfind_page_tables on text-only pages: {cost:.1f} us/page (CPU)")
    print(f"\nchunk_bytes on text-only PDFs ({timed['pages']} pages x {timed['rounds']} rounds, "
          f"{len(documents)} documents):")
    print(f"  tables auto: {timed['auto_pages_per_s']} pages/s wall, {timed['auto_pages_per_cpu_s']} per CPU s")
    print(f"  tables off:  {timed['off_pages_per_s']} pages/s wall, {timed['off_pages_per_cpu_s']} per CPU s")
    print(f"  auto / off: {timed['ratio']} wall, {timed['cpu_ratio']} CPU")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
