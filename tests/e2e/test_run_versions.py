"""`docstream run` on a file, then on the same file edited in one paragraph: the second run is the file's next
version (docs/intake.md "Versions of a document") and runs the model only on the chunks whose text changed; the
others keep the first version's vectors, bit for bit."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from docstream.settings import Settings
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


def test_a_file_edited_in_one_paragraph_runs_the_model_only_on_its_changed_chunks(tmp_path: Path) -> None:
    report = tmp_path / "in" / "report.pdf"
    report.parent.mkdir()
    first = _paragraphs(12, 0)
    report.write_bytes(make_pdf_of_paragraphs([first[:4], first[4:8], first[8:]]).data)
    assert "reused:" not in _run(tmp_path).stdout
    edited = [*first[:6], "A paragraph rewritten for the second version says something else entirely.", *first[7:]]
    report.write_bytes(make_pdf_of_paragraphs([edited[:4], edited[4:8], edited[8:]]).data)
    second = _run(tmp_path)

    store = SqliteStore(tmp_path / ".docstream" / "docstream.db")
    try:
        source = store.get_source("default", report.resolve().as_uri())
        assert source is not None
        document = store.get_document(source.doc_id)
        assert document is not None and document.previous_doc_id is not None
        model_id = Settings().inference.model_id
        before = {row.text: row.embedding for row in store.iter_chunks(document.previous_doc_id, model_id)}
        after = list(store.iter_chunks(source.doc_id, model_id))
    finally:
        store.close()
    kept = [row for row in after if row.text in before]
    assert 0 < len(kept) < len(after)  # the edit changed some chunks, not all
    assert all(row.embedding == before[row.text] for row in kept)  # reused, not computed again
    used = re.search(r"reused: (\d+) chunk results", second.stdout)
    assert used is not None and int(used.group(1)) == len(kept), second.stdout[-2000:]
