"""The OpenAI embeddings API, as docstream speaks it: pure decisions, no sockets (docs/inference.md).

* ``plan_requests``: a micro-batch split into requests within the endpoint's limits;
* ``request_body`` and ``parse_embeddings``: what is sent, and the answer checked before it is
  trusted (one vector per input, matched by ``index``, all of one length);
* ``status_verdict`` and ``retry_after_s``: what an HTTP status means for the batch, and how long a
  server asked us to wait;
* ``RateBudget``: the optional requests-per-second and tokens-per-minute budget.

The edge that sends the requests is ``docstream.models.endpoint``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from docstream.errors import FatalError, PoisonRecord
from docstream.retry import backoff_ceiling

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_RETRY_AFTER_S",
    "EndpointDimensionError",
    "EndpointRefused",
    "EndpointRejected",
    "EndpointResponseError",
    "RateBudget",
    "Verdict",
    "error_message",
    "parse_embeddings",
    "plan_requests",
    "request_body",
    "retry_after_s",
    "retry_delay_s",
    "status_verdict",
    "usage_tokens",
]

Verdict = Literal["ok", "retry", "split", "refused"]

MAX_RETRY_AFTER_S = 300.0
"""The longest ``Retry-After`` obeyed; a longer one waits this long (then the budget decides)."""
MAX_ERROR_CHARS = 300
"""Most characters of an endpoint's error message kept in logs and DLQ entries."""

_RETRY = frozenset({408, 409, 425, 429})
_SPLIT = frozenset({400, 413, 422})


class EndpointRejected(PoisonRecord):
    """The endpoint refused the inputs of a request (400, 413, 422): split it; alone, the input fails."""

    code = "endpoint_rejected"


class EndpointResponseError(PoisonRecord):
    """An answer that does not hold one vector per input (count, indices, numbers): never trusted."""

    code = "endpoint_bad_response"


class EndpointDimensionError(FatalError):
    """The endpoint's vectors changed length: another model answers under the same model_id. Stop."""

    code = "endpoint_dimension_mismatch"


class EndpointRefused(FatalError):  # noqa: N818 - what the endpoint does, as PoisonRecord names a record
    """The endpoint refuses us, not the input (401, 403, 404, ...): a key or URL to fix. Stop."""

    code = "endpoint_refused"


def status_verdict(status: int) -> Verdict:
    """What an HTTP status means for a request.

    ``ok``: 2xx. ``retry``: 408, 409, 425, 429 and every 5xx (full-jitter backoff, Retry-After obeyed).
    ``split``: 400, 413, 422, the inputs' fault (bisect the request down to the input). ``refused``:
    any other status (401, 403, 404: the key, the URL or the model name; the service stops).
    """
    if 200 <= status < 300:
        return "ok"
    if status in _RETRY or 500 <= status < 600:
        return "retry"
    if status in _SPLIT:
        return "split"
    return "refused"


def retry_after_s(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), within [0, MAX_RETRY_AFTER_S].

    None when absent or unreadable. ``now`` (aware, UTC) is only read for an HTTP date.
    """
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def retry_delay_s(attempt: int, *, retry_after: float | None, base_s: float, max_s: float, jitter: float) -> float:
    """The wait before attempt ``attempt + 1``: full jitter over the doubling ceiling, at least ``retry_after``.

    Args:
        attempt: the attempt that failed (1-based).
        retry_after: what the server asked for (``retry_after_s``), or None.
        base_s: the first ceiling; it doubles per attempt up to ``max_s``.
        max_s: the largest ceiling.
        jitter: a uniform draw in [0, 1).

    Raises:
        ValueError: attempt < 1 or a negative bound.
    """
    ceiling = backoff_ceiling(attempt, base_s=base_s, max_s=max_s)
    delay = jitter * ceiling
    if retry_after is not None:
        # the server's wait, plus a little spread so a crowd told "1 s" does not return in one instant
        delay = retry_after + jitter * min(base_s, ceiling)
    return delay


def plan_requests(tokens: Sequence[int], *, max_inputs: int, max_tokens: int) -> list[range]:
    """Consecutive runs of inputs, one per request: at most ``max_inputs`` inputs and ``max_tokens`` tokens each.

    An input longer than ``max_tokens`` goes alone (the endpoint truncates it or rejects it, and then it
    fails alone). The inputs arrive longest first, so runs of long inputs hold fewer of them.

    Raises:
        ValueError: a limit below 1.
    """
    if max_inputs < 1 or max_tokens < 1:
        raise ValueError("request limits must be at least 1")
    runs: list[range] = []
    start, used = 0, 0
    for i, count in enumerate(tokens):
        count = max(int(count), 0)
        if i > start and (i - start >= max_inputs or used + count > max_tokens):
            runs.append(range(start, i))
            start, used = i, 0
        used += count
    if start < len(tokens):
        runs.append(range(start, len(tokens)))
    return runs


def request_body(model: str, inputs: Sequence[str], *, dimensions: int | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /embeddings``: a list of inputs, floats back."""
    body: dict[str, Any] = {"model": model, "input": list(inputs), "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return body


def parse_embeddings(body: Any, *, count: int, dimension: int | None) -> list[list[float]]:
    """The vectors of an answer, in input order, after checking it holds exactly one per input.

    Args:
        body: the decoded JSON answer.
        count: inputs sent.
        dimension: the length every vector must have; None: all of one length, whatever it is.

    Raises:
        EndpointResponseError: no ``data`` list, a count other than ``count``, an index missing,
            repeated or out of range, an embedding that is not a list of finite numbers, or vectors of
            different lengths within the answer.
        EndpointDimensionError: vectors of another length than ``dimension``.
    """
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        raise EndpointResponseError("the answer has no 'data' list")
    if len(data) != count:
        raise EndpointResponseError(f"the answer holds {len(data)} embeddings for {count} inputs")
    vectors: list[list[float] | None] = [None] * count
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, Mapping) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise EndpointResponseError(f"embedding {position} has index {index!r}, not one of 0..{count - 1}")
        if vectors[index] is not None:
            raise EndpointResponseError(f"index {index} answered twice")
        vectors[index] = _vector(item.get("embedding"), index)
    lengths = {len(v) for v in vectors if v is not None}
    if len(lengths) > 1:
        raise EndpointResponseError(f"vectors of different lengths in one answer: {sorted(lengths)}")
    if dimension is not None and lengths and lengths != {dimension}:
        raise EndpointDimensionError(f"the endpoint answers vectors of {lengths.pop()} floats, not {dimension}")
    return [v for v in vectors if v is not None]


def usage_tokens(body: Any) -> int | None:
    """``usage.prompt_tokens`` (else ``total_tokens``) of an answer, when it says."""
    usage = body.get("usage") if isinstance(body, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    for key in ("prompt_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def error_message(status: int, body: Any, text: str = "") -> str:
    """A short description of an error answer: the status and the endpoint's own message, bounded."""
    message: Any = None
    if isinstance(body, Mapping):
        error = body.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        message = message or body.get("detail") or body.get("message")
    detail = str(message if message is not None else text).strip().replace("\n", " ")
    return f"HTTP {status}: {detail[:MAX_ERROR_CHARS]}" if detail else f"HTTP {status}"


def _vector(value: Any, index: int) -> list[float]:
    if not isinstance(value, list) or not value:
        raise EndpointResponseError(f"embedding {index} is not a list of numbers (encoding_format 'float')")
    try:
        vector = [float(x) for x in value]
    except (TypeError, ValueError):
        raise EndpointResponseError(f"embedding {index} holds a value that is not a number") from None
    if any(isinstance(x, bool) for x in value) or not all(map(math.isfinite, vector)):
        raise EndpointResponseError(f"embedding {index} holds a value that is not a finite number")
    return vector


@dataclass(slots=True)
class _Bucket:
    rate: float  # units per second
    capacity: float
    level: float
    updated: float

    def reserve(self, amount: float, now: float) -> float:
        self.level = min(self.capacity, self.level + max(now - self.updated, 0.0) * self.rate)
        self.updated = max(now, self.updated)
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate


class RateBudget:
    """Requests per second and tokens per minute, as token buckets that lend: a request waits off its debt.

    ``reserve(tokens, now)`` books one request of ``tokens`` tokens and returns how long to wait
    before sending it; later requests queue behind the debt. A bucket holds one second of requests
    and one minute of tokens (the burst an API with those limits allows). A request larger than a
    whole minute's tokens still goes, after the bucket refills. Zero switches a budget off.
    """

    def __init__(self, *, requests_per_s: float = 0.0, tokens_per_min: int = 0, now: float = 0.0) -> None:
        if requests_per_s < 0 or tokens_per_min < 0:
            raise ValueError("budgets are non-negative")
        self._requests = (_Bucket(requests_per_s, max(requests_per_s, 1.0), max(requests_per_s, 1.0), now)
                          if requests_per_s else None)
        self._tokens = (_Bucket(tokens_per_min / 60.0, float(tokens_per_min), float(tokens_per_min), now)
                        if tokens_per_min else None)

    @property
    def limited(self) -> bool:
        """Whether any budget is set."""
        return self._requests is not None or self._tokens is not None

    def reserve(self, tokens: int, now: float) -> float:
        """Book a request of ``tokens`` tokens at ``now`` (monotonic seconds); the seconds to wait before it."""
        wait = 0.0
        if self._requests is not None:
            wait = self._requests.reserve(1.0, now)
        if self._tokens is not None:
            wait = max(wait, self._tokens.reserve(float(max(tokens, 0)), now))
        return wait
