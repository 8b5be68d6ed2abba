"""A sink's handler: a completed document → its points in the engine (docs/sinks.md).

The ConsumeLoop hands it the DocumentCompleted records of the completed topic as a poll returns them, up to
``max_documents`` at once, and commits their offsets only after the handler returned: after the engine
acknowledged every write. The handler reads what the store holds of each document (its rows are written before
the DocumentCompleted is published), decides (``points.decide``), writes the points of all the documents to
write in as few engine calls as ``batch_size`` allows, then deletes what each one retires, through
``SinkWriter``, which ``docstream sink verify --repair`` uses too. A batch that fails runs again one document at
a time (the loop's rule), so a document the engine refuses goes to the DLQ alone. A crash anywhere re-runs the
documents: upserts by id and deletes by filter leave the same contents. The sink reads the intake topic too, for
its tombstones only (``on_tombstone``): a deleted source's points are deleted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from docstream.errors import PoisonRecord
from docstream.kafka.loop import Envelope, Output
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import DocumentCompleted, DocumentSubmitted
from docstream.store import ResultStore
from docstream.store.base import ChunkRow, DocumentRow
from docstream.store.completion import latest_completed
from docstream.store.sources import tombstoned
from docstream_sink.engine import SinkEngine
from docstream_sink.points import Remove, SinkPoint, Skip, Write, decide, points_of, source_of

__all__ = ["SinkHandler", "SinkWriter"]

_log = get_logger(__name__)
_TENANTS_KEPT = 4096


class SinkWriter:
    """The one path from the store to a sink's engine: what a document asks (``plan``), its points
    (``points``, ``points_to_write``), and the writes (``upsert``, ``delete_other_versions``, ``remove``).

    Args:
        name: the sink's name (logs; its metrics' ``service`` label is ``sink-<name>``, as its loop's).
        store: the result store the points are read from.
        engine: the sink's engine.
        model_id: the model whose vectors the sink holds.
        batch_size: most points in one engine write.
        metrics: where ``docstream_sink_*`` are counted.
    """

    def __init__(self, name: str, store: ResultStore, engine: SinkEngine, *, model_id: str, batch_size: int,
                 metrics: Metrics) -> None:
        self.name = name
        self._service = f"sink-{name}"
        self.store = store
        self.engine = engine
        self.model_id = model_id
        self._batch_size = batch_size
        self._metrics = metrics
        self._tenants: dict[str, str] = {}

    def tenant_of(self, job_id: str) -> str | None:
        """The tenant of a job (cached: a job's tenant never changes); None: the store has no such job."""
        tenant = self._tenants.get(job_id)
        if tenant is None:
            job = self.store.get_job(job_id)
            if job is None:
                return None
            if len(self._tenants) >= _TENANTS_KEPT:
                self._tenants.clear()
            tenant = self._tenants[job_id] = job.tenant
        return tenant

    def plan(self, document: DocumentRow | None, tenant: str) -> Write | Remove | Skip:
        """What the sink does about ``document`` now (``points.decide`` on what the store holds)."""
        if document is None:
            return Skip("unknown_document")
        result = self.store.get_document_result(document.doc_id, self.model_id)
        shown: str | None = None
        deleted = False
        if document.source_key:
            source = self.store.get_source(tenant, document.source_key)
            deleted = source is None
            if source is not None:
                shown = latest_completed(self.store, source.doc_id, self.model_id)
        return decide(document, result.status if result is not None else None, shown_doc_id=shown,
                      source_deleted=deleted)

    def points(self, tenant: str, document: DocumentRow) -> list[SinkPoint]:
        """The document's points: its chunks under the sink's model, with the other tasks' chunk outputs."""
        chunks = list(self.store.iter_chunks(document.doc_id, self.model_id))
        others: dict[str, list[ChunkRow]] = {}
        for result in self.store.list_document_results(document.doc_id):
            if result.model_id != self.model_id:
                others[result.task] = list(self.store.iter_chunks(document.doc_id, result.model_id))
        return points_of(tenant, document, chunks, others)

    def upsert(self, points: Sequence[SinkPoint]) -> None:
        """Upsert ``points`` in batches of the sink's ``batch_size``, creating the collection on the first."""
        if not points:
            return
        # one point per id in a write (a document handled twice in one batch: a replay); the last one wins
        points = list({p.id: p for p in points}.values())
        self.engine.ensure(len(points[0].vector))
        for start in range(0, len(points), self._batch_size):
            batch = points[start:start + self._batch_size]
            began = time.perf_counter()
            self.engine.upsert(batch)
            self._metrics.sink_write_latency.labels(self._service).observe(time.perf_counter() - began)
            self._metrics.sink_points.labels(self._service, "upsert").inc(len(batch))

    def points_to_write(self, tenant: str, document: DocumentRow) -> list[SinkPoint] | None:
        """The points of a document to write, or None when the store no longer holds its chunks (a newer version
        retired them since ``plan``: its own completion writes the source)."""
        points = self.points(tenant, document)
        if not points:
            result = self.store.get_document_result(document.doc_id, self.model_id)
            if result is None or result.chunk_count > result.failed_chunks:
                return None
        return points

    def delete_other_versions(self, tenant: str, document: DocumentRow, action: Write) -> None:
        """After a later version's points are written: delete its source's points of other versions (the earlier
        versions' chunks whose text is gone)."""
        if document.previous_doc_id is None:
            # the first version of a source has no other version's points to delete (a delete by filter
            # scans, in Milvus Lite: 50 ms per document at 6,000 points): a source deleted and submitted again
            # starts over as a first version, its earlier points removed by its delete's tombstone
            return
        deleted = self.engine.delete_other_versions(tenant, action.source, action.doc_id)
        if deleted > 0:
            self._metrics.sink_points.labels(self._service, "delete").inc(deleted)

    def remove(self, tenant: str, action: Remove) -> None:
        """Delete every point of a deleted source."""
        deleted = self.engine.delete_source(tenant, action.source)
        if deleted > 0:
            self._metrics.sink_points.labels(self._service, "delete").inc(deleted)


class SinkHandler:
    """The ConsumeLoop handler of ``docstream sink run``: it writes and produces nothing. It takes a batch of
    completed documents (``handle_batch``): their points go to the engine in as few writes as ``batch_size``
    allows, as a plain client would write them; the loop commits the batch's offsets after the last write."""

    def __init__(self, writer: SinkWriter, metrics: Metrics) -> None:
        self._writer = writer
        self._metrics = metrics
        self._label = f"sink-{writer.name}"

    def __call__(self, envelope: Envelope) -> list[Output]:
        return self.handle_batch([envelope])[0]

    def on_tombstone(self, topic: str, doc_id: str) -> list[Output]:
        """A tombstone on the intake topic (``docstream delete``, ``DELETE /v1/sources``, a producer's own): remove
        the points of that version's source, unless the source started over since (``store.sources.tombstoned``)."""
        found = tombstoned(self._writer.store, doc_id)
        if found is None:
            self._metrics.sink_documents.labels(self._label, "unknown_document").inc()
            return []
        tenant, document = found
        self._writer.remove(tenant, Remove(source_of(document.doc_id, document.source_key)))
        self._metrics.sink_documents.labels(self._label, "removed").inc()
        _log.info("sink_source_removed", sink=self._writer.name, doc_id=doc_id)
        return []

    def handle_batch(self, envelopes: Sequence[Envelope]) -> list[list[Output]]:
        """Plan every document, upsert all the points of those to write at once, then delete what each asks
        (other versions of a written source, every point of a removed one)."""
        writer = self._writer
        outcomes: list[str] = []
        points: list[SinkPoint] = []
        written: list[tuple[str, DocumentRow, Write]] = []
        removed: list[tuple[str, Remove]] = []
        for envelope in envelopes:
            completed = envelope.value
            if isinstance(completed, DocumentSubmitted):
                continue  # the intake topic: only its tombstones (on_tombstone) concern a sink
            if not isinstance(completed, DocumentCompleted):
                raise PoisonRecord(f"a sink reads DocumentCompleted, not {type(completed).__name__}",
                                   code="unexpected_record")
            tenant = writer.tenant_of(completed.job_id)
            document = writer.store.get_document(completed.doc_id) if tenant is not None else None
            action = writer.plan(document, tenant) if tenant is not None else Skip("unknown_document")
            if isinstance(action, Skip):
                outcomes.append(action.reason)
            elif isinstance(action, Remove):
                assert tenant is not None
                removed.append((tenant, action))
                outcomes.append("removed")
            else:
                assert tenant is not None and document is not None
                mine = writer.points_to_write(tenant, document)
                if mine is None:
                    outcomes.append("retired")
                    continue
                points.extend(mine)
                written.append((tenant, document, action))
                outcomes.append("written")
        writer.upsert(points)
        for tenant, document, write in written:
            writer.delete_other_versions(tenant, document, write)
        for tenant, remove in removed:
            writer.remove(tenant, remove)
            _log.info("sink_source_removed", sink=writer.name, source_chars=len(remove.source))
        for outcome in outcomes:
            self._metrics.sink_documents.labels(self._label, outcome).inc()
        return [[] for _ in envelopes]
