"""Every refusal of the API is a JSON body ``{error_code, message}`` with a 4xx status; faults are 5xx.

``ApiError`` is raised by routes; ``install_error_handlers`` maps it, docstream's typed errors,
FastAPI's validation errors and Starlette's HTTP errors onto that one shape (``ErrorBody``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from docstream.errors import DocstreamError, InputError, QuotaExceeded, RetryableError, StoreError
from docstream.logging import get_logger

__all__ = ["ApiError", "error_response", "install_error_handlers", "status_of_input_error"]

_log = get_logger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
}
_TOO_LARGE_CODES = frozenset({"too_large", "upload_too_large", "archive_too_large"})
_RETRY_AFTER_S = "5"


class ApiError(Exception):
    """A refusal (4xx) or fault (5xx) with a stable ``error_code``.

    Args:
        status: the HTTP status.
        error_code: stable snake_case identifier.
        message: for humans.
        extra: more members of the JSON body (e.g. ``refused``).
        headers: response headers (e.g. ``WWW-Authenticate``).
    """

    def __init__(
        self,
        status: int,
        error_code: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.extra = extra or {}
        self.headers = headers


def error_response(
    status: int, error_code: str, message: str, *, extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The JSON error response."""
    return JSONResponse({"error_code": error_code, "message": message, **(extra or {})}, status, headers=headers)


def status_of_input_error(code: str) -> int:
    """413 for size refusals, 422 for every other refused input."""
    return 413 if code in _TOO_LARGE_CODES else 422


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in exc.errors()
    ]


async def _on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.error_code, exc.message, extra=exc.extra, headers=exc.headers)


async def _on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = _validation_details(exc)
    first = details[0] if details else {"loc": [], "msg": "invalid request"}
    message = f"{'.'.join(first['loc'])}: {first['msg']}" if first["loc"] else str(first["msg"])
    return error_response(422, "invalid_request", message, extra={"details": details})


async def _on_http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), headers=dict(exc.headers) if exc.headers else None)


async def _on_docstream_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DocstreamError)
    if isinstance(exc, InputError):
        return error_response(status_of_input_error(exc.code), exc.code, exc.message)
    if isinstance(exc, QuotaExceeded):
        # nothing was enqueued: the same request later is admitted once the tenant's figures allow it
        return error_response(429, exc.code, exc.message, extra={"limit": exc.limit},
                              headers={"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, StoreError) and exc.code == "admission_busy":
        return error_response(429, exc.code, exc.message, headers={"Retry-After": "1"})
    if isinstance(exc, RetryableError):
        _log.warning("http_dependency_unavailable", path=request.url.path, error_code=exc.code, error=exc.message)
        return error_response(503, exc.code, exc.message, headers={"Retry-After": _RETRY_AFTER_S})
    _log.error("http_request_failed", path=request.url.path, error_code=exc.code, error=exc.message)
    return error_response(500, exc.code, "internal error")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    _log.error("http_request_crashed", path=request.url.path, error=str(exc)[:500], exc_info=exc)
    return error_response(500, "internal_error", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the ``{error_code, message}`` shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(DocstreamError, _on_docstream_error)
    app.add_exception_handler(Exception, _on_unexpected)
