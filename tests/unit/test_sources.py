"""docstream_ingest.sources: deleting a source over a real SQLite store, and `docstream delete`'s exit statuses."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from docstream.errors import InputError
from docstream.settings import Settings
from docstream.store.base import DocumentRow, SourceRow
from docstream.store.sqlite import SqliteStore
from docstream_ingest.sources import delete_command, delete_source, source_key_of

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def test_a_source_is_named_by_its_uri_or_by_its_files_absolute_uri(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.pdf").write_bytes(b"%PDF")
    (tmp_path / "link.pdf").symlink_to(tmp_path / "in" / "a.pdf")
    assert source_key_of("s3://bucket/a.pdf") == "s3://bucket/a.pdf"
    assert source_key_of(str(tmp_path / "link.pdf")) == (tmp_path / "in" / "a.pdf").resolve().as_uri()
    for bad in ("", "   ", "x" * 5000):
        with pytest.raises(InputError) as refused:
            source_key_of(bad)
        assert refused.value.code == "invalid_source_key"


def _store(tmp_path: Path, *statuses: str) -> SqliteStore:
    """A store with a source whose versions v1..vN have these statuses (vN current, each naming the one before)."""
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    for n, status in enumerate(statuses, start=1):
        store.upsert_document(DocumentRow(f"v{n}", "j", f"file:///o/{n}", "ab" * 32, status, AT,  # type: ignore[arg-type]
                                          source_key="s3://b/a.pdf", previous_doc_id=f"v{n - 1}" if n > 1 else None))
    store.upsert_source(SourceRow("acme", "s3://b/a.pdf", f"v{len(statuses)}", "ab" * 32, "j", AT))
    return store


def test_every_version_is_walked_back_and_a_loop_in_the_history_ends_the_walk(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "failed", "partial")
    store.upsert_document(DocumentRow("v1", "j", "file:///o/1", "ab" * 32, "completed", AT,
                                      source_key="s3://b/a.pdf", previous_doc_id="v3"))  # a loop: v1 → v3
    try:
        done = delete_source(store, "acme", "s3://b/a.pdf")
        assert (done.doc_id, done.versions) == ("v3", 3)
        assert store.get_source("acme", "s3://b/a.pdf") is None
    finally:
        store.close()


def test_docstream_delete_says_what_it_did_and_exits_by_the_worst_outcome(tmp_path: Path) -> None:
    settings = Settings().with_overrides(store={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    _store(tmp_path, "completed", "chunked").close()  # the current version still in flight
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert delete_command(settings, ["s3://b/a.pdf"], tenant="acme", console=console, confirm=lambda _: False) == 2
    assert delete_command(settings, ["s3://b/a.pdf"], tenant="acme", console=console) == 1
    assert "source_in_flight" in out.getvalue()
    assert delete_command(settings, ["s3://b/none.pdf"], tenant="acme", console=console) == 2
    store = SqliteStore(tmp_path / "s.db")
    store.upsert_document(DocumentRow("v2", "j", "file:///o/2", "ab" * 32, "completed", AT,
                                      source_key="s3://b/a.pdf", previous_doc_id="v1"))
    store.close()
    assert delete_command(settings, ["s3://b/a.pdf"], tenant="acme", console=console) == 0
    assert "s3://b/a.pdf" in out.getvalue() and " v2 " in out.getvalue()
    with pytest.raises(InputError):
        delete_command(settings, ["s3://b/a.pdf"], tenant="bad tenant!", console=console)
