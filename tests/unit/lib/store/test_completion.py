"""store.completion: a completed new version of a source retires its earlier version's results under the same model,
over a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.records import DocumentCompleted
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow
from docstream.store.completion import record_completion, retire_earlier
from docstream.store.sqlite import SqliteStore

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def _chunk(doc_id: str, model_id: str) -> ChunkRow:
    return ChunkRow(doc_id=doc_id, model_id=model_id, chunk_index=0, chunk_id=f"{doc_id}-0", job_id="j1", text="t",
                    page_start=1, page_end=1, char_start=0, char_end=1, token_count=1, embedding=[1.0, 0.0])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    store.upsert_document(DocumentRow("v1", "j1", "file:///o/a", "aa" * 32, "completed", AT, source_key="file:///a"))
    store.upsert_document(DocumentRow("v2", "j2", "file:///o/b", "bb" * 32, "chunked", AT, source_key="file:///a",
                                      previous_doc_id="v1"))
    for model_id in ("m", "other"):
        store.upsert_chunks([_chunk("v1", model_id)])
        store.upsert_document_result(DocumentResultRow("v1", model_id, "j1", "completed", 1, 0, 1, [1.0, 0.0],
                                                       "cs", AT))
    yield store
    store.close()


def _completed(status: str) -> DocumentCompleted:
    return DocumentCompleted(job_id="j2", doc_id="v2", status=status, completed_at=AT, model_id="m", chunk_count=1,
                             failed_chunks=1 if status == "failed" else 0, token_count=1)


@pytest.mark.parametrize("status", ["completed", "partial"])
def test_a_completed_new_version_retires_the_earlier_versions_results_under_its_model(
    store: SqliteStore, status: str
) -> None:
    record_completion(store, _completed(status), AT)
    assert list(store.iter_chunks("v1", "m")) == [] and store.get_document_result("v1", "m") is None
    assert store.count_chunks("v1", "other") == 1  # another model's (another task's) wait for their own
    assert store.get_document_result("v2", "m") is not None
    record_completion(store, _completed(status), AT)  # the record handled again: the same rows
    assert store.get_document("v1") is not None  # the version's document row stays: its job keeps its counts


def test_a_failed_new_version_leaves_the_earlier_versions_results(store: SqliteStore) -> None:
    record_completion(store, _completed("failed"), AT)
    assert store.count_chunks("v1", "m") == 1 and store.get_document_result("v1", "m") is not None


def test_a_version_that_failed_is_passed_through_and_the_completed_one_before_it_retired(store: SqliteStore) -> None:
    # v2 failed (its result says so); v3 completes: v2's rows and v1's go, the walk stops at v1, which had completed
    store.upsert_document_result(DocumentResultRow("v2", "m", "j2", "failed", 1, 1, 0, [], "cs", AT))
    store.upsert_document(DocumentRow("v3", "j3", "file:///o/c", "cc" * 32, "chunked", AT, source_key="file:///a",
                                      previous_doc_id="v2"))
    record_completion(store, replace(_completed("completed"), doc_id="v3", job_id="j3"), AT)
    assert store.get_document_result("v2", "m") is None
    assert store.count_chunks("v1", "m") == 0 and store.get_document_result("v1", "m") is None
    assert store.count_chunks("v1", "other") == 1
    assert retire_earlier(store, "v3", "m") == 1  # v3's own result is completed: the walk stops there
