"""Open the engine a sink's settings name: the one module that knows every engine (docs/sinks.md "Adding a sink").

Each engine's client library is an extra; importing the engine here, not at the top, keeps a sink of one kind from
needing the other's.
"""

from __future__ import annotations

from docstream.errors import ConfigError
from docstream.settings import SinkSettings
from docstream_sink.engine import SinkEngine

__all__ = ["open_engine"]


def open_engine(settings: SinkSettings) -> SinkEngine:
    """The engine of ``settings.kind``, connected.

    Raises:
        ConfigError: its client library is not installed.
        RetryableError: the engine does not answer (``sink_unavailable``).
    """
    try:
        if settings.kind == "milvus":
            from docstream_sink.milvus import MilvusEngine
            return MilvusEngine(settings)
        from docstream_sink.postgres import PostgresEngine
        return PostgresEngine(settings)
    except ImportError as exc:
        extra = "milvus" if settings.kind == "milvus" else "postgres"
        raise ConfigError(f"the {settings.kind} sink needs its client: pip install 'docstream[{extra}]' "
                          f"({exc.name} is missing)") from exc
