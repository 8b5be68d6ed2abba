"""`docstream search` on both stores (SQLite exact search, Cassandra 5 SAI vector index) with the real model: a
query made from a known chunk's text returns that chunk first, with its document, pages and score."""

from __future__ import annotations

import io
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from docstream.models.embedder import Embedder
from docstream.settings import CassandraSettings, Settings
from docstream.store import ChunkRow, DocumentRow, ResultStore, SqliteStore
from docstream_cli.ops.search import query_embedder, run_search, search_chunks
from tests.fixtures.documents import paragraphs
from tests.fixtures.services import DOCSTREAM, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCS = 3
PER_DOC = 6


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The model as `docstream search` loads it from the default settings."""
    return query_embedder(Settings())


def _write_corpus(store: ResultStore, embedder: Embedder, model_id: str, job_id: str, seed: int = 7) -> list[ChunkRow]:
    """DOCS documents of PER_DOC chunks each, embedded by the model, with their document rows."""
    now = datetime.now(UTC)
    texts = paragraphs(seed=seed, count=DOCS * PER_DOC)
    vectors = embedder.embed(embedder.prepare(texts))
    rows: list[ChunkRow] = []
    for d in range(DOCS):
        doc_id = f"{job_id}-doc-{d}"
        store.upsert_document(DocumentRow(doc_id=doc_id, job_id=job_id, source_uri=f"file:///{doc_id}.pdf",
                                          content_sha256="ab" * 32, status="completed", updated_at=now,
                                          filename=f"report-{d}.pdf", page_count=PER_DOC))
        for i in range(PER_DOC):
            n = d * PER_DOC + i
            rows.append(ChunkRow(doc_id=doc_id, model_id=model_id, chunk_index=i, chunk_id=f"{doc_id}-c{i}",
                                 job_id=job_id, text=texts[n], page_start=i + 1, page_end=i + 2, char_start=0,
                                 char_end=len(texts[n]), token_count=40, embedding=[float(x) for x in vectors[n]]))
    store.upsert_chunks(rows)
    return rows


@pytest.fixture
def corpus(store: ResultStore, embedder: Embedder) -> Iterator[tuple[ResultStore, str, str, list[ChunkRow]]]:
    """Two jobs of the same texts under a model_id of this test only (rows of other tests never match)."""
    model_id = f"all-MiniLM-L6-v2@search-{uuid.uuid4().hex[:8]}"
    job = f"job-{uuid.uuid4().hex[:8]}"
    rows = _write_corpus(store, embedder, model_id, job)
    _write_corpus(store, embedder, model_id, f"{job}-twin")
    yield store, model_id, job, rows


def test_a_chunks_own_text_finds_it_first(corpus: tuple[ResultStore, str, str, list[ChunkRow]],
                                          embedder: Embedder) -> None:
    store, model_id, job, rows = corpus
    for known in (rows[0], rows[PER_DOC + 3], rows[-1]):
        results = search_chunks(store, embedder, known.text, model_id=model_id, k=5, job_id=job)
        assert len(results) == 5
        best = results[0]
        assert (best.chunk_id, best.doc_id, best.page_start, best.page_end) == (
            known.chunk_id, known.doc_id, known.page_start, known.page_end)
        assert best.filename == f"report-{known.doc_id[-1]}.pdf"
        assert best.score > 0.99 and results[1].score < best.score
        assert [r.rank for r in results] == [1, 2, 3, 4, 5]
        assert all(r.job_id == job and r.model_id == model_id for r in results)


def test_without_a_job_both_twins_come_first(corpus: tuple[ResultStore, str, str, list[ChunkRow]],
                                             embedder: Embedder) -> None:
    store, model_id, job, rows = corpus
    results = search_chunks(store, embedder, rows[2].text, model_id=model_id, k=3)
    assert {results[0].job_id, results[1].job_id} == {job, f"{job}-twin"}
    assert results[0].chunk_index == results[1].chunk_index == 2
    assert search_chunks(store, embedder, rows[2].text, model_id="no-such-model", k=3) == []


def test_run_search_prints_a_table_and_json(corpus: tuple[ResultStore, str, str, list[ChunkRow]],
                                            embedder: Embedder) -> None:
    store, model_id, job, rows = corpus
    out = io.StringIO()
    code = run_search(Settings(), rows[1].text, console=Console(file=out, width=250, color_system=None), k=3,
                      job_id=job, model_id=model_id, embedder=embedder, store=store)
    table = out.getvalue()
    assert code == 0 and rows[1].doc_id in table and "report-0.pdf" in table and "2-3" in table
    out = io.StringIO()
    run_search(Settings(), rows[1].text, console=Console(file=out, width=80), k=3, job_id=job, model_id=model_id,
               as_json=True, embedder=embedder, store=store)
    found = json.loads(out.getvalue())
    assert found[0]["chunk_id"] == rows[1].chunk_id and found[0]["score"] > 0.99 and len(found) == 3


def _cli_search(env: dict[str, str], text: str, *args: str) -> list[dict[str, object]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    done = subprocess.run([str(DOCSTREAM), "search", text, "--json", *args], env={**clean, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))


def test_command_line_on_sqlite(tmp_path: Path, embedder: Embedder) -> None:
    store = SqliteStore(tmp_path / "search.db")
    store.migrate()
    try:
        rows = _write_corpus(store, embedder, "all-MiniLM-L6-v2", "job-cli")
    finally:
        store.close()
    env = {"DOCSTREAM_STORE__BACKEND": "sqlite", "DOCSTREAM_STORE__SQLITE_PATH": str(tmp_path / "search.db")}
    found = _cli_search(env, rows[4].text, "--job", "job-cli", "-k", "2")
    assert [f["chunk_id"] for f in found][:1] == [rows[4].chunk_id] and len(found) == 2
    assert found[0]["filename"] == "report-0.pdf" and found[0]["model_id"] == "all-MiniLM-L6-v2"


def test_command_line_on_cassandra(cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
                                   embedder: Embedder) -> None:
    model_id = f"all-MiniLM-L6-v2@cli-{uuid.uuid4().hex[:8]}"
    rows = _write_corpus(cassandra_store, embedder, model_id, f"job-{uuid.uuid4().hex[:8]}")
    env = {
        "DOCSTREAM_STORE__BACKEND": "cassandra",
        "DOCSTREAM_CASSANDRA__CONTACT_POINTS": json.dumps(list(cassandra_settings.contact_points)),
        "DOCSTREAM_CASSANDRA__PORT": str(cassandra_settings.port),
        "DOCSTREAM_CASSANDRA__KEYSPACE": cassandra_settings.keyspace,
    }
    found = _cli_search(env, rows[7].text, "--model", model_id, "-k", "4")
    assert found[0]["chunk_id"] == rows[7].chunk_id and found[0]["doc_id"] == rows[7].doc_id
    assert found[0]["page_start"] == rows[7].page_start and len(found) == 4
