"""`docstream ingest`: prepare intake (store schema, topics) for producers and `docstream submit`.

Wiring only. Documents arrive through `docstream submit`, `docstream.client` or any producer
of DocumentSubmitted (docs/intake.md); this process makes sure what they write to exists.
"""

from __future__ import annotations

from docstream.logging import get_logger
from docstream.service import ServiceHost, run_service
from docstream.settings import Settings
from docstream_ingest.commands import prepare_intake

__all__ = ["main"]


def main(settings: Settings) -> int:
    """Create the store schema and the topics where missing; 0 when ready, 1 otherwise."""

    def prepare(_: ServiceHost) -> None:
        prepare_intake(settings)
        get_logger(__name__).info("ingest_ready", topic_prefix=settings.kafka.topic_prefix,
                                  object_store=settings.object_store.url)

    # one-shot: no metrics endpoint, and prepare_intake opens (and closes) the store itself
    return run_service(settings, "ingest", prepare, metrics_endpoint=False, failed_event="ingest_prepare_failed")
