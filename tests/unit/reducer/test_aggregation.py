"""docstream_reducer.aggregation: chunk results into documents, documents into job progress. Pure."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from docstream.avro.segments import Float32Vector
from docstream.errors import PoisonRecord
from docstream.records import OUTPUT_TOO_LARGE, ChunkResult, DocumentCompleted
from docstream.tasks.base import FoldInput
from docstream.tasks.fold_embed import EmbedFold, unpack_floats
from docstream.tasks.fold_generate import GenerateFold
from docstream_reducer.aggregation import (
    ALL_CHUNKS_FAILED,
    CHUNK_ANSWER_MISSING,
    ChunkCountMismatchError,
    ChunkIndexError,
    CompletionMarker,
    CorruptStateError,
    DocumentState,
    EmbeddingDimensionError,
    JobProgress,
    StatusThrottle,
    apply,
    collect_answers,
    decode_entry,
    document_key,
    job_status,
    record_document,
    with_answers,
)

EMBED_FOLD = EmbedFold()

T0 = datetime(2024, 5, 17, 12, 0, 0, tzinfo=UTC)
SETTINGS = "chunker=v1;max_tokens=256;overlap=32"
RUNTIME = "torch/cpu/bf16/2t"


def _chunk(index: int, count: int, *, vector: list[float] | None = None, tokens: int = 10, ok: bool = True,
           doc_id: str = "d1", at: datetime | None = None, settings: str = SETTINGS,
           runtime: str | None = RUNTIME) -> ChunkResult:
    return ChunkResult(
        job_id="j1", doc_id=doc_id, chunk_id=f"c{index}", chunk_index=index, chunk_count=count, model_id="m",
        status="ok" if ok else "failed", token_count=tokens, page_start=1, page_end=1,
        embedded_at=at or T0 + timedelta(seconds=index),
        embedding=(vector if vector is not None else [float(index), 1.0]) if ok else [],
        error_code=None if ok else "model_error", error=None if ok else "boom", chunker_settings=settings,
        runtime=runtime if ok else None,
    )


def _run(chunks: list[ChunkResult]) -> tuple[DocumentState | CompletionMarker | None, list[DocumentCompleted]]:
    state: DocumentState | CompletionMarker | None = None
    done: list[DocumentCompleted] = []
    for chunk in chunks:
        state, completed = apply(state, chunk, EMBED_FOLD)
        if completed is not None:
            done.append(completed)
    return state, done


def test_in_order_document_completes_once_with_weighted_mean() -> None:
    chunks = [_chunk(0, 3, vector=[1.0, 0.0], tokens=1), _chunk(1, 3, vector=[0.0, 1.0], tokens=3),
              _chunk(2, 3, vector=[1.0, 1.0], tokens=4)]
    _, done = _run(chunks)
    assert len(done) == 1
    doc = done[0]
    assert (doc.status, doc.chunk_count, doc.failed_chunks, doc.token_count) == ("completed", 3, 0, 8)
    assert doc.embedding == pytest.approx([(1 * 1 + 4 * 1) / 8, (3 * 1 + 4 * 1) / 8])
    assert (doc.job_id, doc.doc_id, doc.model_id, doc.error_code, doc.error) == ("j1", "d1", "m", None, None)


def test_out_of_order_and_duplicated_results_give_the_same_document() -> None:
    chunks = [_chunk(i, 7, vector=[float(i), float(7 - i), 0.5], tokens=i + 1) for i in range(7)]
    _, in_order = _run(chunks)
    shuffled = chunks + chunks[2:5] + chunks[:1]
    random.Random(7).shuffle(shuffled)
    state, out_of_order = _run(shuffled)
    assert len(out_of_order) == 1
    assert out_of_order[0].embedding == pytest.approx(in_order[0].embedding)
    assert out_of_order[0].token_count == in_order[0].token_count
    # completion time is the latest embedded_at, not the arrival order's last
    assert out_of_order[0].completed_at == T0 + timedelta(seconds=6)
    assert isinstance(state, DocumentState) and state.received_count == 7


def test_duplicate_returns_the_same_state_object() -> None:
    state, _ = apply(None, _chunk(0, 2), EMBED_FOLD)
    again, completed = apply(state, _chunk(0, 2, vector=[9.0, 9.0]), EMBED_FOLD)
    assert again is state
    assert completed is None


def test_duplicates_after_completion_change_nothing() -> None:
    state, done = _run([_chunk(0, 2), _chunk(1, 2)])
    assert len(done) == 1
    again, completed = apply(state, _chunk(1, 2), EMBED_FOLD)
    assert again is state and completed is None
    marker = CompletionMarker("completed", 2, 0, 0)
    kept, completed = apply(marker, _chunk(0, 2), EMBED_FOLD)
    assert kept is marker and completed is None


def test_document_with_one_chunk_completes_at_once() -> None:
    state, completed = apply(None, _chunk(0, 1, vector=[0.25, -0.5], tokens=5), EMBED_FOLD)
    assert completed is not None
    assert completed.status == "completed"
    assert completed.embedding == pytest.approx([0.25, -0.5])
    assert completed.token_count == 5
    assert isinstance(state, DocumentState) and state.is_complete


def test_partial_document_counts_failed_chunks_and_averages_the_rest() -> None:
    chunks = [_chunk(0, 4, vector=[1.0, 0.0]), _chunk(1, 4, ok=False), _chunk(2, 4, vector=[0.0, 1.0]),
              _chunk(3, 4, ok=False)]
    _, done = _run(chunks[::-1])
    doc = done[0]
    assert doc.status == "partial"
    assert (doc.failed_chunks, doc.token_count) == (2, 20)
    assert doc.embedding == pytest.approx([0.5, 0.5])
    assert doc.error is not None and "2 of 4" in doc.error and "model_error" in doc.error
    assert doc.error_code is None


def test_an_ok_result_replacing_a_failure_completes_the_document_again() -> None:
    state, done = _run([_chunk(0, 3, vector=[1.0, 0.0]), _chunk(1, 3, ok=False), _chunk(2, 3, vector=[0.0, 1.0])])
    assert done[0].status == "partial"
    assert isinstance(state, DocumentState) and state.has_failed(1)
    # the dead letter replayed: chunk 1 now embedded
    again, completed = apply(state, _chunk(1, 3, vector=[1.0, 1.0], at=T0 + timedelta(minutes=5)), EMBED_FOLD)
    assert completed is not None and isinstance(again, DocumentState)
    assert (completed.status, completed.failed_chunks, completed.token_count, completed.error) == (
        "completed", 0, 30, None)
    assert completed.embedding == pytest.approx([2 / 3, 2 / 3])
    assert completed.completed_at == T0 + timedelta(minutes=5)
    assert not again.has_failed(1) and again.received_count == 3
    # now a duplicate either way
    for late in (_chunk(1, 3, vector=[5.0, 5.0]), _chunk(1, 3, ok=False)):
        same, nothing = apply(again, late, EMBED_FOLD)
        assert same is again and nothing is None


def test_a_failure_never_replaces_an_ok_result_and_repeats_are_duplicates() -> None:
    state, _ = _run([_chunk(0, 2, ok=False), _chunk(1, 2)])
    assert isinstance(state, DocumentState)
    for late in (_chunk(1, 2, ok=False), _chunk(0, 2, ok=False)):
        same, nothing = apply(state, late, EMBED_FOLD)
        assert same is state and nothing is None


def test_a_replaced_failure_before_completion_just_counts() -> None:
    state, _ = _run([_chunk(0, 3, ok=False)])
    state, completed = apply(state, _chunk(0, 3), EMBED_FOLD)
    assert completed is None and isinstance(state, DocumentState) and state.failed_chunks == 0
    state, completed = apply(state, _chunk(1, 3), EMBED_FOLD)
    state, completed = apply(state, _chunk(2, 3), EMBED_FOLD)
    assert completed is not None and completed.status == "completed"


def test_an_all_failed_document_becomes_partial_when_one_chunk_is_replayed() -> None:
    state, done = _run([_chunk(0, 2, ok=False), _chunk(1, 2, ok=False)])
    assert done[0].status == "failed"
    _, completed = apply(state, _chunk(0, 2, vector=[3.0]), EMBED_FOLD)
    assert completed is not None and completed.status == "partial" and completed.embedding == pytest.approx([3.0])


def _answer(index: int, count: int, *, ok: bool, prompt: int, completion: int) -> ChunkResult:
    """A generate chunk result: its summary, or a failure with what its attempts cost (tasks.base.failure_output)."""
    output = {"kind": "summarize", "prompt_tokens": prompt, "completion_tokens": completion}
    return replace(_chunk(index, count, ok=ok), task="generate", embedding=[],
                   output=json.dumps({**output, "text": f"s{index}"} if ok else output))


_Row = tuple[int, str, str | None]
LIMIT = 8 * 1024 * 1024


def _rows(results: list[ChunkResult]) -> list[_Row]:
    """The chunk rows the inference service wrote for ``results`` (a later row of an index replaces the earlier)."""
    return sorted({r.chunk_index: (r.chunk_index, r.status, r.output) for r in results}.values())


def _complete(state: DocumentState | CompletionMarker | None, rows: list[_Row], fold: GenerateFold,
              limit: int = LIMIT) -> DocumentCompleted:
    """What the reducer's documents agent does at completion: the answers read back from the rows."""
    assert isinstance(state, DocumentState) and state.is_complete
    return with_answers(state, fold, collect_answers(state, fold, rows, max_bytes=limit), limit=limit)


def test_a_failed_chunk_that_says_what_it_cost_is_counted_by_its_fold_and_a_bare_failure_is_not() -> None:
    fold = GenerateFold()
    results = [_answer(0, 3, ok=True, prompt=10, completion=2), _answer(1, 3, ok=False, prompt=30, completion=9),
               replace(_chunk(2, 3, ok=False), task="generate", embedding=[])]  # failed before any answer
    state: DocumentState | CompletionMarker | None = None
    for result in results:
        state, completed = apply(state, result, fold)
    assert completed is not None
    completed = _complete(state, _rows(results), fold)
    assert (completed.status, completed.failed_chunks) == ("partial", 2)
    output = json.loads(completed.output or "{}")
    assert [s["text"] for s in output["chunk_summaries"]] == ["s0"]
    assert (output["prompt_tokens"], output["completion_tokens"]) == (40, 11)
    # the dead letter replayed, answered this time: its tokens add to the failed attempts'
    replayed = _answer(1, 3, ok=True, prompt=12, completion=3)
    state, again = apply(state, replayed, fold)
    assert again is not None
    again = _complete(state, _rows([*results, replayed]), fold)
    output = json.loads(again.output or "{}")
    assert (output["prompt_tokens"], output["completion_tokens"]) == (52, 14)
    assert [s["text"] for s in output["chunk_summaries"]] == ["s0", "s1"]


def test_the_generate_state_stays_the_same_size_whatever_the_number_of_chunk_answers() -> None:
    fold = GenerateFold()
    answer = "x" * 1024  # 1 KiB a chunk: 2,000 of them kept in the state would be 2 MiB, rewritten per chunk

    def state_bytes(count: int) -> list[int]:
        state: DocumentState | CompletionMarker | None = None
        sizes = []
        for index in range(count):
            output = {"kind": "summarize", "text": answer, "prompt_tokens": 700, "completion_tokens": 250}
            state, _ = apply(state, replace(_chunk(index, count), task="generate", embedding=[],
                                            output=json.dumps(output)), fold)
            assert isinstance(state, DocumentState)
            sizes.append(len(json.dumps(state.to_json())))
        return sizes

    small, large = state_bytes(2), state_bytes(2_000)
    # what grows is the two bitmaps (2 bits a chunk) and the token totals' digits, never the answers
    assert max(large) - min(large) <= 2 * 2_000 // 6 + 16
    assert max(large) < 2_000  # bytes, for 2 MiB of answers
    assert max(large) - max(small) < 2 * 2_000 // 6 + 16


def test_the_answers_are_read_back_in_chunk_order_and_a_missing_one_fails_its_chunk_alone() -> None:
    fold = GenerateFold()
    results = [_answer(i, 4, ok=True, prompt=10, completion=2) for i in (3, 1, 0, 2)]
    state: DocumentState | CompletionMarker | None = None
    for result in results:
        state, _ = apply(state, result, fold)
    rows = _rows(results)
    whole = _complete(state, list(reversed(rows)), fold)  # rows in any order
    assert whole.status == "completed"
    assert [s["text"] for s in json.loads(whole.output or "{}")["chunk_summaries"]] == ["s0", "s1", "s2", "s3"]
    # row 2 gone (a version retired, a foreign writer), row 3 holding no answer: the same rows, the same document
    broken = [rows[0], rows[1], (3, "ok", json.dumps({"kind": "extract", "value": 1}))]
    first, second = _complete(state, broken, fold), _complete(state, broken, fold)
    assert first == second
    assert (first.status, first.failed_chunks, first.error_code) == ("partial", 2, None)
    assert first.error == f"2 of 4 chunks failed ({CHUNK_ANSWER_MISSING})"
    output = json.loads(first.output or "{}")
    assert [s["index"] for s in output["chunk_summaries"]] == [0, 1]
    assert (output["prompt_tokens"], output["completion_tokens"]) == (40, 8)  # what every chunk cost
    # a row that says ok for an index the reducer heard fail is not the document's (its ok record is on its way)
    failed = [_answer(0, 2, ok=True, prompt=1, completion=1), _answer(1, 2, ok=False, prompt=1, completion=1)]
    state = None
    for result in failed:
        state, _ = apply(state, result, fold)
    ahead = _complete(state, _rows([failed[0], _answer(1, 2, ok=True, prompt=1, completion=1)]), fold)
    assert (ahead.status, ahead.failed_chunks) == ("partial", 1)
    assert [s["index"] for s in json.loads(ahead.output or "{}")["chunk_summaries"]] == [0]
    nothing = _complete(state, [], fold)  # every row gone
    assert (nothing.status, nothing.error_code) == ("failed", ALL_CHUNKS_FAILED)


def test_answers_over_the_record_limit_fail_the_document_with_output_too_large_and_keep_its_tokens() -> None:
    fold = GenerateFold()
    results = [replace(_chunk(i, 20), task="generate", embedding=[],
                       output=json.dumps({"kind": "summarize", "text": "y" * 1000, "prompt_tokens": 5,
                                          "completion_tokens": 3})) for i in range(20)]
    state: DocumentState | CompletionMarker | None = None
    for result in results:
        state, _ = apply(state, result, fold)
    assert isinstance(state, DocumentState)
    found = collect_answers(state, fold, _rows(results), max_bytes=10_000)
    assert found.over and found.answers == () and 10_000 < found.size < 12_000  # reading stopped at the budget
    completed = with_answers(state, fold, found, limit=10_000)
    assert (completed.status, completed.error_code) == ("failed", OUTPUT_TOO_LARGE)
    assert "10000" in (completed.error or "")
    assert json.loads(completed.output or "{}") == {"kind": "summarize", "prompt_tokens": 100,
                                                    "completion_tokens": 60}
    assert _complete(state, _rows(results), fold, limit=30_000).status == "completed"


def test_document_whose_chunks_all_failed_is_failed_without_embedding() -> None:
    _, done = _run([_chunk(0, 2, ok=False), _chunk(1, 2, ok=False)])
    assert done[0].status == "failed"
    assert done[0].error_code == ALL_CHUNKS_FAILED
    assert done[0].embedding == []


def test_zero_token_chunks_still_weigh() -> None:
    _, done = _run([_chunk(0, 2, vector=[2.0], tokens=0), _chunk(1, 2, vector=[4.0], tokens=0)])
    assert done[0].embedding == pytest.approx([3.0])
    assert done[0].token_count == 0


def test_chunk_count_disagreement_is_a_typed_poison_error_and_not_merged() -> None:
    state, _ = apply(None, _chunk(0, 3), EMBED_FOLD)
    with pytest.raises(ChunkCountMismatchError) as info:
        apply(state, _chunk(1, 4), EMBED_FOLD)
    assert info.value.code == "chunk_count_mismatch"
    assert isinstance(info.value, PoisonRecord)
    assert "chunk_count 4" in info.value.message
    # the state is untouched: the right chunks still complete the document
    state, done = _run([_chunk(0, 3), _chunk(1, 3), _chunk(2, 3)])
    assert len(done) == 1
    with pytest.raises(ChunkCountMismatchError):
        apply(CompletionMarker("completed", 3, 0, 0), _chunk(0, 5), EMBED_FOLD)


@pytest.mark.parametrize(("index", "count"), [(-1, 3), (3, 3), (0, 0)])
def test_index_outside_the_document_is_rejected(index: int, count: int) -> None:
    with pytest.raises(ChunkIndexError) as info:
        apply(None, _chunk(index, count), EMBED_FOLD)
    assert info.value.code == "chunk_index_out_of_range"


def test_embedding_dimension_change_is_rejected() -> None:
    state, _ = apply(None, _chunk(0, 2, vector=[1.0, 2.0]), EMBED_FOLD)
    with pytest.raises(EmbeddingDimensionError):
        apply(state, _chunk(1, 2, vector=[1.0, 2.0, 3.0]), EMBED_FOLD)
    with pytest.raises(EmbeddingDimensionError):
        apply(None, _chunk(0, 2, vector=[]), EMBED_FOLD)


def test_state_json_round_trip_is_exact_and_compact_for_large_documents() -> None:
    count = 10_000
    state: DocumentState | CompletionMarker | None = None
    for i in range(0, count, 3):
        state, _ = apply(state, _chunk(i, count, vector=[0.1 * i, 1 / 3], tokens=i % 17), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    encoded = json.dumps(state.to_json())
    assert len(encoded) < 4_500  # two bitmaps of 1 250 bytes, base64 ~1 700 chars each
    restored = decode_entry(json.loads(encoded))
    assert restored == state
    assert isinstance(restored, DocumentState)
    assert all(restored.has(i) == (i % 3 == 0) for i in range(0, 50))


def test_embedding_sum_is_stored_as_packed_float64_and_round_trips_exactly() -> None:
    rng = random.Random(3)
    vector = [rng.uniform(-1, 1) for _ in range(384)] + [-0.0, 5e-324, 1.7976931348623157e308, 1 / 3]
    state, _ = apply(None, _chunk(0, 2, vector=vector, tokens=213), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    data = state.to_json()
    assert isinstance(data["embedding_sum"], str)  # base64 of little-endian float64, not a JSON list
    encoded = json.dumps(data)
    assert len(encoded) < 2 * 8 * len(vector)  # a JSON list of these floats takes ~20 chars each
    restored = decode_entry(json.loads(encoded))
    assert restored == state
    assert isinstance(restored, DocumentState)
    assert [repr(x) for x in _vector_sum(restored)] == [repr(x) for x in _vector_sum(state)]  # -0.0 included


def _python_sum(sums: list[float], vector: list[float], tokens: int) -> list[float]:
    """The fold's arithmetic one float at a time: the weight times each value, rounded, then added, rounded."""
    weight = float(max(tokens, 1))
    return [s + weight * float(x) for s, x in zip(sums or [0.0] * len(vector), vector, strict=True)]


@pytest.mark.parametrize("decoded", [False, True], ids=["list", "as decoded from its record"])
def test_the_embedding_sum_is_the_float64_sum_taken_one_value_at_a_time_to_the_last_bit(decoded: bool) -> None:
    rng = random.Random(5)
    fold, state, expected = EmbedFold(), EmbedFold().empty(), []
    specials = [-0.0, 0.0, 1e-45, 3.4e38, -3.4e38, float(np.float32(1 / 3))]
    for index in range(20):
        vector = np.asarray([rng.choice([rng.gauss(0, 1), *specials]) for _ in range(16)], dtype=np.float32)
        tokens = rng.choice([0, 1, 7, 213, 4096])
        chunk = Float32Vector(vector) if decoded else vector.tolist()
        state = fold.add(state, FoldInput(index=index, token_count=tokens, page_start=1, page_end=1, embedding=chunk))
        expected = _python_sum(expected, vector.tolist(), tokens)
        assert [repr(x) for x in unpack_floats(state["sum"])] == [repr(x) for x in expected]


def test_state_written_with_embedding_sum_as_a_json_list_still_loads() -> None:
    """States in changelogs written before the packed format keep loading, and fold on the same."""
    state, _ = apply(None, _chunk(0, 3, vector=[0.1, -2.5, 1 / 3], tokens=7), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    old = {**state.to_json(), "embedding_sum": list(_vector_sum(state))}
    restored = decode_entry(json.loads(json.dumps(old)))
    assert restored == state
    next_chunk = _chunk(1, 3, vector=[1.0, 1.0, 1.0])
    assert apply(restored, next_chunk, EMBED_FOLD) == apply(state, next_chunk, EMBED_FOLD)


def _vector_sum(state: DocumentState) -> tuple[float, ...]:
    """The embed fold's token-weighted sum of the vectors, from the state's fold JSON."""
    return unpack_floats(state.fold["sum"])


@pytest.mark.parametrize("value", ["not base64!", "AAAA", 7])
def test_an_embedding_sum_that_is_not_packed_floats_is_corrupt(value: object) -> None:
    state, _ = apply(None, _chunk(0, 2), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    with pytest.raises(CorruptStateError):
        DocumentState.from_json({**state.to_json(), "embedding_sum": value})


def test_the_document_carries_its_chunks_chunker_settings() -> None:
    state, done = _run([_chunk(1, 2), _chunk(0, 2, ok=False)])
    assert [d.chunker_settings for d in done] == [SETTINGS]
    assert isinstance(state, DocumentState)
    assert decode_entry(json.loads(json.dumps(state.to_json()))) == state


def test_chunks_written_before_chunker_settings_existed_give_none() -> None:
    """ChunkEmbedded v1 records decode with "": the document then has no settings to report; a later
    chunk that carries them fills them in."""
    _, done = _run([_chunk(0, 2, settings=""), _chunk(1, 2, settings="")])
    assert [d.chunker_settings for d in done] == [None]
    _, done = _run([_chunk(0, 2, settings=""), _chunk(1, 2)])
    assert [d.chunker_settings for d in done] == [SETTINGS]


def test_state_saved_before_chunker_settings_existed_still_loads() -> None:
    state, _ = apply(None, _chunk(0, 2, settings=""), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    data = state.to_json()
    del data["chunker_settings"]
    assert DocumentState.from_json(data) == state


def test_the_document_carries_the_runtime_its_chunks_were_embedded_with() -> None:
    state, done = _run([_chunk(1, 2, ok=False), _chunk(0, 2)])
    assert [d.runtime for d in done] == [RUNTIME]
    state, _ = apply(None, _chunk(0, 2), EMBED_FOLD)
    assert isinstance(state, DocumentState) and state.runtime == RUNTIME
    assert decode_entry(json.loads(json.dumps(state.to_json()))) == state


def test_chunks_without_a_runtime_give_none_and_the_first_one_carried_stays() -> None:
    """ChunkEmbedded before v3, failed and reused chunks carry no runtime; mixed runtimes (a restart on
    another machine) keep the first that arrived."""
    _, done = _run([_chunk(0, 2, runtime=None), _chunk(1, 2, runtime=None)])
    assert [d.runtime for d in done] == [None]
    _, done = _run([_chunk(0, 2, runtime=None), _chunk(1, 2, runtime="torch/cpu/fp32/2t")])
    assert [d.runtime for d in done] == ["torch/cpu/fp32/2t"]
    _, done = _run([_chunk(0, 2), _chunk(1, 2, runtime="torch/cpu/fp32/2t")])
    assert [d.runtime for d in done] == [RUNTIME]


def test_state_saved_before_the_runtime_existed_still_loads() -> None:
    state, _ = apply(None, _chunk(0, 2, runtime=None), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    data = state.to_json()
    del data["runtime"]
    assert DocumentState.from_json(data) == state


def test_marker_round_trip_and_expiry() -> None:
    marker = CompletionMarker("partial", 5, 1_000, 2)
    assert decode_entry(json.loads(json.dumps(marker.to_json()))) == marker
    assert not marker.expired(now_ms=2_000, ttl_ms=1_000)
    assert marker.expired(now_ms=2_001, ttl_ms=1_000)


@pytest.mark.parametrize("data", [{}, {"v": 1, "kind": "state"}, {"v": 2, "kind": "done"},
                                  {"v": 1, "kind": "done", "status": "running", "chunk_count": 1,
                                   "completed_ms": 0, "partition": 0}])
def test_corrupt_entries_raise_a_typed_error(data: dict[str, object]) -> None:
    with pytest.raises(CorruptStateError):
        decode_entry(data)


def test_bitmap_that_does_not_fit_is_corrupt() -> None:
    state, _ = apply(None, _chunk(0, 20), EMBED_FOLD)
    assert isinstance(state, DocumentState)
    data = state.to_json()
    data["chunk_count"] = 100
    with pytest.raises(CorruptStateError):
        DocumentState.from_json(data)


def test_document_key_separates_models() -> None:
    assert document_key("d", "m1") != document_key("d", "m2")


def test_job_progress_counts_each_document_once() -> None:
    progress = JobProgress("j1", document_count=3)
    progress = record_document(progress, None, "completed")
    same = record_document(progress, "completed", "completed")
    assert same is progress
    progress = record_document(progress, None, "failed")
    assert not progress.is_complete
    progress = record_document(progress, None, "partial")
    assert (progress.completed, progress.partial, progress.failed, progress.terminal) == (1, 1, 1, 3)
    assert progress.is_complete


def test_job_progress_moves_a_document_whose_status_changes() -> None:
    progress = record_document(JobProgress("j1", document_count=1), None, "partial")
    progress = record_document(progress, "partial", "completed")
    assert (progress.completed, progress.partial) == (1, 0)


def test_job_of_unknown_size_is_never_complete() -> None:
    progress = record_document(JobProgress("j1"), None, "completed")
    assert not progress.is_complete


def test_job_progress_json_round_trip_and_status() -> None:
    progress = JobProgress("j1", "acme", 4, 2, 1, 1, final=True, webhook_done=False)
    assert JobProgress.from_json(json.loads(json.dumps(progress.to_json()))) == progress
    status = job_status(progress, T0, final=True)
    assert (status.state, status.final, status.completed, status.partial, status.failed) == ("completed", True, 2, 1, 1)
    assert (status.document_count, status.tenant, status.key) == (4, "acme", "j1")
    assert job_status(progress, T0).state == "running"
    with pytest.raises(CorruptStateError):
        JobProgress.from_json({"v": 1})


def test_record_document_rejects_non_terminal_status() -> None:
    with pytest.raises(ValueError, match="terminal"):
        record_document(JobProgress("j1"), None, "running")  # type: ignore[arg-type]


def test_throttle_publishes_first_change_then_at_most_once_per_interval() -> None:
    throttle = StatusThrottle(1.0)
    assert throttle.changed("j", 10.0)
    assert not throttle.changed("j", 10.4)
    assert not throttle.changed("j", 10.9)
    assert throttle.due_pending(10.95) == []
    assert throttle.due_pending(11.0) == ["j"]
    assert throttle.due_pending(11.5) == []  # nothing pending any more
    assert not throttle.changed("j", 11.5)
    assert throttle.changed("k", 11.5)  # jobs are independent
    assert throttle.changed("j", 12.1)
    assert throttle.due_pending(20.0) == []


def test_throttle_forgets_final_jobs() -> None:
    throttle = StatusThrottle(5.0)
    throttle.changed("j", 0.0)
    throttle.changed("j", 1.0)
    throttle.forget("j")
    assert len(throttle) == 0
    assert throttle.due_pending(100.0) == []
    assert throttle.changed("j", 1.5)
    with pytest.raises(ValueError):
        StatusThrottle(-1)
