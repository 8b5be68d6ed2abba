"""Inference: isolating a chunk that makes the model fail, and the rows/records of results."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from docstream.errors import BackendUnavailable, FatalError, PartialBatchError, PoisonRecord
from docstream.records import ChunkCreated
from docstream_inference.handler import (
    MODEL_ERROR,
    chunk_row,
    failed_result,
    ok_result,
    requested_model,
    result_record,
)
from docstream_inference.isolation import Isolated, embed_isolating

AT = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


class FakeModel:
    """Embeds index i as [i]; raises on the indices in ``bad`` (RuntimeError, like a torch failure)."""

    def __init__(self, bad: set[int], *, fail_times: int | None = None) -> None:
        self.bad = bad
        self.calls: list[list[int]] = []
        self.fail_times = fail_times

    def __call__(self, indices: Sequence[int]) -> list[list[float]]:
        self.calls.append(list(indices))
        if self.bad & set(indices):
            if self.fail_times is None or self.fail_times > 0:
                if self.fail_times is not None:
                    self.fail_times -= 1
                raise RuntimeError("boom")
        return [[float(i)] for i in indices]


def test_one_bad_record_is_isolated_and_its_neighbours_succeed() -> None:
    model = FakeModel({5})
    results = embed_isolating(model, 16, attempts=3)
    assert [r for i, r in enumerate(results) if i != 5] == [[float(i)] for i in range(16) if i != 5]
    assert isinstance(results[5], Isolated)
    assert results[5].attempts == 3
    assert str(results[5].error) == "boom"
    assert [c for c in model.calls if c == [5]] == [[5], [5], [5]]
    assert len(model.calls) <= 2 * 4 + 1 + 3  # halvings down to one record, plus its retries


def test_a_lone_record_that_fails_once_succeeds_on_retry() -> None:
    model = FakeModel({2}, fail_times=3)  # fails in 4, in 2, alone once; then works
    results = embed_isolating(model, 4, attempts=3)
    assert results == [[0.0], [1.0], [2.0], [3.0]]


def test_every_record_bad_fails_every_record() -> None:
    results = embed_isolating(FakeModel(set(range(4))), 4, attempts=2)
    assert all(isinstance(r, Isolated) and r.attempts == 2 for r in results)


def test_fatal_errors_are_not_isolated() -> None:
    def fatal(_: Sequence[int]) -> list[list[float]]:
        raise FatalError("gone")

    with pytest.raises(FatalError):
        embed_isolating(fatal, 4, attempts=3)


def test_a_wrong_number_of_vectors_counts_as_a_failure() -> None:
    def short(indices: Sequence[int]) -> list[list[float]]:
        return [[0.0]] * (len(indices) - 1 if len(indices) > 1 else 1)

    results = embed_isolating(short, 3, attempts=1)
    assert results == [[0.0], [0.0], [0.0]]


def test_failures_are_reported_and_empty_batches_are_fine() -> None:
    seen: list[tuple[int, str]] = []
    embed_isolating(FakeModel({0}), 2, attempts=1, on_failure=lambda idx, err: seen.append((len(idx), str(err))))
    assert seen == [(2, "boom"), (1, "boom")]
    assert embed_isolating(FakeModel(set()), 0, attempts=1) == []
    with pytest.raises(ValueError, match="attempts"):
        embed_isolating(FakeModel(set()), 1, attempts=0)


def _chunk(model_id: str | None = None) -> ChunkCreated:
    return ChunkCreated(
        job_id="j", doc_id="d", chunk_id="c", chunk_index=3, chunk_count=9, content_sha256="s", text="hello",
        page_start=1, page_end=2, char_start=5, char_end=10, token_count=4, chunker_settings="cs", created_at=AT,
        heading="H", model_id=model_id,
    )


def test_requested_model_defaults_to_the_loaded_one() -> None:
    assert requested_model(_chunk(), "embed", "m1") == "m1"
    assert requested_model(_chunk("m2"), "embed", "m1") == "m2"


def test_a_chunks_embedding_model_request_does_not_bind_other_tasks() -> None:
    assert requested_model(_chunk("m2"), "entities", "entities/x") == "entities/x"


def test_ok_result_becomes_a_row_and_a_record() -> None:
    result = ok_result(_chunk(), "m1", [0.5, -0.5])
    row = chunk_row(result)
    assert (row.doc_id, row.model_id, row.chunk_index, row.status, row.embedding) == ("d", "m1", 3, "ok", [0.5, -0.5])
    assert (row.text, row.heading, row.char_start, row.char_end, row.token_count) == ("hello", "H", 5, 10, 4)
    record = result_record(result, AT)
    assert record.status == "ok"
    assert record.embedding == [0.5, -0.5]
    assert (record.chunk_count, record.page_start, record.page_end, record.embedded_at) == (9, 1, 2, AT)
    assert record.key == "d"
    assert record.runtime is None  # reused from the store: not made by this process's runtime
    assert result_record(ok_result(_chunk(), "m1", [0.5], "torch/cpu/bf16/2t"), AT).runtime == "torch/cpu/bf16/2t"


def test_failed_result_keeps_its_code_and_no_embedding() -> None:
    result = failed_result(_chunk(), "m1", MODEL_ERROR, "x" * 5000)
    row = chunk_row(result)
    record = result_record(result, AT)
    assert (row.status, row.error_code, row.embedding) == ("failed", MODEL_ERROR, [])
    assert (record.status, record.error_code, record.embedding) == ("failed", MODEL_ERROR, [])
    assert record.error is not None
    assert len(record.error) == 2000
    assert row.output is None and record.output is None  # its task said nothing of what it cost


def test_a_failed_result_keeps_what_its_attempts_cost_as_its_output_when_that_is_json() -> None:
    spent = {"kind": "extract", "prompt_tokens": 60, "completion_tokens": 15}
    result = failed_result(_chunk(), "m1", "generation_invalid", "invalid three times", task="generate", spent=spent)
    assert chunk_row(result).output == result_record(result, AT).output == \
        '{"kind":"extract","prompt_tokens":60,"completion_tokens":15}'
    assert chunk_row(result).status == "failed"
    for bad in ({"x": float("nan")}, {"x": object()}, {"x": "y" * 70_000}):  # not JSON, or over MAX_OUTPUT_BYTES
        assert failed_result(_chunk(), "m1", "generation_invalid", "e", task="generate", spent=bad).output is None


class PartlyRefusing:
    """Embeds index i as [i], except that indices in ``refused`` come back as their own errors (an endpoint)."""

    def __init__(self, refused: set[int]) -> None:
        self.refused = refused
        self.calls: list[list[int]] = []

    def __call__(self, indices: Sequence[int]) -> list[list[float]]:
        self.calls.append(list(indices))
        if self.refused & set(indices):
            raise PartialBatchError([PoisonRecord(f"refused {i}", code="endpoint_rejected") if i in self.refused
                                     else [float(i)] for i in indices])
        return [[float(i)] for i in indices]


def test_a_partial_batch_error_fails_only_the_items_it_names_without_splitting() -> None:
    model = PartlyRefusing({3, 9})
    results = embed_isolating(model, 12, attempts=3)
    assert model.calls == [list(range(12))]  # the items were named: no halving, no retry
    assert [r for i, r in enumerate(results) if i not in (3, 9)] == [[float(i)] for i in range(12) if i not in (3, 9)]
    for i in (3, 9):
        assert isinstance(results[i], Isolated)
        assert results[i].attempts == 1
        assert isinstance(results[i].error, PoisonRecord) and results[i].error.code == "endpoint_rejected"


def test_a_partial_batch_error_of_the_wrong_length_is_a_failure_that_splits() -> None:
    calls: list[list[int]] = []

    def short(indices: Sequence[int]) -> list[list[float]]:
        calls.append(list(indices))
        if len(indices) > 1:
            raise PartialBatchError([[0.0]])  # one output for many items: never trusted
        return [[float(indices[0])]]

    assert embed_isolating(short, 4, attempts=1) == [[0.0], [1.0], [2.0], [3.0]]
    assert calls[0] == [0, 1, 2, 3]


def test_backend_unavailable_is_never_isolated_it_goes_to_the_caller() -> None:
    calls: list[list[int]] = []

    def down(indices: Sequence[int]) -> list[list[float]]:
        calls.append(list(indices))
        raise BackendUnavailable("endpoint down")

    with pytest.raises(BackendUnavailable):
        embed_isolating(down, 8, attempts=3)
    assert calls == [list(range(8))]  # not split: no record is at fault
