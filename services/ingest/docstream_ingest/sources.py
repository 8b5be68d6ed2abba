"""A deleted source (``docstream.store.sources``) told to the sinks: a tombstone for each deleted document on the
intake topic (docs/intake.md "Deleting a source"), by the API's delete route and by ``docstream delete``."""

from __future__ import annotations

from collections.abc import Callable

from docstream.kafka.clients import ReliableProducer
from docstream.topics import Topics

__all__ = ["tombstone_announcer"]


def tombstone_announcer(producer: ReliableProducer, topics: Topics, timeout_s: float) -> Callable[[str], None]:
    """``delete_source``'s ``announce``: a tombstone keyed by the doc_id on the intake topic, delivered."""

    def announce(doc_id: str) -> None:
        producer.produce(topics.submitted, doc_id, None)
        producer.flush(timeout_s)

    return announce
