"""The generate task against a real chat server: SmolLM2-135M-Instruct on llama.cpp (tests/fixtures/llm.py).

A 135M model is a functional stand-in: these tests assert structure (an answer per chunk, shorter than the
chunk, JSON valid against the schema or its failure code, the same answers on a rerun at temperature 0, the
server's own token counts), never what the answers say.

The stand-in's server applies no chat template, so the model runs on into a made-up next turn; the tests set
the stop sequences a user of such a server would (``tasks.generate.stop``), an empty line and "User:".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import httpx
import jsonschema
import pytest

from docstream.errors import PartialBatchError
from docstream.models.endpoint import EndpointUnavailable
from docstream.settings import Settings
from docstream.tasks.base import ChunkOutput, FoldInput, Prompt, TaskContext, TaskRequest, failure_output
from docstream.tasks.chat_protocol import chat_body, prompt_messages
from docstream.tasks.fold_generate import GenerateFold
from docstream.tasks.generate import GenerateTask
from docstream.tasks.registry import load_task
from docstream_inference.isolation import Isolated, embed_isolating
from tests.fixtures.contexts import task_context
from tests.fixtures.fault_proxy import FaultProxy
from tests.fixtures.llm import LlmServer

pytestmark = pytest.mark.integration

STOP = ["\n\n", "\nUser:"]
TEXTS = [
    "The Kafka broker stores records in partitions. Each partition is an ordered log that only grows at its end. "
    "Consumers read partitions in order and commit offsets after processing them, so a crash replays only the "
    "records that were not committed. A consumer group spreads the partitions of a topic over its members, and "
    "when a member leaves, its partitions move to the others after a rebalance.",
    "The invoice from ACME Corporation lists three items and a total of 120 euros, due on 3 March. Payment goes "
    "by bank transfer to the account at the bottom of the page. Late payment adds a fee of two percent a month, "
    "and an item may be returned within thirty days.",
    "The city council met on Tuesday and voted to repair the old bridge over the river. The work starts in May, "
    "costs four million euros and closes the bridge to cars for six months; buses and bicycles may still cross.",
]
EXTRACT_TEXTS = [
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in the chloroplasts "
    "of plant cells, where chlorophyll absorbs red and blue light and reflects green light, which is why leaves "
    "look green.",
    TEXTS[2],
    TEXTS[1],
]
SUBJECT = {"type": "object", "properties": {"subject": {"type": ["string", "null"]}}, "required": ["subject"]}
BUILT_TO_FAIL = "BUILT-TO-FAIL-4c1e"
SUMMARIZE = TaskRequest("generate", prompt=Prompt("summarize"))


def _settings(url: str, **generate: Any) -> TaskContext:
    options = {"endpoint": {"url": url, "model": "smollm2", "max_attempts": 8, "base_delay_ms": 50},
               "max_tokens": 96, "stop": STOP, **generate}
    return task_context(Settings().with_overrides(tasks={"generate": options}))


@pytest.fixture(scope="module")
def task(llm: LlmServer) -> Iterator[GenerateTask]:
    loaded = load_task("generate", _settings(llm.url))
    assert isinstance(loaded, GenerateTask)
    yield loaded
    loaded.close()


def _run(task: GenerateTask, texts: list[str], requests: list[TaskRequest]) -> list[ChunkOutput | BaseException]:
    try:
        return list(task.run(task.prepare(texts, requests)))
    except PartialBatchError as exc:
        return list(exc.outputs)


def test_every_chunk_gets_a_summary_shorter_than_it_and_the_same_on_a_rerun(task: GenerateTask) -> None:
    first = _run(task, TEXTS, [SUMMARIZE] * 3)
    assert all(isinstance(o, ChunkOutput) for o in first), first
    for text, output in zip(TEXTS, first, strict=True):
        assert isinstance(output, ChunkOutput)
        summary = output.output["text"]
        assert summary.strip() and len(summary) < len(text)
        assert output.output["prompt_tokens"] > 0 and output.output["completion_tokens"] > 0
    assert _run(task, TEXTS, [SUMMARIZE] * 3) == first  # temperature 0: reproducible


def test_the_tokens_recorded_are_the_servers_own_usage(task: GenerateTask, llm: LlmServer) -> None:
    [output] = _run(task, TEXTS[:1], [SUMMARIZE])
    assert isinstance(output, ChunkOutput)
    settings = _settings(llm.url).tasks.generate
    body = chat_body("smollm2", prompt_messages(Prompt("summarize"), TEXTS[0], system_prompt=settings.system_prompt),
                     temperature=0.0, seed=0, max_tokens=96, stop=STOP)
    usage = httpx.post(f"{llm.url}/chat/completions", json=body, timeout=120).json()["usage"]
    assert (output.output["prompt_tokens"], output.output["completion_tokens"]) == (
        usage["prompt_tokens"], usage["completion_tokens"])


def test_extract_answers_validate_and_one_built_to_fail_fails_alone_after_its_retries(llm: LlmServer) -> None:
    """The middle chunk's every answer is garbled by the proxy (an input the model never answers validly): it is
    asked 1 + invalid_retries times and fails alone with generation_invalid; its neighbours are the model's own
    answers, each valid against the schema or failed with its own code."""
    fits = TaskRequest("generate", prompt=Prompt.of("extract", "", SUBJECT))
    texts = [EXTRACT_TEXTS[0], f"{BUILT_TO_FAIL} {EXTRACT_TEXTS[1]}", EXTRACT_TEXTS[2]]
    with FaultProxy(llm.url) as proxy:
        proxy.garble(BUILT_TO_FAIL)
        task = load_task("generate", _settings(proxy.url, invalid_retries=2))
        warm = proxy.stats()  # the warm-up request at load
        try:
            outputs = _run(task, texts, [fits] * 3)
            again = _run(task, texts, [fits] * 3)
        finally:
            task.close()  # type: ignore[attr-defined]
        stats = proxy.stats()
    assert getattr(outputs[1], "code", None) == "generation_invalid"
    assert stats.garbled == 2 * 3  # each run: the first answer and two retries
    valid = [o for o in (outputs[0], outputs[2]) if isinstance(o, ChunkOutput)]
    assert valid, outputs
    for output in valid:
        assert output.output["kind"] == "extract"
        jsonschema.validate(output.output["value"], SUBJECT)
    for other in (outputs[0], outputs[2]):
        assert isinstance(other, ChunkOutput) or getattr(other, "code", "").startswith("generation_"), other
    assert [getattr(o, "output", None) for o in again] == [getattr(o, "output", None) for o in outputs]
    # what every answer cost, the failed ones' included, is what the server counted (the proxy is that server
    # for the built-to-fail chunk: 1 + 1 tokens an answer, three answers)
    assert failure_output(outputs[1]) == {"kind": "extract", "prompt_tokens": 3, "completion_tokens": 3}
    spent = [o.output if isinstance(o, ChunkOutput) else failure_output(o) or {} for o in outputs]  # twice: 2 runs
    assert (2 * sum(x.get("prompt_tokens", 0) for x in spent), 2 * sum(x.get("completion_tokens", 0) for x in spent)) \
        == (stats.prompt_tokens - warm.prompt_tokens, stats.completion_tokens - warm.completion_tokens)


def test_throttling_errors_and_resets_are_retried_and_a_poisoned_input_fails_alone(llm: LlmServer) -> None:
    with FaultProxy(llm.url) as proxy:
        task = load_task("generate", _settings(proxy.url))
        try:
            proxy.throttle(2, retry_after_s=0.1)
            proxy.fail(2, status=503)
            proxy.reset(1)
            proxy.poison("POISON-7")
            texts = [TEXTS[0], "POISON-7 " + TEXTS[1], TEXTS[2]]
            outputs = _run(task, texts, [SUMMARIZE] * 3)
        finally:
            task.close()  # type: ignore[attr-defined]
        stats = proxy.stats()
    assert getattr(outputs[1], "code", None) == "endpoint_rejected"
    assert isinstance(outputs[0], ChunkOutput) and isinstance(outputs[2], ChunkOutput)
    assert stats.throttled == 2 and stats.failed == 2 and stats.reset == 1
    assert json.dumps(outputs[0].output)  # a plain JSON answer


def test_a_document_longer_than_one_reduce_call_reduces_in_a_tree_with_its_levels_recorded(llm: LlmServer) -> None:
    """Six parts of about 60 tokens where a reduce request holds 200 (context 360 - max_tokens 96 - 64): two
    calls or more on level 1, then the next level. The parts are the texts themselves, standing for their chunk
    summaries."""
    loaded = load_task("generate", _settings(llm.url, context_tokens=360))
    assert isinstance(loaded, GenerateTask)
    fold = GenerateFold()
    state = fold.empty()
    for i, text in enumerate([*TEXTS, *EXTRACT_TEXTS]):
        state = fold.add(state, FoldInput(i, 70, 1, 1, output={"kind": "summarize", "text": text,
                                                                "prompt_tokens": 0, "completion_tokens": 0}))
    pending = fold.finish_with(state, list(enumerate([*TEXTS, *EXTRACT_TEXTS])), chunk_count=6).output
    try:
        output = loaded.reduce_document(dict(pending), Prompt("summarize"))
    finally:
        loaded.close()
    levels = output["levels"]
    assert len(levels) >= 2 and levels[0]["calls"] >= 2, levels
    assert [i for group in levels[0]["groups"] for i in group] == list(range(6))  # every part once, in order
    for below, above in pairwise(levels):
        assert [i for group in above["groups"] for i in group] == list(range(len(below["outputs"])))
    assert levels[-1]["outputs"] == [output["summary"]] and output["summary"].strip()
    assert output["document_step"] == "done"
    assert output["prompt_tokens"] == sum(level["prompt_tokens"] for level in levels) > 0  # the server's usage
    assert output["completion_tokens"] == sum(level["completion_tokens"] for level in levels) > 0


def test_a_batch_split_around_a_nested_answer_bills_what_the_job_counts_and_asks_no_chunk_again(
    llm: LlmServer,
) -> None:
    """The proxy answers the middle chunk with JSON nested 10,000 deep (a RecursionError in the decoder, once, that
    escaped ``run`` and made the inference service split the batch and ask the others again). Run as the service
    runs a batch (``embed_isolating`` over ``run``): every chunk is asked once, and the tokens the chunks count,
    the failed one's included, are the proxy's bill."""
    fits = TaskRequest("generate", prompt=Prompt.of("extract", "", SUBJECT))
    texts = [EXTRACT_TEXTS[0], f"{BUILT_TO_FAIL} {EXTRACT_TEXTS[1]}", EXTRACT_TEXTS[2]]
    with FaultProxy(llm.url) as proxy:
        proxy.garble(BUILT_TO_FAIL, "[" * 10_000 + "]" * 10_000)
        task = load_task("generate", _settings(proxy.url, invalid_retries=0))
        warm = proxy.stats()
        try:
            prepared = task.prepare(texts, [fits] * 3)

            def run(indices: Any) -> Any:
                if len(indices) == len(texts):
                    return task.run(prepared)
                return task.run(task.prepare([texts[i] for i in indices], [fits] * len(indices)))

            outcomes = embed_isolating(run, len(texts), attempts=2)
        finally:
            task.close()  # type: ignore[attr-defined]
        stats = proxy.stats()
    assert isinstance(outcomes[1], Isolated) and getattr(outcomes[1].error, "code", None) == "generation_invalid"
    assert (stats.garbled, stats.forwarded - warm.forwarded) == (1, 2)  # each chunk asked once, no split
    parts = [failure_output(o.error) or {} if isinstance(o, Isolated) else o.output for o in outcomes]
    counted = (sum(p.get("prompt_tokens", 0) for p in parts), sum(p.get("completion_tokens", 0) for p in parts))
    assert counted == (stats.prompt_tokens - warm.prompt_tokens, stats.completion_tokens - warm.completion_tokens)


def test_a_batch_the_endpoint_answered_in_part_asks_only_the_rest_when_it_runs_again(llm: LlmServer) -> None:
    """One request of the batch finds the endpoint failing past its one attempt while the others are answered: the
    batch waits for the endpoint (``EndpointUnavailable``, as the inference service keeps it), and its next run asks
    only for the chunk without an answer. Each chunk is billed once, and the chunks count the proxy's bill."""
    fits = TaskRequest("generate", prompt=Prompt.of("extract", "", SUBJECT))
    with FaultProxy(llm.url) as proxy:
        task = load_task("generate", _settings(proxy.url, endpoint={"url": proxy.url, "model": "smollm2",
                                                                   "max_attempts": 1, "max_in_flight": 1},
                                               invalid_retries=0))
        warm = proxy.stats()
        try:
            prepared = task.prepare(EXTRACT_TEXTS, [fits] * len(EXTRACT_TEXTS))
            proxy.fail(1, status=503)  # the first request of the batch, one attempt: past its budget
            with pytest.raises(EndpointUnavailable):
                task.run(prepared)
            try:
                outcomes: list[Any] = list(task.run(prepared))
            except PartialBatchError as exc:  # an answer the small model got wrong fails alone, with its cost
                outcomes = list(exc.outputs)
        finally:
            task.close()  # type: ignore[attr-defined]
        stats = proxy.stats()
    assert stats.failed == 1
    assert stats.forwarded - warm.forwarded == len(EXTRACT_TEXTS)  # every chunk answered once: none asked again
    parts = [failure_output(o) or {} if isinstance(o, BaseException) else o.output for o in outcomes]
    counted = (sum(p.get("prompt_tokens", 0) for p in parts), sum(p.get("completion_tokens", 0) for p in parts))
    assert counted == (stats.prompt_tokens - warm.prompt_tokens, stats.completion_tokens - warm.completion_tokens)
