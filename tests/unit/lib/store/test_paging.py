"""Keyset paging, limits and the shared TableStore methods, checked against an in-memory backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from docstream.errors import RetryableError, StoreError
from docstream.store.base import (
    ApiKeyRow,
    ChunkRow,
    DocumentResultRow,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    TaskTally,
)
from docstream.store.paging import at_least_one, keyset_pages, keyset_rows
from docstream.store.rows import (
    CHUNK_ROWS,
    CHUNKS,
    DOCUMENT_RESULTS,
    JOB_DOCUMENTS,
    JOBS,
    ColumnEncoding,
    Columns,
    Table,
)
from docstream.store.table_store import MAX_RESULTS_PER_DOCUMENT, TableStore
from docstream.tenants.usage import Usage

T0 = datetime(2024, 5, 1, 12, tzinfo=UTC)


class _Fetches:
    """A sorted list of keys served page by page, recording each (after, limit) asked."""

    def __init__(self, keys: Sequence[int]) -> None:
        self.keys = sorted(keys)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, after: int, limit: int) -> list[int]:
        self.calls.append((after, limit))
        return [k for k in self.keys if k > after][:limit]


def _same(key: int) -> int:
    return key


@pytest.mark.parametrize(("count", "pages"), [(0, [0]), (1, [1]), (3, [3, 0]), (7, [3, 3, 1]), (6, [3, 3, 0])])
def test_pages_stop_at_the_first_short_page(count: int, pages: list[int]) -> None:
    fetch = _Fetches(range(10, 10 + count))
    found = list(keyset_pages(fetch, start=-1, key=_same, page_size=3))
    assert [len(page) for page in found] == pages
    assert [k for page in found for k in page] == fetch.keys
    assert [after for after, _ in fetch.calls] == [-1, *[page[-1] for page in found[:-1]]]
    assert {limit for _, limit in fetch.calls} == {3}


def test_rows_are_fetched_lazily_but_page_size_is_checked_at_once() -> None:
    fetch = _Fetches([1, 2, 3])
    iterator = keyset_rows(fetch, start=0, key=_same, page_size=2)
    assert fetch.calls == []
    assert next(iterator) == 1
    assert fetch.calls == [(0, 2)]
    assert list(iterator) == [2, 3]
    with pytest.raises(ValueError, match="page_size must be at least 1"):
        keyset_rows(fetch, start=0, key=_same, page_size=0)


def test_at_least_one() -> None:
    at_least_one("limit", 1)
    with pytest.raises(ValueError, match=r"^limit must be at least 1$"):
        at_least_one("limit", 0)


def _job(job_id: str) -> JobRow:
    return JobRow(job_id=job_id, tenant="acme", created_at=T0, status="running", document_count=0)


def _job_document(doc_id: str) -> JobDocumentRow:
    return JobDocumentRow(job_id="job", doc_id=doc_id, status="submitted", updated_at=T0)


def _chunk(index: int) -> ChunkRow:
    return ChunkRow(doc_id="doc", model_id="m", chunk_index=index, chunk_id=f"c{index}", job_id="job", text="t",
                    page_start=0, page_end=0, char_start=0, char_end=0, token_count=1, embedding=[])


class InMemoryTableStore(TableStore):
    """TableStore over dicts of column values: what a backend supplies, and nothing more."""

    _encoding = ColumnEncoding(
        timestamp=lambda value: value, read_timestamp=lambda value: value, text=lambda value: value or None,
        options=dict, read_options=dict, counts=dict, read_counts=lambda value: dict(value or {}),
        structure=lambda value: value, read_structure=lambda value: value,
    )

    def __init__(self, page_size: int) -> None:
        self._page_size = page_size
        self.tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
        self.queries: list[tuple[str, object, int]] = []

    def _row(self, table: Table, key: Sequence[Any]) -> dict[str, Any]:
        empty = dict.fromkeys(table.columns + table.element_columns) | dict(zip(table.key, key, strict=True))
        return self.tables.setdefault(table.name, {}).setdefault(tuple(key), empty)

    def _upsert(self, table: Table, values: Sequence[Any], operation: str) -> None:
        row = dict(zip(table.columns, values, strict=True))
        self._row(table, [row[k] for k in table.key]).update(row)

    def _update(self, table: Table, key: Sequence[Any], columns: Sequence[str], values: Sequence[Any],
                operation: str) -> None:
        self._row(table, key).update(zip(columns, values, strict=True))

    def _set_entry(self, table: Table, key: Sequence[Any], column: str, entry: tuple[str, str],
                   also: Mapping[str, Any], created: Mapping[str, Any], operation: str) -> None:
        row = self._row(table, key)
        row[column] = {**(row[column] or {}), entry[0]: entry[1]}
        row.update(also)

    def _document_results_of(self, doc_id: str, limit: int) -> list[dict[str, Any]]:
        return self._sorted(DOCUMENT_RESULTS, lambda r: r["doc_id"] == doc_id, "model_id", "", limit)

    def _get(self, table: Table, key: Sequence[Any], operation: str) -> Columns | None:
        return self.tables.get(table.name, {}).get(tuple(key))

    def _put_if(self, table: Table, values: Sequence[Any], expected: Mapping[str, Any] | None,
                operation: str) -> tuple[bool, Columns | None]:
        found = self._get(table, table.key_of(values), operation)
        if (found is None) != (expected is None) or (
                found is not None and expected is not None and any(found[c] != v for c, v in expected.items())):
            return False, found
        self._upsert(table, values, operation)
        return True, None

    def _delete(self, table: Table, key: Sequence[Any], operation: str) -> None:
        self.tables.get(table.name, {}).pop(tuple(key), None)

    def _sorted(self, table: Table, match: Callable[[dict[str, Any]], bool], key: str, after: object,
                limit: int) -> list[dict[str, Any]]:
        found = sorted((r for r in self.tables.get(table.name, {}).values() if match(r)), key=lambda r: r[key])
        self.queries.append((table.name, after, limit))
        return [r for r in found if r[key] > after][:limit]

    def _jobs_page(self, tenant: str, after: str, limit: int) -> list[dict[str, Any]]:
        return self._sorted(JOBS, lambda r: r["tenant"] == tenant, "job_id", after, limit)

    def _job_documents_page(self, job_id: str, after: str, limit: int) -> list[dict[str, Any]]:
        return self._sorted(JOB_DOCUMENTS, lambda r: r["job_id"] == job_id, "doc_id", after, limit)

    def _chunks_page(self, doc_id: str, model_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        match = lambda r: (r["doc_id"], r["model_id"]) == (doc_id, model_id)  # noqa: E731
        return self._sorted(CHUNKS, match, "chunk_index", after, limit)


def _filled(page_size: int) -> tuple[InMemoryTableStore, list[JobRow], list[JobDocumentRow], list[ChunkRow]]:
    store = InMemoryTableStore(page_size)
    jobs = [_job(f"job-{i}") for i in range(5)]
    documents = [_job_document(f"doc-{i}") for i in range(5)]
    chunks = [_chunk(i) for i in range(5)]
    for job, document, chunk in zip(reversed(jobs), reversed(documents), reversed(chunks), strict=True):
        store.upsert_job(job)
        store.upsert_job_document(document)
        values = CHUNK_ROWS.to_columns(chunk, store._encoding, encoded={"embedding": b""})
        store._upsert(CHUNKS, values, "upsert_chunks")
    store.queries.clear()
    return store, jobs, documents, chunks


def test_list_reads_check_the_limit_and_start_after_the_token() -> None:
    store, jobs, documents, _ = _filled(page_size=2)
    assert store.list_jobs("acme", limit=2) == jobs[:2]
    assert store.list_jobs("acme", limit=2, after="job-1") == jobs[2:4]
    assert store.list_jobs("other") == []
    assert store.list_job_documents("job", limit=10, after="doc-3") == documents[4:]
    assert store.queries == [("jobs", "", 2), ("jobs", "job-1", 2), ("jobs", "", 50), ("job_documents", "doc-3", 10)]
    for read in (store.list_jobs, store.list_job_documents):
        with pytest.raises(ValueError, match=r"^limit must be at least 1$"):
            read("x", limit=0)


def test_iter_reads_page_by_key() -> None:
    store, _, documents, chunks = _filled(page_size=2)
    assert list(store.iter_chunks("doc", "m")) == chunks
    assert store.queries == [("chunks", -1, 2), ("chunks", 1, 2), ("chunks", 3, 2)]
    assert list(store.iter_job_documents("job", page_size=5)) == documents
    assert store.queries[-2:] == [("job_documents", "", 5), ("job_documents", "doc-4", 5)]
    with pytest.raises(ValueError, match=r"^page_size must be at least 1$"):
        store.iter_job_documents("job", page_size=0)


def test_rows_read_back_by_primary_key() -> None:
    store, jobs, _, _ = _filled(page_size=2)
    assert store.get_job("job-3") == jobs[3]
    assert store.get_job("job-9") is None
    document = DocumentRow(doc_id="doc", job_id="job", source_uri="u", content_sha256="s", status="chunked",
                           updated_at=T0, filename="")
    store.upsert_document(document)
    assert store.get_document("doc") == replace(document, filename=None)
    result = DocumentResultRow(doc_id="doc", model_id="m", job_id="job", status="completed", chunk_count=1,
                               failed_chunks=0, token_count=3, embedding=[0.5], chunker_settings="c", completed_at=T0)
    store.upsert_document_result(result)
    assert store.get_document_result("doc", "m") == result
    assert store.get_document_result("doc", "other") is None
    key = ApiKeyRow(key_id="k", tenant="acme", key_hash="h", created_at=T0)
    store.upsert_api_key(key)
    assert store.get_api_key("k") == key


def test_list_document_results_reads_a_bounded_page_by_model_id() -> None:
    store = InMemoryTableStore(page_size=2)
    base = DocumentResultRow(doc_id="doc", model_id="m", job_id="job", status="completed", chunk_count=1,
                             failed_chunks=0, token_count=3, embedding=[], chunker_settings="c", completed_at=T0)
    models = [f"m{i:03d}" for i in range(MAX_RESULTS_PER_DOCUMENT + 3)]
    for model_id in reversed(models):
        store.upsert_document_result(replace(base, model_id=model_id))
    found = store.list_document_results("doc")
    assert [r.model_id for r in found] == models[:MAX_RESULTS_PER_DOCUMENT]
    assert store.queries[-1] == ("document_results", "", MAX_RESULTS_PER_DOCUMENT)


def test_job_document_tasks_survive_the_row_upsert_and_the_status_update() -> None:
    store, _, documents, _ = _filled(page_size=2)
    tally = TaskTally("partial", Usage(chunks=2))
    store.upsert_job_document_task("job", "doc-1", "entities", tally, T0)
    store.upsert_job_document(replace(documents[1], status="completed"))
    store.update_job_document_status("job", "doc-1", "partial", "model_error", None, T0)
    assert store.list_job_documents("job", after="doc-0", limit=1) == [
        replace(documents[1], status="partial", error_code="model_error", tasks={"entities": tally})]


# -- conditional writes ------------------------------------------------------------------


def _completed(row: DocumentRow) -> bool:
    return row.status == "completed"


class _MovedOnAtTheWrite(InMemoryTableStore):
    """Another writer moves the documents row on to each of ``moves`` in turn, just before each conditional write."""

    def __init__(self, moves: list[str]) -> None:
        super().__init__(page_size=2)
        self.moves = moves
        self.writes = 0

    def _put_if(self, table: Table, values: Sequence[Any], expected: Mapping[str, Any] | None,
                operation: str) -> tuple[bool, Columns | None]:
        self.writes += 1
        if self.moves:
            self._update(table, table.key_of(values), ("status",),
                         (self.moves.pop(0),), "another writer")
        return super()._put_if(table, values, expected, operation)


def test_a_conditional_write_decides_again_on_each_row_another_writer_left_and_keeps_the_one_to_stay() -> None:
    store = _MovedOnAtTheWrite([])
    document = DocumentRow(doc_id="doc", job_id="job", source_uri="u", content_sha256="s", status="submitted",
                           updated_at=T0)
    store.upsert_document(document)
    store.moves = ["chunking", "completed"]

    assert not store.write_document_unless(replace(document, status="chunked"), _completed)

    assert store.writes == 2
    assert store.get_document("doc") == replace(document, status="completed")


def test_a_conditional_write_that_loses_every_round_fails_with_a_retryable_code() -> None:
    store = _MovedOnAtTheWrite(["chunking", "submitted"] * 8)
    document = DocumentRow(doc_id="doc", job_id="job", source_uri="u", content_sha256="s", status="submitted",
                           updated_at=T0)
    store.upsert_document(document)

    with pytest.raises(StoreError) as raised:
        store.write_document_unless(replace(document, status="chunked"), _completed)

    assert raised.value.code == "store_cas_contended" and isinstance(raised.value, RetryableError)
    assert store.writes == 8
