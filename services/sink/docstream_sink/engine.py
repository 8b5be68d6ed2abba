"""The contract of a sink's engine (docs/sinks.md "Adding a sink"); ``docstream_sink.connect`` opens one.

An engine is small: it creates its collection once it knows the vectors' dimensions, upserts points by id,
deletes by id, by (id, doc_id) or by (tenant, source[, not doc_id]), and lists what it holds for ``docstream sink
verify``. Every call is idempotent: the handler calls it again after a crash before the offset commit. Its errors are
docstream's: ``RetryableError`` (code ``sink_unavailable``) for a fault that passes (the loop backs off and
tries again), ``PoisonRecord`` (code ``sink_refused``) for points the engine will never take (the record goes to
the DLQ), ``ConfigError`` for a collection that cannot hold the points (the sink stops).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from docstream_sink.points import SinkPoint

__all__ = ["HeldPoint", "SinkEngine"]

HeldPoint = tuple[str, str, list[float]]
"""What an engine holds of a point, as ``scan`` lists it: (id, doc_id, vector)."""


class SinkEngine(Protocol):
    """An external store a sink writes points to."""

    overlaps_reads: bool
    """Its writes wait on the engine with the GIL released (gRPC), so a write on the sink's writer thread overlaps
    the reads of the next documents; False where the client's own Python work dominates a write (psycopg adapting
    vectors), and a second thread only contends for the GIL. Measured: benchmarks/sink.py, docs/performance.md."""

    def ensure(self, dimensions: int) -> None:
        """Create the collection for vectors of ``dimensions`` when it is not there (once per process).

        Raises:
            ConfigError: the collection exists with vectors of other dimensions.
        """

    def upsert(self, points: Sequence[SinkPoint]) -> None:
        """Insert or replace ``points`` by id, all of them or (on an error) possibly some: upserting again is
        harmless."""

    def delete_other_versions(self, tenant: str, source: str, doc_id: str) -> int:
        """Delete the points of ``source`` that belong to a document other than ``doc_id``; returns how many, or
        -1 where the engine does not say."""

    def delete_source(self, tenant: str, source: str) -> int:
        """Delete every point of ``source``; returns how many (-1: unknown)."""

    def delete_ids(self, ids: Sequence[str]) -> None:
        """Delete the points of these ids (the ones that are there)."""

    def delete_if_held(self, points: Sequence[tuple[str, str]]) -> None:
        """Delete each (id, doc_id) of ``points`` only while the engine holds that id under that doc_id, in the
        engine's own delete (``sink verify --repair`` beside a live sink: a point the sink wrote again under a
        newer version since the scan stays)."""

    def scan(self, tenant: str) -> Iterator[HeldPoint]:
        """Every point of ``tenant``, in no order."""

    def close(self) -> None:
        """Release the connection."""
