"""`docstream run` on a file, then on the same file edited in one paragraph: the second run is the file's next
version (docs/intake.md "Versions of a document") and runs the model only on the chunks whose text changed; the
others keep the first version's vectors, bit for bit, and the first version's chunks are retired. Then
`docstream delete` of the file retires every version.

Its runs start the Kafka of their state dir, not the session's shared broker (``shared_broker_env``):
tests/run.sh runs this file beside the chaos scenarios, which stop and restart the stack's Kafka.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from docstream.settings import Settings
from docstream.store.base import ChunkRow
from docstream.store.sqlite import SqliteStore
from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.services import DOCSTREAM, bare_env

pytestmark = pytest.mark.e2e

WORDS = ("the broker keeps every record of a partition in order and a consumer commits its offset after the write "
         "so that a crash replays only what was not yet stored").split()


def _paragraphs(count: int, seed: int) -> list[str]:
    return [" ".join(WORDS[(seed + i * 7 + j) % len(WORDS)] for j in range(40 + i % 9)).capitalize() + "."
            for i in range(count)]


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(DOCSTREAM), "run", "in", "--timeout", "300"], cwd=tmp_path,
                          env=bare_env(COLUMNS="200", DOCSTREAM_CHUNKER__MAX_TOKENS="64",
                                       DOCSTREAM_CHUNKER__OVERLAP_TOKENS="8"),
                          capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _rows(tmp_path: Path, report: Path) -> tuple[str | None, list[ChunkRow]]:
    """The source's current document: its earlier version's doc_id, and its chunk rows."""
    store = SqliteStore(tmp_path / ".docstream" / "docstream.db")
    try:
        source = store.get_source("default", report.resolve().as_uri())
        document = store.get_document(source.doc_id) if source is not None else None
        assert source is not None and document is not None
        return document.previous_doc_id, list(store.iter_chunks(source.doc_id, Settings().inference.model_id))
    finally:
        store.close()


def test_a_file_edited_in_one_paragraph_runs_the_model_only_on_its_changed_chunks_and_retires_the_old_ones(
    tmp_path: Path,
) -> None:
    report = tmp_path / "in" / "report.pdf"
    report.parent.mkdir()
    first = _paragraphs(12, 0)
    report.write_bytes(make_pdf_of_paragraphs([first[:4], first[4:8], first[8:]]).data)
    assert "reused:" not in _run(tmp_path).stdout
    none_before, v1_rows = _rows(tmp_path, report)
    assert none_before is None
    edited = [*first[:6], "A paragraph rewritten for the second version says something else entirely.", *first[7:]]
    report.write_bytes(make_pdf_of_paragraphs([edited[:4], edited[4:8], edited[8:]]).data)
    second = _run(tmp_path)

    previous, after = _rows(tmp_path, report)
    assert previous == v1_rows[0].doc_id
    before = {row.text: row.embedding for row in v1_rows}
    kept = [row for row in after if row.text in before]
    assert 0 < len(kept) < len(after)  # the edit changed some chunks, not all
    assert all(row.embedding == before[row.text] for row in kept)  # reused, not computed again
    used = re.search(r"reused: (\d+) chunk results", second.stdout)
    assert used is not None and int(used.group(1)) == len(kept), second.stdout[-2000:]
    # the first version is retired: its chunks are gone from the store, so a search finds the current text only
    store = SqliteStore(tmp_path / ".docstream" / "docstream.db")
    try:
        assert list(store.iter_chunks(previous, Settings().inference.model_id)) == []
    finally:
        store.close()

    # the file deleted by its path: every version leaves the store, and its source is marked deleted
    deleted = subprocess.run([str(DOCSTREAM), "delete", "in/report.pdf", "--yes"], cwd=tmp_path,
                             env=bare_env(COLUMNS="200"), capture_output=True, text=True, timeout=120, check=False)
    assert deleted.returncode == 0, deleted.stdout[-2000:] + deleted.stderr[-2000:]
    store = SqliteStore(tmp_path / ".docstream" / "docstream.db")
    try:
        assert not store.get_source("default", report.resolve().as_uri()).live  # type: ignore[union-attr]
        assert store.count_chunks(after[0].doc_id, Settings().inference.model_id) == 0
    finally:
        store.close()
