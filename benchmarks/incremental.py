"""Benchmark: a new version of a document, edited in one section, against a full run of the same version.

Two figures, in one run:

* **the chunker's re-cut** (pure, no model): ``--trials`` seeded documents of ``--paragraphs`` prose paragraphs,
  each with one paragraph rewritten; how many of the new version's chunks have a text the old version has no
  chunk of (those run the model; the rest reuse the old version's results, docs/intake.md "Versions of a
  document");
* **end to end**: a ``--pages`` page PDF through ``docstream run`` (embedded stack, the default embedding model):
  version 1, then version 2 (one paragraph of one page rewritten, the file edited in place) in the same state
  folder, against version 2 alone in a fresh one. It prints each run's wall time, version 2's chunks run by the
  model against its total (read from the store: a chunk whose text version 1 had reuses its result), and its
  model-seconds in both runs.

    .venv/bin/python benchmarks/incremental.py --pages 40
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
DOCSTREAM = str(Path(sys.executable).with_name("docstream"))

from machine import cpu_line  # noqa: E402

from docstream.models.tokenization import load_token_counter  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream.store import SqliteStore  # noqa: E402
from docstream_chunker.chunking import ChunkingConfig, PageText, chunk_document  # noqa: E402
from tests.fixtures.documents import make_pdf_of_paragraphs  # noqa: E402

WORDS = ("the broker keeps every record of a partition in order and a consumer commits its offset after the "
         "write so that a crash replays only what was not yet stored while the reducer folds each document "
         "from its chunks and the job counts what it cost in pages tokens and model seconds").split()


def _paragraph(rng: random.Random) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."
                 for _ in range(rng.randint(2, 4))]
    return " ".join(sentences)


def _edited(paragraphs: list[str], rng: random.Random) -> list[str]:
    out = list(paragraphs)
    out[rng.randrange(len(out))] = _paragraph(rng)
    return out


def recut(trials: int, paragraphs: int, per_page: int) -> list[tuple[int, int]]:
    """(chunks whose text is new, chunks) of the edited version, per trial."""
    settings = Settings()
    counter = load_token_counter(settings.inference.model_path, settings.inference.model_id)
    config = ChunkingConfig(settings.chunker.max_tokens, settings.chunker.overlap_tokens)
    rng = random.Random(20261204)
    figures = []
    for _ in range(trials):
        old = [_paragraph(rng) for _ in range(paragraphs)]
        new = _edited(old, rng)

        def pages(texts: list[str]) -> list[PageText]:
            return [PageText(i // per_page + 1, "\n\n".join(texts[i:i + per_page]))
                    for i in range(0, len(texts), per_page)]

        before = {c.text for c in chunk_document(pages(old), config, counter)}
        after = chunk_document(pages(new), config, counter)
        figures.append((sum(1 for c in after if c.text not in before), len(after)))
    return figures


def _run(folder: Path, state: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")} | {"COLUMNS": "200"}
    started = time.perf_counter()
    done = subprocess.run([DOCSTREAM, "run", str(folder), "--state-dir", str(state)], env=env, capture_output=True,
                          text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"docstream run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def _model_seconds(store: SqliteStore, doc_id: str) -> float:
    """The document's forward-pass seconds (its job_documents row's usage)."""
    document = store.get_document(doc_id)
    for row in store.iter_job_documents(document.job_id) if document is not None else ():
        if row.doc_id == doc_id and row.usage is not None:
            return sum(row.usage.model_us.values()) / 1e6
    return 0.0


def end_to_end(pages: int, per_page: int, work: Path) -> None:
    rng = random.Random(7)
    v1 = [_paragraph(rng) for _ in range(pages * per_page)]
    v2 = _edited(v1, rng)
    folder, report = work / "in", work / "in" / "report.pdf"
    folder.mkdir()

    def write(texts: list[str]) -> None:
        report.write_bytes(make_pdf_of_paragraphs([texts[i:i + per_page]
                                                   for i in range(0, len(texts), per_page)]).data)

    write(v1)
    first = _run(folder, work / "versions")
    key, model_id = report.resolve().as_uri(), Settings().inference.model_id
    # version 1's texts, read now: version 2's completion retires its rows (docs/intake.md "Versions of a document")
    store = SqliteStore(work / "versions" / "docstream.db")
    try:
        before = store.get_source("default", key)
        old_texts = {row.text for row in store.iter_chunks(before.doc_id, model_id)} if before is not None else set()
    finally:
        store.close()
    write(v2)
    incremental = _run(folder, work / "versions")
    full = _run(folder, work / "fresh")
    store = SqliteStore(work / "versions" / "docstream.db")
    try:
        source = store.get_source("default", key)
        document = store.get_document(source.doc_id) if source is not None else None
        if source is None or document is None or document.previous_doc_id is None:
            raise SystemExit("version 2 is not recorded as the next version of version 1")
        rows = list(store.iter_chunks(source.doc_id, model_id))
        ran = sum(1 for row in rows if row.text not in old_texts)
        model_incremental = _model_seconds(store, source.doc_id)
    finally:
        store.close()
    store = SqliteStore(work / "fresh" / "docstream.db")
    try:
        fresh = store.get_source("default", key)
        model_full = _model_seconds(store, fresh.doc_id) if fresh is not None else 0.0
    finally:
        store.close()
    print(f"end to end: {pages} pages, {len(rows)} chunks in version 2; version 1 took {first:.1f} s")
    print(f"  version 2 after version 1: {incremental:.1f} s, {ran} of {len(rows)} chunks run by the model "
          f"({ran / len(rows):.1%}), {model_incremental:.2f} model-seconds")
    print(f"  version 2 alone (full):    {full:.1f} s, {len(rows)} of {len(rows)} chunks run by the model, "
          f"{model_full:.2f} model-seconds")
    print(f"  incremental / full: {incremental / full:.2f}x wall time, "
          f"{model_incremental / model_full if model_full else 0:.2f}x model-seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=40, help="pages of the end-to-end document")
    parser.add_argument("--per-page", type=int, default=4, help="paragraphs a page")
    parser.add_argument("--trials", type=int, default=20, help="seeded edits of the re-cut figure")
    parser.add_argument("--paragraphs", type=int, default=60, help="paragraphs of each re-cut document")
    args = parser.parse_args()
    print(cpu_line())
    figures = recut(args.trials, args.paragraphs, args.per_page)
    print(f"re-cut: {args.trials} documents of {args.paragraphs} paragraphs, one rewritten: chunks with new text "
          f"{statistics.mean(n for n, _ in figures):.1f} of {statistics.mean(t for _, t in figures):.1f} on average "
          f"({statistics.mean(n / t for n, t in figures):.1%}), at most {max(n for n, _ in figures)}")
    with tempfile.TemporaryDirectory(prefix="docstream-incremental-") as work:
        end_to_end(args.pages, args.per_page, Path(work))


if __name__ == "__main__":
    main()
