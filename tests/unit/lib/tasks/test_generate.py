"""The generate task without a server: its fold, and its runner over a scripted client (no sockets)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from docstream.errors import PartialBatchError
from docstream.models.endpoint import EndpointUnavailable
from docstream.models.endpoint_protocol import EndpointRejected
from docstream.tasks.base import FoldInput, Prompt, TaskOutputError, TaskRequest, failure_output
from docstream.tasks.chat_protocol import GenerationTruncated
from docstream.tasks.fold_generate import GenerateFold, merge_values
from docstream_inference.isolation import Isolated, embed_isolating
from tests.fixtures.chat import asked, chat_answer, scripted_task

FOLD = GenerateFold()
SCHEMA = {"type": "object", "properties": {"vendor": {"type": "string"}}, "required": ["vendor"]}
EXTRACT = TaskRequest("generate", prompt=Prompt.of("extract", "", SCHEMA))
SUMMARIZE = TaskRequest("generate", prompt=Prompt("summarize"))


def _chunk(index: int, output: Any) -> FoldInput:
    return FoldInput(index=index, token_count=10, page_start=1, page_end=1, output=output)


def _finish(state: Any, chunks: Sequence[FoldInput], chunk_count: int) -> Any:
    """The document's output as the reducer makes it: the fold's state (no answer in it), and the ok chunks'
    answers as their stored rows give them back, in any order."""
    answers = [(c.index, FOLD.answer_of(state, c.output)) for c in reversed(chunks) if not c.failed]
    return FOLD.finish_with(state, answers, chunk_count=chunk_count).output


def test_summaries_fold_in_chunk_order_whatever_order_they_arrive_in() -> None:
    parts = [_chunk(i, {"kind": "summarize", "text": f"summary {i}", "prompt_tokens": 10 + i,
                        "completion_tokens": i}) for i in range(6)]
    expected = None
    rng = random.Random(5)
    for _ in range(50):
        rng.shuffle(parts)
        state = FOLD.empty()
        for part in parts:
            state = FOLD.add(state, part)
        state = json.loads(json.dumps(state))  # the reducer keeps it as JSON
        output = _finish(state, parts, 6)
        expected = expected or output
        assert output == expected
    assert expected["chunk_summaries"] == [{"index": i, "text": f"summary {i}"} for i in range(6)]
    assert expected["summary"] is None and expected["document_step"] == "pending"  # the document stage gives it
    assert (expected["prompt_tokens"], expected["completion_tokens"]) == (75, 15)


def test_a_document_of_one_chunk_has_that_chunks_summary_as_its_own() -> None:
    chunk = _chunk(0, {"kind": "summarize", "text": "Kurz.", "prompt_tokens": 3, "completion_tokens": 1})
    state = FOLD.add(FOLD.empty(), chunk)
    assert _finish(state, [chunk], 1)["summary"] == "Kurz."
    assert "document_step" not in _finish(state, [chunk], 1)  # no model call left to make
    assert "document_step" not in _finish(state, [chunk], 3)  # the only chunk that did not fail
    assert _finish(FOLD.empty(), [], 1)["summary"] is None  # its one chunk failed


def test_a_failed_chunk_counts_what_it_cost_and_gives_no_answer_in_any_order() -> None:
    ok = _chunk(0, {"kind": "summarize", "text": "s0", "prompt_tokens": 10, "completion_tokens": 2})
    failed = FoldInput(index=1, token_count=10, page_start=1, page_end=1, failed=True,
                       output={"kind": "summarize", "prompt_tokens": 30, "completion_tokens": 9})
    retried = _chunk(1, {"kind": "summarize", "text": "s1", "prompt_tokens": 11, "completion_tokens": 3})
    outputs = []
    for order in ([ok, failed, retried], [failed, retried, ok], [failed, ok, retried]):
        state = FOLD.empty()
        for chunk in order:
            state = json.loads(json.dumps(FOLD.add(state, chunk)))
        outputs.append(_finish(state, order, 2))
    assert outputs[0] == outputs[1] == outputs[2]
    assert [s["text"] for s in outputs[0]["chunk_summaries"]] == ["s0", "s1"]
    assert (outputs[0]["prompt_tokens"], outputs[0]["completion_tokens"]) == (51, 14)  # both attempts of chunk 1
    alone = _finish(FOLD.add(FOLD.empty(), failed), [failed], 1)  # every chunk failed
    assert alone == {"kind": "summarize", "prompt_tokens": 30, "completion_tokens": 9, "chunk_summaries": [],
                     "summary": None}


def test_extracted_values_merge_field_by_field_in_chunk_order() -> None:
    assert merge_values([{"a": None, "b": 1}, {"a": "x", "b": 2}, {"c": [1]}]) == {"a": "x", "b": 1, "c": [1]}
    assert merge_values([None, "first", "second"]) == "first"
    assert merge_values([]) is None
    state = FOLD.empty()
    chunks = [_chunk(i, {"kind": "extract", "value": value, "prompt_tokens": 1, "completion_tokens": 1})
              for i, value in [(2, {"vendor": "late"}), (0, {"vendor": None}), (1, {"vendor": "ACME"})]]
    for chunk in chunks:
        state = FOLD.add(state, chunk)
    output = _finish(state, chunks, 3)
    assert output["value"] is None and output["document_step"] == "pending"  # ACME or late: the model reconciles
    assert [v["value"] for v in output["chunk_values"]] == [{"vendor": None}, {"vendor": "ACME"}, {"vendor": "late"}]


def test_extracted_values_that_agree_merge_without_a_document_step() -> None:
    state = FOLD.empty()
    chunks = [_chunk(i, {"kind": "extract", "value": value, "prompt_tokens": 1, "completion_tokens": 1})
              for i, value in [(2, {"vendor": "ACME", "total": 3}), (0, {"vendor": None}), (1, {"vendor": "ACME"})]]
    for chunk in chunks:
        state = FOLD.add(state, chunk)
    output = _finish(state, chunks, 3)
    assert output["value"] == {"vendor": "ACME", "total": 3} and "document_step" not in output


@pytest.mark.parametrize("output", [None, "text", {"kind": "translate"}, {"kind": "summarize", "text": 5},
                                    {"kind": "summarize", "text": "t", "prompt_tokens": -1}])
def test_an_output_that_is_no_generate_answer_is_refused(output: Any) -> None:
    with pytest.raises(TaskOutputError):
        FOLD.add(FOLD.empty(), _chunk(0, output))


def test_answers_of_two_kinds_in_one_document_are_refused() -> None:
    state = FOLD.add(FOLD.empty(), _chunk(0, {"kind": "summarize", "text": "t"}))
    with pytest.raises(TaskOutputError, match="extract answer in a summarize document"):
        FOLD.add(state, _chunk(1, {"kind": "extract", "value": {}}))


def test_every_chunk_is_one_request_with_the_sampling_settings() -> None:
    task, client = scripted_task(lambda body: chat_answer("A summary."), seed=3, stop=["\n\n"])
    outputs = task.run(task.prepare(["one two", "three"], [SUMMARIZE, SUMMARIZE]))
    assert [o.output for o in outputs] == [{"kind": "summarize", "text": "A summary.", "prompt_tokens": 20,
                                           "completion_tokens": 5}] * 2
    assert len(client.bodies) == 2
    assert {(b["temperature"], b["seed"], tuple(b["stop"]), b["max_tokens"]) for b in client.bodies} == {
        (0.0, 3, ("\n\n",), 256)}
    assert "one two" in client.bodies[0]["messages"][-1]["content"]


def test_an_invalid_extract_answer_is_asked_again_with_the_error_then_kept() -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        retried = body["messages"][-1]["content"].startswith("That answer is not valid")
        return chat_answer('{"vendor": "ACME"}' if retried else '{"vendor": 5}', prompt=30, completion=6)

    task, client = scripted_task(answer)
    [output] = task.run(task.prepare(["invoice"], [EXTRACT]))
    assert output.output == {"kind": "extract", "value": {"vendor": "ACME"}, "prompt_tokens": 60,
                             "completion_tokens": 12}
    assert len(client.bodies) == 2 and "vendor: 5 is not of type 'string'" in \
        client.bodies[1]["messages"][-1]["content"]


def test_an_answer_invalid_after_every_retry_fails_alone_and_its_neighbours_keep_theirs() -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        text = asked(body)
        return chat_answer('{"vendor": "ACME"}' if "good" in text else "no JSON here")

    task, client = scripted_task(answer, invalid_retries=2)
    with pytest.raises(PartialBatchError) as info:
        task.run(task.prepare(["good one", "bad one", "good two"], [EXTRACT] * 3))
    first, failed, last = info.value.outputs
    assert failed.code == "generation_invalid"
    assert first.output["value"] == last.output["value"] == {"vendor": "ACME"}
    assert len(client.bodies) == 3 + 2  # the bad one asked twice more, the good ones once
    # the failure says what its three attempts cost: the chunk's failed row keeps it, the fold counts it
    assert failure_output(failed) == {"kind": "extract", "prompt_tokens": 3 * 20, "completion_tokens": 3 * 5}


def test_truncated_refused_rejected_and_too_long_chunks_fail_with_their_codes() -> None:
    def answer(body: dict[str, Any]) -> Any:
        text = asked(body)
        if "cut" in text:
            return chat_answer("half", completion=256)
        if "refuse" in text:
            return {"choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}]}
        if "reject" in text:
            return EndpointRejected("HTTP 400: bad input")
        return chat_answer("fine")

    task, client = scripted_task(answer, context_tokens=300, max_tokens=256)
    texts = ["cut", "refuse", "reject", "word " * 250, "fine"]
    with pytest.raises(PartialBatchError) as info:
        task.run(task.prepare(texts, [SUMMARIZE] * 5))
    codes = [getattr(o, "code", "ok") for o in info.value.outputs]
    assert codes == ["generation_truncated", "generation_refused", "endpoint_rejected", "generation_too_long", "ok"]
    assert len(client.bodies) == 4  # the one too long for the context is never sent
    spent = [failure_output(o) if isinstance(o, BaseException) else None for o in info.value.outputs]
    assert spent == [{"kind": "summarize", "prompt_tokens": 20, "completion_tokens": 256}, None, None, None, None]


def test_the_model_id_follows_the_prompt() -> None:
    task, _ = scripted_task(lambda body: chat_answer("x"))
    assert task.model_id == task.model_id_for(TaskRequest("generate")) == task.model_id_for(SUMMARIZE)
    assert task.model_id_for(EXTRACT) != task.model_id and task.model_id_for(EXTRACT).startswith("generate/m/extract/")


def _summaries(n: int, words: int = 3) -> dict[str, Any]:
    state = FOLD.empty()
    chunks = [_chunk(i, {"kind": "summarize", "text": " ".join([f"s{i}"] * words), "prompt_tokens": 10,
                         "completion_tokens": 2}) for i in range(n)]
    for chunk in chunks:
        state = FOLD.add(state, chunk)
    output = _finish(state, chunks, n)
    assert output["document_step"] == "pending"
    return dict(output)


def test_a_document_summary_reduces_the_chunk_summaries_in_a_tree_with_its_levels_recorded() -> None:
    # a request holds 200 (context) - 40 (max_tokens) - 64 (overhead) = 96 tokens of parts; a part of 20 words
    # counts 24 with its label: four parts a request
    task, client = scripted_task(lambda body: chat_answer(f"sum{asked(body).count('Part ')}", prompt=30, completion=1),
                         context_tokens=200, max_tokens=40)
    output = task.reduce_document(_summaries(9, words=20), Prompt("summarize"))
    assert output["document_step"] == "done"
    assert [lv["groups"] for lv in output["levels"]] == [[[0, 1, 2, 3], [4, 5, 6, 7], [8]], [[0, 1, 2]]]
    assert output["levels"][0]["outputs"] == ["sum4", "sum4", " ".join(["s8"] * 20)]
    assert output["summary"] == "sum3"
    assert (output["prompt_tokens"], output["completion_tokens"]) == (90 + 3 * 30, 18 + 3)  # chunks + 3 calls
    assert len(client.bodies) == 3 and all(b["max_tokens"] <= 40 for b in client.bodies)
    assert output["chunk_summaries"][0] == {"index": 0, "text": " ".join(["s0"] * 20)}  # the chunks' kept


def test_a_document_step_answer_that_is_no_answer_fails_the_document_with_its_code() -> None:
    task, _ = scripted_task(lambda body: chat_answer("cut", completion=40, finish="length"), context_tokens=200,
                            max_tokens=40)
    with pytest.raises(GenerationTruncated) as failed:
        task.reduce_document(_summaries(3), Prompt("summarize"))
    assert failed.value.code == "generation_truncated"
    assert failure_output(failed.value) == {"prompt_tokens": 20, "completion_tokens": 40}  # the step's one call


def test_disagreeing_extract_values_are_reconciled_by_the_model_and_validated() -> None:
    state = FOLD.empty()
    chunks = [_chunk(i, {"kind": "extract", "value": {"vendor": vendor} if vendor else None, "prompt_tokens": 5,
                         "completion_tokens": 1}) for i, vendor in enumerate(["ACME", None, "ACME Corp"])]
    for chunk in chunks:
        state = FOLD.add(state, chunk)
    folded = _finish(state, chunks, 3)
    replies = iter(['{"vendor": 7}', '{"vendor": "ACME Corp"}'])  # invalid first: asked again with the error
    task, client = scripted_task(lambda body: chat_answer(next(replies), prompt=11, completion=3))
    output = task.reduce_document(dict(folded), EXTRACT.prompt)  # type: ignore[arg-type]
    assert output["value"] == {"vendor": "ACME Corp"} and output["document_step"] == "done"
    assert output["levels"][0]["groups"] == [[0, 1]]  # the two non-null values
    assert "not valid" in client.bodies[1]["messages"][-1]["content"]
    assert (output["prompt_tokens"], output["completion_tokens"]) == (15 + 22, 3 + 6)


# -- accounting: no chunk with an answer is asked again (docs/security.md "Generate accounting") -------------------

NESTED = "[" * 10_000 + "]" * 10_000


def _isolated(task: Any, texts: list[str], requests: list[TaskRequest]) -> list[Any]:
    """The batch as the inference service runs it: ``embed_isolating`` over ``task.run``, halves re-prepared."""
    prepared = task.prepare(texts, requests)

    def run(indices: Any) -> Any:
        if len(indices) == len(texts):
            return task.run(prepared)
        return task.run(task.prepare([texts[i] for i in indices], [requests[i] for i in indices]))

    return embed_isolating(run, len(texts), attempts=2)


def _spent(outcomes: list[Any]) -> tuple[int, int]:
    costs = [o.error if isinstance(o, Isolated) else o for o in outcomes]
    parts = [failure_output(c) or {} if isinstance(c, BaseException) else c.output for c in costs]
    return sum(p.get("prompt_tokens", 0) for p in parts), sum(p.get("completion_tokens", 0) for p in parts)


def test_a_nested_answer_fails_its_chunk_alone_and_no_other_chunk_is_asked_again() -> None:
    task, client = scripted_task(lambda body: chat_answer(NESTED if "nested" in asked(body) else '{"vendor": "A"}'),
                                 invalid_retries=1)
    outcomes = _isolated(task, ["good one", "nested one", "good two"], [EXTRACT] * 3)
    assert [isinstance(o, Isolated) for o in outcomes] == [False, True, False]
    error = outcomes[1].error
    assert getattr(error, "code", None) == "generation_invalid" and "levels deep" in str(error)
    assert len(client.bodies) == 3 + 1  # each chunk once, the nested one's retry: no split asked any again
    assert _spent(outcomes) == (len(client.bodies) * 20, len(client.bodies) * 5)  # every answer's usage


def test_a_chunk_whose_schema_is_refused_fails_alone_and_is_never_asked(tmp_path: Any) -> None:
    outside = TaskRequest("generate", prompt=Prompt.of("extract", "", {
        "type": "object", "properties": {"vendor": {"$ref": (tmp_path / "secret.json").as_uri()}}}))
    task, client = scripted_task(lambda body: chat_answer('{"vendor": "A"}'))
    outcomes = _isolated(task, ["one", "two"], [EXTRACT, outside])
    assert isinstance(outcomes[1], Isolated) and getattr(outcomes[1].error, "code", None) == "prompt_invalid"
    assert outcomes[0].output["value"] == {"vendor": "A"}
    assert len(client.bodies) == 1


def test_an_endpoint_gone_while_an_invalid_answer_is_asked_again_keeps_every_answer_and_its_cost() -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["content"].startswith("That answer is not valid"):
            raise EndpointUnavailable("the endpoint is gone")
        return chat_answer("no JSON" if "bad" in asked(body) else '{"vendor": "A"}')

    task, client = scripted_task(answer, invalid_retries=2)
    outcomes = _isolated(task, ["good one", "bad one"], [EXTRACT] * 2)
    assert outcomes[0].output["value"] == {"vendor": "A"}
    assert isinstance(outcomes[1], Isolated) and getattr(outcomes[1].error, "code", None) == "generation_invalid"
    assert failure_output(outcomes[1].error) == {"kind": "extract", "prompt_tokens": 20, "completion_tokens": 5}
    assert len(client.bodies) == 3  # two answered, one retry the endpoint did not answer; none asked again


def test_an_endpoint_gone_before_any_answer_runs_the_batch_again() -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        raise EndpointUnavailable("the endpoint is gone")

    task, _ = scripted_task(answer)
    with pytest.raises(EndpointUnavailable):
        task.run(task.prepare(["one"], [EXTRACT]))


def test_answers_given_while_a_sibling_request_found_no_endpoint_are_kept_for_the_batchs_next_run() -> None:
    down = {"on": True}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if down["on"] and "late" in asked(body):
            raise EndpointUnavailable("past its retry budget")
        return chat_answer('{"vendor": "A"}')

    task, client = scripted_task(answer)
    prepared = task.prepare(["early one", "late one", "early two"], [EXTRACT] * 3)
    with pytest.raises(EndpointUnavailable):  # the batch waits for the endpoint, as the pipeline keeps it
        task.run(prepared)
    assert len(client.bodies) == 3
    down["on"] = False
    outputs = task.run(prepared)  # its next run asks only for the chunk that had no answer
    assert [o.output["value"] for o in outputs] == [{"vendor": "A"}] * 3
    assert len(client.bodies) == 4 and "late" in asked(client.bodies[-1])
    answered = 3  # the two of the first run, the late one of the second; the request that found none is unbilled
    assert (sum(o.output["prompt_tokens"] for o in outputs), sum(o.output["completion_tokens"] for o in outputs)) \
        == (answered * 20, answered * 5)  # every answer the server gave is counted, once


def test_kept_answers_survive_a_run_that_finds_no_endpoint_at_all() -> None:
    state = {"round": 0}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if (state["round"] == 0 and "late" in asked(body)) or state["round"] == 1:
            raise EndpointUnavailable("down")
        return chat_answer('{"vendor": "A"}')

    task, client = scripted_task(answer)
    prepared = task.prepare(["early", "late"], [EXTRACT] * 2)
    for state["round"] in (0, 1):
        with pytest.raises(EndpointUnavailable):
            task.run(prepared)
    state["round"] = 2
    assert len(task.run(prepared)) == 2
    assert sum("early" in asked(b) for b in client.bodies) == 1  # answered in the first run, never asked again
