"""`docstream run docs/ --task generate --prompt summarize`: a chat model summarizes every chunk, in one process.

The model is the test chat server (tests/fixtures/llm.py, SmolLM2-135M on llama.cpp). Three generated PDFs, one
of a single short paragraph; chunked small so the others have several chunks. Checked in `--out`: one line per
document for the generate task, a summary per chunk, the one-chunk document's summary its chunk's, and the others'
the summary of their chunk summaries (the document stage, which the run starts beside the generate task).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.llm import LlmServer
from tests.fixtures.services import DOCSTREAM, bare_env

pytestmark = pytest.mark.e2e

SHORT = [["Kafka keeps records in partitions, each an ordered log that consumers read in order."]]
LONG = [[
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in the chloroplasts "
    "of plant cells, where chlorophyll absorbs red and blue light and reflects green light, which is why leaves "
    "look green.",
    "The city council met on Tuesday and voted to repair the old bridge over the river. The work starts in May, "
    "costs four million euros and closes the bridge to cars for six months; buses and bicycles may still cross.",
]]
INVOICE = [[
    "The invoice from ACME Corporation lists three items and a total of 120 euros, due on 3 March. Payment goes "
    "by bank transfer to the account at the bottom of the page. Late payment adds a fee of two percent a month, "
    "and an item may be returned within thirty days.",
]]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_run_summarizes_every_chunk_of_every_document(tmp_path: Path, llm: LlmServer) -> None:
    (tmp_path / "in").mkdir()
    for name, pages in (("short", SHORT), ("long", LONG), ("invoice", INVOICE)):
        (tmp_path / "in" / f"{name}.pdf").write_bytes(make_pdf_of_paragraphs(pages).data)
    env = bare_env(COLUMNS="200", DOCSTREAM_CHUNKER__MAX_TOKENS="64", DOCSTREAM_CHUNKER__OVERLAP_TOKENS="8",
                   DOCSTREAM_TASKS__GENERATE__ENDPOINT__URL=llm.url,
                   DOCSTREAM_TASKS__GENERATE__ENDPOINT__MODEL=llm.model,
                   DOCSTREAM_TASKS__GENERATE__MAX_TOKENS="128",
                   DOCSTREAM_TASKS__GENERATE__STOP=json.dumps(["\n\n", "\nUser:"]))
    done = subprocess.run(
        [str(DOCSTREAM), "run", "in", "--task", "generate", "--prompt", "summarize", "--chunks",
         "--out", "out/results.jsonl", "--timeout", "500"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = _lines(tmp_path / "out" / "results.jsonl")
    documents = {Path(x["filename"]).stem: x for x in lines if "chunk_index" not in x}
    chunks = [x for x in lines if "chunk_index" in x]
    assert set(documents) == {"short", "long", "invoice"}
    for name, document in documents.items():
        failed = [(c.get("error_code"), c["text"][:60]) for c in chunks if c["doc_id"] == document["doc_id"]
                  and c.get("status") != "ok"]
        assert document["task"] == "generate" and document["status"] == "completed", (name, failed)
        output = json.loads(document["output"]) if isinstance(document["output"], str) else document["output"]
        summaries = output["chunk_summaries"]
        assert [s["index"] for s in summaries] == list(range(document["chunk_count"])), name
        assert all(s["text"].strip() for s in summaries), name
        assert output["prompt_tokens"] > 0 and output["completion_tokens"] > 0
        if document["chunk_count"] == 1:
            assert output["summary"] == summaries[0]["text"]
        else:  # the document stage's summary of the chunk summaries, its levels recorded
            assert output["document_step"] == "done" and output["summary"].strip()
            assert output["levels"][-1]["outputs"] == [output["summary"]]
    assert documents["long"]["chunk_count"] > 1
    assert len(chunks) == sum(d["chunk_count"] for d in documents.values())
    for chunk in chunks:
        answer = json.loads(chunk["output"]) if isinstance(chunk["output"], str) else chunk["output"]
        assert answer["kind"] == "summarize" and answer["text"].strip()
