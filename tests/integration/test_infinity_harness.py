"""The endpoint tests' harness: the real Infinity server (tests/fixtures/infinity.py) and the fault proxy in
front of it (tests/fixtures/fault_proxy.py) do what the endpoint tests rely on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np
import pytest

from docstream.models.embedding import load_embedder
from docstream.settings import InferenceSettings
from tests.fixtures.documents import paragraphs
from tests.fixtures.fault_proxy import FaultProxy
from tests.fixtures.infinity import InfinityServer
from tests.fixtures.kafka import wait_until

pytestmark = pytest.mark.integration

_DIM = 384


def _texts(count: int, seed: int = 21) -> list[str]:
    return paragraphs(seed, count)


def _post(client: httpx.Client, url: str, model: str, texts: Sequence[str]) -> httpx.Response:
    return client.post(f"{url}/embeddings", json={"model": model, "input": list(texts)})


def _vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    return np.asarray([item["embedding"] for item in data], dtype=np.float32)


@pytest.fixture
def client(infinity: InfinityServer) -> Iterator[httpx.Client]:
    with httpx.Client(headers={"Authorization": f"Bearer {infinity.api_key}"}, timeout=60.0) as c:
        yield c


def test_server_answers_one_vector_per_input_in_index_order(infinity: InfinityServer, client: httpx.Client) -> None:
    texts = [*_texts(6), ""]  # an empty string is an input like any other
    vectors = _vectors(_post(client, infinity.url, infinity.model, texts))
    assert vectors.shape == (len(texts), _DIM)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    alone = _vectors(_post(client, infinity.url, infinity.model, texts[3:4]))
    assert float(alone[0] @ vectors[3]) > 0.9999  # index 3 of the batch is input 3, not a neighbour


def test_server_demands_its_key(infinity: InfinityServer) -> None:
    with httpx.Client(timeout=30.0) as anonymous:
        assert _post(anonymous, infinity.url, infinity.model, ["a"]).status_code == 401
        anonymous.headers["Authorization"] = "Bearer not-the-key"
        assert _post(anonymous, infinity.url, infinity.model, ["a"]).status_code == 401


def test_server_vectors_agree_with_the_local_model(infinity: InfinityServer, client: httpx.Client) -> None:
    texts = [*_texts(12), " ".join(_texts(12, seed=5))]  # the last runs past the model's 256-token window
    remote = _vectors(_post(client, infinity.url, infinity.model, texts))
    embedder = load_embedder(InferenceSettings(runtime="fp32", warmup=False))
    local = np.asarray(embedder.embed(embedder.prepare(texts)), dtype=np.float32)
    local /= np.linalg.norm(local, axis=1, keepdims=True)
    cosines = np.sum(remote * local, axis=1) / np.linalg.norm(remote, axis=1)
    assert float(cosines.min()) >= 0.999, cosines


def test_proxy_forwards_method_path_key_and_body(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                 client: httpx.Client) -> None:
    texts = _texts(4)
    direct = _vectors(_post(client, infinity.url, infinity.model, texts))
    proxied = _vectors(_post(client, fault_proxy.url, infinity.model, texts))
    assert np.allclose(direct, proxied, atol=1e-6)
    with httpx.Client(timeout=30.0) as anonymous:
        assert _post(anonymous, fault_proxy.url, infinity.model, texts).status_code == 401
    stats = fault_proxy.stats()
    assert (stats.requests, stats.forwarded, stats.forwarded_inputs) == (2, 2, 8)


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_throttle_answers_429_with_retry_after_then_forwards(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                             client: httpx.Client) -> None:
    fault_proxy.throttle(2, retry_after_s=3)
    for _ in range(2):
        response = _post(client, fault_proxy.url, infinity.model, ["a", "b"])
        assert _error(response, 429)["code"] == "rate_limit_exceeded"
        assert response.headers["Retry-After"] == "3"
        assert response.headers["retry-after-ms"] == "3000"
    assert len(_vectors(_post(client, fault_proxy.url, infinity.model, ["a", "b"]))) == 2
    stats = fault_proxy.stats()
    assert (stats.requests, stats.throttled, stats.forwarded, stats.forwarded_inputs) == (3, 2, 1, 2)


def test_fail_answers_the_status_asked_then_forwards(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                     client: httpx.Client) -> None:
    fault_proxy.fail(1)
    fault_proxy.fail(2, status=503)  # the last word counts
    assert [_post(client, fault_proxy.url, infinity.model, ["a"]).status_code for _ in range(3)] == [503, 503, 200]
    assert _error(_fail_once(fault_proxy, client, infinity), 500)["type"] == "server_error"
    assert fault_proxy.stats().failed == 3


def _fail_once(proxy: FaultProxy, client: httpx.Client, infinity: InfinityServer) -> httpx.Response:
    proxy.fail(1)
    return _post(client, proxy.url, infinity.model, ["a"])


def test_reset_is_a_transport_error_then_forwards(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                  client: httpx.Client) -> None:
    fault_proxy.reset(2)
    for _ in range(2):
        with pytest.raises(httpx.TransportError):
            _post(client, fault_proxy.url, infinity.model, ["a"])
    assert len(_vectors(_post(client, fault_proxy.url, infinity.model, ["a"]))) == 1
    stats = fault_proxy.stats()
    assert (stats.reset, stats.forwarded) == (2, 1)


def test_outage_refuses_connections_for_its_window_then_serves(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                               client: httpx.Client) -> None:
    _vectors(_post(client, fault_proxy.url, infinity.model, ["a"]))  # a pooled connection, open at the outage
    fault_proxy.outage(2.0)
    with pytest.raises(httpx.TransportError):
        _post(client, fault_proxy.url, infinity.model, ["a"])
    with httpx.Client(headers=client.headers, timeout=30.0) as fresh, pytest.raises(httpx.ConnectError):
        _post(fresh, fault_proxy.url, infinity.model, ["a"])

    def served() -> bool:
        try:
            return _post(client, fault_proxy.url, infinity.model, ["a"]).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(served, 30.0, "the proxy listening again after its outage", poll_s=0.2)
    assert fault_proxy.stats().dropped_connections >= 1


def test_down_and_up(fault_proxy: FaultProxy, infinity: InfinityServer, client: httpx.Client) -> None:
    fault_proxy.down()
    with pytest.raises(httpx.ConnectError):
        _post(client, fault_proxy.url, infinity.model, ["a"])
    fault_proxy.up()
    assert _post(client, fault_proxy.url, infinity.model, ["a"]).status_code == 200


def test_poison_fails_only_the_batch_holding_the_marker(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                        client: httpx.Client) -> None:
    fault_proxy.poison("XPOISONX")
    texts = _texts(5)
    poisoned = [*texts[:2], f"{texts[2]} XPOISONX", *texts[3:]]
    error = _error(_post(client, fault_proxy.url, infinity.model, poisoned), 400)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "input", None)
    assert len(_vectors(_post(client, fault_proxy.url, infinity.model, poisoned[:2]))) == 2
    assert _post(client, fault_proxy.url, infinity.model, poisoned[2:3]).status_code == 400
    assert len(_vectors(_post(client, fault_proxy.url, infinity.model, poisoned[3:]))) == 2
    stats = fault_proxy.stats()
    assert (stats.poisoned, stats.forwarded, stats.forwarded_inputs) == (2, 2, 4)


def test_latency_delays_every_request_and_clear_removes_it(fault_proxy: FaultProxy, infinity: InfinityServer,
                                                           client: httpx.Client) -> None:
    fault_proxy.latency(3000)
    with pytest.raises(httpx.ReadTimeout):
        client.post(f"{fault_proxy.url}/embeddings", json={"model": infinity.model, "input": ["a"]}, timeout=0.5)
    fault_proxy.throttle(5)
    fault_proxy.clear()
    assert _post(client, fault_proxy.url, infinity.model, ["a"]).status_code == 200
