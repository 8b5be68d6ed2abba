"""`docstream run` over a folder of scans and normal PDFs: the scans are OCRed, the normal PDFs never are.

Runs the real OCR engine (``chunker.ocr``'s default); its absence fails the test (``make setup``
installs it). OCR calls are counted from the extraction child's ``page_ocred`` log lines, one per
OCRed page, each naming its document.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from docstream.errors import ConfigError
from docstream.settings import OcrSettings
from docstream_chunker.ocr import open_engine
from tests.fixtures.documents import make_pdf, make_scanned_copy, page_marker
from tests.fixtures.services import DOCSTREAM, shared_broker_env

pytestmark = pytest.mark.e2e


def _engine_missing() -> str | None:
    try:
        open_engine(OcrSettings())
    except ConfigError as exc:
        return exc.message
    return None


def _ocred_pages(output: str) -> Counter[str]:
    """doc_id -> pages the extraction child OCRed, from its JSON log lines."""
    pages: Counter[str] = Counter()
    for line in output.splitlines():
        if '"page_ocred"' not in line:
            continue
        event = json.loads(line[line.index("{"):])
        pages[str(event["doc_id"])] += 1
    return pages


def test_run_ocrs_the_scans_and_never_the_normal_pdfs(tmp_path: Path, kafka_bootstrap: str) -> None:
    missing = _engine_missing()
    if missing is not None:
        pytest.fail(f"no OCR engine (`make setup` installs it: deploy/install-ocr.sh): {missing}")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    scans = {"scan-0.pdf": make_scanned_copy(2, seed=10), "scan-1.pdf": make_scanned_copy(1, seed=11),
             "mixed.pdf": make_scanned_copy(3, seed=12, text_pages=[1, 3])}
    for name, scan in scans.items():
        (inputs / name).write_bytes(scan.data)
    for i in range(3):
        (inputs / f"normal-{i}.pdf").write_bytes(make_pdf(3, seed=20 + i).data)
    out = tmp_path / "results.jsonl"

    proc = subprocess.run(
        [DOCSTREAM, "run", str(inputs), "--out", str(out), "--chunks", "--state-dir", str(tmp_path / "state"),
         "--timeout", "500"],
        cwd=tmp_path, env=shared_broker_env(kafka_bootstrap, "ocr"), capture_output=True, text=True, timeout=560,
    )

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    documents = {Path(r["filename"]).name: r for r in records if r["record"] == "document"}
    chunks: dict[str, list[dict[str, object]]] = {}
    for r in records:
        if r["record"] == "chunk":
            chunks.setdefault(str(r["doc_id"]), []).append(r)
    assert set(documents) == {*scans, "normal-0.pdf", "normal-1.pdf", "normal-2.pdf"}
    assert all(doc["status"] == "completed" for doc in documents.values()), documents

    ocred = _ocred_pages(proc.stdout + proc.stderr)
    for name in ("normal-0.pdf", "normal-1.pdf", "normal-2.pdf"):
        doc = documents[name]
        assert ocred[str(doc["doc_id"])] == 0, f"OCR ran on {name}"
        assert doc["pages_by_source"] == {"text_layer": 3} and doc["pages_by_verdict"] == {"ok": 3}
        assert {c["text_source"] for c in chunks[str(doc["doc_id"])]} == {"text_layer"}
        assert {c["ocr_engine"] for c in chunks[str(doc["doc_id"])]} == {None}
    for name in ("scan-0.pdf", "scan-1.pdf"):
        doc = documents[name]
        pages = len(scans[name].page_texts)
        assert ocred[str(doc["doc_id"])] == pages
        assert doc["pages_by_source"] == {"ocr": pages}
        doc_chunks = chunks[str(doc["doc_id"])]
        assert {c["text_source"] for c in doc_chunks} == {"ocr"}
        assert {c["ocr_engine"] for c in doc_chunks} == {OcrSettings().engine}
        assert page_marker(1) in str(doc_chunks[0]["text"])
    mixed = documents["mixed.pdf"]
    assert ocred[str(mixed["doc_id"])] == 1
    assert mixed["pages_by_source"] == {"ocr": 1, "text_layer": 2}
    sources = {(c["page_start"], c["page_end"], c["text_source"]) for c in chunks[str(mixed["doc_id"])]}
    assert all(source == "ocr" for start, end, source in sources if int(start) <= 2 <= int(end))  # type: ignore[call-overload]
    assert sum(ocred.values()) == 4, "OCR ran on the scans' pages only, once each"
    # the run's bar counts the OCR pages as they start
    bar = [line for line in proc.stdout.splitlines() if "pages OCRed" in line]
    assert bar and re.search(r"\b4/\?", bar[-1]), proc.stdout[-2000:]
