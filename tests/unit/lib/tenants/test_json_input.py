"""docstream.tenants.json_input: JSON a tenant sends, refused past its size or depth before ``json.loads`` runs."""

from __future__ import annotations

import json

import pytest

from docstream.errors import InputError
from docstream.tenants.json_input import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_depth, loads_bounded


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ('"a"', 0), ("[]", 1), ("{}", 1), ('{"a": [1, {"b": []}]}', 4), ("[[], [[]], []]", 3),
    ('["[[[[", "{{{{"]', 1),  # brackets inside strings are text
    ('["a\\"[[[", "]]]"]', 1),  # an escaped quote does not end the string
    ('["a\\\\", [[]]]', 3),  # an escaped backslash does: the next quote closes it
    ('{"k\\u005b": [[1]]}', 3),
])
def test_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    json.loads(text)  # each is valid JSON
    assert json_depth(text) == depth


def test_depth_of_a_malformed_text_is_still_a_number() -> None:
    assert json_depth("]]][[") == 2
    assert json_depth('["unterminated [[[') == 1


def test_within_the_bounds_the_value_is_decoded() -> None:
    text = json.dumps({"a": [1, 2, {"b": "c"}]})
    assert loads_bounded(text, what="tasks", code="invalid_request") == {"a": [1, 2, {"b": "c"}]}
    deepest = _nested(MAX_JSON_DEPTH)
    assert json_depth(deepest) == MAX_JSON_DEPTH
    loads_bounded(deepest, what="tasks", code="invalid_request")


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_a_text_nested_past_the_bound_is_an_input_error_with_the_callers_code(depth: int) -> None:
    text = _nested(depth)
    with pytest.raises(InputError) as refused:  # never a RecursionError, however deep
        loads_bounded(text, what="--schema", code="prompt_invalid", max_bytes=len(text))
    assert refused.value.code == "prompt_invalid"
    assert refused.value.message == f"--schema nests {depth} levels deep, more than {MAX_JSON_DEPTH}"


def test_json_loads_alone_fails_on_the_same_text_with_a_recursion_error() -> None:
    with pytest.raises(RecursionError):  # what the bound stands between: RecursionError is no ValueError
        json.loads(_nested(100_000))


def test_a_deep_object_is_refused_like_a_deep_array() -> None:
    text = '{"a":' * 50 + "1" + "}" * 50
    with pytest.raises(InputError, match="nests 50 levels deep"):
        loads_bounded(text, what="source_keys", code="invalid_request")
    loads_bounded(text, what="source_keys", code="invalid_request", max_depth=50)


@pytest.mark.parametrize("text", ["x" * (MAX_JSON_BYTES + 1), "é" * (MAX_JSON_BYTES // 2 + 1),
                                  ("x" * (MAX_JSON_BYTES + 1)).encode()])
def test_a_text_past_the_size_bound_is_refused_in_utf8_bytes(text: str | bytes) -> None:
    with pytest.raises(InputError) as refused:
        loads_bounded(text, what="tasks", code="invalid_request")
    assert refused.value.message == f"tasks is longer than {MAX_JSON_BYTES} bytes"


def test_bytes_are_read_as_utf8_and_non_utf8_is_refused() -> None:
    assert loads_bounded('{"k": "café"}'.encode(), what="tasks", code="invalid_request") == {"k": "café"}
    with pytest.raises(InputError) as refused:
        loads_bounded(b'{"k": "caf\xe9"}', what="tasks", code="invalid_request")
    assert refused.value.code == "invalid_request" and "not UTF-8" in refused.value.message


@pytest.mark.parametrize("text", ["{not json", "", "[1,]", "NaN1"])
def test_text_that_is_not_json_is_refused_with_the_code(text: str) -> None:
    with pytest.raises(InputError) as refused:
        loads_bounded(text, what="tasks", code="invalid_request")
    assert refused.value.code == "invalid_request" and refused.value.message.startswith("tasks is not JSON: ")
