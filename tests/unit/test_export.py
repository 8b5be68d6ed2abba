"""docstream.export: a job's results streamed as JSON Lines or Parquet, from an in-memory store."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from docstream.errors import InputError
from docstream.export import CHUNK_SCHEMA, DOCUMENT_SCHEMA, chunks_path, export_results
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, JobRow

T0 = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)


@dataclass
class FakeStore:
    """The read side of a ResultStore in dicts; counts how far the job's documents were pulled."""

    jobs: dict[str, JobRow] = field(default_factory=dict)
    entries: list[JobDocumentRow] = field(default_factory=list)
    documents: dict[str, DocumentRow] = field(default_factory=dict)
    results: dict[tuple[str, str], DocumentResultRow] = field(default_factory=dict)
    chunks: dict[tuple[str, str], list[ChunkRow]] = field(default_factory=dict)
    pulled: int = 0

    def get_job(self, job_id: str) -> JobRow | None:
        return self.jobs.get(job_id)

    def iter_job_documents(self, job_id: str, *, page_size: int = 500) -> Iterator[JobDocumentRow]:
        for entry in self.entries:
            if entry.job_id == job_id:
                self.pulled += 1
                yield entry

    def get_document(self, doc_id: str) -> DocumentRow | None:
        return self.documents.get(doc_id)

    def get_document_result(self, doc_id: str, model_id: str) -> DocumentResultRow | None:
        return self.results.get((doc_id, model_id))

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        yield from self.chunks.get((doc_id, model_id), [])


def _store(count: int = 3, *, chunks_per_doc: int = 2, options: dict[str, str] | None = None) -> FakeStore:
    store = FakeStore()
    job_options = {"model_id": "m"} if options is None else options
    store.jobs["j1"] = JobRow("j1", "acme", T0, "completed", count, options=job_options)
    for i in range(count):
        doc_id = f"d{i}"
        failed = i == count - 1
        store.entries.append(JobDocumentRow("j1", doc_id, "failed" if failed else "completed", T0,
                                            filename=f"{doc_id}.pdf", error_code="encrypted" if failed else None))
        store.documents[doc_id] = DocumentRow(doc_id, "j1", f"file:///{doc_id}.pdf", "ab" * 32,
                                              "failed" if failed else "completed", T0, media_type="application/pdf",
                                              filename=f"{doc_id}.pdf", page_count=2, error_code=None,
                                              error="password" if failed else None)
        if failed:
            continue
        store.results[(doc_id, "m")] = DocumentResultRow(doc_id, "m", "j1", "completed", chunks_per_doc, 0, 10 * i,
                                                         [0.5, float(i)], "max=256", T0, "ab" * 32)
        store.chunks[(doc_id, "m")] = [
            ChunkRow(doc_id, "m", c, f"{doc_id}-{c}", "j1", f"text {c}", 1, 2, 0, 6, 3, [1.0, float(c)])
            for c in range(chunks_per_doc)
        ]
    return store


def _lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines()]


def test_jsonl_documents_then_their_chunks_in_order() -> None:
    out = io.BytesIO()
    summary = export_results(_store(), "j1", out, chunks=True)  # type: ignore[arg-type]
    lines = _lines(out.getvalue())
    assert [(x["record"], x["doc_id"], x.get("chunk_index")) for x in lines] == [
        ("document", "d0", None), ("chunk", "d0", 0), ("chunk", "d0", 1),
        ("document", "d1", None), ("chunk", "d1", 0), ("chunk", "d1", 1),
        ("document", "d2", None),
    ]
    assert (summary.documents, summary.chunks, summary.model_id, summary.paths) == (3, 4, "m", ())
    first = lines[0]
    assert set(first) == {"record", *DOCUMENT_SCHEMA.names}
    assert (first["status"], first["embedding"], first["completed_at"]) == ("completed", [0.5, 0.0],
                                                                           "2024-05-17T12:00:00+00:00")
    assert (first["filename"], first["source_uri"], first["chunk_count"]) == ("d0.pdf", "file:///d0.pdf", 2)
    failed = lines[-1]
    assert (failed["status"], failed["error_code"], failed["error"], failed["embedding"]) == (
        "failed", "encrypted", "password", None)
    assert set(lines[1]) == {"record", *CHUNK_SCHEMA.names}
    assert lines[1]["text"] == "text 0" and lines[1]["embedding"] == [1.0, 0.0]


def test_jsonl_without_chunks_has_only_documents() -> None:
    out = io.BytesIO()
    export_results(_store(), "j1", out)  # type: ignore[arg-type]
    assert {x["record"] for x in _lines(out.getvalue())} == {"document"}


class _WatchingStream(io.BytesIO):
    """Notes how many documents the store had handed out at each write."""

    def __init__(self, store: FakeStore) -> None:
        super().__init__()
        self.store = store
        self.pulled_at_write: list[int] = []

    def write(self, data: Any) -> int:
        self.pulled_at_write.append(self.store.pulled)
        return super().write(data)


def test_jsonl_streams_one_document_at_a_time() -> None:
    store = _store(50, chunks_per_doc=1)
    out = _WatchingStream(store)
    export_results(store, "j1", out)  # type: ignore[arg-type]
    assert out.pulled_at_write[:3] == [1, 2, 3]  # written before the next document is read


def test_parquet_writes_bounded_row_groups_and_a_chunks_file(tmp_path: Path) -> None:
    store = _store(7, chunks_per_doc=3)
    target = tmp_path / "results.parquet"
    summary = export_results(store, "j1", target, fmt="parquet", chunks=True, row_group_size=2)  # type: ignore[arg-type]
    assert summary.paths == (str(target), str(chunks_path(target)))
    documents = pq.ParquetFile(target)
    assert documents.metadata.num_row_groups == 4 and documents.metadata.num_rows == 7
    assert documents.schema_arrow.equals(DOCUMENT_SCHEMA)
    table = pq.read_table(target).to_pylist()
    assert [r["doc_id"] for r in table] == [f"d{i}" for i in range(7)]
    assert table[1]["embedding"] == [0.5, 1.0] and table[6]["embedding"] is None
    assert table[0]["completed_at"] == T0
    chunks = pq.ParquetFile(chunks_path(target))
    assert chunks.metadata.num_rows == 18 and chunks.metadata.num_row_groups == 9
    assert chunks.schema_arrow.equals(CHUNK_SCHEMA)


def test_parquet_documents_to_a_stream(tmp_path: Path) -> None:
    out = io.BytesIO()
    export_results(_store(), "j1", out, fmt="parquet")  # type: ignore[arg-type]
    assert pq.read_table(io.BytesIO(out.getvalue())).num_rows == 3


def test_parquet_chunks_need_a_path() -> None:
    with pytest.raises(InputError) as info:
        export_results(_store(), "j1", io.BytesIO(), fmt="parquet", chunks=True)  # type: ignore[arg-type]
    assert info.value.code == "invalid_output"


def test_model_comes_from_the_argument_the_job_or_the_default() -> None:
    out = io.BytesIO()
    summary = export_results(_store(), "j1", out, model_id="other")  # type: ignore[arg-type]
    assert summary.model_id == "other"
    assert all(x["embedding"] is None for x in _lines(out.getvalue()))  # no results for that model
    summary = export_results(_store(options={}), "j1", io.BytesIO(), default_model_id="m")  # type: ignore[arg-type]
    assert summary.model_id == "m"
    with pytest.raises(InputError) as info:
        export_results(_store(options={}), "j1", io.BytesIO())  # type: ignore[arg-type]
    assert info.value.code == "model_unknown"


def test_unknown_job_and_format_are_refused() -> None:
    with pytest.raises(InputError) as info:
        export_results(_store(), "nope", io.BytesIO())  # type: ignore[arg-type]
    assert info.value.code == "job_not_found"
    with pytest.raises(InputError) as info:
        export_results(_store(), "j1", io.BytesIO(), fmt="csv")  # type: ignore[arg-type]
    assert info.value.code == "invalid_format"


def test_the_results_preview_counts_and_shows_documents_not_their_chunks(tmp_path: Path) -> None:
    from rich.console import Console

    from docstream.results_preview import preview

    out = tmp_path / "results.jsonl"
    export_results(_store(3, chunks_per_doc=2), "j1", out, chunks=True)  # type: ignore[arg-type]
    console = Console(record=True, width=200)

    assert preview(out, console=console) == 0

    text = console.export_text()
    assert f"3 documents in {out}" in text
    assert "d0.pdf" in text and "text 0" not in text
