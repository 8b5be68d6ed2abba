"""``docstream sink verify NAME``: compare a sink's contents with the store's current chunks, and repair.

The store says what a sink should hold for a tenant: for each document of the tenant's jobs, the points of
the documents the sink would write now (``SinkWriter.plan``: current versions with completed vectors). The
engine says what it holds (``scan``). ``points.compare`` names the differences: missing, extra (a deleted
source, a retired version's changed chunk, a point written behind docstream's back), stale (another version's
point under the id) and vector mismatch. ``--repair`` upserts the expected points of the first three kinds and
deletes the extra ones, through ``SinkWriter`` like ``docstream sink run``.

A live ``sink run`` keeps writing while verify reads: a point it writes between the store's read and the scan
looks extra, a version it replaces looks stale or missing. So, after the scan, verify reads the store again for
the documents of the differences (``_current_points``) and repairs only what that second read still asks for
(``points.plan_repair``); an extra point is deleted only while the engine still holds it under the doc_id the
scan saw (``SinkEngine.delete_if_held``). docs/sinks.md "Beside a live sink".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from rich.console import Console

from docstream.ids import validate_id
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import Settings
from docstream.store import open_store
from docstream_sink.connect import open_engine
from docstream_sink.handler import SinkWriter
from docstream_sink.main import sink_settings, sink_writer
from docstream_sink.points import Differences, Repair, SinkPoint, Write, compare, plan_repair

__all__ = ["Verification", "expected_points", "verify_command", "verify_sink"]

_log = get_logger(__name__)
_JOBS_PAGE = 200


@dataclass(frozen=True, slots=True)
class Verification:
    """What ``verify_sink`` found (``differences``), how many points it expected and the sink held, what a repair
    writes of them after the store's second read (``plan``; its ``settled`` ids are the live sink's writes during
    the scan), and whether it wrote that."""

    expected: int
    held: int
    differences: Differences
    plan: Repair = field(default_factory=Repair)
    repaired: bool = False

    @property
    def in_step(self) -> bool:
        """Nothing to repair: no difference, or only ones the store's second read explains."""
        return not self.plan.upsert and not self.plan.delete


def expected_points(writer: SinkWriter, tenant: str) -> Iterator[SinkPoint]:
    """The points the store says the sink holds for ``tenant``: every document of its jobs that the sink would
    write now, each once."""
    store = writer.store
    seen: set[str] = set()
    after: str | None = None
    while True:
        jobs = store.list_jobs(tenant, limit=_JOBS_PAGE, after=after)
        for job in jobs:
            for entry in store.iter_job_documents(job.job_id):
                if entry.doc_id in seen:
                    continue
                seen.add(entry.doc_id)
                document = store.get_document(entry.doc_id)
                if document is not None and isinstance(writer.plan(document, tenant), Write):
                    yield from writer.points(tenant, document)
        if len(jobs) < _JOBS_PAGE:
            return
        after = jobs[-1].job_id


def _current_points(writer: SinkWriter, tenant: str, doc_ids: Collection[str]) -> dict[str, dict[str, SinkPoint]]:
    """What the store says the sink holds now of each of ``doc_ids`` (a document of ``tenant`` it would write
    now), by doc_id, then point id; a document it would not write is left out."""
    current: dict[str, dict[str, SinkPoint]] = {}
    for doc_id in doc_ids:
        document = writer.store.get_document(doc_id)
        if document is None or writer.tenant_of(document.job_id) != tenant:
            continue
        if isinstance(writer.plan(document, tenant), Write):
            current[doc_id] = {point.id: point for point in writer.points(tenant, document)}
    return current


def verify_sink(writer: SinkWriter, tenant: str, *, repair: bool = False,
                between_reads: Callable[[], None] | None = None) -> Verification:
    """Compare the sink with the store for ``tenant``; with ``repair``, make the sink hold what the store says.
    Safe beside a live sink: a point it writes during the verify is never deleted or written over with an older
    version's (the module's docstring). ``between_reads`` runs after the store's first read, before the scan.

    Raises:
        RetryableError: the engine or the store did not answer (run it again: a repair is idempotent).
    """
    expected = {p.id: p for p in expected_points(writer, tenant)}
    if between_reads is not None:
        between_reads()
    held = {point_id: (doc_id, vector) for point_id, doc_id, vector in writer.engine.scan(tenant)}
    differences = compare(expected.values(), held)
    plan = Repair()
    if differences.total:
        docs = {expected[i].doc_id for i in (*differences.missing, *differences.stale, *differences.vector_mismatch)}
        docs |= {held[i][0] for i in differences.extra}
        plan = plan_repair(differences, expected, held, _current_points(writer, tenant, docs))
    found = Verification(len(expected), len(held), differences, plan)
    _log.info("sink_verified", sink=writer.name, tenant=tenant, expected=len(expected), held=len(held),
              settled=len(plan.settled), **differences.counts())
    if not repair or found.in_step:
        return found
    if plan.upsert:
        writer.upsert(plan.upsert)
    writer.engine.delete_if_held(plan.delete)
    _log.info("sink_repaired", sink=writer.name, tenant=tenant, upserted=len(plan.upsert), deleted=len(plan.delete))
    return Verification(len(expected), len(held), differences, plan, repaired=True)


def verify_command(settings: Settings, name: str, *, tenant: str, repair: bool, console: Console) -> int:
    """``docstream sink verify``: print what ``verify_sink`` found (and repaired).

    Returns the exit status: 0 the sink holds what the store says (or was repaired to), 1 differences were found
    and left.

    Raises:
        ConfigError: no such sink, or its client is not installed.
        InputError: a bad tenant.
        RetryableError: the engine or the store did not answer.
    """
    validate_id(tenant, "tenant")
    engine = open_engine(sink_settings(settings, name))
    store = open_store(settings.store, settings.cassandra)
    writer = sink_writer(settings, name, store=store, engine=engine, metrics=Metrics())
    try:
        found = verify_sink(writer, tenant, repair=repair)
    finally:
        writer.close()
        store.close()
        engine.close()
    counts = found.differences.counts()
    console.print(f"sink {name} (tenant {tenant}): expected {found.expected} points, holds {found.held}; "
                  + ", ".join(f"{kind} {n}" for kind, n in counts.items()), soft_wrap=True)
    if found.plan.settled:
        console.print(f"{len(found.plan.settled)} of them written by the sink during the verify: left to it",
                      soft_wrap=True)
    if found.in_step:
        console.print("in step with the store")
        return 0
    if found.repaired:
        console.print(f"repaired: upserted {len(found.plan.upsert)}, deleted {len(found.plan.delete)}",
                      soft_wrap=True)
        return 0
    console.print("run again with --repair to fix them")
    return 1
