"""`docstream run` over PDFs with ruled tables: each table comes out as table chunks, Markdown and cells.

The documents (tests.fixtures.tables, drawn by PyMuPDF, cells known) run through the whole pipeline
on the embedded stack with the default settings (``chunker.tables`` ``auto``): a short table with
a caption between two paragraphs, a long one split into several chunks, a Cyrillic one, two
without a vertical rule: booktabs (three horizontal rules) and shaded rows, and one continued on
the next page under its header drawn again. The
results file (``--out ... --chunks``, what ``docstream results --chunks`` writes) holds each table
chunk's ``kind``, its Markdown text with the header row, and its cells with spans, page and bbox;
``docstream results <job> --chunks`` shows the same.

Its runs start the Kafka of their state dir, not the session's shared broker (``shared_broker_env``):
tests/run.sh runs this file beside the chaos scenarios, which stop and restart the stack's Kafka.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.services import DOCSTREAM, bare_env
from tests.fixtures.tables import (
    TableSpec,
    long_table,
    make_continued_table_pdf,
    make_mixed_pdf,
    make_table_pdf,
    table_rows,
)

pytestmark = pytest.mark.e2e

SPANS = ((0, 1, 1, 2), (2, 0, 2, 1))


def _chunks(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    (doc,) = [r for r in records if r["record"] == "document" and Path(r["filename"]).name == name]
    assert doc["status"] == "completed", doc
    return sorted((r for r in records if r["record"] == "chunk" and r["doc_id"] == doc["doc_id"]),
                  key=lambda r: r["chunk_index"])


def _cells(table: dict[str, Any]) -> set[tuple[int, int, int, int, str]]:
    return {(c["row"], c["col"], c["row_span"], c["col_span"], c["text"]) for c in table["cells"]}


def test_run_keeps_tables_as_tables_with_their_header_markdown_and_cells(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    short = TableSpec(table_rows(7, 6, 4), spans=SPANS, caption="Table 1: Regions and counts")
    mixed = make_mixed_pdf(short, pages=3, seed=7)
    longer = make_table_pdf([long_table(rows=41)])
    cyrillic = TableSpec(table_rows(3, 5, 3, script="cyrillic"), caption="Таблица 2: Города", script="cyrillic")
    russian = make_table_pdf([cyrillic], seed=3)
    booktabs = make_table_pdf([TableSpec(table_rows(5, 6, 4), caption="Table 3: Booktabs", style="rules")], seed=5)
    shaded = make_table_pdf([TableSpec(table_rows(6, 5, 3), caption="Table 4: Shaded rows", style="shaded")], seed=6)
    plain = make_table_pdf([TableSpec(table_rows(4, 6, 4), caption="Table 7: Nothing drawn", style="plain")], seed=4)
    continued = make_continued_table_pdf(TableSpec(table_rows(8, 14, 4), caption="Table 5: Continued"), 8, seed=8)
    banded = TableSpec((("Name", "Counts", "", "Notes"), ("", "in", "out", ""), *table_rows(6, 6, 4)[1:]),
                       spans=((0, 0, 2, 1), (0, 1, 1, 2), (0, 3, 2, 1)), caption="Table 6: Two header rows",
                       style="rules")
    two_rows = make_table_pdf([banded], seed=9)
    for name, pdf in (("mixed.pdf", mixed), ("long.pdf", longer), ("cyrillic.pdf", russian),
                      ("booktabs.pdf", booktabs), ("shaded.pdf", shaded), ("continued.pdf", continued),
                      ("two-rows.pdf", two_rows), ("plain.pdf", plain)):
        (inputs / name).write_bytes(pdf.data)
    out = tmp_path / "results.jsonl"

    proc = subprocess.run(
        [DOCSTREAM, "run", str(inputs), "--out", str(out), "--chunks", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=400,
    )

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]

    chunks = _chunks(records, "mixed.pdf")
    kinds = [c["kind"] for c in chunks]
    assert kinds.count("table") == 1 and kinds[0] == "text" and kinds[-1] == "text", kinds
    (table,) = [c for c in chunks if c["kind"] == "table"]
    assert table["text"].startswith(
        "Table 1: Regions and counts\n\n| Name | Region |  | Share |\n|---|---|---|---|\n| ")
    assert table["page_start"] == table["page_end"] == 2 == table["table"]["page"]
    assert table["table"]["header"] == ["Name", "Region", "", "Share"]
    assert table["table"]["caption"] == "Table 1: Regions and counts"
    known = mixed.tables[0]
    assert _cells(table["table"]) == {(c.row, c.col, c.row_span, c.col_span, c.text) for c in known.cells}
    assert all(abs(a - b) <= 2 for a, b in zip(table["table"]["bbox"], known.bbox, strict=True))
    assert table["embedding"], "a table chunk is embedded like any other"
    assert all(c["table"] is None and "|---|" not in c["text"] for c in chunks if c["kind"] == "text")

    parts = _chunks(records, "long.pdf")
    parts = [c for c in parts if c["kind"] == "table"]
    assert len(parts) >= 3
    header = "| Name | Region | Count | Share |"
    rows: list[int] = []
    for i, part in enumerate(parts):
        assert f"{header}\n|---|---|---|---|\n" in part["text"] and part["token_count"] <= 254
        assert (part["table"]["caption"] is not None) == (i == 0)
        rows.extend(range(part["table"]["row_start"], part["table"]["row_end"]))
    assert rows == list(range(1, 41))

    (russian_table,) = [c for c in _chunks(records, "cyrillic.pdf") if c["kind"] == "table"]
    assert russian_table["text"].startswith("Таблица 2: Города\n\n| Название | Город | Число |\n")
    assert _cells(russian_table["table"]) == {(c.row, c.col, c.row_span, c.col_span, c.text)
                                              for c in russian.tables[0].cells}

    for name, pdf in (("booktabs.pdf", booktabs), ("shaded.pdf", shaded), ("plain.pdf", plain)):
        (unruled,) = [c for c in _chunks(records, name) if c["kind"] == "table"]
        header = pdf.tables[0].spec.rows[0]
        assert unruled["text"].startswith(f"{pdf.tables[0].caption}\n\n| {' | '.join(header)} |\n|---|"), name
        assert unruled["table"]["header"] == list(header)
        assert unruled["table"]["caption"] == pdf.tables[0].caption
        assert _cells(unruled["table"]) == {(c.row, c.col, c.row_span, c.col_span, c.text) for c in pdf.tables[0].cells}

    joined = [c for c in _chunks(records, "continued.pdf") if c["kind"] == "table"]
    assert {c["table"]["rows"] for c in joined} == {14}, "one table over two pages"
    assert (joined[0]["page_start"], joined[-1]["page_end"]) == (1, 2)
    assert set().union(*(_cells(c["table"]) for c in joined)) == {
        (c.row, c.col, c.row_span, c.col_span, c.text) for c in continued.tables[0].cells}, "its header once"

    (banded_table,) = [c for c in _chunks(records, "two-rows.pdf") if c["kind"] == "table"]
    assert banded_table["text"].startswith(
        "Table 6: Two header rows\n\n| Name | Counts in | Counts out | Notes |\n|---|---|---|---|\n| ")
    assert (banded_table["table"]["header_rows"], banded_table["table"]["row_start"]) == (2, 2)
    assert _cells(banded_table["table"]) == {(c.row, c.col, c.row_span, c.col_span, c.text)
                                             for c in two_rows.tables[0].cells}, "a booktabs header's spans"

    exported = subprocess.run(
        [DOCSTREAM, "results", table["job_id"], "--chunks", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=120,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    again = [json.loads(line) for line in exported.stdout.splitlines() if line.strip()]
    (shown,) = [c for c in _chunks(again, "mixed.pdf") if c["kind"] == "table"]
    assert (shown["text"], shown["table"]) == (table["text"], table["table"]), "docstream results --chunks shows it"
