"""Deleting a source over a real SQLite store (docstream.store.sources), by name, by an intake-topic tombstone, and
`docstream delete`'s exit statuses."""

from __future__ import annotations

import io
import random
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from docstream.errors import InputError
from docstream.settings import Settings
from docstream.store.base import DocumentResultRow, DocumentRow, JobRow
from docstream.store.sources import advance_source, delete_by_tombstone, delete_source, enforce, fence, tombstoned
from docstream.store.sqlite import SqliteStore
from docstream_cli.ops.delete import delete_command, source_key_of

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


def _version(store: SqliteStore, doc_id: str, status: str = "completed", *, job: str = "j",
             key: str = "s3://b/a.pdf") -> str | None:
    """Submit a version of a source as the intake does (``advance_source``); the version it follows."""
    previous, _ = advance_source(
        store, "acme", key, doc_id, content_sha256="ab" * 32, job_id=job, now=AT,
        write_document=lambda prev: store.upsert_document(DocumentRow(
            doc_id, job, f"file:///o/{doc_id}", "ab" * 32, status, AT,  # type: ignore[arg-type]
            source_key=key, previous_doc_id=prev)))
    return previous


def _store(tmp_path: Path, *statuses: str) -> SqliteStore:
    """A store with a source whose versions v1..vN have these statuses (vN current, each following the one before)."""
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    store.upsert_job(JobRow("j", "acme", AT, "running", len(statuses)))
    for n, status in enumerate(statuses, start=1):
        _version(store, f"v{n}", status)
    return store


def _result(store: SqliteStore, doc_id: str, status: str = "completed", model: str = "m") -> None:
    store.upsert_document_result(DocumentResultRow(doc_id, model, "j", status, 1, 0, 1, [1.0], "s", AT))  # type: ignore[arg-type]


def test_versions_get_generations_in_submission_order_and_a_redelivery_keeps_its_place(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "completed", "chunked")
    try:
        rows = [store.get_document(f"v{n}") for n in (1, 2, 3)]
        assert [(r.generation, r.previous_doc_id) for r in rows if r] == [(1, None), (2, "v1"), (3, "v2")]
        assert _version(store, "v2") == "v1"  # submitted again: no new generation, v3 stays current
        source = store.get_source("acme", "s3://b/a.pdf")
        assert source is not None and (source.doc_id, source.generation) == ("v3", 3)
    finally:
        store.close()


class _ReadBeforeTheOtherPass(SqliteStore):
    """A store whose next read of one documents row answers as it stood before another pass advanced it: none."""

    stale: str | None = None

    def get_document(self, doc_id: str) -> DocumentRow | None:
        if doc_id == self.stale:
            self.stale = None
            return None
        return super().get_document(doc_id)


def test_a_version_another_pass_made_current_since_its_read_keeps_its_place_and_its_row(tmp_path: Path) -> None:
    # two passes of an external producer's record: the other one advanced v2 (and the pipeline completed it)
    # after this one read v2's row; this one must neither write its row again nor follow v2 with v2
    store = _ReadBeforeTheOtherPass(tmp_path / "s.db")
    store.migrate()
    try:
        _version(store, "v1")
        _version(store, "v2")
        store.stale = "v2"
        assert _version(store, "v2", "submitted") == "v1"
        row = store.get_document("v2")
        assert row is not None and (row.status, row.previous_doc_id, row.generation) == ("completed", "v1", 2)
        source = store.get_source("acme", "s3://b/a.pdf")
        assert source is not None and (source.doc_id, source.generation) == ("v2", 2)
    finally:
        store.close()


def test_a_current_version_whose_row_is_gone_is_written_again_never_following_itself(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "completed")
    try:
        store.delete_document_rows("v2")
        with store._connection() as conn:  # the documents row itself, as a cleanup by hand leaves it
            conn.execute("DELETE FROM documents WHERE doc_id = 'v2'")
        assert _version(store, "v2", "submitted") is None
        row = store.get_document("v2")
        assert row is not None and (row.status, row.previous_doc_id, row.generation) == ("submitted", None, 3)
    finally:
        store.close()


def test_concurrent_submissions_of_one_source_never_fork_its_chain(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed")
    ready = threading.Barrier(8)

    def submit(n: int) -> None:
        ready.wait()
        _version(store, f"c{n}", "submitted")

    try:
        threads = [threading.Thread(target=submit, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        source = store.get_source("acme", "s3://b/a.pdf")
        assert source is not None and source.generation == 9
        chain = []
        doc_id: str | None = source.doc_id
        while doc_id is not None:
            row = store.get_document(doc_id)
            assert row is not None
            chain.append((row.generation, doc_id))
            doc_id = row.previous_doc_id
        # one chain through every version, generations 9 down to 1: no version is on a branch of its own
        assert [g for g, _ in chain] == list(range(9, 0, -1))
        assert {d for _, d in chain} == {"v1", *(f"c{n}" for n in range(8))}
    finally:
        store.close()


def test_deletes_racing_submissions_leave_each_version_deleted_or_current_never_orphaned(tmp_path: Path) -> None:
    """Submissions and deletes of one source at once, in a random interleaving: each delete is ordered with each
    submission by the sources row's compare-and-set. Afterwards every version is either deleted (marked, below the
    row's deleted_through) or in the live chain the row leads to; none is both, none is neither."""
    store = _store(tmp_path, "completed")
    rng = random.Random(44)
    kinds = ["submit"] * 12 + ["delete"] * 4
    rng.shuffle(kinds)
    ready = threading.Barrier(len(kinds))
    errors: list[BaseException] = []

    def act(n: int, kind: str) -> None:
        ready.wait()
        try:
            if kind == "submit":
                _version(store, f"r{n}", "completed")
            else:
                delete_source(store, "acme", "s3://b/a.pdf")
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    try:
        threads = [threading.Thread(target=act, args=(n, kind)) for n, kind in enumerate(kinds)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        source = store.get_source("acme", "s3://b/a.pdf")
        assert source is not None and source.generation == 13  # v1 and 12 submissions, one generation each
        live: set[str] = set()
        doc_id: str | None = source.doc_id if source.live else None
        while doc_id is not None:
            row = store.get_document(doc_id)
            assert row is not None and row.generation > (source.deleted_through or 0)  # type: ignore[operator]
            live.add(doc_id)
            doc_id = row.previous_doc_id
        for name in ["v1", *(f"r{n}" for n, kind in enumerate(kinds) if kind == "submit")]:
            row = store.get_document(name)
            assert row is not None and row.generation is not None
            deleted = fence(store, row, "acme") == "source_deleted"
            assert deleted != (name in live), name
            assert deleted == (row.generation <= (source.deleted_through or 0)), name
    finally:
        store.close()


def test_a_version_that_completes_after_a_newer_one_is_retired_as_it_is_written(tmp_path: Path) -> None:
    store = _store(tmp_path, "chunked", "chunked")
    try:
        _result(store, "v2")  # v2 completed first
        _result(store, "v1")  # then v1's result lands
        assert fence(store, store.get_document("v1"), "acme", "m") == "version_retired"  # type: ignore[arg-type]
        assert enforce(store, "v1", "acme", "m") == "version_retired"
        assert store.get_document_result("v1", "m") is None and store.get_document_result("v2", "m") is not None
        assert enforce(store, "v2", "acme", "m") is None
        _result(store, "v1", model="other")  # retirement is per model: v2 has no result under "other"
        assert enforce(store, "v1", "acme", "other") is None
    finally:
        store.close()


def test_a_delete_is_final_for_versions_in_flight_and_their_writes_after_it(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "chunked")  # v2 still in flight
    _result(store, "v1")
    try:
        done = delete_source(store, "acme", "s3://b/a.pdf")
        assert (done.doc_id, done.versions, done.results) == ("v2", 2, 1)
        assert store.get_document_result("v1", "m") is None
        _result(store, "v2")  # v2's completion lands after the delete: its check after the write takes it back
        assert enforce(store, "v2", "acme", "m") == "source_deleted"
        assert store.get_document_result("v2", "m") is None
        source = store.get_source("acme", "s3://b/a.pdf")
        assert source is not None and not source.live and source.deleted_through == 2
        # submitted again: a first version of the next generation, live; the deleted ones stay deleted
        assert _version(store, "w1") is None
        assert store.get_document("w1").generation == 3  # type: ignore[union-attr]
        assert _version(store, "v2") == "v1"  # a deleted version submitted again keeps its place: not current
        assert store.get_source("acme", "s3://b/a.pdf").doc_id == "w1"  # type: ignore[union-attr]
        _result(store, "v2")
        assert enforce(store, "v2", "acme", "m") == "source_deleted"
        assert enforce(store, "w1", "acme", "m") is None
    finally:
        store.close()


def test_docstream_delete_says_what_it_did_and_exits_by_the_worst_outcome(tmp_path: Path) -> None:
    settings = Settings().with_overrides(store={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    _store(tmp_path, "completed", "chunked").close()  # the current version still in flight: deleted all the same
    out = io.StringIO()
    console = Console(file=out, width=200)

    def delete(*sources: str, **options: object) -> int:  # a docstream run's store: no broker, no tombstone
        return delete_command(settings, list(sources), tenant="acme", console=console, publish=False,
                              **options)  # type: ignore[arg-type]

    assert delete("s3://b/a.pdf", confirm=lambda _: False) == 2
    assert delete("s3://b/none.pdf") == 2
    assert delete("s3://b/a.pdf") == 0
    assert "s3://b/a.pdf" in out.getvalue() and " v2 " in out.getvalue()
    assert "no tombstone published" in out.getvalue()
    assert delete("s3://b/a.pdf") == 0  # run again: done again, nothing left
    with pytest.raises(InputError):
        delete_command(settings, ["s3://b/a.pdf"], tenant="bad tenant!", console=console, publish=False)


def test_the_store_is_deleted_before_the_announcement_and_a_failed_one_is_announced_again(tmp_path: Path) -> None:
    store = _store(tmp_path, "completed", "completed")
    _result(store, "v2")

    def refuse(doc_id: str) -> None:
        assert doc_id == "v2"
        assert store.get_document_result("v2", "m") is None  # the sinks hear of it once the store holds nothing
        raise RuntimeError("broker down")

    try:
        with pytest.raises(RuntimeError):
            delete_source(store, "acme", "s3://b/a.pdf", announce=refuse)
        told: list[str] = []
        assert delete_source(store, "acme", "s3://b/a.pdf", announce=told.append).versions == 2
        assert told == ["v2"]
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
        _version(store, "w1")
        _result(store, "w1")
        assert delete_by_tombstone(store, "v1") is None
        assert store.get_source("acme", "s3://b/a.pdf").live  # type: ignore[union-attr]
        assert store.get_document_result("w1", "m") is not None
        # an upload without a source key: its own results, in flight or not, and a write after it goes again
        store.upsert_document(DocumentRow("u1", "j", "upload://u1", "ef" * 32, "chunked", AT))
        _result(store, "u1")
        gone = delete_by_tombstone(store, "u1")
        assert gone is not None and gone.source_key is None and gone.results == 1
        _result(store, "u1")
        assert enforce(store, "u1", "acme", "m") == "source_deleted"
        assert store.get_document_result("u1", "m") is None
        assert store.get_document("u1").deleted_at is not None  # type: ignore[union-attr]
        store.upsert_document(DocumentRow("u1", "j", "upload://u1", "ef" * 32, "completed", AT))  # a stale upsert
        assert store.get_document("u1").deleted_at is not None  # type: ignore[union-attr]
    finally:
        store.close()
