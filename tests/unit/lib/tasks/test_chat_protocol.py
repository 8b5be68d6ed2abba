"""The chat protocol of the generate task, as pure functions (docstream.tasks.chat_protocol)."""

from __future__ import annotations

import json

import pytest

from docstream.errors import InputError
from docstream.models.endpoint_protocol import EndpointResponseError
from docstream.tasks.base import Prompt
from docstream.tasks.chat_protocol import (
    EXTRACT_INSTRUCTION,
    SUMMARIZE_INSTRUCTION,
    ChatAnswer,
    GenerationEmpty,
    GenerationInvalid,
    GenerationRefused,
    GenerationTooLong,
    GenerationTruncated,
    answer_budget,
    answer_error,
    chat_body,
    check_json_schema,
    extracted_value,
    generate_model_id,
    parse_chat,
    prompt_messages,
    retry_messages,
    skeleton,
)

FIELDS = {"type": "object", "properties": {"vendor": {"type": "string"}, "total": {"type": "number"},
                                           "lines": {"type": "array"},
                                           "address": {"type": "object", "properties": {"city": {"type": "string"}}}},
          "required": ["vendor", "total"]}
SETTINGS = {"system_prompt": "You are a helpful assistant.", "temperature": 0.0, "seed": 0, "max_tokens": 256,
            "stop": ()}


def _answer(content: str | None = "ok", finish: str = "stop", prompt: int = 10, completion: int = 3,
            **message: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content, **message},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def test_a_summarize_prompt_gives_the_system_prompt_then_the_text_then_the_instruction() -> None:
    messages = prompt_messages(Prompt("summarize"), "Πέντε γάτες κοιμούνται.", system_prompt="Be brief.")
    assert messages == [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": f"Text:\nΠέντε γάτες κοιμούνται.\n\n{SUMMARIZE_INSTRUCTION}"}]
    own = prompt_messages(Prompt("summarize", "Answer: who is the author?"), "text", system_prompt="")
    assert own == [{"role": "user", "content": "Text:\ntext\n\nAnswer: who is the author?"}]


def test_an_extract_prompt_asks_to_fill_in_the_schemas_fields() -> None:
    content = prompt_messages(Prompt.of("extract", "", FIELDS), "Invoice from ACME", system_prompt="")[0]["content"]
    assert content.startswith("Text:\nInvoice from ACME\n\n" + EXTRACT_INSTRUCTION)
    shape = json.loads(content.rsplit("filled in: ", 1)[1])
    assert shape == {"vendor": None, "total": None, "lines": [], "address": {"city": None}}
    assert '"required"' not in content  # the schema is held to by validation, not written in


def test_a_schema_without_properties_is_written_into_the_prompt() -> None:
    prompt = Prompt.of("extract", "", {"type": "array", "items": {"type": "string"}})
    assert skeleton({"type": "array"}) is None
    assert prompt.json_schema is not None
    assert prompt.json_schema in prompt_messages(prompt, "t", system_prompt="")[0]["content"]


def test_a_retry_appends_the_invalid_answer_and_what_is_wrong() -> None:
    first = prompt_messages(Prompt.of("extract", "", FIELDS), "t", system_prompt="s")
    again = retry_messages(first, '{"vendor": 3}', "vendor: 3 is not of type 'string'")
    assert again[:2] == first and again[2] == {"role": "assistant", "content": '{"vendor": 3}'}
    assert again[3]["role"] == "user" and "vendor: 3 is not of type 'string'" in again[3]["content"]
    assert len(retry_messages(first, "x", "e" * 10_000)[3]["content"]) < 700  # the error is bounded


def test_the_request_body_carries_the_sampling_settings_and_asks_for_a_schema_only_when_told() -> None:
    body = chat_body("m", [{"role": "user", "content": "hi"}], temperature=0.0, seed=7, max_tokens=40, stop=["\n\n"])
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "seed": 7,
                    "max_tokens": 40, "n": 1, "stream": False, "stop": ["\n\n"]}
    schema_body = chat_body("m", [], temperature=0.0, seed=0, max_tokens=1, schema=FIELDS)
    assert schema_body["response_format"]["json_schema"]["schema"] == FIELDS
    assert "stop" not in schema_body


def test_an_answer_is_read_with_its_usage() -> None:
    assert parse_chat(_answer("  hello ", prompt=44, completion=32)) == ChatAnswer("  hello ", "stop", 44, 32)
    assert parse_chat(_answer(None, finish="length")) == ChatAnswer("", "length", 10, 3)
    no_usage = _answer()
    del no_usage["usage"]
    assert parse_chat(no_usage).prompt_tokens == 0
    assert parse_chat(_answer("", refusal="I can't")).refusal == "I can't"


@pytest.mark.parametrize("body", [None, [], {}, {"choices": []}, {"choices": [{"message": None}]},
                                  {"choices": [{"message": {"content": 5}}]}])
def test_what_is_no_chat_answer_is_never_trusted(body: object) -> None:
    with pytest.raises(EndpointResponseError):
        parse_chat(body)


def test_refused_truncated_and_empty_answers_each_have_their_code() -> None:
    cases = [
        (ChatAnswer("", "stop", 5, 0, refusal="no"), GenerationRefused, "generation_refused"),
        (ChatAnswer("x", "content_filter", 5, 1), GenerationRefused, "generation_refused"),
        (ChatAnswer("half a sent", "length", 5, 12), GenerationTruncated, "generation_truncated"),
        (ChatAnswer("used it all", "stop", 5, 40), GenerationTruncated, "generation_truncated"),
        (ChatAnswer(" \n", "stop", 5, 1), GenerationEmpty, "generation_empty"),
    ]
    for answer, kind, code in cases:
        error = answer_error(answer, max_tokens=40)
        assert isinstance(error, kind) and error.code == code, answer
    assert answer_error(ChatAnswer("fine", "stop", 5, 39), max_tokens=40) is None


def test_an_extract_answer_must_be_json_valid_against_the_schema() -> None:
    assert extracted_value('{"vendor": "ACME", "total": 12.5}', FIELDS) == {"vendor": "ACME", "total": 12.5}
    assert extracted_value('```json\n{"vendor": "Ω", "total": 1}\n```', FIELDS) == {"vendor": "Ω", "total": 1}
    with pytest.raises(GenerationInvalid, match="not JSON") as info:
        extracted_value('The vendor is ACME. {"vendor": "ACME"}', FIELDS)
    assert info.value.code == "generation_invalid"
    with pytest.raises(GenerationInvalid, match="total"):
        extracted_value('{"vendor": "ACME"}', FIELDS)
    with pytest.raises(GenerationInvalid, match="address/city"):
        extracted_value('{"vendor": "ACME", "total": 1, "address": {"city": 5}}', FIELDS)


def test_a_schema_that_is_no_json_schema_is_refused_before_any_chunk() -> None:
    check_json_schema(FIELDS)
    with pytest.raises(InputError) as info:
        check_json_schema({"type": "objekt"})
    assert info.value.code == "prompt_invalid"


def test_the_answer_budget_is_what_the_prompt_leaves_of_the_context() -> None:
    assert answer_budget(100, max_tokens=256, context_tokens=2048) == 256
    assert answer_budget(1900, max_tokens=256, context_tokens=2048) == 148
    with pytest.raises(GenerationTooLong) as info:
        answer_budget(2040, max_tokens=256, context_tokens=2048)
    assert info.value.code == "generation_too_long"


def test_the_model_id_names_the_model_the_kind_and_a_hash_of_what_changes_an_answer() -> None:
    summary = generate_model_id("llama", Prompt("summarize"), **SETTINGS)
    assert summary.startswith("generate/llama/summarize/") and len(summary.rsplit("/", 1)[1]) == 12
    assert generate_model_id("llama", Prompt("summarize"), **SETTINGS) == summary
    others = {
        generate_model_id("llama", Prompt("summarize", "Who wrote it?"), **SETTINGS),
        generate_model_id("llama", Prompt.of("extract", "", FIELDS), **SETTINGS),
        generate_model_id("llama", Prompt.of("extract", "", {**FIELDS, "required": ["vendor"]}), **SETTINGS),
        generate_model_id("llama", Prompt("summarize"), **{**SETTINGS, "temperature": 0.7}),
        generate_model_id("llama", Prompt("summarize"), **{**SETTINGS, "seed": 1}),
        generate_model_id("llama", Prompt("summarize"), **{**SETTINGS, "system_prompt": "Be terse."}),
        generate_model_id("llama", Prompt("summarize"), **{**SETTINGS, "stop": ["\n"]}),
        generate_model_id("mistral", Prompt("summarize"), **SETTINGS),
    }
    assert len(others) == 8 and summary not in others


def test_one_schema_has_one_text_whatever_its_key_order() -> None:
    shuffled = dict(reversed(list(FIELDS.items())))
    assert Prompt.of("extract", " x ", shuffled) == Prompt.of("extract", "x", FIELDS)


@pytest.mark.parametrize(("kind", "schema"), [("extract", None), ("summarize", "{}"), ("translate", None),
                                              ("extract", "[1]"), ("extract", "{not json")])
def test_a_prompt_of_the_wrong_shape_is_refused(kind: str, schema: str | None) -> None:
    with pytest.raises(InputError) as info:
        Prompt(kind, "", schema)  # type: ignore[arg-type]
    assert info.value.code == "prompt_invalid"
