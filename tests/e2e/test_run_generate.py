"""`docstream run docs/ --task generate`: a chat model summarizes every chunk, or extracts fields by a JSON Schema
from every chunk, in one process.

The model is the test chat server (tests/fixtures/llm.py, SmolLM2-135M on llama.cpp). Three generated PDFs, one
of a single short paragraph; chunked small so the others have several chunks. Checked in `--out`: one line per
document for the generate task, a summary per chunk, the one-chunk document's summary its chunk's, and the others'
the summary of their chunk summaries (the document stage, which the run starts beside the generate task). The
extract run goes through the fault proxy, which garbles every answer for the document built to fail, and counts
the tokens of every answer it serves: the run's chat tokens are that bill.

Its runs start the Kafka of their state dir, not the session's shared broker (``shared_broker_env``):
tests/run.sh runs this file beside the chaos scenarios, which stop and restart the stack's Kafka.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.fault_proxy import FaultProxy
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


SUBJECT = {"type": "object", "properties": {"subject": {"type": ["string", "null"]}}, "required": ["subject"]}
BUILT_TO_FAIL = "BUILT-TO-FAIL-7d2a"


def test_run_extracts_schema_valid_json_per_document_and_the_one_built_to_fail_fails_alone(
    tmp_path: Path, llm: LlmServer
) -> None:
    (tmp_path / "in").mkdir()
    broken = [[f"{BUILT_TO_FAIL} {SHORT[0][0]}"]]
    photo = [[LONG[0][0]]]  # one chunk; the long one has two, whose values the document stage reconciles
    for name, pages in (("photo", photo), ("long", LONG), ("broken", broken)):
        (tmp_path / "in" / f"{name}.pdf").write_bytes(make_pdf_of_paragraphs(pages).data)
    (tmp_path / "schema.json").write_text(json.dumps(SUBJECT), encoding="utf-8")
    with FaultProxy(llm.url) as proxy:
        proxy.garble(BUILT_TO_FAIL)
        env = bare_env(COLUMNS="200", DOCSTREAM_CHUNKER__MAX_TOKENS="64", DOCSTREAM_CHUNKER__OVERLAP_TOKENS="8",
                       DOCSTREAM_TASKS__GENERATE__ENDPOINT__URL=proxy.url,
                       DOCSTREAM_TASKS__GENERATE__ENDPOINT__MODEL=llm.model,
                       DOCSTREAM_TASKS__GENERATE__MAX_TOKENS="96", DOCSTREAM_TASKS__GENERATE__INVALID_RETRIES="2",
                       DOCSTREAM_TASKS__GENERATE__STOP=json.dumps(["\n\n", "\nUser:"]),
                       DOCSTREAM_INFERENCE__WARMUP="false")  # every request the proxy sees is the job's
        done = subprocess.run(
            [str(DOCSTREAM), "run", "in", "--task", "generate", "--schema",
             "schema.json", "--chunks", "--out", "out/results.jsonl", "--timeout", "500"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
        stats = proxy.stats()
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # 1: a document failed
    lines = _lines(tmp_path / "out" / "results.jsonl")
    documents = {Path(x["filename"]).stem: x for x in lines if "chunk_index" not in x}
    chunks = [x for x in lines if "chunk_index" in x]
    assert set(documents) == {"photo", "long", "broken"} and documents["long"]["chunk_count"] > 1

    # the document built to fail: its one chunk answered invalid three times (the answer and its two retries)
    assert documents["broken"]["status"] == "failed"
    [broken_chunk] = [c for c in chunks if c["doc_id"] == documents["broken"]["doc_id"]]
    assert (broken_chunk["status"], broken_chunk["error_code"]) == ("failed", "generation_invalid")
    assert stats.garbled == 3
    # the others: schema-valid JSON per document, or a generation failure of their own (a 135M model)
    valid = 0
    for name in ("photo", "long"):
        document = documents[name]
        output = json.loads(document["output"]) if isinstance(document["output"], str) else document["output"]
        assert output["kind"] == "extract"
        if document["status"] == "completed":
            jsonschema.validate(output["value"], SUBJECT)
            valid += 1
        else:
            codes = {c.get("error_code") for c in chunks if c["doc_id"] == document["doc_id"]} | {
                output.get("error_code"), document.get("error_code")}
            assert any(str(code).startswith("generation_") for code in codes), (name, document)
    assert valid >= 1, documents

    # the run's chat tokens are the bill: every answer the server gave, the failed chunk's included
    used = re.search(r"chat tokens (\d+) prompt \+ (\d+) completion", done.stdout)
    assert used is not None, done.stdout[-2000:]
    assert (int(used.group(1)), int(used.group(2))) == (stats.prompt_tokens, stats.completion_tokens)
    assert stats.completion_tokens > 2
