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
from concurrent.futures import Future, ThreadPoolExecutor, wait

from docstream.errors import PoisonRecord
from docstream.kafka.loop import Envelope, Output
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import DocumentCompleted, DocumentSubmitted
from docstream.store import ResultStore
from docstream.store.base import ChunkRow, DocumentRow
from docstream.store.completion import latest_completed
from docstream.store.sources import RETIRING, delete_by_tombstone, fence, generation_of, tombstoned
from docstream.tenants.tenancy import refuse_tombstone, tenant_of_topic
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
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sink-{name}-writes")

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
        deleted = fence(self.store, document, tenant) == "source_deleted"
        if document.source_key and not deleted:
            source = self.store.get_source(tenant, document.source_key)
            deleted = source is None
            if source is not None and source.doc_id == document.doc_id and result is not None:
                shown = document.doc_id if result.status in RETIRING else None  # the current version: no walk
            elif source is not None:
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
        """Upsert ``points`` in writes of the sink's ``batch_size``, one at a time, creating the collection on the
        first."""
        with self.writes() as writes:
            writes.add(points)

    def writes(self) -> _Writes:
        """A pipeline of writes: ``add`` points as they are read, and each ``batch_size`` of them goes to the
        engine, on the writer's thread while the next are read where the engine's writes overlap reads
        (``SinkEngine.overlaps_reads``), else at once; leaving the block waits for the last write (and raises its
        error). One write in flight at a time."""
        return _Writes(self)

    def _write(self, batch: Sequence[SinkPoint]) -> None:
        self.engine.ensure(len(batch[0].vector))
        began = time.perf_counter()
        self.engine.upsert(batch)
        self._metrics.sink_write_latency.labels(self._service).observe(time.perf_counter() - began)
        self._metrics.sink_points.labels(self._service, "upsert").inc(len(batch))

    def close(self) -> None:
        """Stop the writer's thread (after its write in flight)."""
        self._pool.shutdown(wait=True)

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
        if document.previous_doc_id is None and generation_of(document) <= 1:
            # the very first version of a source has no other version's points to delete (a delete by filter
            # scans, in Milvus Lite: 50 ms per document at 6,000 points); a source deleted and submitted again
            # starts over as a first version of a later generation, and deletes the points of the versions before
            return
        deleted = self.engine.delete_other_versions(tenant, action.source, action.doc_id)
        if deleted > 0:
            self._metrics.sink_points.labels(self._service, "delete").inc(deleted)

    def settle(self, tenant: str, document: DocumentRow) -> None:
        """Leave the points of ``document``'s source as the store has it now: the points of the version the sink
        shows (``latest_completed`` among the versions not deleted) alone, or none (a source deleted, or none of
        whose versions since its delete completed; a document without a source that was deleted)."""
        if not document.source_key:
            self.remove(tenant, Remove(source_of(document.doc_id, None)))
            return
        source = self.store.get_source(tenant, document.source_key)
        shown = latest_completed(self.store, source.doc_id, self.model_id) if source is not None and source.live \
            else None
        if shown is None:
            self.remove(tenant, Remove(document.source_key))
            return
        deleted = self.engine.delete_other_versions(tenant, document.source_key, shown)
        if deleted > 0:
            self._metrics.sink_points.labels(self._service, "delete").inc(deleted)

    def remove(self, tenant: str, action: Remove) -> None:
        """Delete every point of a deleted source."""
        deleted = self.engine.delete_source(tenant, action.source)
        if deleted > 0:
            self._metrics.sink_points.labels(self._service, "delete").inc(deleted)


class _Writes:
    """``SinkWriter.writes``: points in, writes of ``batch_size`` out, at most one in flight."""

    def __init__(self, writer: SinkWriter) -> None:
        self._writer = writer
        self._pending: list[SinkPoint] = []
        self._in_flight: Future[None] | None = None

    def __enter__(self) -> _Writes:
        return self

    def add(self, points: Sequence[SinkPoint]) -> None:
        self._pending.extend(points)
        size = self._writer._batch_size
        while len(self._pending) >= size:
            self._send(self._pending[:size])
            self._pending = self._pending[size:]

    def _send(self, batch: list[SinkPoint]) -> None:
        self._wait()
        if not self._writer.engine.overlaps_reads:
            self._writer._write(batch)
            return
        self._in_flight = self._writer._pool.submit(self._writer._write, batch)

    def _wait(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        if kind is None:
            if self._pending:
                self._send(self._pending)
                self._pending = []
            self._wait()
            return
        # failing: the write in flight ends before the error goes up (the batch may run again at once)
        if self._in_flight is not None:
            wait([self._in_flight])
            self._in_flight = None


class SinkHandler:
    """The ConsumeLoop handler of ``docstream sink run``: it writes and produces nothing. It takes a batch of
    completed documents (``handle_batch``): their points go to the engine in as few writes as ``batch_size``
    allows, as a plain client would write them; the loop commits the batch's offsets after the last write."""

    def __init__(self, writer: SinkWriter, metrics: Metrics, *, prefix: str | None = None) -> None:
        self._writer = writer
        self._metrics = metrics
        self._prefix = prefix
        self._label = f"sink-{writer.name}"

    def __call__(self, envelope: Envelope) -> list[Output]:
        return self.handle_batch([envelope])[0]

    def on_tombstone(self, topic: str, doc_id: str) -> list[Output]:
        """A tombstone on the intake topic (``docstream delete``, ``DELETE /v1/sources``, a producer's own): the
        store's delete, when not done yet (``store.sources.delete_by_tombstone``), then the source's points as the
        store has them (``SinkWriter.settle``): none, or, for a source submitted again since, its new versions'.

        Raises:
            IntakeRefused: ``tenant_mismatch_source``: on a tenant's own intake topic (``prefix`` given), the document
                is another tenant's; nothing is removed (docs/security.md "Intake records").
        """
        found = tombstoned(self._writer.store, doc_id)
        if found is None:
            self._metrics.sink_documents.labels(self._label, "unknown_document").inc()
            return []
        tenant, document = found
        topic_tenant = tenant_of_topic(self._prefix, topic) if self._prefix is not None else None
        refusal = refuse_tombstone(topic_tenant, tenant)
        if refusal is not None:
            self._metrics.intake_refused.labels(self._label, refusal.code).inc()
            raise refusal.error()
        # the store's part first, when the chunker has not done it yet (a producer's own tombstone): once the
        # source is marked deleted, no later completion writes its points again (docs/reliability.md)
        delete_by_tombstone(self._writer.store, doc_id)
        self._writer.settle(tenant, document)
        self._metrics.sink_documents.labels(self._label, "removed").inc()
        _log.info("sink_source_removed", sink=self._writer.name, doc_id=doc_id)
        return []

    def handle_batch(self, envelopes: Sequence[Envelope]) -> list[list[Output]]:
        """Plan every document, write the points of those to write (read and written in a pipeline), then delete
        what each asks (other versions of a written source, every point of a removed one)."""
        writer = self._writer
        outcomes: list[str] = []
        written: list[tuple[str, DocumentRow, Write]] = []
        removed: list[tuple[str, DocumentRow]] = []
        seen: set[str] = set()
        with writer.writes() as writes:
            for envelope in envelopes:
                completed = envelope.value
                if isinstance(completed, DocumentSubmitted):
                    continue  # the intake topic: only its tombstones (on_tombstone) concern a sink
                if not isinstance(completed, DocumentCompleted):
                    raise PoisonRecord(f"a sink reads DocumentCompleted, not {type(completed).__name__}",
                                       code="unexpected_record")
                if completed.doc_id in seen:
                    continue  # another task's completion of a document this batch handles already
                seen.add(completed.doc_id)
                tenant = writer.tenant_of(completed.job_id)
                document = writer.store.get_document(completed.doc_id) if tenant is not None else None
                action = writer.plan(document, tenant) if tenant is not None else Skip("unknown_document")
                if isinstance(action, Skip):
                    outcomes.append(action.reason)
                elif isinstance(action, Remove):
                    assert tenant is not None and document is not None
                    removed.append((tenant, document))
                    outcomes.append("removed")
                else:
                    assert tenant is not None and document is not None
                    mine = writer.points_to_write(tenant, document)
                    if mine is None:
                        outcomes.append("retired")
                        continue
                    writes.add(mine)
                    written.append((tenant, document, action))
                    outcomes.append("written")
        for tenant, document, write in written:
            writer.delete_other_versions(tenant, document, write)
            if not isinstance(writer.plan(document, tenant), Write):
                # deleted or retired while it was written: its points go again (the check after the write)
                writer.settle(tenant, document)
        for tenant, document in removed:
            # a deleted version: its source's points as the store has them now, not every point of the source (it
            # may have been submitted again since its delete, and its new version written)
            writer.settle(tenant, document)
            _log.info("sink_source_removed", sink=writer.name, source_chars=len(document.source_key or ""))
        for outcome in outcomes:
            self._metrics.sink_documents.labels(self._label, outcome).inc()
        return [[] for _ in envelopes]
