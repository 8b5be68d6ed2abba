"""``docstream sink verify NAME``: compare a sink's contents with the store's current chunks, and repair.

The store says what a sink should hold for a tenant: for each document of the tenant's jobs, the points of
the documents the sink would write now (``SinkWriter.plan``: current versions with completed vectors). The
engine says what it holds (``scan``). ``points.compare`` names the differences: missing, extra (a deleted
source, a retired version's changed chunk, a point written behind docstream's back), stale (another version's
point under the id) and vector mismatch. ``--repair`` upserts the expected points of the first three kinds and
deletes the extra ones, through ``SinkWriter`` like ``docstream sink run``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console

from docstream.ids import validate_id
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import Settings
from docstream.store import open_store
from docstream_sink.engine import open_engine
from docstream_sink.handler import SinkWriter
from docstream_sink.main import sink_settings, sink_writer
from docstream_sink.points import Differences, SinkPoint, Write, compare

__all__ = ["Verification", "expected_points", "verify_command", "verify_sink"]

_log = get_logger(__name__)
_JOBS_PAGE = 200


@dataclass(frozen=True, slots=True)
class Verification:
    """What ``verify_sink`` found (``differences``), how many points it expected and the sink held, and whether
    it repaired them."""

    expected: int
    held: int
    differences: Differences
    repaired: bool = False


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


def verify_sink(writer: SinkWriter, tenant: str, *, repair: bool = False) -> Verification:
    """Compare the sink with the store for ``tenant``; with ``repair``, make the sink hold what the store says.

    Raises:
        RetryableError: the engine or the store did not answer (run it again: a repair is idempotent).
    """
    expected = {p.id: p for p in expected_points(writer, tenant)}
    held = {point_id: (doc_id, vector) for point_id, doc_id, vector in writer.engine.scan(tenant)}
    differences = compare(expected.values(), held)
    _log.info("sink_verified", sink=writer.name, tenant=tenant, expected=len(expected), held=len(held),
              **differences.counts())
    if not repair or differences.total == 0:
        return Verification(len(expected), len(held), differences)
    fix = [expected[i] for i in (*differences.missing, *differences.stale, *differences.vector_mismatch)]
    writer.upsert(fix)
    writer.engine.delete_ids(list(differences.extra))
    _log.info("sink_repaired", sink=writer.name, tenant=tenant, upserted=len(fix), deleted=len(differences.extra))
    return Verification(len(expected), len(held), differences, repaired=True)


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
    store = open_store(settings)
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
    if found.differences.total == 0:
        console.print("in step with the store")
        return 0
    if found.repaired:
        console.print(f"repaired: upserted {counts['missing'] + counts['stale'] + counts['vector_mismatch']}, "
                      f"deleted {counts['extra']}", soft_wrap=True)
        return 0
    console.print("run again with --repair to fix them")
    return 1
