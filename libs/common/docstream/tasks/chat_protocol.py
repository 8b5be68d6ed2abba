"""The OpenAI-compatible chat-completions API, as the generate task speaks it. Pure (docs/tasks.md "generate").

* ``prompt_messages`` and ``retry_messages``: what a chunk is asked, and asked again after an invalid answer;
* ``chat_body`` and ``parse_chat``: the request, and the answer checked before it is trusted;
* ``answer_error``: what an answer that is no answer is (empty, truncated, refused), each with its code;
* ``check_json_schema`` and ``extracted_value``: a tenant's JSON Schema checked at submission (self-contained,
  bounded, its patterns RE2's), and an extract answer's JSON validated against it within a bounded work;
* ``answer_budget``: the answer's ``max_tokens`` within the model's context;
* ``generate_model_id``: the name results are keyed by, with a hash of everything that changes an answer.

The edge that sends the requests is ``docstream.models.endpoint.EndpointClient.complete``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import unquote

import jsonschema
import re2
import referencing
import referencing.exceptions

from docstream.errors import InputError, PoisonRecord
from docstream.models.endpoint_protocol import EndpointResponseError
from docstream.tasks.base import MAX_SCHEMA_CHARS, Prompt
from docstream.tenants.json_input import MAX_JSON_DEPTH, json_depth, loads_bounded

__all__ = [
    "EXTRACT_INSTRUCTION",
    "MAX_ANSWER_CHARS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "MAX_VALIDATION_STEPS",
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

MAX_SCHEMA_NODES = 4_000
"""The most subschemas an extract schema holds once its ``$ref``s are followed (a ``$ref`` cycle never ends)."""
MAX_SCHEMA_DEPTH = 32
"""The deepest nesting of subschemas in an extract schema once its ``$ref``s are followed."""
MAX_ANSWER_CHARS = 64 * 1024
"""The longest extract answer validated; a longer one is ``generation_invalid``."""
MAX_VALIDATION_STEPS = 20_000
"""The work one answer's validation may take, in keyword checks (a pattern's a step per 64 characters it reads,
``uniqueItems`` one per pair it compares): past it the answer is ``generation_invalid``, so a schema and an
answer within their bounds never hold the model thread for long."""

_HASH_CHARS = 12
_MAX_ERROR_CHARS = 500
_REGEX_OPTIONS = re2.Options()
_REGEX_OPTIONS.log_errors = False
# RE2 (linear time): the answer's own text never stalls the model thread, however it is made
_FENCE = re2.compile(r"(?s)^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```", _REGEX_OPTIONS)
_META_SCHEMAS = frozenset({"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"})
_REFUSED_KEYWORDS = {
    "$id": "an extract schema takes no $id (it would move what its $refs point at)",
    "$dynamicRef": "an extract schema takes no $dynamicRef: use $ref to '#/...' in the schema itself",
    "$recursiveRef": "an extract schema takes no $recursiveRef: use $ref to '#/...' in the schema itself",
}
_ONE_SCHEMA = ("additionalProperties", "items", "contains", "propertyNames", "not", "if", "then", "else",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_PATTERN_CHARS_A_STEP = 64


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

    The schema is checked first (``check_json_schema``: nothing outside it is opened), the answer's length and
    nesting are bounded before it is decoded, and the validation stops past ``MAX_VALIDATION_STEPS``.

    Raises:
        GenerationInvalid: no JSON value first, one too long or too deeply nested, one not valid against the schema
            (the message says where), or one whose validation takes more than its steps.
        InputError: ``prompt_invalid``: the schema is refused (``check_json_schema``); asking again is no use.
    """
    validator = _validator(_schema_text(schema))
    body = text.strip()
    fenced = _FENCE.match(body)
    body = fenced.group(1).strip() if fenced else body
    if len(body) > MAX_ANSWER_CHARS:
        raise GenerationInvalid(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
    depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise GenerationInvalid(f"the answer nests {depth} levels deep, more than {MAX_JSON_DEPTH}")
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except ValueError as exc:
        raise GenerationInvalid(f"not JSON: {exc}") from None
    error = _first_error(validator, value)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the value"
        raise GenerationInvalid(f"{where}: {error.message}"[:_MAX_ERROR_CHARS])
    return value


def check_json_schema(schema: Mapping[str, Any]) -> None:
    """Refuse a JSON Schema an extract prompt may not carry, before any chunk is asked.

    A schema is Draft 2020-12 (its meta-schema), at most ``MAX_SCHEMA_CHARS`` of canonical JSON nested at most
    ``MAX_JSON_DEPTH`` deep, and self-contained: every ``$ref`` is ``#`` or a JSON pointer ``#/...`` into the
    schema itself (no file, no URL, no anchor; no ``$id``, ``$dynamicRef``, and ``$schema`` only 2020-12's), and
    it holds at most ``MAX_SCHEMA_NODES`` subschemas, ``MAX_SCHEMA_DEPTH`` deep, once its ``$ref``s are
    followed (a cycle is refused so). Every ``pattern`` and ``patternProperties`` key compiles on RE2, which
    never backtracks (no backreference, no lookaround); ``unevaluatedProperties`` does not sit in a schema with
    ``patternProperties`` (jsonschema would run those on Python's ``re``).

    Raises:
        InputError: ``prompt_invalid``, naming what is wrong and where (``#/properties/a/$ref``).
    """
    _check_schema_text(_schema_text(schema))


def _schema_text(schema: Mapping[str, Any]) -> str:
    try:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: a dict nested past the stack
        raise InputError(f"the JSON Schema is not JSON: {exc}"[:_MAX_ERROR_CHARS], code="prompt_invalid") from None


@functools.lru_cache(maxsize=256)
def _check_schema_text(text: str) -> None:
    if len(text) > MAX_SCHEMA_CHARS:
        _refuse(f"the JSON Schema is longer than {MAX_SCHEMA_CHARS} characters")
    root = loads_bounded(text, what="the JSON Schema", code="prompt_invalid")
    _check_meta(root, "")
    _walk(root)


def _refuse(message: str) -> NoReturn:
    raise InputError(message[:_MAX_ERROR_CHARS], code="prompt_invalid")


def _check_meta(schema: Any, where: str) -> None:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        inner = "/".join(str(p) for p in exc.absolute_path)
        _refuse(f"the JSON Schema is not valid: #{where}{'/' + inner if inner else ''}: {exc.message}")


def _walk(root: Any) -> None:
    """Every subschema of ``root``, the targets of its ``$ref``s included, as validation would reach them."""
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    targets: set[str] = set()
    seen = 0
    keywords: set[str] = set()
    while stack:
        node, where, depth = stack.pop()
        seen += 1
        if seen > MAX_SCHEMA_NODES:
            _refuse(f"the JSON Schema holds more than {MAX_SCHEMA_NODES} subschemas once its $refs are followed "
                    "(a $ref cycle, or too many $refs)")
        if depth > MAX_SCHEMA_DEPTH:
            _refuse(f"the JSON Schema nests more than {MAX_SCHEMA_DEPTH} subschemas deep once its $refs are "
                    f"followed (a $ref cycle never ends), at #{where}")
        if not isinstance(node, dict):
            continue
        keywords.update(node)
        _check_keywords(node, where)
        stack.extend((sub, f"{where}/{key}", depth + 1) for key, sub in _subschemas(node))
        if "$ref" in node:
            pointer = _local_pointer(node["$ref"], f"{where}/$ref")
            target = _resolved(root, pointer, f"{where}/$ref")
            if pointer not in targets:  # a place no keyword leads to is checked as a schema too
                targets.add(pointer)
                _check_meta(target, pointer)
            stack.append((target, pointer, depth + 1))
    if "unevaluatedProperties" in keywords and "patternProperties" in keywords:
        _refuse("an extract schema with patternProperties takes no unevaluatedProperties")


def _check_keywords(node: dict[str, Any], where: str) -> None:
    for keyword, why in _REFUSED_KEYWORDS.items():
        if keyword in node:
            _refuse(f"#{where}/{keyword}: {why}")
    if "$schema" in node and node["$schema"] not in _META_SCHEMAS:
        _refuse(f"#{where}/$schema: an extract schema is Draft 2020-12 "
                f"(https://json-schema.org/draft/2020-12/schema), not {str(node['$schema'])[:100]!r}")
    if isinstance(node.get("pattern"), str):
        _check_regex(node["pattern"], f"{where}/pattern")
    if isinstance(node.get("patternProperties"), dict):
        for pattern in node["patternProperties"]:
            _check_regex(pattern, f"{where}/patternProperties")


def _check_regex(pattern: str, where: str) -> None:
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        _refuse(f"#{where}: the pattern {pattern[:100]!r} is not one RE2 runs (no backreferences, no lookaround): "
                f"{reason}")


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in _ONE_SCHEMA:
        if key in node:
            yield key, node[key]
    for key in _SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            yield from ((f"{key}/{i}", sub) for i, sub in enumerate(node[key]))
    for key in _SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            yield from ((f"{key}/{_escaped(name)}", sub) for name, sub in node[key].items())


def _escaped(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _local_pointer(ref: Any, where: str) -> str:
    """The JSON pointer of a ``$ref`` into the schema itself (``#`` is ``""``)."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        _refuse(f"#{where}: {str(ref)[:100]!r} points outside the schema: a $ref is '#' or '#/a/json/pointer' "
                "into the schema itself, never a file, a URL or an anchor")
    return unquote(ref[1:])


def _resolved(root: Any, pointer: str, where: str) -> Any:
    node = root
    for token in pointer.split("/")[1:] if pointer else ():
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            _refuse(f"#{where}: '#{pointer[:100]}' points at nothing in the schema")
    return node


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _REGEX_OPTIONS)


class _StepsSpent(Exception):  # noqa: N818 - a private signal, caught by _first_error
    """An answer's validation ran past ``MAX_VALIDATION_STEPS``."""


_STEPS: ContextVar[list[int] | None] = ContextVar("docstream_schema_steps", default=None)


def _first_error(validator: Any, value: Any) -> jsonschema.exceptions.ValidationError | None:
    """The best validation error of ``value``, within ``MAX_VALIDATION_STEPS``."""
    token = _STEPS.set([MAX_VALIDATION_STEPS])
    try:
        return jsonschema.exceptions.best_match(validator.iter_errors(value))
    except _StepsSpent:
        raise GenerationInvalid(f"the answer takes more than {MAX_VALIDATION_STEPS} steps to validate against "
                                "the schema") from None
    except RecursionError:  # the bounds above keep it out; never an escaping error if not
        raise GenerationInvalid("the answer nests too deep to validate against the schema") from None
    except referencing.exceptions.Unresolvable as exc:  # check_json_schema refuses it first; never opened
        raise InputError(f"the JSON Schema's $ref does not resolve in the schema itself: {exc}"[:_MAX_ERROR_CHARS],
                         code="prompt_invalid") from None
    finally:
        _STEPS.reset(token)


def _cost(keyword: str, value: Any, instance: Any) -> int:
    if keyword == "uniqueItems" and isinstance(instance, list):
        n = len(instance)  # jsonschema compares containers pair by pair
        return 1 + (n * n if any(isinstance(item, dict | list) for item in instance) else n)
    if keyword == "pattern" and isinstance(instance, str):
        return 1 + len(instance) // _PATTERN_CHARS_A_STEP
    if keyword in ("patternProperties", "additionalProperties") and isinstance(instance, dict):
        return 1 + len(instance) * (len(value) if isinstance(value, dict) else 1)
    if keyword == "enum" and isinstance(value, list):
        return 1 + len(value)
    return 1


def _charged(keyword: str, check: Callable[..., Any]) -> Callable[..., Any]:
    def charged(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        steps = _STEPS.get()
        if steps is not None:
            steps[0] -= _cost(keyword, value, instance)
            if steps[0] < 0:
                raise _StepsSpent
        return check(validator, value, instance, schema)

    return charged


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and _regex(pattern).search(instance) is None:
        yield jsonschema.exceptions.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        regex = _regex(pattern)
        for key, item in instance.items():
            if regex.search(key) is not None:
                yield from validator.descend(item, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, with ``patternProperties`` matched on RE2."""
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    regexes = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = [key for key in instance if key not in named and not any(r.search(key) is not None for r in regexes)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(key) for key in sorted(extras))
        yield jsonschema.exceptions.ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


_KEYWORDS: dict[str, Callable[..., Any]] = {
    **jsonschema.Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
_ExtractValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {keyword: _charged(keyword, check) for keyword, check in _KEYWORDS.items()})
_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry()  # resolves nothing it was not given


@functools.lru_cache(maxsize=64)
def _validator(text: str) -> Any:
    """The validator of a schema's canonical text, checked first (``check_json_schema``): the schema's own
    ``$ref``s resolve in it, any other raises (never a retrieval), and its patterns run on RE2."""
    _check_schema_text(text)
    return _ExtractValidator(json.loads(text), registry=_NO_RETRIEVAL)


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
