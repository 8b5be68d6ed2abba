"""The reducer with tasks: each (document, model_id) folds with its task's fold, and a job's document counts once
every task its job asked for is terminal. Pure folds and in-memory tables; no broker."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from docstream.records import ChunkResult, JobStatus
from docstream.store import JobRow
from docstream.store.base import TaskTally
from docstream.tasks.base import DocumentOutput, FoldInput, TaskOutputError, TaskRequest
from docstream.tasks.selection import tasks_option
from docstream.tenants.usage import Usage, across_tasks
from docstream_reducer.aggregation import ANY_TASK, DocumentState, DocumentTally, DocumentTasks, apply, decode_entry
from tests.fixtures.clock import FakeClock
from tests.unit.reducer.test_agents import (
    BY_JOB,
    JOBS,
    T0,
    FakeSink,
    FakeStore,
    _jobs,
    _msg,
)


class _WordsFold:
    """A user-style fold: the set of words the chunks reported, and their token-weighted count."""

    def empty(self) -> Any:
        return {"words": [], "w": 0}

    def add(self, state: Any, chunk: FoldInput) -> Any:
        if not isinstance(chunk.output, dict):
            raise TaskOutputError("not a dict")
        words = sorted(set(state["words"]) | set(chunk.output["words"]))
        return {"words": words, "w": state["w"] + max(chunk.token_count, 1)}

    def finish(self, state: Any, *, chunk_count: int) -> DocumentOutput:
        return DocumentOutput(output={"words": state["words"], "weight": state["w"], "chunks": chunk_count})


def _result(index: int, count: int, words: list[str], *, ok: bool = True) -> ChunkResult:
    return ChunkResult(
        job_id="j1", doc_id="d1", chunk_id=f"c{index}", chunk_index=index, chunk_count=count, model_id="words/1",
        status="ok" if ok else "failed", token_count=index + 1, page_start=1, page_end=1,
        embedded_at=T0 + timedelta(seconds=index), task="words", tasks=["embed", "words"],
        output=json.dumps({"words": words}) if ok else None, error_code=None if ok else "model_error",
    )


def test_a_task_fold_completes_its_document_whatever_the_order_and_however_often_chunks_arrive() -> None:
    fold = _WordsFold()
    results = [_result(0, 3, ["b", "a"]), _result(1, 3, ["c"]), _result(2, 3, ["a"])]
    outputs = set()
    for order in itertools.permutations(results):
        state: Any = None
        done = []
        for record in [*order, order[0], order[1]]:  # redelivered chunks change nothing
            state, completed = apply(state, record, fold)
            if state is not None:
                state = decode_entry(state.to_json())  # through the table's JSON, as in the service
            if completed is not None:
                done.append(completed)
        assert len(done) == 1
        completed = done[0]
        assert (completed.task, completed.tasks, completed.status, completed.embedding) == (
            "words", ["embed", "words"], "completed", [])
        outputs.add(completed.output)
    assert outputs == {json.dumps({"words": ["a", "b", "c"], "weight": 6, "chunks": 3}, separators=(",", ":"))}


def test_a_failed_chunk_is_not_folded_and_a_bad_output_is_refused() -> None:
    fold = _WordsFold()
    state, _ = apply(None, _result(0, 2, ["a"]), fold)
    state, completed = apply(state, _result(1, 2, [], ok=False), fold)
    assert completed is not None and completed.status == "partial" and completed.failed_chunks == 1
    assert json.loads(completed.output or "")["words"] == ["a"]
    with pytest.raises(TaskOutputError):
        apply(None, replace(_result(0, 2, []), output="[1, 2]"), fold)  # the fold refuses a list
    with pytest.raises(TaskOutputError):
        apply(None, replace(_result(0, 2, []), output="{not json"), fold)


def test_a_task_state_keeps_its_task_and_the_jobs_tasks_through_json() -> None:
    state, _ = apply(None, _result(0, 2, ["x"]), _WordsFold())
    assert isinstance(state, DocumentState)
    back = DocumentState.from_json(json.loads(json.dumps(state.to_json())))
    assert back == state and back.task == "words" and back.tasks == ("embed", "words")


def test_a_document_counts_in_its_job_once_every_task_is_terminal() -> None:
    usage = Usage(pages=2, chunks=3, tokens=30, model_us={"cpu": 5}, stage_us={"chunker": 7, "inference": 4})
    entry = DocumentTasks().with_result("embed", DocumentTally("completed", usage), None, ["embed", "entities"])
    assert entry.combined() is None
    other = Usage(pages=2, chunks=3, tokens=30, model_us={"cpu": 9}, stage_us={"chunker": 7, "inference": 6})
    entry = entry.with_result("entities", DocumentTally("partial", other), "model_error", ["embed", "entities"])
    tally, code = entry.combined() or (None, None)
    assert tally == DocumentTally("partial", Usage(2, 3, 30, {"cpu": 14}, {"chunker": 7, "inference": 10}))
    assert code == "model_error"
    assert DocumentTasks.from_json(json.loads(json.dumps(entry.to_json()))) == entry


def test_combined_status_is_completed_or_failed_only_when_every_task_agrees() -> None:
    for statuses, expected in ((("completed", "completed"), "completed"), (("failed", "failed"), "failed"),
                               (("completed", "failed"), "partial"), (("partial", "completed"), "partial")):
        entry = DocumentTasks()
        for task, status in zip(("a", "b"), statuses, strict=True):
            entry = entry.with_result(task, DocumentTally(status), None, ["a", "b"])  # type: ignore[arg-type]
        assert (entry.combined() or (None,))[0] == DocumentTally(expected), statuses  # type: ignore[arg-type]


def test_a_failure_before_inference_holds_for_every_task() -> None:
    entry = DocumentTasks().with_result(None, DocumentTally("failed"), "corrupt", ["embed", "entities"])
    assert ANY_TASK in entry.results and entry.combined() == (DocumentTally("failed"), "corrupt")


def test_a_tally_written_before_tasks_reads_as_a_counted_embed_document() -> None:
    old = DocumentTally("completed", Usage(pages=1)).to_json()
    entry = DocumentTasks.from_json(old)
    assert entry.counted == DocumentTally("completed", Usage(pages=1)) and entry.required == ("embed",)


def test_usage_across_tasks_counts_the_document_once_and_the_models_each() -> None:
    a = Usage(3, 4, 50, {"cpu": 10}, {"chunker": 20, "inference": 5})
    b = Usage(3, 4, 50, {"cuda:0": 2}, {"chunker": 20, "inference": 1})
    assert across_tasks([a, b]) == Usage(3, 4, 50, {"cpu": 10, "cuda:0": 2}, {"chunker": 20, "inference": 6})
    assert across_tasks([a]) == a


def _by_job(doc_id: str, task: str | None, status: str = "completed", tasks: tuple[str, ...] = ("embed", "entities"),
            ) -> Any:
    body = {"job_id": "j1", "doc_id": doc_id, "status": status, "error_code": None,
            "usage": Usage(pages=1, chunks=2, tokens=3).to_json(), "task": task, "tasks": list(tasks)}
    return _msg(json.dumps(body).encode(), topic=BY_JOB, key=b"j1")


def _job(count: int, tasks: tuple[str, ...]) -> JobRow:
    return JobRow("j1", "acme", T0, "running", count,
                  options={"tasks": tasks_option([TaskRequest(t) for t in tasks])})


def test_a_job_of_two_tasks_completes_when_every_document_is_terminal_for_both() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job(3, ("embed", "entities"))
    reducer = _jobs(store, sink, clock, jobs, docs)
    inputs = [("a", "embed"), ("b", "entities"), ("a", "embed"), ("c", None), ("b", "embed"),
              ("a", "entities"), ("a", "entities")]

    async def run() -> list[bool]:
        finals = []
        for doc_id, task in inputs:
            await reducer.handle(_by_job(doc_id, task, "failed" if task is None else "completed"))
            finals.append(any(s.final for s in sink.records(JOBS)))
            clock.now += 0.1
        return finals

    finals = asyncio.run(run())
    assert finals == [False, False, False, False, False, True, True]  # complete only with a's entities result
    statuses: list[JobStatus] = sink.records(JOBS)
    final = [s for s in statuses if s.final]
    assert len(final) == 1 and (final[0].completed, final[0].failed) == (2, 1)
    assert final[0].pages == 3  # each document's usage once (a, b across their two tasks; c failed before)
    # the documents of several tasks get their combined status written by the jobs agent
    assert {d: r.status for (_, d), r in store.job_documents.items()} == {"a": "completed", "b": "completed"}


def test_a_recount_of_a_job_of_two_tasks_counts_only_documents_terminal_for_both() -> None:
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job(2, ("embed", "entities"))
    for doc_id, tasks in (("a", ("embed", "entities")), ("b", ("embed",))):
        for task in tasks:
            store.upsert_job_document_task("j1", doc_id, task, TaskTally("completed", Usage(pages=1)), T0)
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_msg(json.dumps({"kind": "reconcile", "job_id": "j1"}).encode(), topic=BY_JOB))
        assert not any(s.final for s in sink.records(JOBS))
        await reducer.handle(_by_job("b", "entities"))

    asyncio.run(run())
    final = [s for s in sink.records(JOBS) if s.final]
    assert len(final) == 1 and final[0].completed == 2


def test_a_recount_repairs_a_count_lost_between_the_two_table_writes() -> None:
    """At-least-once: a kill after the job-documents entry was written and before the job's count was left the
    document marked counted but not counted; its redelivered record is then a duplicate. The recount starts from
    the store's rows, so the job completes."""
    store, sink, clock, jobs, docs = FakeStore(), FakeSink(), FakeClock(100.0), {}, {}
    store.jobs["j1"] = _job(2, ("embed",))
    reducer = _jobs(store, sink, clock, jobs, docs)

    async def run() -> None:
        await reducer.handle(_by_job("a", "embed", tasks=()))
        await reducer.handle(_by_job("b", "embed", tasks=()))
        assert any(s.final for s in sink.records(JOBS))

    asyncio.run(run())
    # the same job again, as the restarted reducer found it: b's entry says counted, the count does not
    store2, sink2, jobs2 = FakeStore(), FakeSink(), {}
    store2.jobs["j1"] = _job(2, ("embed",))
    for doc_id in ("a", "b"):
        store2.upsert_job_document_task("j1", doc_id, "embed", TaskTally("completed", Usage(pages=1, chunks=2,
                                                                                             tokens=3)), T0)
    docs2: dict[str, Any] = {}
    reducer2 = _jobs(store2, sink2, FakeClock(100.0), jobs2, docs2)

    async def restarted() -> None:
        await reducer2.handle(_by_job("a", "embed", tasks=()))
        b_entry = DocumentTasks().with_result("embed", DocumentTally("completed", Usage(pages=1, chunks=2, tokens=3)),
                                              None, ["embed"])
        docs2["j1|b"] = replace(b_entry, counted=b_entry.combined()[0]).to_json()  # type: ignore[index]
        await reducer2.handle(_by_job("b", "embed", tasks=()))  # looks like a duplicate
        assert not any(s.final for s in sink2.records(JOBS))
        await reducer2.handle(_msg(json.dumps({"kind": "reconcile", "job_id": "j1"}).encode(), topic=BY_JOB))

    asyncio.run(restarted())
    final = [s for s in sink2.records(JOBS) if s.final]
    assert len(final) == 1 and (final[0].completed, final[0].pages) == (2, 2)
