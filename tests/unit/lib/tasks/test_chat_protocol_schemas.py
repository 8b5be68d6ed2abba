"""A tenant's JSON Schema, as an extract prompt carries it (docs/security.md "JSON Schemas of extract prompts").

A schema resolves no ``$ref`` outside itself, runs its patterns on RE2 and stays within its bounds: what is not so
is refused at submission (``check_json_schema``, through ``check_job_tasks`` for the CLI and the API) with
``prompt_invalid``, and never opened or run when an answer is validated (``extracted_value``).
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from docstream.errors import InputError
from docstream.tasks.base import Prompt, TaskRequest
from docstream.tasks.chat_protocol import (
    MAX_VALIDATION_STEPS,
    GenerationInvalid,
    check_json_schema,
    extracted_value,
)
from docstream.tasks.selection import check_job_tasks, command_line_prompt

REDOS = "^(a+)+$"
SECRET = "TOPSECRET-123"


def _with_ref(ref: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {"$ref": ref}}}


def _refused_at_submission(schema: dict[str, Any]) -> str:
    """The message of the refusal, the same by every way in (the check, the job's tasks, the CLI's --schema)."""
    with pytest.raises(InputError) as direct:
        check_json_schema(schema)
    assert direct.value.code == "prompt_invalid"
    with pytest.raises(InputError) as job:
        check_job_tasks([TaskRequest("generate", prompt=Prompt.of("extract", "", schema))])
    assert job.value.code == "prompt_invalid"
    with pytest.raises(InputError) as cli:
        check_job_tasks([TaskRequest("generate", prompt=command_line_prompt(None, json.dumps(schema)))])
    assert cli.value.code == "prompt_invalid"
    return direct.value.message


def _finishes(call: Callable[[], Any], within_s: float) -> Any:
    """``call``'s result or error; fails when it runs past ``within_s`` (the bound the issue asks for), never
    hangs the test."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test, whatever it is
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(within_s)
    assert not worker.is_alive(), f"still running after {within_s} s"
    return outcome[0]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback socket that listens and never accepts: a connection would wait in its backlog, unanswered."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


def _connected(sock: socket.socket) -> bool:
    """Whether a connection waits in the listener's backlog (a client connects before it sends a byte)."""
    ready, _, _ = select.select([sock], [], [], 0)
    return bool(ready)


def test_a_file_ref_is_refused_at_submission_and_never_opened_at_validation(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"const": SECRET}))
    schema = _with_ref(secret.as_uri())
    assert "points outside the schema" in _refused_at_submission(schema)
    # a schema that skipped the check (a foreign record) is refused again, before the answer is looked at
    with pytest.raises(InputError) as info:
        extracted_value('{"a": 5}', schema)
    assert info.value.code == "prompt_invalid" and SECRET not in info.value.message


def test_a_ref_hidden_where_no_keyword_leads_is_followed_and_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"const": SECRET}))
    message = _refused_at_submission({"x": {"$ref": secret.as_uri()}, "$ref": "#/x"})
    assert message.startswith("#/x/$ref:") and SECRET not in message


def test_an_http_ref_to_a_loopback_listener_is_refused_and_never_connects(listener: socket.socket) -> None:
    schema = _with_ref(f"http://127.0.0.1:{listener.getsockname()[1]}/s.json")
    _refused_at_submission(schema)
    with pytest.raises(InputError):
        extracted_value('{"a": 5}', schema)
    assert not _connected(listener), "the listener received a connection"


def test_a_ref_to_an_address_that_never_answers_is_refused_at_once(listener: socket.socket) -> None:
    schema = _with_ref(f"http://127.0.0.1:{listener.getsockname()[1]}/never.json")
    _refused_at_submission(schema)
    outcome = _finishes(lambda: extracted_value('{"a": 5}', schema), within_s=10)
    assert isinstance(outcome, InputError) and outcome.code == "prompt_invalid"
    assert not _connected(listener)


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"$defs": {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)} | {"d30": {}},
     "$ref": "#/$defs/d0"},
], ids=["itself", "a-cycle", "doubling-30-times"])
def test_a_ref_cycle_or_an_exponential_expansion_is_refused(schema: dict[str, Any]) -> None:
    assert "once its $refs are followed" in _refused_at_submission(schema)


@pytest.mark.parametrize(("schema", "says"), [
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"properties": {"a": {"$ref": "#anchor"}}, "$defs": {"x": {"$anchor": "anchor"}}}, "points outside"),
    ({"$id": "http://127.0.0.1:9/", "properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {"b": {}}}, "$id"),
    ({"properties": {"a": {"$dynamicRef": "#meta"}}}, "$dynamicRef"),
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "Draft 2020-12"),
    ({"x": {"pattern": 5}, "$ref": "#/x"}, "#/x/pattern"),
])
def test_what_would_resolve_elsewhere_or_is_no_schema_is_refused_with_its_place(schema: dict[str, Any],
                                                                                 says: str) -> None:
    assert says in _refused_at_submission(schema)


@pytest.mark.parametrize(("schema", "where"), [
    ({"properties": {"a": {"type": "string", "pattern": r"(a)\1"}}}, "#/properties/a/pattern"),
    ({"properties": {"a": {"type": "string", "pattern": "(?=a)a"}}}, "#/properties/a/pattern"),
    ({"patternProperties": {"(?<!b)a": {}}}, "#/patternProperties"),
])
def test_a_pattern_re2_does_not_run_is_refused_naming_its_place(schema: dict[str, Any], where: str) -> None:
    message = _refused_at_submission(schema)
    assert message.startswith(where) and "RE2" in message


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    _refused_at_submission({"patternProperties": {"^x": {}}, "unevaluatedProperties": False})


def test_a_backtracking_pattern_runs_on_re2_within_a_second() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": REDOS}},
              "patternProperties": {REDOS: {"type": "integer"}}, "additionalProperties": False}
    check_json_schema(schema)  # RE2 runs it: accepted
    evil = "a" * 40 + "!"
    for answer in (json.dumps({"name": evil}), json.dumps({evil: 1})):  # pattern; additionalProperties' patterns
        outcome = _finishes(lambda answer=answer: extracted_value(answer, schema), within_s=1)  # type: ignore[misc]
        assert isinstance(outcome, GenerationInvalid), outcome
    assert extracted_value(json.dumps({"name": "aaaa", "aa": 1}), schema) == {"name": "aaaa", "aa": 1}


def test_a_deeply_nested_answer_is_invalid_never_a_recursion_error() -> None:
    with pytest.raises(GenerationInvalid, match="levels deep"):
        extracted_value("[" * 10_000 + "]" * 10_000, {"type": "array"})


def test_an_answer_past_its_validation_steps_is_invalid() -> None:
    schema = {"type": "array", "items": {"anyOf": [{"minimum": 10 ** 6 + i} for i in range(1000)]}}
    check_json_schema(schema)
    with pytest.raises(GenerationInvalid, match=f"more than {MAX_VALIDATION_STEPS} steps"):
        extracted_value(json.dumps([1] * 100), schema)


def test_refs_into_the_schema_itself_validate_as_before() -> None:
    schema = {"$defs": {"money": {"type": "number", "minimum": 0}}, "type": "object",
              "properties": {"total": {"$ref": "#/$defs/money"}, "tax": {"$ref": "#/$defs/money"}}}
    check_json_schema(schema)
    assert extracted_value('{"total": 12.5, "tax": 2}', schema) == {"total": 12.5, "tax": 2}
    with pytest.raises(GenerationInvalid, match="tax: -1 is less than the minimum of 0"):
        extracted_value('{"total": 12.5, "tax": -1}', schema)


def test_a_schema_nested_past_its_depth_is_refused_never_a_recursion_error() -> None:
    deep = '{"not":' * 2000 + "{}" + "}" * 2000
    with pytest.raises(InputError) as record:
        Prompt.from_record({"kind": "extract", "instruction": "", "json_schema": deep})
    with pytest.raises(InputError) as cli:
        command_line_prompt(None, deep)
    assert record.value.code == cli.value.code == "prompt_invalid"
    assert "levels deep" in record.value.message
