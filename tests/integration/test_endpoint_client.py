"""The endpoint client against a real Infinity server, directly and through the fault proxy (no mock of the server).

Vectors agree with the local model; 429 bursts (with Retry-After), 500s and connection resets are
retried; a poisoned input fails alone; an endpoint past its budget is ``EndpointUnavailable``; a bad
key or a change of vector length stops the service; never more requests in flight than allowed.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from docstream.errors import PartialBatchError
from docstream.models.embedding import load_embedder
from docstream.models.endpoint import EndpointClient, EndpointEmbedder, EndpointUnavailable
from docstream.models.endpoint_protocol import EndpointDimensionError, EndpointRefused, EndpointRejected
from docstream.settings import EndpointSettings, InferenceSettings

pytestmark = pytest.mark.integration

POISON = "POISON-PILL-7f3a"


class Recorder:
    """An EndpointObserver that keeps what it is told."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.token_count = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def requested(self, outcome: str, seconds: float, inputs: int) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def tokens(self, count: int) -> None:
        with self._lock:
            self.token_count += count

    def retried(self, reason: str) -> None:
        with self._lock:
            self.retries[reason] += 1

    def in_flight(self, count: int) -> None:
        with self._lock:
            self.most_in_flight = max(self.most_in_flight, count)


def texts_of(count: int) -> list[str]:
    topics = ("shipping costs rose", "the cell divides", "offsets are committed", "the river flooded the town",
              "a quarterly report", "the treaty was signed")
    return [f"Paragraph {i}: {topics[i % len(topics)]} and the {i}th detail follows here." for i in range(count)]


def endpoint_settings(url: str, key: str, **options: Any) -> InferenceSettings:
    fast = {"base_delay_ms": 20, "max_delay_ms": 200, "max_inputs_per_request": 8, "max_in_flight": 3}
    return InferenceSettings(endpoint=EndpointSettings(url=url, api_key=key, **{**fast, **options}), warmup=False)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def through_proxy(fault_proxy: Any, infinity: Any, recorder: Recorder) -> Iterator[EndpointEmbedder]:
    embedder = load_embedder(endpoint_settings(fault_proxy.url, infinity.api_key))
    assert isinstance(embedder, EndpointEmbedder)
    embedder.client.observer = recorder
    try:
        yield embedder
    finally:
        embedder.close()


@pytest.fixture(scope="module")
def local_vectors() -> Any:
    local = load_embedder(InferenceSettings(runtime="fp32", warmup=False))
    return local.embed(local.prepare(texts_of(60)))


def test_the_endpoint_agrees_with_the_local_model_and_keeps_the_in_flight_bound(
    infinity: Any, recorder: Recorder, local_vectors: Any
) -> None:
    embedder = load_embedder(endpoint_settings(infinity.url, infinity.api_key))
    assert isinstance(embedder, EndpointEmbedder)
    embedder.client.observer = recorder
    try:
        got = embedder.embed(embedder.prepare(texts_of(60)))
    finally:
        embedder.close()
    assert got.shape == (60, 384) and got.dtype == np.float32
    cosines = (got * local_vectors).sum(axis=1)  # both L2-normalized
    assert float(cosines.min()) >= 0.999
    assert recorder.outcomes == Counter({"200": 8})  # 60 inputs, 8 a request
    assert 1 <= recorder.most_in_flight <= 3
    assert recorder.token_count > 0
    assert embedder.model_id == "endpoint/all-MiniLM-L6-v2"


def test_429_bursts_with_retry_after_500s_and_resets_are_retried(
    through_proxy: EndpointEmbedder, fault_proxy: Any, recorder: Recorder, local_vectors: Any
) -> None:
    fault_proxy.throttle(3, retry_after_s=1)
    fault_proxy.fail(2, status=500)
    fault_proxy.reset(2)
    got = through_proxy.embed(through_proxy.prepare(texts_of(60)))
    assert float((got * local_vectors).sum(axis=1).min()) >= 0.999  # every vector in its place
    assert recorder.outcomes["429"] == 3 and recorder.outcomes["500"] == 2 and recorder.outcomes["connection"] == 2
    assert recorder.retries == Counter({"429": 3, "500": 2, "connection": 2})
    assert recorder.outcomes["200"] == 8


def test_a_poisoned_input_fails_alone_and_only_its_request_is_split(
    through_proxy: EndpointEmbedder, fault_proxy: Any, recorder: Recorder, local_vectors: Any
) -> None:
    texts = texts_of(60)
    texts[21] = f"{texts[21]} {POISON}"
    fault_proxy.poison(POISON)
    with pytest.raises(PartialBatchError) as caught:
        through_proxy.embed(through_proxy.prepare(texts))
    outputs = caught.value.outputs
    assert [i for i, out in caught.value.failures] == [21]
    refused = outputs[21]
    assert isinstance(refused, EndpointRejected) and "HTTP 400" in refused.message
    good = np.vstack([out for i, out in enumerate(outputs) if i != 21])
    assert float((good * np.delete(local_vectors, 21, axis=0)).sum(axis=1).min()) >= 0.999
    # the request of inputs 16..23 is bisected to 21 (8 → 4 → 2 → 1): 1 + 2 + 2 + 2 requests; the others once
    assert recorder.outcomes["400"] == 4
    assert recorder.outcomes["200"] == 7 + 3
    assert recorder.retries == Counter()  # a refusal is never retried


def test_an_endpoint_past_its_retry_budget_is_unavailable_not_a_failed_chunk(
    fault_proxy: Any, infinity: Any, recorder: Recorder
) -> None:
    embedder = load_embedder(endpoint_settings(fault_proxy.url, infinity.api_key, max_attempts=3))
    assert isinstance(embedder, EndpointEmbedder)
    embedder.client.observer = recorder
    fault_proxy.fail(1000, status=503)
    try:
        with pytest.raises(EndpointUnavailable) as caught:
            embedder.embed(embedder.prepare(texts_of(4)))
    finally:
        embedder.close()
    assert caught.value.code == "endpoint_unavailable"
    assert recorder.outcomes == Counter({"503": 3})


def test_a_wrong_key_stops_with_endpoint_refused_and_the_key_is_in_no_message(infinity: Any) -> None:
    client = EndpointClient(EndpointSettings(url=infinity.url, api_key="sk-wrong-key-123"))
    try:
        with pytest.raises(EndpointRefused) as caught:
            client.embed(["hello"], [2])
    finally:
        client.close()
    assert "401" in caught.value.message
    assert "sk-wrong-key-123" not in caught.value.message


def test_vectors_of_another_length_than_configured_stop_the_service(infinity: Any) -> None:
    client = EndpointClient(EndpointSettings(url=infinity.url, api_key=infinity.api_key, dimensions=768))
    try:
        with pytest.raises(EndpointDimensionError):
            client.embed(["hello"], [2])
    finally:
        client.close()


def test_a_closed_client_refuses_work_at_once(infinity: Any) -> None:
    client = EndpointClient(EndpointSettings(url=infinity.url, api_key=infinity.api_key))
    client.close()
    client.close()  # idempotent
    with pytest.raises(EndpointUnavailable):
        client.embed(["hello"], [2])
