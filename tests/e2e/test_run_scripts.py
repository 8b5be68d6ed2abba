"""`docstream run` over born-digital Arabic, Japanese and Korean PDFs: their correct text layers are kept.

The regressions of issue 28: with `auto` OCR and Tesseract data for English only, born-digital
pages in these scripts had their text layers replaced by Latin-looking OCR noise. Here the
documents (tests.fixtures.scripts, fonts from Debian, nothing typed) run through the whole
pipeline on the embedded stack with the default settings (OCR `auto`, languages `eng`) and the
real engine installed: no page is OCRed, every chunk is `text_layer` with reason `text_layer`,
and the stored chunks are the layer's text, whole.

Its runs start the Kafka of their state dir, not the session's shared broker (``shared_broker_env``):
tests/run.sh runs this file beside the chaos scenarios, which stop and restart the stack's Kafka.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_run_ocr import _ocred_pages
from tests.fixtures.scripts import make_script_pdf, normalise_text
from tests.fixtures.services import DOCSTREAM, bare_env

pytestmark = pytest.mark.e2e

SCRIPTS = ("arabic", "japanese", "korean")


def test_run_keeps_the_correct_text_layers_of_arabic_japanese_and_korean_pdfs(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    layers = {}
    for i, script in enumerate(SCRIPTS):
        pdf = make_script_pdf(script, 2, seed=28 + i)
        (inputs / f"{script}.pdf").write_bytes(pdf.data)
        layers[f"{script}.pdf"] = normalise_text(" ".join(pdf.page_texts))
    out = tmp_path / "results.jsonl"

    proc = subprocess.run(
        [DOCSTREAM, "run", str(inputs), "--out", str(out), "--chunks", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=400,
    )

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sum(_ocred_pages(proc.stdout + proc.stderr).values()) == 0, "no page of a correct layer is OCRed"
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    documents = {Path(r["filename"]).name: r for r in records if r["record"] == "document"}
    assert set(documents) == set(layers)
    for name, doc in documents.items():
        assert doc["status"] == "completed", doc
        assert doc["pages_by_source"] == {"text_layer": 2} and doc["pages_by_verdict"] == {"ok": 2}, name
        chunks = sorted((r for r in records if r["record"] == "chunk" and r["doc_id"] == doc["doc_id"]),
                        key=lambda r: r["chunk_index"])
        assert chunks, name
        assert {(c["text_source"], c["ocr_engine"]) for c in chunks} == {("text_layer", None)}
        assert {reason for c in chunks for reason in c["page_reasons"]} == {"text_layer"}
        layer = layers[name]
        texts = [normalise_text(str(c["text"])) for c in chunks]
        assert all(text in layer for text in texts), f"{name}: a chunk's text is not the layer's"
        assert layer.startswith(texts[0][:40]) and layer.endswith(texts[-1][-40:]), f"{name}: the layer is whole"
