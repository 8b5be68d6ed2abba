"""Generation over an OpenAI-compatible chat-completions API, as docstream speaks it. Pure (docs/tasks.md "generate").

* ``prompt_messages`` and ``retry_messages``: what a chunk is asked, and asked again after an invalid answer;
* ``chat_body`` and ``parse_chat``: the request, and the answer checked before it is trusted;
* ``answer_error``: what an answer that is no answer is (empty, truncated, refused), each with its code;
* ``extracted_value``: an extract answer's JSON, validated against the prompt's JSON Schema;
* ``answer_budget``: the answer's ``max_tokens`` within the model's context;
* ``generate_model_id``: the name results are keyed by, with a hash of everything that changes an answer.

The edge that sends the requests is ``docstream.endpoint.EndpointClient.complete``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from docstream.endpoint_protocol import EndpointResponseError
from docstream.errors import InputError, PoisonRecord
from docstream.tasks.base import Prompt

__all__ = [
    "EXTRACT_INSTRUCTION",
    "MIN_ANSWER_TOKENS",
    "SUMMARIZE_INSTRUCTION",
    "ChatAnswer",
    "GenerationEmpty",
    "GenerationInvalid",
    "GenerationRefused",
    "GenerationTooLong",
    "GenerationTruncated",
    "answer_budget",
    "answer_error",
    "chat_body",
    "check_json_schema",
    "extracted_value",
    "generate_model_id",
    "parse_chat",
    "prompt_messages",
    "retry_messages",
    "skeleton",
]

SUMMARIZE_INSTRUCTION = "Summarize the text above in a few sentences, keeping its key facts."
EXTRACT_INSTRUCTION = "Extract these fields from the text above."
MIN_ANSWER_TOKENS = 16
"""The fewest answer tokens a request may leave: a prompt that leaves fewer fails ``generation_too_long``."""

_HASH_CHARS = 12
_MAX_ERROR_CHARS = 500
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```", re.DOTALL)


class GenerationEmpty(PoisonRecord):
    """The model answered with no text."""

    code = "generation_empty"


class GenerationTruncated(PoisonRecord):
    """The answer stopped at its token budget (``finish_reason: length``): it is cut, so it is not kept."""

    code = "generation_truncated"


class GenerationRefused(PoisonRecord):
    """The model or its server refused to answer (a ``refusal``, or ``finish_reason: content_filter``)."""

    code = "generation_refused"


class GenerationInvalid(PoisonRecord):
    """An extract answer that is not JSON valid against the schema, after every retry."""

    code = "generation_invalid"


class GenerationTooLong(PoisonRecord):
    """The prompt leaves the answer fewer than ``MIN_ANSWER_TOKENS`` of the model's context."""

    code = "generation_too_long"


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    """One chat completion, as the server gave it.

    Attributes:
        text: the answer's content ("" when none).
        finish_reason: why it ended (``stop``, ``length``, ``content_filter``, ...; "" when not said).
        prompt_tokens: the server's ``usage.prompt_tokens`` (0 when not said).
        completion_tokens: the server's ``usage.completion_tokens`` (0 when not said).
        refusal: the message's ``refusal``, when the server set one.
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    refusal: str | None = None


def prompt_messages(prompt: Prompt, text: str, *, system_prompt: str) -> list[dict[str, str]]:
    """The messages that ask for one chunk: the system prompt, then the chunk's text, then the instruction (the
    kind's built-in one when the prompt has none).

    extract adds the answer to fill in: the schema's ``skeleton`` (its fields, each null). The schema itself is
    held to by validation (an invalid answer is asked again with what is wrong: ``retry_messages``) and, where
    the server takes one, by ``response_format``; written into the first prompt, it made small models repeat
    the text instead of answering (docs/tasks.md "generate"). A schema that is no object of properties, which
    has no skeleton, is written in.
    """
    parts = [f"Text:\n{text}", prompt.instruction or (SUMMARIZE_INSTRUCTION if prompt.kind == "summarize"
                                                       else EXTRACT_INSTRUCTION)]
    schema = prompt.schema
    if schema is not None:
        shape = skeleton(schema)
        parts[-1] += ("\nAnswer with the JSON only, filled in: " + json.dumps(shape, ensure_ascii=False)
                      if shape is not None else
                      f"\nAnswer with one JSON value only, valid against this JSON Schema: {prompt.json_schema}")
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": "\n\n".join(parts)}]


def skeleton(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON object an answer fills in: each of the schema's ``properties`` null (an object property: its own
    skeleton; an array: ``[]``). None for a schema that is no object of properties."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    shape: dict[str, Any] = {}
    for name, sub in properties.items():
        kind = sub.get("type") if isinstance(sub, Mapping) else None
        if kind == "object" and isinstance(sub, Mapping):
            shape[str(name)] = skeleton(sub)
        else:
            shape[str(name)] = [] if kind == "array" else None
    return shape


def retry_messages(messages: Sequence[Mapping[str, str]], answer: str, error: str) -> list[dict[str, str]]:
    """``messages`` followed by the invalid ``answer`` and what was wrong with it, asking again."""
    return [*(dict(m) for m in messages), {"role": "assistant", "content": answer},
            {"role": "user", "content": f"That answer is not valid: {error[:_MAX_ERROR_CHARS]}\nAnswer again with "
                                        "only the JSON value, valid against the schema."}]


def chat_body(model: str, messages: Sequence[Mapping[str, str]], *, temperature: float, seed: int, max_tokens: int,
              stop: Sequence[str] = (), schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` (``schema``: also ask the server for ``response_format``)."""
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], "temperature": temperature,
                            "seed": seed, "max_tokens": max_tokens, "n": 1, "stream": False}
    if stop:
        body["stop"] = list(stop)
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "answer", "schema": dict(schema), "strict": True}}
    return body


def parse_chat(body: Any) -> ChatAnswer:
    """The first choice of a chat-completions answer.

    Raises:
        EndpointResponseError: not an answer of that API (no choice, no message, content not text).
    """
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EndpointResponseError("a chat answer without choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise EndpointResponseError("a chat answer without a message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise EndpointResponseError("a chat answer whose content is not text")
    refusal = message.get("refusal")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return ChatAnswer(text=content or "", finish_reason=str(choices[0].get("finish_reason") or ""),
                      prompt_tokens=_count(usage.get("prompt_tokens")),
                      completion_tokens=_count(usage.get("completion_tokens")),
                      refusal=refusal if isinstance(refusal, str) and refusal else None)


def answer_error(answer: ChatAnswer, *, max_tokens: int) -> PoisonRecord | None:
    """What makes ``answer`` no answer, or None: refused, truncated, empty, in that order.

    Truncated: ``finish_reason: length``, or an answer of ``max_tokens`` tokens or more whatever its finish
    reason (some servers say ``stop`` when the budget ran out).
    """
    if answer.refusal is not None or answer.finish_reason == "content_filter":
        return GenerationRefused(f"the model refused: {(answer.refusal or answer.finish_reason)[:_MAX_ERROR_CHARS]}")
    if answer.finish_reason == "length" or answer.completion_tokens >= max_tokens:
        return GenerationTruncated(f"the answer reached its token budget ({answer.completion_tokens} of "
                                   f"{max_tokens} tokens)")
    if not answer.text.strip():
        return GenerationEmpty("the model answered with no text")
    return None


def extracted_value(text: str, schema: Mapping[str, Any]) -> Any:
    """The JSON value an extract answer opens with, valid against ``schema``. Spaces and a Markdown code fence
    before it are taken off, and what follows the value is left (models add a note); an answer that does not
    open with JSON is not searched.

    Raises:
        GenerationInvalid: no JSON value first, or one not valid against the schema (the message says where).
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    try:
        value, _ = json.JSONDecoder().raw_decode(fenced.group(1).strip() if fenced else body)
    except ValueError as exc:
        raise GenerationInvalid(f"not JSON: {exc}") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(dict(schema)).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the value"
        raise GenerationInvalid(f"{where}: {error.message}"[:_MAX_ERROR_CHARS])
    return value


def check_json_schema(schema: Mapping[str, Any]) -> None:
    """Refuse a JSON Schema that is not one (Draft 2020-12's meta-schema), before any chunk is asked.

    Raises:
        InputError: ``prompt_invalid``, naming what is wrong.
    """
    try:
        jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the schema"
        raise InputError(f"the JSON Schema is not valid: {where}: {exc.message}"[:_MAX_ERROR_CHARS],
                         code="prompt_invalid") from None


def answer_budget(prompt_tokens: int, *, max_tokens: int, context_tokens: int) -> int:
    """The ``max_tokens`` of a request: the configured one, cut to what the prompt leaves of the context.

    Raises:
        GenerationTooLong: the prompt leaves fewer than ``MIN_ANSWER_TOKENS``.
    """
    left = context_tokens - prompt_tokens
    if left < MIN_ANSWER_TOKENS:
        raise GenerationTooLong(f"the prompt takes {prompt_tokens} of the model's {context_tokens} tokens")
    return min(max_tokens, left)


def generate_model_id(model: str, prompt: Prompt, *, system_prompt: str, temperature: float, seed: int,
                      max_tokens: int, stop: Sequence[str]) -> str:
    """``generate/<model>/<kind>/<12 hex of sha256 of the canonical JSON of what changes an answer>``: the
    prompt, its schema, the system prompt and the sampling settings. Two prompts never share a ``model_id``,
    and a rerun with the same ones writes over the same rows."""
    canonical = json.dumps({"instruction": prompt.instruction, "schema": prompt.json_schema,
                            "system": system_prompt, "temperature": float(temperature), "seed": seed,
                            "max_tokens": max_tokens, "stop": list(stop)},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"generate/{model}/{prompt.kind}/{digest}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
