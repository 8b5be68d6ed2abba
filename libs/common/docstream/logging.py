"""configure_logging(): the only structlog set-up.

JSON lines in services, a console renderer for the CLI (or on a TTY with format=auto).
Standard-library logs (cassandra-driver, faust, aiokafka) go through the same processors.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]


_SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "credential")
_NOT_SECRET = frozenset({"token_count", "tokens", "max_tokens", "chunk_max_tokens", "overlap_tokens"})


def _is_secret(key: str) -> bool:
    """Whether a log field may hold a secret (token counts are not: they are figures)."""
    name = key.lower()
    return name not in _NOT_SECRET and not name.endswith(("_tokens", "token_count")) and any(
        word in name for word in _SECRET_WORDS)


def _drop_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key in list(event_dict):
        if _is_secret(key):
            event_dict[key] = "***"
    return event_dict


def configure_logging(
    *, level: str = "INFO", fmt: str = "auto", service: str | None = None, file: Path | None = None
) -> None:
    """Set up structlog and route stdlib logging through it.

    Args:
        level: DEBUG, INFO, WARNING or ERROR.
        fmt: "json", "console", or "auto" (console on a TTY, else JSON).
        service: bound into every line when given.
        file: write to this file (appending) instead of stderr, e.g. under a progress bar.
    """
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_secrets,
    ]
    renderer: Any
    if use_console:
        renderer = structlog.dev.ConsoleRenderer()
    else:
        shared.append(structlog.processors.dict_tracebacks)
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler: logging.Handler
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("cassandra", "aiokafka", "faust", "mode", "httpx", "urllib3", "filelock", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    if service:
        structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str | None = None) -> Any:
    """A structlog logger (bound context comes from contextvars)."""
    return structlog.get_logger(name)
