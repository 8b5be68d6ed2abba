"""An OpenAI-compatible embeddings endpoint as the ``Embedder`` (docs/inference.md "A model behind an endpoint").

``EndpointClient`` owns one asyncio loop on a thread of its own and one pooled ``httpx.AsyncClient``.
``embed`` turns a micro-batch into requests within the endpoint's limits
(``docstream.models.endpoint_protocol.plan_requests``), sends them concurrently up to ``max_in_flight``,
and matches every answer back to its inputs by index. Per request:

* 429, 5xx, timeouts and connection errors are retried with full-jitter backoff, at least the
  ``Retry-After`` the server gave, up to ``max_attempts``; past them ``EndpointUnavailable`` (a
  ``BackendUnavailable``): the inference service keeps the batch and pauses consumption;
* 400, 413 and 422 split the request in halves, down to the one input the endpoint refuses; that
  input fails alone (``PartialBatchError``) and its neighbours keep their vectors;
* 401, 403, 404 (a key, URL or model name to fix) and a change of vector length stop the service.

``EndpointEmbedder`` is the ``Embedder`` over it: ``prepare`` counts tokens with the chunker's
tokenizer (the limits' unit), ``embed`` returns float32 rows, L2-normalized like the local model's.
The API key goes in a header and nowhere else: never in a log line, an error or a repr.

The same client sends the generate task's chat completions (``complete``): one request per chunk, concurrent up
to ``max_in_flight``, with the same retries; a body the endpoint refuses fails alone.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from docstream.errors import BackendUnavailable, ConfigError, FatalError, PartialBatchError
from docstream.logging import get_logger
from docstream.models.embedder import PreparedBatch
from docstream.models.endpoint_protocol import (
    EndpointRefused,
    EndpointRejected,
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
from docstream.models.runtime import Runtime
from docstream.models.tokenization import ModelTokenCounter, load_token_counter
from docstream.settings import EndpointSettings, InferenceSettings

__all__ = [
    "EndpointClient",
    "EndpointEmbedder",
    "EndpointObserver",
    "EndpointUnavailable",
    "close_embedder",
    "load_endpoint_embedder",
    "observe_embedder",
]

Vectors = npt.NDArray[np.float32]
_log = get_logger(__name__)
_WARMUP_TEXTS = ("docstream warm-up: a short sentence.",)
_MAX_BODY_BYTES = 256 * 1024 * 1024


class EndpointUnavailable(BackendUnavailable):
    """A request ran past its retry budget (429, 5xx, timeouts, connection errors), or the client closed."""

    code = "endpoint_unavailable"


class EndpointObserver(Protocol):
    """Where the client reports what it does (the inference service's ``docstream_endpoint_*`` metrics)."""

    def requested(self, outcome: str, seconds: float, inputs: int) -> None:
        """One HTTP exchange ended: ``outcome`` is the status code, or ``timeout`` / ``connection``."""

    def tokens(self, count: int) -> None:
        """Tokens of an answered request (the endpoint's ``usage`` where it says, else our count)."""

    def retried(self, reason: str) -> None:
        """A request is sent again: ``reason`` as ``outcome`` above."""

    def in_flight(self, count: int) -> None:
        """Requests in flight now."""


class _Quiet:
    def requested(self, outcome: str, seconds: float, inputs: int) -> None:
        return None

    def tokens(self, count: int) -> None:
        return None

    def retried(self, reason: str) -> None:
        return None

    def in_flight(self, count: int) -> None:
        return None


class _Transient(Exception):  # noqa: N818 - internal control flow: one attempt's retryable outcome
    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class EndpointClient:
    """A pooled, concurrent, retrying client of ``POST <url>/embeddings`` (``embed``) and ``POST
    <url>/chat/completions`` (``complete``, the generate task's); thread-safe and blocking.

    Args:
        settings: the endpoint settings (``url`` set).
        observer: told about every request, retry and the in-flight count.
        rng: the jitter's random source.

    Raises:
        ConfigError: no URL.
    """

    def __init__(
        self, settings: EndpointSettings, *, observer: EndpointObserver | None = None, rng: random.Random | None = None
    ) -> None:
        if settings.url is None:
            raise ConfigError("inference.endpoint.url is not set", code="endpoint_unset")
        self._settings = settings
        self._url = settings.url
        self.observer: EndpointObserver = observer or _Quiet()
        self._rng = rng or random.Random()
        self._dimension = settings.dimensions
        self._budget = RateBudget(requests_per_s=settings.requests_per_s, tokens_per_min=settings.tokens_per_min,
                                  now=time.monotonic())
        self._budget_lock = threading.Lock()
        self._in_flight = 0
        self._closed = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="endpoint-io", daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient = self._call(self._open())
        self._slots: asyncio.Semaphore = self._call(self._semaphore())

    @property
    def settings(self) -> EndpointSettings:
        """The settings (the key stays a SecretStr)."""
        return self._settings

    @property
    def dimension(self) -> int | None:
        """The vector length: configured, else learned from the first answer; None before it."""
        return self._dimension

    def embed(self, texts: Sequence[str], tokens: Sequence[int]) -> list[list[float] | BaseException]:
        """One vector per text, or the exception of a text the endpoint refused alone.

        Raises:
            EndpointUnavailable: a request ran past its retry budget, or the client is closed.
            EndpointRefused: the endpoint refuses us (401, 403, 404, ...).
            EndpointDimensionError: the vectors changed length.
        """
        if len(texts) != len(tokens):
            raise ValueError("one token count per text")
        if not texts:
            return []
        if self._closed.is_set():
            raise EndpointUnavailable("the endpoint client is closed")
        out: list[list[float] | BaseException] = self._call(self._embed_all(list(texts), list(tokens)))
        return out

    def complete(self, bodies: Sequence[dict[str, Any]], tokens: Sequence[int]) -> list[Any]:
        """``POST <url>/chat/completions`` once per body, concurrently up to ``max_in_flight``: each decoded
        answer (a JSON object), or the ``EndpointRejected``/``EndpointResponseError`` of a body the endpoint
        refused alone (400, 413, 422, or an answer that is no JSON object), or, when other bodies were answered,
        the ``EndpointUnavailable`` of a body past its retry budget: an answer the server gave (and billed) is
        never dropped because a sibling request failed. ``tokens``: each body's prompt tokens, for the budget.

        Raises:
            EndpointUnavailable: no body was answered: every request ran past its retry budget, or the client is
                closed.
            EndpointRefused: the endpoint refuses us (401, 403, 404, ...).
        """
        if len(bodies) != len(tokens):
            raise ValueError("one token count per body")
        if not bodies:
            return []
        if self._closed.is_set():
            raise EndpointUnavailable("the endpoint client is closed")
        out: list[Any] = self._call(self._complete_all(list(bodies), list(tokens)))
        return out

    def close(self) -> None:
        """Stop: requests in flight end with ``EndpointUnavailable``; the connections close. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()

        async def shut() -> None:
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()
            await self._client.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()

    # -- the loop's side ----------------------------------------------------------------------

    def _call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except (asyncio.CancelledError, CancelledError):
            raise EndpointUnavailable("the endpoint client closed while a request was in flight") from None

    async def _open(self) -> httpx.AsyncClient:
        s = self._settings
        headers = {"Accept": "application/json", "User-Agent": "docstream"}
        if s.api_key is not None:
            headers["Authorization"] = f"Bearer {s.api_key.get_secret_value()}"
        limits = httpx.Limits(max_connections=s.max_in_flight, max_keepalive_connections=s.max_in_flight)
        return httpx.AsyncClient(headers=headers, limits=limits, timeout=httpx.Timeout(s.timeout_s),
                                 follow_redirects=False)

    async def _semaphore(self) -> asyncio.Semaphore:
        return asyncio.Semaphore(self._settings.max_in_flight)

    async def _embed_all(self, texts: list[str], tokens: list[int]) -> list[list[float] | BaseException]:
        s = self._settings
        runs = plan_requests(tokens, max_inputs=s.max_inputs_per_request, max_tokens=s.max_tokens_per_request)
        parts = await asyncio.gather(*(self._embed_run(texts, tokens, list(run)) for run in runs),
                                     return_exceptions=True)
        for part in parts:  # the first stop wins: a fatal refusal over an outage
            if isinstance(part, FatalError):
                raise part
        for part in parts:
            if isinstance(part, BaseException):
                raise part
        out: list[list[float] | BaseException] = []
        for part in parts:
            out.extend(part)  # type: ignore[arg-type]  # no exception is left here
        return out

    async def _embed_run(self, texts: list[str], tokens: list[int], indices: list[int]) -> list[Any]:
        try:
            return list(await self._request([texts[i] for i in indices], sum(tokens[i] for i in indices)))
        except (EndpointRejected, EndpointResponseError) as exc:
            if len(indices) == 1:
                _log.warning("endpoint_input_refused", error_code=exc.code, error=exc.message,
                             tokens=tokens[indices[0]])
                return [exc]
            middle = len(indices) // 2
            halves = await asyncio.gather(self._embed_run(texts, tokens, indices[:middle]),
                                          self._embed_run(texts, tokens, indices[middle:]))
            return halves[0] + halves[1]

    async def _request(self, inputs: list[str], tokens: int) -> list[list[float]]:
        s = self._settings
        body = request_body(s.model, inputs, dimensions=s.dimensions if s.send_dimensions else None)
        vectors: list[list[float]] = await self._send("/embeddings", body, len(inputs), tokens,
                                                      lambda answer: self._vectors(answer, len(inputs), tokens))
        return vectors

    async def _complete_all(self, bodies: list[dict[str, Any]], tokens: list[int]) -> list[Any]:
        parts = await asyncio.gather(*(self._complete_one(body, count) for body, count in zip(bodies, tokens,
                                                                                              strict=True)),
                                     return_exceptions=True)
        for part in parts:  # the first stop wins: a fatal refusal over an outage
            if isinstance(part, FatalError):
                raise part
        answered = any(not isinstance(part, BaseException) for part in parts)
        for part in parts:  # an answer given is kept: the others' outage goes back in their places
            if isinstance(part, BaseException) and not isinstance(part, EndpointRejected | EndpointResponseError) \
                    and not (answered and isinstance(part, EndpointUnavailable)):
                raise part
        return parts

    async def _complete_one(self, body: dict[str, Any], tokens: int) -> Any:
        return await self._send("/chat/completions", body, 1, tokens, self._chat_answer)

    def _chat_answer(self, answer: Any) -> Any:
        if not isinstance(answer, dict):
            raise EndpointResponseError("a chat answer that is not a JSON object")
        self.observer.tokens(usage_tokens(answer) or 0)
        return answer

    async def _send(self, path: str, body: dict[str, Any], inputs: int, tokens: int,
                    accept: Callable[[Any], Any]) -> Any:
        """POST ``body`` to ``<url><path>`` until an answer, retrying transient failures; ``accept`` checks a 2xx
        answer's JSON and returns what the caller gets."""
        s = self._settings
        attempt = 0
        while True:
            attempt += 1
            await self._wait_budget(tokens)
            try:
                return await self._exchange(path, body, inputs, accept)
            except _Transient as exc:
                if self._closed.is_set():
                    raise EndpointUnavailable("the endpoint client is closed") from None
                if attempt >= s.max_attempts:
                    raise EndpointUnavailable(
                        f"{self._settings.url}: {exc} (after {attempt} attempts)", code="endpoint_unavailable"
                    ) from None
                delay = retry_delay_s(attempt, retry_after=exc.retry_after, base_s=s.base_delay_ms / 1000,
                                      max_s=s.max_delay_ms / 1000, jitter=self._rng.random())
                self.observer.retried(exc.reason)
                _log.info("endpoint_retry", reason=exc.reason, attempt=attempt, delay_s=round(delay, 3),
                          retry_after_s=exc.retry_after, inputs=inputs, error=str(exc))
                await asyncio.sleep(delay)

    async def _wait_budget(self, tokens: int) -> None:
        if not self._budget.limited:
            return
        with self._budget_lock:
            wait = self._budget.reserve(tokens, time.monotonic())
        if wait > 0:
            await asyncio.sleep(wait)

    async def _exchange(self, path: str, body: dict[str, Any], inputs: int, accept: Callable[[Any], Any]) -> Any:
        async with self._slots:
            self._in_flight += 1
            self.observer.in_flight(self._in_flight)
            started = time.perf_counter()
            outcome = "connection"
            try:
                response = await self._client.post(self._url + path, json=body)
                outcome = str(response.status_code)
                content = response.content
            except httpx.TimeoutException as exc:
                outcome = "timeout"
                raise _Transient("timeout", f"timed out: {type(exc).__name__}") from None
            except httpx.TransportError as exc:
                raise _Transient("connection", f"{type(exc).__name__}: {str(exc)[:200]}") from None
            finally:
                self._in_flight -= 1
                self.observer.in_flight(self._in_flight)
                self.observer.requested(outcome, time.perf_counter() - started, inputs)
        return self._answer(response, content, accept)

    def _answer(self, response: httpx.Response, content: bytes, accept: Callable[[Any], Any]) -> Any:
        status = response.status_code
        verdict = status_verdict(status)
        if len(content) > _MAX_BODY_BYTES:
            raise EndpointResponseError(f"an answer of {len(content)} bytes")
        try:
            decoded: Any = response.json() if content else None
        except ValueError:
            decoded = None
        if verdict == "ok":
            if decoded is None:
                raise EndpointResponseError(f"HTTP {status} without a JSON body")
            return accept(decoded)
        message = error_message(status, decoded, content[:1000].decode("utf-8", "replace"))
        if verdict == "retry":
            raise _Transient(str(status), message, retry_after_s(response.headers.get("retry-after")))
        if verdict == "split":
            raise EndpointRejected(message)
        raise EndpointRefused(f"{self._settings.url} refuses the request: {message}")


    def _vectors(self, answer: Any, inputs: int, tokens: int) -> list[list[float]]:
        vectors = parse_embeddings(answer, count=inputs, dimension=self._dimension)
        if self._dimension is None and vectors:
            self._dimension = len(vectors[0])
        self.observer.tokens(usage_tokens(answer) or tokens)
        return vectors


class EndpointEmbedder:
    """The ``Embedder`` whose model is an OpenAI-compatible endpoint.

    Args:
        client: the endpoint client (closed by ``close``).
        counter: the chunker's token counter (the unit of ``max_tokens_per_request`` and the budgets).
        normalize: L2-normalize the vectors (as the local model's).
    """

    def __init__(self, client: EndpointClient, counter: ModelTokenCounter, *, normalize: bool = True) -> None:
        self._client = client
        self._counter = counter
        self._normalize = normalize
        self._runtime = Runtime(device="remote", precision="fp32", threads=0, backend="openai")

    @property
    def client(self) -> EndpointClient:
        """The endpoint client."""
        return self._client

    @property
    def model_id(self) -> str:
        """``endpoint.model_id``, else ``endpoint/<model>``."""
        return self._client.settings.recorded_model_id

    @property
    def dimension(self) -> int:
        """The vector length (asks the endpoint once when it is not known yet).

        Raises:
            EndpointUnavailable: the endpoint does not answer.
        """
        if self._client.dimension is None:
            self.warm_up()
        return int(self._client.dimension or 0)

    @property
    def max_tokens(self) -> int:
        """``endpoint.max_input_tokens``."""
        return self._client.settings.max_input_tokens

    @property
    def runtime(self) -> Runtime:
        """``openai/remote``."""
        return self._runtime

    @property
    def device(self) -> str:
        """``remote``: the model's time is the endpoint's answer time."""
        return "remote"

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        """Count each text's tokens (the features are the counts)."""
        return PreparedBatch(texts=tuple(texts), features=self._counter.count(texts) if texts else [])

    def embed(self, batch: PreparedBatch) -> Vectors:
        """The endpoint's vectors, float32, one row per text.

        Raises:
            PartialBatchError: the endpoint refused some texts alone; ``outputs`` holds float32 rows
                and, for those texts, their ``EndpointRejected`` (or ``EndpointResponseError``).
            EndpointUnavailable: past the retry budget.
        """
        if not batch.texts:
            return np.zeros((0, self._client.dimension or 0), dtype=np.float32)
        tokens = list(batch.features) if isinstance(batch.features, list) else self._counter.count(batch.texts)
        outputs = self._client.embed(batch.texts, tokens)
        if any(isinstance(out, BaseException) for out in outputs):
            raise PartialBatchError([out if isinstance(out, BaseException) else self._rows([out])[0]
                                     for out in outputs])
        return self._rows(outputs)  # type: ignore[arg-type]  # no exception in outputs

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """All of ``texts`` through the endpoint, ``batch_size`` per call of ``embed``."""
        rows = [self.embed(self.prepare(texts[i : i + batch_size])) for i in range(0, len(texts), max(batch_size, 1))]
        return np.vstack(rows) if rows else np.zeros((0, self.dimension), dtype=np.float32)

    def warm_up(self) -> None:
        """One request: the endpoint answers, and its vector length is known."""
        self.embed(self.prepare(_WARMUP_TEXTS))

    def close(self) -> None:
        """Close the client."""
        self._client.close()

    def _rows(self, vectors: Sequence[list[float]]) -> Vectors:
        rows = np.asarray(vectors, dtype=np.float32)
        if self._normalize:
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            rows = rows / np.clip(norms, 1e-12, None)
        return rows.astype(np.float32, copy=False)


def load_endpoint_embedder(
    settings: InferenceSettings, *, observer: EndpointObserver | None = None
) -> EndpointEmbedder:
    """The endpoint embedder ``settings.endpoint`` describes, with the chunker's token counter.

    With ``settings.warmup`` it sends one request; an endpoint that does not answer then is logged
    (``endpoint_unavailable_at_start``), not fatal: the service waits for it like for an outage.

    Raises:
        ConfigError: no endpoint URL, or no tokenizer for the counts.
        EndpointRefused: the endpoint refuses the key, URL or model at warm-up.
    """
    client = EndpointClient(settings.endpoint, observer=observer)
    embedder = EndpointEmbedder(client, load_token_counter(settings.model_path, settings.model_id),
                                normalize=settings.normalize)
    _log.info("endpoint_model", url=settings.endpoint.url, model=settings.endpoint.model, model_id=embedder.model_id,
              max_inputs_per_request=settings.endpoint.max_inputs_per_request,
              max_in_flight=settings.endpoint.max_in_flight, key_set=settings.endpoint.api_key is not None)
    if settings.warmup:
        try:
            embedder.warm_up()
        except BackendUnavailable as exc:
            _log.warning("endpoint_unavailable_at_start", url=settings.endpoint.url, error=str(exc)[:300])
        except FatalError:
            client.close()
            raise
    return embedder


def observe_embedder(embedder: object, observer: EndpointObserver) -> None:
    """Report an endpoint embedder's requests to ``observer``; any other embedder has none to report."""
    if isinstance(embedder, EndpointEmbedder):
        embedder.client.observer = observer


def close_embedder(embedder: object) -> None:
    """Close an endpoint embedder's connections; a local model holds none."""
    if isinstance(embedder, EndpointEmbedder):
        embedder.close()
