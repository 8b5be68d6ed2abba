"""Deleting a source over a real SQLite store (docstream.store.sources), by name, by an intake-topic tombstone, and
`docstream delete`'s exit statuses."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from docstream.errors import InputError
from docstream.settings import Settings
from docstream.store.base import DocumentResultRow, DocumentRow, JobRow, SourceRow
from docstream.store.sources import SourceInFlightError, delete_by_tombstone, delete_source, tombstoned
from docstream.store.sqlite import SqliteStore
from docstream_ingest.sources import delete_command, source_key_of

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
    store.upsert_job(JobRow("j", "acme", AT, "running", len(statuses)))
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

    def delete(*sources: str, **options: object) -> int:  # a docstream run's store: no broker, no tombstone
        return delete_command(settings, list(sources), tenant="acme", console=console, publish=False,
                              **options)  # type: ignore[arg-type]

    assert delete("s3://b/a.pdf", confirm=lambda _: False) == 2
    assert delete("s3://b/a.pdf") == 1
    assert "source_in_flight" in out.getvalue()
    assert delete("s3://b/none.pdf") == 2
    store = SqliteStore(tmp_path / "s.db")
    store.upsert_document(DocumentRow("v2", "j", "file:///o/2", "ab" * 32, "completed", AT,
                                      source_key="s3://b/a.pdf", previous_doc_id="v1"))
    store.close()
    assert delete("s3://b/a.pdf") == 0
    assert "s3://b/a.pdf" in out.getvalue() and " v2 " in out.getvalue()
    assert "no tombstone published" in out.getvalue()
    with pytest.raises(InputError):
        delete_command(settings, ["s3://b/a.pdf"], tenant="bad tenant!", console=console, publish=False)


def test_the_announcement_comes_before_any_delete_and_a_failed_one_deletes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "completed")
    store.upsert_document_result(DocumentResultRow("v2", "m", "j", "completed", 1, 0, 1, [1.0], "s", AT))

    def refuse(doc_id: str) -> None:
        assert doc_id == "v2"
        raise RuntimeError("broker down")

    try:
        with pytest.raises(RuntimeError):
            delete_source(store, "acme", "s3://b/a.pdf", announce=refuse)
        assert store.get_source("acme", "s3://b/a.pdf") is not None
        assert store.get_document_result("v2", "m") is not None
        told: list[str] = []
        assert delete_source(store, "acme", "s3://b/a.pdf", announce=told.append).results == 1
        assert told == ["v2"] and store.get_document_result("v2", "m") is None
    finally:
        store.close()


def test_a_tombstone_deletes_its_versions_source_once_and_never_a_source_that_started_over(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "completed")
    try:
        assert tombstoned(store, "nope") is None
        found = tombstoned(store, "v1")  # an earlier version names the source too
        assert found is not None and found[0] == "acme" and found[1].doc_id == "v1"
        done = delete_by_tombstone(store, "v1")
        assert done is not None and (done.doc_id, done.versions) == ("v2", 2)
        assert delete_by_tombstone(store, "v1") is None  # redelivered: nothing left to delete
        # the source submitted again after the delete starts over: the old tombstone does not apply to it
        store.upsert_document(DocumentRow("w1", "j", "file:///o/w", "cd" * 32, "completed", AT,
                                          source_key="s3://b/a.pdf"))
        store.upsert_source(SourceRow("acme", "s3://b/a.pdf", "w1", "cd" * 32, "j", AT))
        assert tombstoned(store, "v1") is None and delete_by_tombstone(store, "v1") is None
        assert store.get_source("acme", "s3://b/a.pdf") is not None
        # an upload without a source key: its own results
        store.upsert_document(DocumentRow("u1", "j", "upload://u1", "ef" * 32, "completed", AT))
        store.upsert_document_result(DocumentResultRow("u1", "m", "j", "completed", 1, 0, 1, [1.0], "s", AT))
        gone = delete_by_tombstone(store, "u1")
        assert gone is not None and gone.source_key is None and gone.results == 1
        store.upsert_document(DocumentRow("u2", "j", "upload://u2", "ef" * 32, "chunked", AT))
        with pytest.raises(SourceInFlightError):
            delete_by_tombstone(store, "u2")
    finally:
        store.close()
