"""Job accounting, pure: docstream.tenants.usage and its folds in docstream_reducer.aggregation (docs/operations.md)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from docstream.records import ChunkResult, DocumentCompleted
from docstream.tasks.fold_embed import EmbedFold
from docstream.tenants.usage import (
    CHAT_COMPLETION,
    CHAT_PROMPT,
    Usage,
    across_tasks,
    add_counts,
    apportion,
    document_usage,
    read_counts,
    total_usage,
)
from docstream_reducer.aggregation import (
    CompletionMarker,
    CorruptStateError,
    DocumentState,
    DocumentTally,
    JobProgress,
    UsageRecordError,
    apply,
    count_document,
    job_status,
)

EMBED_FOLD = EmbedFold()

T0 = datetime(2024, 5, 17, 12, 0, 0, tzinfo=UTC)


def _chunk(index: int, count: int, *, tokens: int = 10, model_us: int = 1_000, device: str | None = "cpu",
           stage_us: dict[str, int] | None = None, ok: bool = True) -> ChunkResult:
    return ChunkResult(
        job_id="j1", doc_id="d1", chunk_id=f"c{index}", chunk_index=index, chunk_count=count, model_id="m",
        status="ok" if ok else "failed", token_count=tokens, page_start=1, page_end=1,
        embedded_at=T0 + timedelta(seconds=index), embedding=[float(index), 1.0] if ok else [],
        error_code=None if ok else "model_error", model_us=model_us, device=device,
        stage_us={"chunker": 100, "inference": 2_000} if stage_us is None else stage_us,
    )


def _complete(chunks: list[ChunkResult]) -> list[DocumentCompleted]:
    state: DocumentState | CompletionMarker | None = None
    done = []
    for chunk in chunks:
        state, completed = apply(state, chunk, EMBED_FOLD)
        if completed is not None:
            done.append(completed)
    return done


# -- apportion ---------------------------------------------------------------------------


@pytest.mark.parametrize(("total", "weights"), [
    (1_000_003, [10, 20, 30]), (7, [1, 1, 1]), (0, [5, 5]), (5, [0, 0, 0]), (123_456, [256, 1, 300, 17]),
    (1, [3, 3]),
])
def test_apportioned_parts_add_up_to_the_whole(total: int, weights: list[int]) -> None:
    parts = apportion(total, weights)
    assert sum(parts) == total and len(parts) == len(weights)
    assert all(p >= 0 for p in parts)
    assert apportion(total, weights) == parts  # deterministic


def test_apportion_follows_token_shares_and_counts_empty_chunks_as_one() -> None:
    assert apportion(600, [100, 200, 300]) == [100, 200, 300]
    assert apportion(3, [0, 0, 1]) == [1, 1, 1]
    assert apportion(10, []) == []
    with pytest.raises(ValueError, match="total"):
        apportion(-1, [1])


# -- Usage ------------------------------------------------------------------------------


def test_usage_adds_subtracts_and_round_trips_through_json() -> None:
    a = Usage(pages=2, chunks=3, tokens=300, model_us={"cpu": 1_500_000}, stage_us={"chunker": 10, "inference": 20})
    b = Usage(pages=1, chunks=1, tokens=50, model_us={"cuda:0": 250_000}, stage_us={"inference": 5})
    both = a.plus(b)
    assert both == Usage(3, 4, 350, {"cpu": 1_500_000, "cuda:0": 250_000}, {"chunker": 10, "inference": 25})
    assert both.minus(b) == a and both.minus(a).minus(b).is_empty
    assert both.model_seconds == pytest.approx(1.75)
    assert both.device == "cpu+cuda:0" and a.device == "cpu" and Usage().device is None
    assert both.stage_seconds == {"chunker": 0.00001, "inference": 0.000025}
    assert Usage.from_json(json.loads(json.dumps(both.to_json()))) == both
    assert Usage.from_json(None) == Usage()


@pytest.mark.parametrize("bad", [
    {"tokens": -1}, {"pages": 1.5}, {"model_us": {"cpu": -3}}, {"stage_us": {"": 1}},
    {"stage_us": {f"s{i}": 1 for i in range(33)}}, {"model_us": {"x" * 65: 1}}, [1, 2], {"chunks": True},
])
def test_usage_from_json_refuses_what_is_not_a_usage(bad: object) -> None:
    with pytest.raises(ValueError):
        Usage.from_json(bad)


def test_counts_drop_zeros_and_add_key_by_key() -> None:
    assert add_counts({"a": 1, "b": 2}, {"b": -2, "c": 3}) == {"a": 1, "c": 3}
    assert add_counts({"a": 1}, {"a": 1}, sign=-1) == {}
    assert read_counts({"a": 0, "b": 4}) == {"b": 4}
    assert read_counts({f"s{i}": 1 for i in range(40)}, limit=None)


def test_document_usage_and_total_usage() -> None:
    completed = DocumentCompleted(job_id="j", doc_id="d", status="completed", completed_at=T0, page_count=4,
                                  chunk_count=3, token_count=700, model_us={"cpu": 9}, stage_us={"chunker": 1})
    usage = document_usage(completed)
    assert usage == Usage(4, 3, 700, {"cpu": 9}, {"chunker": 1})
    assert document_usage(DocumentCompleted(job_id="j", doc_id="d", status="failed", completed_at=T0)) == Usage()
    assert total_usage([usage, None, usage]) == usage.plus(usage)


def test_a_chat_models_tokens_come_from_the_document_output_and_add_up() -> None:
    output = '{"kind":"summarize","summary":"Kurz.","prompt_tokens":120,"completion_tokens":30}'
    completed = DocumentCompleted(job_id="j", doc_id="d", status="completed", completed_at=T0, chunk_count=2,
                                  task="generate", output=output)
    usage = document_usage(completed)
    assert usage.chat_tokens == {"prompt": 120, "completion": 30}
    assert (usage.prompt_tokens, usage.completion_tokens) == (120, 30)
    assert Usage.from_json(usage.to_json()) == usage
    assert "chat_tokens" not in Usage(pages=1).to_json()  # usages without them read and write as before
    assert usage.plus(usage).minus(usage) == usage
    assert across_tasks([usage, Usage(chunks=2, tokens=9)]).chat_tokens == {"prompt": 120, "completion": 30}
    for odd in ('{"completion_tokens": -1}', '["completion_tokens"]', "completion_tokens?", None):
        assert document_usage(replace(completed, output=odd)).chat_tokens == {}


# -- the document fold ------------------------------------------------------------------


def test_a_document_adds_up_its_chunks_model_and_stage_time() -> None:
    chunks = [_chunk(0, 3, model_us=100), _chunk(1, 3, model_us=200, device="cuda:0"), _chunk(2, 3, model_us=300)]
    (doc,) = _complete(chunks)
    assert doc.model_us == {"cpu": 400, "cuda:0": 200}
    assert doc.stage_us == {"chunker": 300, "inference": 6_000}
    assert document_usage(doc).tokens == 30


def test_the_document_fold_is_order_independent_and_idempotent_under_redelivery() -> None:
    rng = random.Random(11)
    chunks = [_chunk(i, 6, tokens=rng.randint(1, 256), model_us=rng.randint(1, 10**7),
                     device=rng.choice(["cpu", "cuda:0"]), stage_us={"chunker": rng.randint(0, 10**6),
                                                                     "inference": rng.randint(1, 10**7)})
              for i in range(6)]
    (reference,) = _complete(chunks)
    for seed in range(20):
        redelivered = chunks + [rng.choice(chunks) for _ in range(8)]
        random.Random(seed).shuffle(redelivered)
        done = _complete(redelivered)
        assert len(done) == 1
        assert (done[0].model_us, done[0].stage_us, done[0].token_count) == (
            reference.model_us, reference.stage_us, reference.token_count)
    # a redelivered chunk with other timings (inference ran it twice) is still counted once, the first time
    state, _ = apply(None, chunks[0], EMBED_FOLD)
    again, _ = apply(state, _chunk(0, 6, model_us=999_999), EMBED_FOLD)
    assert again is state


def test_a_replayed_failed_chunk_adds_the_time_of_its_second_run() -> None:
    first = _complete([_chunk(0, 2, model_us=10), _chunk(1, 2, model_us=5, ok=False)])
    assert first[0].status == "partial" and first[0].model_us == {"cpu": 15}
    state: DocumentState | CompletionMarker | None = None
    for chunk in [_chunk(0, 2, model_us=10), _chunk(1, 2, model_us=5, ok=False)]:
        state, _ = apply(state, chunk, EMBED_FOLD)
    state, replayed = apply(state, _chunk(1, 2, model_us=7), EMBED_FOLD)
    assert replayed is not None and replayed.status == "completed" and replayed.model_us == {"cpu": 22}


def test_chunks_without_accounting_count_nothing_and_old_states_load() -> None:
    (doc,) = _complete([_chunk(0, 1, model_us=0, device=None, stage_us={})])
    assert (doc.model_us, doc.stage_us) == ({}, {})
    (doc,) = _complete([_chunk(0, 1, model_us=5, device=None)])
    assert doc.model_us == {"unknown": 5}
    state, _ = apply(None, _chunk(0, 2), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    data = state.to_json()
    assert DocumentState.from_json(json.loads(json.dumps(data))) == state
    del data["model_us"], data["stage_us"]
    old = DocumentState.from_json(data)
    assert (old.model_us, old.stage_us) == ({}, {})


@pytest.mark.parametrize("bad", [{"stage_us": {"chunker": -1}}, {"model_us": -5},
                                 {"device": "d" * 100}, {"stage_us": {f"s{i}": 1 for i in range(40)}}])
def test_a_chunk_with_bad_accounting_is_poison(bad: dict[str, object]) -> None:
    values = _chunk(0, 1).to_record() | bad
    with pytest.raises(UsageRecordError):
        apply(None, ChunkResult.from_record(values), EMBED_FOLD)


# -- the job fold -----------------------------------------------------------------------


def _tally(status: str = "completed", tokens: int = 100, model_us: int = 1_000) -> DocumentTally:
    return DocumentTally(status, Usage(pages=2, chunks=3, tokens=tokens, model_us={"cpu": model_us},  # type: ignore[arg-type]
                                       stage_us={"chunker": 10, "inference": model_us + 5}))


def _fold_job(reports: list[tuple[str, DocumentTally]]) -> JobProgress:
    progress, tallies = JobProgress("j1", "acme", 3), {}
    for doc_id, tally in reports:
        progress = count_document(progress, tallies.get(doc_id), tally)
        tallies[doc_id] = tally
    return progress


def test_a_job_adds_each_document_once_whatever_the_order_and_the_duplicates() -> None:
    reports = [("a", _tally(tokens=100)), ("b", _tally("partial", tokens=50, model_us=300)),
               ("c", _tally("failed", tokens=0, model_us=0))]
    expected = total_usage(t.usage for _, t in reports)
    for order in itertools.permutations(reports):
        progress = _fold_job([*order, *order[:2]])
        assert progress.usage == expected
        assert (progress.completed, progress.partial, progress.failed) == (1, 1, 1)


def test_a_document_reported_again_counts_with_its_latest_figures() -> None:
    progress = _fold_job([("a", _tally("partial", tokens=50, model_us=300)), ("a", _tally(tokens=100))])
    assert progress.usage == _tally(tokens=100).usage
    assert (progress.completed, progress.partial) == (1, 0)
    same = JobProgress("j1")
    assert count_document(same, _tally(), _tally()) is same


def test_job_status_and_progress_json_carry_the_usage() -> None:
    progress = _fold_job([("a", _tally()), ("b", _tally(tokens=7))])
    status = job_status(progress, T0, final=True)
    assert (status.pages, status.chunks, status.tokens) == (4, 6, 107)
    assert status.model_us == {"cpu": 2_000} and status.stage_us == {"chunker": 20, "inference": 2_010}
    assert status.chat_tokens == {}  # no chat model in the job
    chat = [Usage(chat_tokens={CHAT_PROMPT: 30, CHAT_COMPLETION: 5}), Usage(chat_tokens={CHAT_PROMPT: 12})]
    chatty = _fold_job([("a", DocumentTally("completed", chat[0])), ("b", DocumentTally("partial", chat[1]))])
    assert job_status(chatty, T0, final=True).chat_tokens == {CHAT_PROMPT: 42, CHAT_COMPLETION: 5}
    assert JobProgress.from_json(json.loads(json.dumps(progress.to_json()))) == progress
    old = progress.to_json()
    del old["usage"]
    assert JobProgress.from_json(old).usage == Usage()


def test_document_tallies_round_trip_and_bare_statuses_of_before_still_load() -> None:
    tally = _tally("partial")
    assert DocumentTally.from_json(json.loads(json.dumps(tally.to_json()))) == tally
    assert DocumentTally.from_json("failed") == DocumentTally("failed")
    for bad in ("running", {"usage": {}}, {"status": "completed", "usage": {"tokens": -1}}):
        with pytest.raises(CorruptStateError):
            DocumentTally.from_json(bad)
