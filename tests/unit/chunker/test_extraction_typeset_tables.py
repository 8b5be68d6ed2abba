"""Tables pdfTeX typeset (booktabs, ``\\hline``, merged cells), found and scored against their LaTeX source.

The PDFs and their source come from pdf-parse-bench (tests/fixtures/typeset/README.md); no one here wrote
either. pdfTeX moves every rule into place with a ``cm`` of its own, which the rule checks once did not follow:
no table of these pages was found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest

from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes
from tests.fixtures.table_truth import Cell, CellMatches, Grid, cell_matches, latex_table, teds

TYPESET = Path(__file__).resolve().parents[2] / "fixtures" / "typeset"
NAMES = ["pdf-parse-bench-093", "pdf-parse-bench-032", "pdf-parse-bench-061"]
SURE = 0.85
"""Each source table's TEDS against the table found for it at least (each scored 0.90 or more when this was written)."""


@pytest.fixture(scope="module")
def counter() -> ModelTokenCounter:
    return load_token_counter(None, "all-MiniLM-L6-v2")


def _truth(name: str) -> list[Grid]:
    entries = json.loads((TYPESET / f"{name}.json").read_text(encoding="utf-8"))
    return [latex_table(e["data"]) for e in entries if e["type"] == "table"]


@pytest.mark.parametrize("name", NAMES)
def test_every_typeset_table_is_a_table_whose_cells_match_its_latex_source(
    name: str, counter: ModelTokenCounter
) -> None:
    truth = _truth(name)
    result = chunk_bytes((TYPESET / f"{name}.pdf").read_bytes(), config=ChunkingConfig(256, 32), counter=counter,
                         max_pages=10, max_bytes=1 << 26)
    found: dict[tuple[float, ...], Grid] = {}
    for chunk in result.chunks:  # a table in several parts: its cells are the union of the parts'
        if chunk.table is not None:
            cells = found.get(tuple(chunk.table.bbox), ())
            found[tuple(chunk.table.bbox)] = (*cells, *(
                Cell(c.row, c.col, c.row_span, c.col_span, c.text) for c in chunk.table.cells if
                Cell(c.row, c.col, c.row_span, c.col_span, c.text) not in cells))
    assert len(found) == len(truth)
    tables = list(found.values())
    for source in truth:
        best = max(tables, key=lambda grid: teds(grid, source))
        assert teds(best, source) >= SURE, (source, best)
        tables.remove(best)
    texts = " ".join(c.text for c in result.chunks if c.kind == "text")
    assert all(cell.text not in texts for grid in found.values() for cell in grid if len(cell.text) > 12)


def test_the_scores_mean_what_they_say() -> None:
    source = latex_table(r"\begin{tabular}{lcc}\toprule \textbf{Model} & \multicolumn{2}{c}{Score} \\ \midrule"
                         r" A & $0.91^{\pm 0.01}$ & 3 \\ \multirow{2}{*}{B} & 0.88 & 4 \\ & 0.87 & 5 \\"
                         r" \bottomrule\end{tabular}")
    assert [(c.row, c.col, c.row_span, c.col_span, c.text) for c in source] == [
        (0, 0, 1, 1, "Model"), (0, 1, 1, 2, "Score"), (1, 0, 1, 1, "A"), (1, 1, 1, 1, "0.91±0.01"),
        (1, 2, 1, 1, "3"), (2, 0, 2, 1, "B"), (2, 1, 1, 1, "0.88"), (2, 2, 1, 1, "4"), (3, 1, 1, 1, "0.87"),
        (3, 2, 1, 1, "5"),
    ]
    assert teds(source, source) == teds(source, source, structure_only=True) == 1.0
    flat = tuple(Cell(c.row, c.col, 1, 1, c.text) for c in source)  # spans lost, text kept
    assert teds(flat, source, structure_only=True) < 1.0 and teds(flat, source) < 1.0
    typo = tuple(Cell(c.row, c.col, c.row_span, c.col_span, c.text.replace("0.88", "0.38")) for c in source)
    assert teds(typo, source, structure_only=True) == 1.0 > teds(typo, source) > 0.95
    assert teds((), source) < 0.1  # nothing found
    assert cell_matches(source, source) == CellMatches(10, 10, 10)
    assert cell_matches(flat, source) == CellMatches(8, 10, 10)  # the two cells with spans are not found whole
    assert cell_matches(typo, source) == CellMatches(9, 10, 10)
    blank = (*source, Cell(4, 0, 1, 1, " "))  # an empty cell counts on neither side
    assert cell_matches(blank, source) == CellMatches(10, 10, 10) and cell_matches((), source) == CellMatches(0, 0, 10)


def test_the_pages_rules_are_placed_where_pdftex_moved_them() -> None:
    from docstream_chunker.extraction import _drawn_paths

    with pymupdf.open(TYPESET / "pdf-parse-bench-093.pdf") as doc:
        page = doc[0]
        widths = {round(box[2] - box[0]) for kind, box in _drawn_paths(page) if kind == "l" and box[1] == box[3]}
        heights = {round(box[1]) for kind, box in _drawn_paths(page) if kind == "l" and box[1] == box[3]}
        assert all(0 < h < page.rect.height for h in heights) and len(heights) >= 12  # 4 tables, 3 rules each
        assert min(widths) > 72
