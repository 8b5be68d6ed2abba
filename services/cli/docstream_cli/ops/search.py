"""Similarity search over chunk results: embed the query with the rows' model, ask the store (docs/replay.md "Search").

The query goes through the same ``Embedder.prepare``/``embed`` path, settings and
normalization the inference service uses for chunks, so a chunk's own text finds that chunk
with a score of ~1. ``ResultStore.search`` does the rest: exact cosine on SQLite, the
Cassandra 5 SAI vector index (ANN) with exact rescoring on Cassandra.

``model_id`` selects rows; the weights always come from ``inference.model_path`` (unset: the
bundled all-MiniLM-L6-v2). Rows written under another id with the same weights (a replay
under ``all-MiniLM-L6-v2@replay``) are searchable with ``--model``; rows of other weights need
``DOCSTREAM_INFERENCE__MODEL_PATH`` pointing at those weights.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from docstream.errors import DocstreamError, InputError
from docstream.models.embedding import Embedder, load_embedder
from docstream.settings import Settings
from docstream.store import ResultsStore, ResultStore, open_store

__all__ = [
    "MAX_K",
    "SearchResult",
    "embed_query",
    "query_embedder",
    "results_table",
    "run_search",
    "search_chunks",
    "snippet",
]

MAX_K = 1000
"""Most results one search returns."""

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class SearchResult:
    """One nearest chunk.

    Attributes:
        rank: 1 for the best.
        score: cosine similarity to the query.
        doc_id: the document.
        job_id: its job.
        filename: the document's file name, where known.
        page_start: first page of the chunk (1-based).
        page_end: last page of the chunk.
        chunk_index: the chunk's index in its document.
        chunk_id: the chunk's id.
        model_id: the model of the row.
        snippet: the start of the chunk's text.
    """

    rank: int
    score: float
    doc_id: str
    job_id: str
    filename: str | None
    page_start: int
    page_end: int
    chunk_index: int
    chunk_id: str
    model_id: str
    snippet: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (``--json`` output)."""
        return asdict(self)


def snippet(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters (… when cut). Pure."""
    flat = _SPACES.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _check_query(text: str, k: int) -> str:
    query = text.strip()
    if not query:
        raise InputError("the search text is empty", code="search_query")
    if not 1 <= k <= MAX_K:
        raise InputError(f"-k must be between 1 and {MAX_K}, got {k}", code="search_k")
    return query


def embed_query(embedder: Embedder, text: str) -> list[float]:
    """The query's vector, by the same prepare → embed path the service embeds chunks with.

    Raises:
        InputError: empty text.
    """
    query = _check_query(text, 1)
    vectors = embedder.embed(embedder.prepare([query]))
    return [float(x) for x in vectors[0]]


def search_chunks(
    store: ResultsStore,
    embedder: Embedder,
    text: str,
    *,
    model_id: str | None = None,
    k: int = 10,
    job_id: str | None = None,
    snippet_chars: int = 160,
) -> list[SearchResult]:
    """The ``k`` chunks nearest to ``text`` among rows of ``model_id`` (default: the embedder's), best first.

    Raises:
        InputError: empty text, or k outside 1..MAX_K.
        StoreError: the store failed transiently.
    """
    query = _check_query(text, k)
    hits = store.search(embed_query(embedder, query), model_id or embedder.model_id, k=k, job_id=job_id)
    filenames: dict[str, str | None] = {}
    results: list[SearchResult] = []
    for rank, hit in enumerate(hits, start=1):
        chunk = hit.chunk
        if chunk.doc_id not in filenames:
            document = store.get_document(chunk.doc_id)
            filenames[chunk.doc_id] = document.filename if document is not None else None
        results.append(SearchResult(
            rank=rank, score=float(hit.score), doc_id=chunk.doc_id, job_id=chunk.job_id,
            filename=filenames[chunk.doc_id], page_start=chunk.page_start, page_end=chunk.page_end,
            chunk_index=chunk.chunk_index, chunk_id=chunk.chunk_id, model_id=chunk.model_id,
            snippet=snippet(chunk.text, snippet_chars),
        ))
    return results


def results_table(query: str, model_id: str, results: Sequence[SearchResult]) -> Table:
    """The results as a rich table: score, doc_id, filename, pages, snippet."""
    table = Table(title=f"{len(results)} nearest chunks to {snippet(query, 60)!r} (model {model_id})")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("doc_id", overflow="fold")
    table.add_column("filename", overflow="fold")
    table.add_column("pages", justify="right")
    table.add_column("snippet", overflow="fold")
    for r in results:
        pages = str(r.page_start) if r.page_start == r.page_end else f"{r.page_start}-{r.page_end}"
        table.add_row(str(r.rank), f"{r.score:.4f}", r.doc_id, r.filename or "", pages, r.snippet)
    return table


def query_embedder(settings: Settings) -> Embedder:
    """The model of ``settings.inference`` (no warm-up batch: one query needs none).

    Raises:
        ConfigError: the model cannot be loaded.
    """
    return load_embedder(settings.inference.model_copy(update={"warmup": False}))


def run_search(
    settings: Settings,
    text: str,
    *,
    console: Console,
    k: int = 10,
    job_id: str | None = None,
    model_id: str | None = None,
    as_json: bool = False,
    embedder: Embedder | None = None,
    store: ResultStore | None = None,
) -> int:
    """``docstream search``: print the nearest chunks. Returns the exit status (0 found or not, 1 failed).

    Raises:
        InputError: empty text or a bad k.
    """
    _check_query(text, k)
    own_store = store is None
    store = store if store is not None else open_store(settings.store, settings.cassandra)
    try:
        embedder = embedder or query_embedder(settings)
        model = model_id or embedder.model_id
        results = search_chunks(store, embedder, text, model_id=model, k=k, job_id=job_id)
    except InputError:
        raise
    except DocstreamError as exc:
        console.print(f"[red]search failed:[/red] {exc.message}")
        return 1
    finally:
        if own_store:
            store.close()
    if as_json:
        console.out(json.dumps([r.to_json() for r in results], ensure_ascii=False), highlight=False)
    else:
        console.print(results_table(text, model, results))
    return 0
