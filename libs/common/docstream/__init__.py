"""docstream: inference over large document jobs on Kafka and Cassandra."""

from docstream.errors import (
    ConfigError,
    DocstreamError,
    DocumentError,
    FatalError,
    InputError,
    PoisonRecord,
    RetryableError,
    SchemaError,
    StoreError,
)

__all__ = [
    "ConfigError",
    "DocstreamError",
    "DocumentError",
    "FatalError",
    "InputError",
    "PoisonRecord",
    "RetryableError",
    "SchemaError",
    "StoreError",
    "__version__",
]

__version__ = "0.1.0"
