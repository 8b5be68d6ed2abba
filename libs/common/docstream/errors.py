"""Typed errors with machine-readable codes.

``DocstreamError`` is the root. The consume loop treats the three families differently:

* ``PoisonRecord``: this input can never succeed (bytes won't decode, handler rejects it):
  send it to the DLQ, commit, go on.
* ``RetryableError``: a dependency blipped (broker, Cassandra timeout): back off and retry,
  commit nothing past it.
* ``FatalError``: bad config, a dependency gone past its deadline, a bug: log once, exit non-zero.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "ConfigError",
    "DocstreamError",
    "DocumentError",
    "FatalError",
    "InputError",
    "PartialBatchError",
    "PoisonRecord",
    "QuotaExceeded",
    "RetryableError",
    "SchemaError",
    "StoreError",
]


class DocstreamError(Exception):
    """Root of docstream's errors; ``code`` is a stable snake_case identifier."""

    code: str = "docstream_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0]) if self.args else self.code


class FatalError(DocstreamError):
    """Unrecoverable: the process should log once and exit non-zero."""

    code = "fatal"


class ConfigError(FatalError):
    """Settings are invalid or impossible."""

    code = "config_invalid"


class RetryableError(DocstreamError):
    """A transient fault of a dependency; retrying later may succeed."""

    code = "transient"


class BackendUnavailable(RetryableError):  # noqa: N818 - a state of the model's backend
    """The model's backend (an HTTP endpoint) does not answer past its retry budget.

    Not the records' fault: the inference service keeps the batch, pauses consumption and sends it
    again once the backend answers (docs/inference.md "When the endpoint is down"). Never a DLQ entry.
    """

    code = "backend_unavailable"


class PartialBatchError(DocstreamError):
    """A batch of which some items failed on their own: ``outputs[i]`` is item i's result or its exception.

    A task runner raises it so that the items given as exceptions fail alone (their chunks go to the
    DLQ with the exception's code) while the others keep their results.
    """

    code = "partial_batch"

    def __init__(self, outputs: list[object], *, message: str = "some items of the batch failed") -> None:
        super().__init__(message)
        self.outputs = outputs

    @property
    def failures(self) -> list[tuple[int, BaseException]]:
        """(index, exception) of each failed item."""
        return [(i, out) for i, out in enumerate(self.outputs) if isinstance(out, BaseException)]


class StoreError(RetryableError):
    """The result store failed transiently (timeout, unavailable)."""

    code = "store_unavailable"


class PoisonRecord(DocstreamError):  # noqa: N818 - the name of record, not of an error
    """A record that can never be processed; it goes to the DLQ.

    Attributes:
        raw: the raw value bytes, kept for the DLQ.
    """

    code = "poison_record"

    def __init__(self, message: str, *, code: str | None = None, raw: bytes | None = None) -> None:
        super().__init__(message, code=code)
        self.raw = raw


class SchemaError(PoisonRecord):
    """Bytes that decode under neither wire format, or a record that violates its schema."""

    code = "schema_error"


class DocumentError(DocstreamError):
    """A document that cannot be processed (encrypted, corrupt, empty, ...).

    Its ``code`` becomes the ``error_code`` of a failed DocumentCompleted.
    """

    code = "document_error"


class InputError(DocstreamError):
    """User input refused at a boundary (CLI, HTTP): bad path, archive rules, limits."""

    code = "invalid_input"


class QuotaExceeded(DocstreamError):  # noqa: N818 - a refusal, named for what it says
    """A submission past one of its tenant's quotas (docs/operations.md "Quotas and admission"): nothing was
    enqueued. HTTP 429 with ``Retry-After``.

    Attributes:
        limit: the limit's name (``max_documents_in_flight``, ``max_enqueued_tokens``, ``max_tokens_per_day``).
        retry_after_s: seconds until trying again is worth it.
    """

    code = "quota_exceeded"

    def __init__(self, message: str, *, limit: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s
