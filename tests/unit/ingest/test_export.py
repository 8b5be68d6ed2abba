"""docstream_ingest.export: a job's results streamed as JSON Lines or Parquet, from an in-memory store."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from docstream.errors import InputError
from docstream.store.base import ChunkRow, DocumentResultRow, DocumentRow, JobDocumentRow, JobRow, TaskTally
from docstream.tasks.base import EntitySummary, Mention, TaskRequest
from docstream.tasks.selection import job_task_names, tasks_option
from docstream_ingest.export import (
    CHUNK_SCHEMA,
    DOCUMENT_SCHEMA,
    TASK_CHUNK_SCHEMA,
    TASK_DOCUMENT_SCHEMA,
    chunks_path,
    document_task_results,
    export_results,
    task_path,
)

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

    def list_document_results(self, doc_id: str) -> list[DocumentResultRow]:
        return [row for (doc, _), row in sorted(self.results.items()) if doc == doc_id]

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

    from docstream_cli.ops.results_preview import preview

    out = tmp_path / "results.jsonl"
    export_results(_store(3, chunks_per_doc=2), "j1", out, chunks=True)  # type: ignore[arg-type]
    console = Console(record=True, width=200)

    assert preview(out, console=console) == 0

    text = console.export_text()
    assert f"3 documents in {out}" in text
    assert "d0.pdf" in text and "text 0" not in text


# -- tasks -------------------------------------------------------------------------------

MENTION = Mention("Ada Lovelace", "PERSON", 3, 15, 1, 0.5)
ENTITY = EntitySummary("PERSON", "ada lovelace", 1, (1,))


def _task_store(tasks: tuple[str, ...] = ("embed", "entities", "classify")) -> FakeStore:
    """``_store(3)`` with the job asking for three tasks: d0 has all three results, d1 embed and entities."""
    store = _store(3, options={"model_id": "m", "tasks": tasks_option([TaskRequest(t) for t in tasks]) or ""})
    for doc_id in ("d0", "d1"):
        store.results[(doc_id, "ner@1")] = DocumentResultRow(
            doc_id, "ner@1", "j1", "partial", 2, 1, 10, [], "max=256", T0, task="entities", mentions=(MENTION,),
            entities=(ENTITY,), mentions_truncated=True)
        store.chunks[(doc_id, "ner@1")] = [ChunkRow(doc_id, "ner@1", 0, f"{doc_id}-0", "j1", "text 0", 1, 1, 0, 6, 3,
                                                    [], task="entities", mentions=(MENTION,))]
    store.results[("d0", "cls@1")] = DocumentResultRow(
        "d0", "cls@1", "j1", "completed", 2, 0, 10, [], "max=256", T0, task="classify",
        label_scores={"finance": 0.75, "sport": 0.25}, top_label="finance", top_chunks=(1, 0))
    store.entries[1] = replace(store.entries[1], tasks={"classify": TaskTally("failed")})
    return store


def test_a_jobs_tasks_come_from_its_tasks_option() -> None:
    def job(options: dict[str, str]) -> JobRow:
        return JobRow("j1", "acme", T0, "completed", 1, options=options)

    assert job_task_names(job({})) == ("embed",)
    assert job_task_names(job({"tasks": ""})) == ("embed",)
    assert job_task_names(job({"tasks": tasks_option([TaskRequest("classify"), TaskRequest("risk")]) or ""})) == (
        "classify", "risk")
    for foreign in ("[not json", "embed,entities", '["a"]', '[{"name": "Bad Name"}]', '{"name": "x"}'):
        assert job_task_names(job({"tasks": foreign})) == ("embed",), foreign


def _row(task: str, model_id: str) -> DocumentResultRow:
    return DocumentResultRow("d", model_id, "j", "completed", 1, 0, 1, [], "", T0, task=task)


def test_document_task_results_selects_sorts_and_marks_the_missing() -> None:
    rows = [_row("embed", "e@2"), _row("entities", "n@1"), _row("embed", "e@1")]
    every = document_task_results(rows, tasks=None, job_tasks=("embed", "classify"))
    assert [(t, r.model_id if r else None) for t, r in every] == [
        ("classify", None), ("embed", "e@1"), ("embed", "e@2"), ("entities", "n@1")]
    chosen = document_task_results(rows, tasks=["entities", "risk"], job_tasks=("embed",))
    assert [(t, r.model_id if r else None) for t, r in chosen] == [("entities", "n@1"), ("risk", None)]
    one_model = document_task_results(rows, tasks=None, job_tasks=("embed", "classify"), model_id="e@2")
    assert [(t, r.model_id if r else None) for t, r in one_model] == [("embed", "e@2")]
    assert document_task_results([], tasks=None, job_tasks=("embed", "classify"), model_id="x") == [
        ("embed", None)]


def test_jsonl_of_a_job_of_several_tasks_has_a_record_per_task_with_its_chunks() -> None:
    out = io.BytesIO()
    summary = export_results(_task_store(), "j1", out, chunks=True)  # type: ignore[arg-type]
    lines = _lines(out.getvalue())
    assert [(x["record"], x["doc_id"], x["task"], x["model_id"]) for x in lines] == [
        ("document", "d0", "classify", "cls@1"),
        ("document", "d0", "embed", "m"), ("chunk", "d0", "embed", "m"), ("chunk", "d0", "embed", "m"),
        ("document", "d0", "entities", "ner@1"), ("chunk", "d0", "entities", "ner@1"),
        ("document", "d1", "classify", None),
        ("document", "d1", "embed", "m"), ("chunk", "d1", "embed", "m"), ("chunk", "d1", "embed", "m"),
        ("document", "d1", "entities", "ner@1"), ("chunk", "d1", "entities", "ner@1"),
        ("document", "d2", "classify", None), ("document", "d2", "embed", "m"), ("document", "d2", "entities", None),
    ]
    assert (summary.documents, summary.chunks, summary.tasks) == (9, 6, ())
    assert set(lines[0]) == {"record", *TASK_DOCUMENT_SCHEMA.names}
    assert (lines[0]["label_scores"], lines[0]["top_label"], lines[0]["top_chunks"]) == (
        {"finance": 0.75, "sport": 0.25}, "finance", [1, 0])
    entities = lines[4]
    assert entities["mentions"] == [{"text": "Ada Lovelace", "label": "PERSON", "start": 3, "end": 15, "page": 1,
                                     "score": 0.5}]
    assert entities["entities"] == [{"label": "PERSON", "text": "ada lovelace", "count": 1, "pages": [1]}]
    assert (entities["status"], entities["mentions_truncated"], entities["embedding"]) == ("partial", True, None)
    assert set(lines[5]) == {"record", *TASK_CHUNK_SCHEMA.names} and lines[5]["mentions"] == entities["mentions"]
    # no result: the task's tally in the job, else the document's status, its fields empty
    assert (lines[6]["status"], lines[6]["mentions"], lines[6]["label_scores"]) == ("failed", None, None)
    assert (lines[-1]["status"], lines[-1]["error_code"]) == ("failed", "encrypted")


def test_tasks_filter_and_embed_alone_keeps_the_records_of_before() -> None:
    out = io.BytesIO()
    export_results(_task_store(), "j1", out, tasks=["entities"])  # type: ignore[arg-type]
    assert [(x["doc_id"], x["task"], x["status"]) for x in _lines(out.getvalue())] == [
        ("d0", "entities", "partial"), ("d1", "entities", "partial"), ("d2", "entities", "failed")]
    out = io.BytesIO()
    summary = export_results(_task_store(), "j1", out, tasks=["embed"])  # type: ignore[arg-type]
    embed_only = io.BytesIO()
    export_results(_store(), "j1", embed_only)  # type: ignore[arg-type]
    assert out.getvalue() == embed_only.getvalue() and summary.tasks == ("embed",)
    assert {"task", "mentions"}.isdisjoint(_lines(out.getvalue())[0])
    with pytest.raises(InputError) as info:
        export_results(_task_store(), "j1", io.BytesIO(), tasks=["Bad name"])  # type: ignore[arg-type]
    assert info.value.code == "task_invalid"


def test_a_task_the_job_never_asked_for_has_no_status() -> None:
    out = io.BytesIO()
    export_results(_task_store(("embed", "entities")), "j1", out, tasks=["risk"])  # type: ignore[arg-type]
    assert [(x["task"], x["status"]) for x in _lines(out.getvalue())] == [("risk", None)] * 3


def test_parquet_of_tasks_types_the_task_fields(tmp_path: Path) -> None:
    target = tmp_path / "results.parquet"
    export_results(_task_store(), "j1", target, fmt="parquet", chunks=True, row_group_size=2)  # type: ignore[arg-type]
    documents = pq.ParquetFile(target)
    assert documents.schema_arrow.equals(TASK_DOCUMENT_SCHEMA) and documents.metadata.num_rows == 9
    rows = pq.read_table(target).to_pylist()
    assert rows[0]["label_scores"] == [("finance", 0.75), ("sport", 0.25)]  # an Arrow map reads as pairs
    assert rows[2]["mentions"] == [{"text": "Ada Lovelace", "label": "PERSON", "start": 3, "end": 15, "page": 1,
                                    "score": 0.5}]
    assert rows[2]["entities"] == [{"label": "PERSON", "text": "ada lovelace", "count": 1, "pages": [1]}]
    chunks = pq.ParquetFile(chunks_path(target))
    assert chunks.schema_arrow.equals(TASK_CHUNK_SCHEMA) and chunks.metadata.num_rows == 6
    assert [r["task"] for r in pq.read_table(chunks_path(target)).to_pylist()][:3] == ["embed", "embed", "entities"]


def test_parquet_of_embed_alone_keeps_the_schema_of_before(tmp_path: Path) -> None:
    target = tmp_path / "results.parquet"
    export_results(_task_store(), "j1", target, fmt="parquet", tasks=["embed"])  # type: ignore[arg-type]
    assert pq.ParquetFile(target).schema_arrow.equals(DOCUMENT_SCHEMA)


def test_parquet_of_tasks_to_a_file_per_task(tmp_path: Path) -> None:
    """What ``docstream run --out results.parquet`` writes for a job of several tasks: a file per task."""
    target = tmp_path / "results.parquet"
    summary = export_results(_task_store(), "j1", target, fmt="parquet", chunks=True,  # type: ignore[arg-type]
                             per_task_files=True)
    names = [Path(p).name for p in summary.paths]
    assert names == ["results.classify.parquet", "results.classify.chunks.parquet", "results.embed.parquet",
                     "results.embed.chunks.parquet", "results.entities.parquet", "results.entities.chunks.parquet"]
    assert not target.exists() and all(Path(p).exists() for p in summary.paths)
    for task in ("classify", "embed", "entities"):
        documents = pq.read_table(task_path(target, task))
        assert documents.schema.equals(TASK_DOCUMENT_SCHEMA)
        assert documents.column("task").to_pylist() == [task] * 3 and documents.column("doc_id").to_pylist() == [
            "d0", "d1", "d2"]
    assert pq.read_table(task_path(target, "entities")).column("mentions").to_pylist()[0][0]["text"] == "Ada Lovelace"
    assert pq.read_table(chunks_path(task_path(target, "embed"))).num_rows == 4
    assert pq.read_table(chunks_path(task_path(target, "classify"))).num_rows == 0
    assert (summary.documents, summary.chunks) == (9, 6)


def test_a_file_per_task_keeps_embed_alone_in_one_file_and_needs_a_path(tmp_path: Path) -> None:
    target = tmp_path / "results.parquet"
    summary = export_results(_store(), "j1", target, fmt="parquet", per_task_files=True)  # type: ignore[arg-type]
    assert summary.paths == (str(target),) and pq.ParquetFile(target).schema_arrow.equals(DOCUMENT_SCHEMA)
    with pytest.raises(InputError) as info:
        export_results(_task_store(), "j1", io.BytesIO(), fmt="parquet", per_task_files=True)  # type: ignore[arg-type]
    assert info.value.code == "invalid_output"
