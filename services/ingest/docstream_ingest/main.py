"""`docstream ingest`: prepare intake (store schema, topics) for producers and `docstream submit`.

Wiring only. Documents arrive through `docstream submit`, `docstream.client` or any producer
of DocumentSubmitted (docs/intake.md); this process makes sure what they write to exists.
"""

from __future__ import annotations

from docstream.errors import DocstreamError
from docstream.logging import configure_logging, get_logger
from docstream.settings import Settings
from docstream_ingest.commands import prepare_intake

__all__ = ["main"]


def main(settings: Settings) -> int:
    """Create the store schema and the topics where missing; 0 when ready, 1 otherwise."""
    configure_logging(level=settings.log.level, fmt=settings.log.format, service="ingest")
    log = get_logger(__name__)
    try:
        prepare_intake(settings)
    except DocstreamError as exc:
        log.error("ingest_prepare_failed", error_code=exc.code, error=exc.message)
        return 1
    log.info("ingest_ready", topic_prefix=settings.kafka.topic_prefix, object_store=settings.object_store.url)
    return 0
