"""The ``generate`` task: a chat model answers a prompt for every chunk (docs/tasks.md "generate").

Each job's ``generate`` request carries its ``Prompt``: ``summarize`` (a summary per chunk) or ``extract`` (the
fields of a JSON Schema, per chunk). The model is an OpenAI-compatible chat-completions server (vLLM, TGI,
llama.cpp's server, a hosted API) at ``tasks.generate.endpoint``, reached through ``EndpointClient.complete``:
a micro-batch becomes one request per chunk, sent concurrently up to ``max_in_flight`` so a continuously
batching server stays full, with the endpoint client's retries and backoff.

Per chunk: an answer that is refused, truncated or empty fails that chunk alone with its code; an extract
answer that is not JSON valid against the schema is asked again with the validation error appended, up to
``invalid_retries`` times, then fails alone with ``generation_invalid``; a chunk whose prompt's schema is refused
(``check_json_schema``: a record from a producer that skipped the intake's check) fails alone with
``prompt_invalid``, never asked. The results are keyed by ``generate_model_id`` (the model and a hash of the
prompt, its schema and the sampling settings).

No chunk that has an answer is asked again but for its own invalid answer (docs/security.md "Generate
accounting"): ``run`` raises no per-chunk failure but in a ``PartialBatchError`` (a raise would make the
inference service split the batch and ask the others again), and an endpoint that stops answering while
invalid answers are asked again fails those chunks with their last answer's ``generation_invalid``. Every
answer's ``usage``, retries and failures included, is in its chunk's output or its failure's ``FAILURE_OUTPUT``.

The pure rules are beside it: what is sent and what an answer must be in ``docstream.tasks.chat_protocol``, the
document-level reduction in ``docstream.tasks.reduction``, the fold in ``docstream.tasks.fold_generate``.

Importing this module loads no model and sends nothing: the reducer imports it for ``GenerateTask.fold``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar

from docstream.errors import BackendUnavailable, ConfigError, InputError, PartialBatchError, PoisonRecord
from docstream.logging import get_logger
from docstream.metrics import EndpointMetrics, Metrics
from docstream.models.endpoint import EndpointClient
from docstream.models.endpoint_protocol import EndpointResponseError
from docstream.models.tokenization import ModelTokenCounter
from docstream.settings import GenerateSettings
from docstream.tasks.base import (
    FAILURE_OUTPUT,
    GENERATE,
    ChunkOutput,
    PreparedTexts,
    Prompt,
    TaskContext,
    TaskFold,
    TaskRequest,
    failure_output,
)
from docstream.tasks.chat_protocol import (
    GenerationInvalid,
    GenerationTooLong,
    answer_budget,
    answer_error,
    chat_body,
    check_json_schema,
    extracted_value,
    generate_model_id,
    parse_chat,
    prompt_messages,
    retry_messages,
)
from docstream.tasks.fold_generate import ANSWER_KEYS, GenerateFold
from docstream.tasks.reduction import DOCUMENT_STEP, part_text, reduce_messages, reduce_tree

__all__ = ["DEFAULT_PROMPT", "GenerateTask"]

DEFAULT_PROMPT = Prompt("summarize")
"""The prompt of a generate request that carries none."""

_PROMPT_OVERHEAD_TOKENS = 64  # the system prompt's and the template's tokens beside the chunk, roughly
_PART_OVERHEAD_TOKENS = 4  # a reduce request's "Part n:" before each part
_DOCUMENT_ANSWER_KEY = {"summarize": "summary", "extract": "value"}  # a document output's answer
_WARMUP = "docstream warm-up."
_KEPT_ANSWERS = 4096  # answers held for a batch that runs again after an outage (oldest dropped first)
_log = get_logger(__name__)


class GenerateTask:
    """A chat model over an OpenAI-compatible endpoint: one answer per chunk (``ChunkOutput.output``)."""

    name: ClassVar[str] = GENERATE
    fold: ClassVar[TaskFold] = GenerateFold()
    document_step: ClassVar[bool] = True
    """A summary of two or more chunk summaries, or chunk values that disagree, are a model call the fold cannot
    make: the document stage makes them (``finish_document``)."""
    always_reuse_stored: ClassVar[bool] = True
    """Every answer is a model call worth far more than one read per batch: after a crash, the chunks whose answers
    were written before it are not asked again (docs/security.md "Generate accounting")."""

    def __init__(self, client: EndpointClient, settings: GenerateSettings, counter: ModelTokenCounter) -> None:
        """Wrap ``client`` (closed by ``close``); ``counter`` estimates a prompt's tokens for its answer's budget."""
        self._client = client
        self._settings = settings
        self._counter = counter
        # answers the server gave (and billed) to a batch that then waited for the endpoint, by request body:
        # its next run takes them instead of asking again (docs/security.md "Generate accounting")
        self._kept: OrderedDict[str, Any] = OrderedDict()

    @classmethod
    def load(cls, context: TaskContext) -> GenerateTask:
        """The runner of ``context.tasks.generate``; with ``inference.warmup`` it sends one small request (an
        endpoint that does not answer then is logged, not fatal: the service waits for it as for an outage).

        Raises:
            ConfigError: ``endpoint_unset`` (no ``tasks.generate.endpoint.url``), or no tokenizer for the counts.
            EndpointRefused: the endpoint refuses the key, URL or model at warm-up.
        """
        from docstream.models.tokenization import load_token_counter

        options: GenerateSettings = context.tasks.generate
        if options.endpoint.url is None:
            raise ConfigError("the generate task needs a chat model: set tasks.generate.endpoint.url "
                              "(DOCSTREAM_TASKS__GENERATE__ENDPOINT__URL)", code="endpoint_unset")
        task = cls(EndpointClient(options.endpoint), options,
                   load_token_counter(context.inference.model_path, context.inference.model_id))
        _log.info("generate_endpoint", url=options.endpoint.url, model=options.endpoint.model,
                  max_in_flight=options.endpoint.max_in_flight, key_set=options.endpoint.api_key is not None)
        if context.inference.warmup:
            try:
                task.warm_up()
            except BackendUnavailable as exc:
                _log.warning("endpoint_unavailable_at_start", url=options.endpoint.url, error=str(exc)[:300])
        return task

    @property
    def model_id(self) -> str:
        """The ``model_id`` of the default prompt (summarize)."""
        return self.model_id_for(TaskRequest(GENERATE))

    @property
    def max_tokens(self) -> int:
        """What the context leaves a chunk beside the prompt and the answer."""
        return max(1, self._settings.context_tokens - self._settings.max_tokens - _PROMPT_OVERHEAD_TOKENS)

    @property
    def runtime(self) -> str:
        """``openai/remote``: the model runs behind the endpoint."""
        return "openai/remote"

    @property
    def device(self) -> str:
        """``remote``: the model's time is the endpoint's answer time."""
        return "remote"

    def model_id_for(self, request: TaskRequest) -> str:
        """``generate_model_id`` of the request's prompt: two prompts' results never overwrite each other."""
        s = self._settings
        return generate_model_id(s.endpoint.model_id or s.endpoint.model, request.prompt or DEFAULT_PROMPT,
                                 system_prompt=s.system_prompt, temperature=s.temperature, seed=s.seed,
                                 max_tokens=s.max_tokens, stop=s.stop)

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Count each chunk's tokens (the answer's budget is what its prompt leaves of the context)."""
        return PreparedTexts(tuple(texts), tuple(requests), self._counter.count(texts) if texts else [])

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """One answer per chunk, the requests concurrent; extract answers validated, and asked again when invalid.

        Raises:
            PartialBatchError: some chunks failed alone (refused, truncated, empty, invalid, too long, a schema
                refused, or a request the endpoint refused); the others keep their answers.
            EndpointUnavailable: the endpoint does not answer within its retry budget, before any chunk has an
                answer (the batch is run again).
            EndpointRefused: the endpoint refuses us (a key, URL or model to fix).
        """
        if len(batch.requests) != len(batch.texts):
            raise ValueError(f"{len(batch.texts)} texts but {len(batch.requests)} requests")
        s = self._settings
        prompts = [request.prompt or DEFAULT_PROMPT for request in batch.requests]
        counts = list(batch.features) if isinstance(batch.features, list) else self._counter.count(batch.texts)
        conversations = [prompt_messages(p, text, system_prompt=s.system_prompt)
                         for p, text in zip(prompts, batch.texts, strict=True)]
        answers = self._ask(conversations, [prompt.schema for prompt in prompts], counts)  # schemas decoded once
        for prompt, answer in zip(prompts, answers, strict=True):
            spent = failure_output(answer) if isinstance(answer, BaseException) else None
            if spent is not None:  # the fold counts a failed chunk's tokens under its document's kind
                spent["kind"] = prompt.kind
        results: list[ChunkOutput | BaseException] = [
            a if isinstance(a, BaseException) else ChunkOutput(output={
                "kind": prompt.kind, ANSWER_KEYS[prompt.kind]: a[0], "prompt_tokens": a[1], "completion_tokens": a[2]})
            for prompt, a in zip(prompts, answers, strict=True)]
        if any(isinstance(r, BaseException) for r in results):
            raise PartialBatchError(list(results))
        return [r for r in results if isinstance(r, ChunkOutput)]

    def finish_document(self, output: dict[str, Any], request: TaskRequest) -> dict[str, Any]:
        """The document-level step (``DocumentStepTask``): ``reduce_document`` with the request's prompt (none:
        ``DEFAULT_PROMPT``).

        Raises:
            PoisonRecord: as ``reduce_document``.
            EndpointUnavailable: as ``reduce_document``.
            EndpointRefused: as ``reduce_document``.
        """
        return self.reduce_document(output, request.prompt or DEFAULT_PROMPT)

    def reduce_document(self, output: dict[str, Any], prompt: Prompt) -> dict[str, Any]:
        """The document-level step of a folded document output (``needs_document_step``): its chunk summaries
        summarized, or its disagreeing chunk values reconciled, level by level (``reduction.reduce_tree``).

        Returns:
            ``output`` with ``summary`` (or ``value``), its ``levels``, the levels' tokens added to the document's,
            and ``document_step`` ``done``.

        Raises:
            PoisonRecord: an answer that is no answer (empty, truncated, refused, invalid after its retries), a
                reduction deeper than ``reduce_max_levels``, or parts too long to reduce (the document fails); its
                ``FAILURE_OUTPUT`` holds the tokens the step spent before it failed.
            EndpointUnavailable: the endpoint does not answer within its retry budget.
            EndpointRefused: the endpoint refuses us.
        """
        s = self._settings
        kind = prompt.kind
        if kind == "summarize":
            parts: list[Any] = [p["text"] for p in output.get("chunk_summaries", [])]
        else:
            parts = [p["value"] for p in output.get("chunk_values", []) if p.get("value") is not None]
        schema = prompt.schema

        def count(values: Sequence[Any]) -> list[int]:
            return [n + _PART_OVERHEAD_TOKENS for n in self._counter.count([part_text(kind, v) for v in values])]

        spent = [0, 0]  # the step's tokens so far, every answer's (a failure says what it cost)

        def call(groups: list[list[Any]]) -> list[tuple[Any, int, int]]:
            conversations = [reduce_messages(prompt, group, system_prompt=s.system_prompt) for group in groups]
            answers = self._ask(conversations, [schema] * len(groups), [sum(count(group)) for group in groups])
            for answer in answers:
                cost = (failure_output(answer) or {}) if isinstance(answer, BaseException) else \
                    {"prompt_tokens": answer[1], "completion_tokens": answer[2]}
                spent[0] += int(cost.get("prompt_tokens", 0))
                spent[1] += int(cost.get("completion_tokens", 0))
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            return [a for a in answers if not isinstance(a, BaseException)]

        budget = max(1, s.context_tokens - s.max_tokens - _PROMPT_OVERHEAD_TOKENS)
        try:
            final, levels = reduce_tree(parts, count=count, budget=budget, max_levels=s.reduce_max_levels,
                                        call=call)
        except PoisonRecord as exc:
            setattr(exc, FAILURE_OUTPUT, {"prompt_tokens": spent[0], "completion_tokens": spent[1]})
            raise
        return {**output, _DOCUMENT_ANSWER_KEY[kind]: final, "levels": [level.to_json() for level in levels],
                "prompt_tokens": output.get("prompt_tokens", 0) + sum(lv.prompt_tokens for lv in levels),
                "completion_tokens": output.get("completion_tokens", 0) + sum(lv.completion_tokens for lv in levels),
                DOCUMENT_STEP: "done"}

    def _ask(self, conversations: list[list[dict[str, str]]], schemas: Sequence[dict[str, Any] | None],
             counts: Sequence[int]) -> list[tuple[Any, int, int] | BaseException]:
        """Each conversation's answer, the requests concurrent: ``(value, prompt_tokens, completion_tokens)``, the
        value a summary's text or a valid extract value (``schemas``: each one's, None for summarize; an invalid
        answer is asked again, up to ``invalid_retries``), the tokens over every attempt; or its failure, with
        the tokens its attempts spent in its ``FAILURE_OUTPUT`` when the server counted any.
        ``counts``: each conversation's text tokens, for its answer's budget.

        Raises:
            EndpointUnavailable: the first requests found no endpoint (nothing was answered yet).
            EndpointRefused: the endpoint refuses us.
        """
        s = self._settings
        conversations = list(conversations)
        results: list[tuple[Any, int, int] | BaseException | None] = [None] * len(conversations)
        budgets = self._budgets(schemas, counts, results)
        used = {i: [0, 0] for i in range(len(conversations))}
        invalid = dict.fromkeys(range(len(conversations)), 0)
        last: dict[int, BaseException] = {}
        pending = sorted(budgets)
        while pending:
            bodies = [chat_body(s.endpoint.model, conversations[i], temperature=s.temperature, seed=s.seed,
                                max_tokens=budgets[i], stop=s.stop,
                                schema=schemas[i] if s.response_format else None) for i in pending]
            try:
                answers = self._complete(bodies, [counts[i] + _PROMPT_OVERHEAD_TOKENS for i in pending])
            except BackendUnavailable as exc:
                if not last:
                    raise  # nothing answered yet: the batch waits for the endpoint and runs again
                answers = [exc] * len(pending)
            gone = [i for i, answer in zip(pending, answers, strict=True) if isinstance(answer, BackendUnavailable)]
            if gone and not last:
                # a first round the endpoint answered in part: the answers are kept for the batch's next run,
                # which asks only for the others
                for body, answer in zip(bodies, answers, strict=True):
                    if not isinstance(answer, BaseException):
                        self._keep(body, answer)
                raise next(a for a in answers if isinstance(a, BackendUnavailable))
            if gone:
                # each one pending has an answer, invalid: asked again with the batch, the others would be too
                _log.warning("generate_retry_unavailable", chunks=len(gone))
                answers = [last[i] if isinstance(a, BackendUnavailable) else a
                           for i, a in zip(pending, answers, strict=True)]
                invalid.update(dict.fromkeys(gone, s.invalid_retries))
            again: list[int] = []
            for i, answer in zip(pending, answers, strict=True):
                outcome, text = self._outcome(schemas[i], answer, used[i], budgets[i])
                if isinstance(outcome, GenerationInvalid) and invalid[i] < s.invalid_retries:
                    invalid[i] += 1
                    last[i] = outcome
                    conversations[i] = retry_messages(conversations[i], text, outcome.message)
                    again.append(i)
                else:
                    if isinstance(outcome, BaseException) and any(used[i]):  # what its attempts cost
                        setattr(outcome, FAILURE_OUTPUT, {"prompt_tokens": used[i][0], "completion_tokens": used[i][1]})
                    results[i] = outcome
            pending = again
        return [r if r is not None else ValueError("no answer") for r in results]

    def _complete(self, bodies: list[dict[str, Any]], tokens: list[int]) -> list[Any]:
        """``EndpointClient.complete``, with the answers kept from an earlier run of the same requests taken
        instead of asking again."""
        out: list[Any] = [self._kept.pop(_body_key(body), None) for body in bodies]
        ask = [i for i, answer in enumerate(out) if answer is None]
        if ask:
            try:
                answers = self._client.complete([bodies[i] for i in ask], [tokens[i] for i in ask])
            except BackendUnavailable:
                for body, answer in zip(bodies, out, strict=True):
                    if answer is not None:
                        self._keep(body, answer)  # still unused: the next run takes them
                raise
            for i, answer in zip(ask, answers, strict=True):
                out[i] = answer
        return out

    def _keep(self, body: dict[str, Any], answer: Any) -> None:
        self._kept[_body_key(body)] = answer
        while len(self._kept) > _KEPT_ANSWERS:
            self._kept.popitem(last=False)

    def _budgets(self, schemas: Sequence[dict[str, Any] | None], counts: Sequence[int],
                 results: list[tuple[Any, int, int] | BaseException | None]) -> dict[int, int]:
        """Each conversation's ``max_tokens``; one whose prompt is too long or whose schema is refused gets its
        failure in ``results`` instead, and is never asked."""
        s = self._settings
        budgets: dict[int, int] = {}
        for i, (schema, count) in enumerate(zip(schemas, counts, strict=True)):
            try:
                if schema is not None:
                    check_json_schema(schema)
                budgets[i] = answer_budget(count + _PROMPT_OVERHEAD_TOKENS, max_tokens=s.max_tokens,
                                           context_tokens=s.context_tokens)
            except (GenerationTooLong, InputError) as exc:  # this one alone
                results[i] = exc
        return budgets

    def warm_up(self) -> None:
        """One small request: the endpoint answers."""
        s = self._settings
        body = chat_body(s.endpoint.model, [{"role": "user", "content": _WARMUP}], temperature=0.0, seed=s.seed,
                         max_tokens=1)
        self._client.complete([body], [8])

    def bind_metrics(self, metrics: Metrics, service: str) -> None:
        """Count the endpoint's requests into ``metrics`` (``docstream_endpoint_*``)."""
        self._client.observer = EndpointMetrics(metrics, service)

    def close(self) -> None:
        """Close the endpoint's connections (the pipeline calls it when it stops)."""
        self._client.close()

    def _outcome(self, schema: dict[str, Any] | None, answer: Any, used: list[int],
                 budget: int) -> tuple[tuple[Any, int, int] | BaseException, str]:
        """One answer as ``(value, prompt_tokens, completion_tokens)``, or its failure, and the answer's text (for a
        retry); ``used`` adds the answer's tokens. ``schema``: extract's (None: summarize). ``answer``: the
        server's, or an exception (the endpoint refused that request alone; an invalid answer kept)."""
        if isinstance(answer, BaseException):
            return answer, ""
        try:
            parsed = parse_chat(answer)
        except EndpointResponseError as exc:
            return exc, ""
        used[0] += parsed.prompt_tokens
        used[1] += parsed.completion_tokens
        error = answer_error(parsed, max_tokens=budget)
        if error is not None:
            return error, parsed.text
        if schema is None:
            return (parsed.text.strip(), used[0], used[1]), parsed.text
        try:
            value = extracted_value(parsed.text, schema)
        except (GenerationInvalid, InputError) as exc:  # InputError: the schema refused, not asked again
            return exc, parsed.text
        return (value, used[0], used[1]), parsed.text


def _body_key(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
