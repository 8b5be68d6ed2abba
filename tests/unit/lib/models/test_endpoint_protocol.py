"""The OpenAI embeddings API as docstream speaks it: planning, checking answers, verdicts, waits, budgets."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from docstream.errors import FatalError, PoisonRecord
from docstream.models.endpoint_protocol import (
    MAX_RETRY_AFTER_S,
    EndpointDimensionError,
    EndpointResponseError,
    RateBudget,
    error_message,
    parse_embeddings,
    plan_requests,
    request_body,
    retry_after_s,
    retry_delay_s,
    status_verdict,
    usage_tokens,
)
from docstream.settings import EndpointSettings, InferenceSettings, Settings


def answer(vectors: list[list[float]], order: list[int] | None = None) -> dict[str, object]:
    indices = order if order is not None else list(range(len(vectors)))
    return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in indices],
            "usage": {"prompt_tokens": 7, "total_tokens": 7}}


# -- plan_requests -------------------------------------------------------------------------------


def test_a_batch_is_cut_at_the_most_inputs_per_request() -> None:
    assert plan_requests([10] * 10, max_inputs=4, max_tokens=10_000) == [range(0, 4), range(4, 8), range(8, 10)]


def test_a_batch_is_cut_at_the_most_tokens_per_request() -> None:
    runs = plan_requests([300, 300, 300, 100, 100, 100], max_inputs=32, max_tokens=600)
    assert runs == [range(0, 2), range(2, 6)]  # 300 + 3 x 100 = 600: at the limit, not past it
    assert all(sum([300, 300, 300, 100, 100, 100][i] for i in run) <= 600 for run in runs)


def test_an_input_longer_than_the_token_limit_goes_alone() -> None:
    assert plan_requests([50, 900, 50], max_inputs=8, max_tokens=100) == [range(0, 1), range(1, 2), range(2, 3)]


@pytest.mark.parametrize("seed", range(20))
def test_every_input_is_in_exactly_one_request_in_order(seed: int) -> None:
    rng = random.Random(seed)
    tokens = [rng.randint(0, 600) for _ in range(rng.randint(0, 300))]
    max_inputs, max_tokens = rng.randint(1, 40), rng.randint(1, 4000)
    runs = plan_requests(tokens, max_inputs=max_inputs, max_tokens=max_tokens)
    assert [i for run in runs for i in run] == list(range(len(tokens)))
    for run in runs:
        assert 1 <= len(run) <= max_inputs
        assert len(run) == 1 or sum(tokens[i] for i in run) <= max_tokens


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_requests([1], max_inputs=0, max_tokens=10)


# -- answers -------------------------------------------------------------------------------------


def test_vectors_are_matched_to_inputs_by_index_not_by_position() -> None:
    vectors = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert parse_embeddings(answer(vectors, order=[2, 0, 1]), count=3, dimension=2) == vectors


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"data": [{"index": 0, "embedding": [1.0]}]}, "1 embeddings for 2 inputs"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}, "answered twice"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [2.0]}]}, "index 5"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": True, "embedding": [2.0]}]}, "index True"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": "AAAA"}]}, "not a list"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [float("nan")]}]}, "finite"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": ["x"]}]}, "not a number"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]}, "different lengths"),
        ({"object": "list"}, "no 'data' list"),
        ([1, 2], "no 'data' list"),
    ],
)
def test_an_answer_without_exactly_one_vector_per_input_is_never_trusted(body: object, match: str) -> None:
    with pytest.raises(EndpointResponseError, match=match) as caught:
        parse_embeddings(body, count=2, dimension=None)
    assert isinstance(caught.value, PoisonRecord) and caught.value.code == "endpoint_bad_response"


def test_vectors_of_another_length_than_known_stop_the_service() -> None:
    with pytest.raises(EndpointDimensionError) as caught:
        parse_embeddings(answer([[1.0, 2.0, 3.0]]), count=1, dimension=384)
    assert isinstance(caught.value, FatalError) and caught.value.code == "endpoint_dimension_mismatch"


def test_usage_tokens_are_read_where_the_endpoint_says_them() -> None:
    assert usage_tokens(answer([[1.0]])) == 7
    assert usage_tokens({"usage": {"total_tokens": 3}}) == 3
    assert usage_tokens({"usage": {"prompt_tokens": -1}}) is None
    assert usage_tokens({}) is None


def test_the_request_body_is_a_list_of_inputs_with_float_encoding() -> None:
    assert request_body("m", ("a", "b")) == {"model": "m", "input": ["a", "b"], "encoding_format": "float"}
    assert request_body("m", ["a"], dimensions=64)["dimensions"] == 64


def test_error_messages_are_short_and_say_the_status() -> None:
    openai = {"error": {"message": "maximum context length is 8192 tokens", "type": "invalid_request_error"}}
    assert error_message(400, openai) == "HTTP 400: maximum context length is 8192 tokens"
    assert error_message(401, {"detail": "Unauthorized"}) == "HTTP 401: Unauthorized"
    assert error_message(502, None, "<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"
    assert len(error_message(500, None, "x" * 10_000)) < 320


# -- verdicts and waits --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "verdict"),
    [(200, "ok"), (429, "retry"), (500, "retry"), (502, "retry"), (503, "retry"), (504, "retry"), (408, "retry"),
     (400, "split"), (413, "split"), (422, "split"), (401, "refused"), (403, "refused"), (404, "refused"),
     (405, "refused"), (302, "refused")],
)
def test_each_status_has_its_verdict(status: int, verdict: str) -> None:
    assert status_verdict(status) == verdict


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_s("2", now=now) == 2.0
    assert retry_after_s(" 0.5 ", now=now) == 0.5
    assert retry_after_s(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert retry_after_s(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0.0
    assert retry_after_s("100000", now=now) == MAX_RETRY_AFTER_S
    for unreadable in (None, "", "soon", "-", "nan", "x" * 100):
        assert retry_after_s(unreadable, now=now) is None


def test_the_backoff_is_full_jitter_under_a_doubling_ceiling() -> None:
    assert retry_delay_s(1, retry_after=None, base_s=0.2, max_s=10, jitter=0.999) == pytest.approx(0.1998)
    assert retry_delay_s(3, retry_after=None, base_s=0.2, max_s=10, jitter=0.5) == pytest.approx(0.4)
    assert retry_delay_s(30, retry_after=None, base_s=0.2, max_s=10, jitter=0.5) == pytest.approx(5.0)
    assert retry_delay_s(2, retry_after=None, base_s=0.2, max_s=10, jitter=0.0) == 0.0


def test_retry_after_is_a_floor_with_a_little_spread() -> None:
    waits = [retry_delay_s(1, retry_after=3.0, base_s=0.2, max_s=10, jitter=j / 10) for j in range(10)]
    assert all(3.0 <= w < 3.2 for w in waits)
    assert len(set(waits)) == 10


# -- budgets -------------------------------------------------------------------------------------


def test_no_budget_never_waits() -> None:
    budget = RateBudget()
    assert not budget.limited
    assert all(budget.reserve(10_000, 0.0) == 0.0 for _ in range(100))


def test_requests_per_second_allow_a_second_of_burst_then_space_requests() -> None:
    budget = RateBudget(requests_per_s=4)
    waits = [budget.reserve(1, 0.0) for _ in range(8)]
    assert waits[:4] == [0.0] * 4
    assert waits[4:] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert budget.reserve(1, 10.0) == 0.0  # refilled


def test_tokens_per_minute_hold_a_minute_of_tokens() -> None:
    budget = RateBudget(tokens_per_min=6000)  # 100 tokens a second
    assert budget.reserve(6000, 0.0) == 0.0
    assert budget.reserve(500, 0.0) == pytest.approx(5.0)
    assert budget.reserve(100, 5.0) == pytest.approx(1.0)  # behind the debt


def test_a_request_larger_than_a_minute_of_tokens_still_goes_after_a_wait() -> None:
    budget = RateBudget(tokens_per_min=60)
    assert budget.reserve(120, 0.0) == pytest.approx(60.0)


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        RateBudget(requests_per_s=-1)


# -- settings ------------------------------------------------------------------------------------


def test_the_key_never_shows_in_the_settings_repr_or_dump() -> None:
    settings = Settings(inference=InferenceSettings(endpoint=EndpointSettings(url="http://h:1/v1/", api_key="sk-123")))
    assert "sk-123" not in repr(settings)
    assert "sk-123" not in settings.model_dump_json()
    assert settings.inference.endpoint.url == "http://h:1/v1"  # a trailing slash is dropped
    assert settings.inference.endpoint.recorded_model_id == "endpoint/all-MiniLM-L6-v2"


def test_the_endpoint_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSTREAM_INFERENCE__ENDPOINT__URL", "https://api.example/v1")
    monkeypatch.setenv("DOCSTREAM_INFERENCE__ENDPOINT__MODEL", "text-embedding-3-small")
    monkeypatch.setenv("DOCSTREAM_INFERENCE__ENDPOINT__API_KEY", "sk-env")
    endpoint = Settings().inference.endpoint
    assert endpoint.url == "https://api.example/v1"
    assert endpoint.recorded_model_id == "endpoint/text-embedding-3-small"
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == "sk-env"


@pytest.mark.parametrize("url", ["ftp://h/v1", "h:8080/v1", "file:///etc/passwd"])
def test_an_endpoint_url_must_be_http(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        EndpointSettings(url=url)


def test_an_empty_url_means_the_local_model() -> None:
    assert EndpointSettings(url="  ").url is None


def test_embed_results_are_keyed_by_the_endpoint_model_when_one_is_set() -> None:
    assert InferenceSettings().embed_model_id == "all-MiniLM-L6-v2"
    remote = InferenceSettings(endpoint=EndpointSettings(url="http://h/v1", model="bge-small"))
    assert remote.embed_model_id == "endpoint/bge-small"
    named = InferenceSettings(endpoint=EndpointSettings(url="http://h/v1", model_id="bge-small@tei"))
    assert named.embed_model_id == "bge-small@tei"
