"""A source's versions in the store: ordered by submission, retired in that order, and deleted for good
(docs/intake.md "Versions of a document", "Deleting a source"; docs/reliability.md "Invariants").

* **Ordered.** ``advance_source`` makes a new version its source's current one: it writes the version's documents
  row (with the version before it and its generation), then swaps the sources row by compare-and-set
  (``ResultStore.swap_source``: a lightweight transaction on Cassandra, a transaction on SQLite). Two submissions of
  one source at once: one swap wins, the other reads the winner and goes again behind it. No fork; each version's
  generation is one more than the version before it.
* **Deleted for good.** ``delete_source`` marks the sources row deleted through its current generation (a swap),
  then deletes every version's rows (``delete_document_rows``) and marks each documents row deleted, then
  announces the tombstone. The sources row stays: it is the durable record of the delete. A source submitted again
  starts over behind it (a first version, the next generation).
* **Fenced.** Whatever writes a version's rows after it could have been retired or deleted (the inference's chunk
  rows, the reducer's result, the document stage, a chunker replay) calls ``enforce`` after its write: when the
  version is deleted (``source_deleted``) or a newer version completed under the model (``version_retired``), what
  it wrote is deleted again. A write either lands before the mark, and the delete or the retirement that follows
  the mark removes it, or its check after it sees the mark and removes it: the invariant holds by the order of
  durable writes, not by timing. (On Cassandra, by write timestamps: the nodes' and clients' clocks are kept in
  step, as Cassandra's last write wins asks anyway.)

A tombstone on the intake topic (a record without a value, keyed by the doc_id of a version) asks the same of
that version's source: ``tombstoned`` finds the document it names, ``delete_by_tombstone`` (the chunker)
deletes; ``docstream delete`` and ``DELETE /v1/sources`` publish one, so that the sinks remove the source too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from docstream.errors import InputError, StoreError
from docstream.ids import MAX_VERSIONS
from docstream.logging import get_logger
from docstream.retry import backoff_delay
from docstream.store.base import DocumentRow, ResultsStore, ResultStore, SourceRow

__all__ = ["RETIRING", "DeletedSource", "Fence", "advance_source", "delete_by_tombstone", "delete_source",
           "enforce", "fence", "generation_of", "tombstoned", "versions_back"]

_log = get_logger(__name__)
_SWAP_ATTEMPTS = 32

Fence = Literal["source_deleted", "version_retired"]
"""Why a version's rows must not stand: its source was deleted since it was submitted; a newer version of its
source completed under the same model."""


@dataclass(frozen=True, slots=True)
class DeletedSource:
    """What ``delete_source`` retired.

    Attributes:
        tenant: the source's tenant.
        source_key: the source (None: a document without one, deleted by a tombstone).
        doc_id: its current version when it was deleted.
        versions: the versions walked, the current one included.
        results: the (version, model) results deleted.
    """

    tenant: str
    source_key: str | None
    doc_id: str
    versions: int
    results: int


RETIRING = frozenset({"completed", "partial"})
"""The statuses of a new version that retire its earlier version's results under the same model (a failed one
leaves them: docs/intake.md "Versions of a document")."""


def versions_back(store: ResultsStore, doc_id: str) -> Iterator[str]:
    """``doc_id``, then each version before it (``previous_doc_id`` on its documents row), at most
    ``MAX_VERSIONS``; a loop in the history ends the walk. A version's row is read only when the next is asked."""
    seen: set[str] = set()
    current: str | None = doc_id
    while current is not None and current not in seen and len(seen) < MAX_VERSIONS:
        seen.add(current)
        yield current
        row = store.get_document(current)
        current = row.previous_doc_id if row is not None else None


def generation_of(document: DocumentRow) -> int:
    """A version's generation (a row written before generations: 0)."""
    return document.generation or 0


def _contended(what: str) -> StoreError:
    return StoreError(f"the source's row changed {_SWAP_ATTEMPTS} times while {what}: run it again",
                      code="source_contended")


def advance_source(store: ResultStore, tenant: str, source_key: str, doc_id: str, *, content_sha256: str,
                   job_id: str, now: datetime,
                   write_document: Callable[[str | None], None]) -> tuple[str | None, int]:
    """Make ``doc_id`` its source's current version, behind the one current now.

    ``write_document(previous_doc_id)`` writes the version's documents row first, and its generation is set on it
    (a delete walking the source's versions finds every version the sources row leads to); then the sources row is
    swapped. When another
    version got there first, the row is written again behind that one. A version that is its source's current
    one already (another pass of its record advanced it since ``doc_id``'s row was read) keeps its place and its
    row. Returns the version before it (None: the source's first, or first since its delete) and its generation.

    Raises:
        StoreError: the store failed transiently, or the row kept changing (``source_contended``).
    """
    before = store.get_document(doc_id)
    for attempt in range(_SWAP_ATTEMPTS):
        current = store.get_source(tenant, source_key)
        if attempt == 0 and before is not None and before.generation is not None and current is not None \
                and current.generation >= before.generation:
            # advanced before (a redelivery, a submission again to its job): it keeps its place, and a version
            # deleted since stays deleted (``fence``)
            return before.previous_doc_id, before.generation
        if current is not None and current.live and current.doc_id == doc_id:
            now_current = store.get_document(doc_id)  # written before the source was swapped to it
            if now_current is not None:
                return now_current.previous_doc_id, current.generation
            previous = None  # its row is gone: written again, and a version never follows itself
        else:
            previous = current.doc_id if current is not None and current.live else None
        generation = (current.generation if current is not None else 0) + 1
        write_document(previous)
        store.set_document_generation(doc_id, generation)
        row = SourceRow(tenant, source_key, doc_id, content_sha256, job_id, now, generation=generation,
                        deleted_through=current.deleted_through if current is not None else None)
        written, _ = store.swap_source(current, row)
        if written:
            return previous, generation
        _log.info("source_swap_lost", attempt=attempt)
        if attempt:
            _pause(attempt)
    raise _contended("a version was submitted")


def _pause(attempt: int) -> None:
    """Wait before the next swap (jittered: contention of one source is short)."""
    time.sleep(backoff_delay(attempt, base_s=0.005, max_s=0.5))


def fence(store: ResultStore, document: DocumentRow, tenant: str, model_id: str | None = None) -> Fence | None:
    """Why ``document``'s rows (under ``model_id``) must not stand, or None.

    ``source_deleted``: the document was deleted, or its source was deleted through its generation;
    ``version_retired``: a newer version of its source completed (``RETIRING``) under ``model_id``.
    """
    if document.deleted_at is not None:
        return "source_deleted"
    if not document.source_key:
        return None
    source = store.get_source(tenant, document.source_key)
    if source is None:
        return None
    mine = generation_of(document)
    if source.deleted_through is not None and mine <= source.deleted_through:
        return "source_deleted"
    if model_id is None or source.generation <= mine or source.doc_id == document.doc_id:
        return None
    for version in versions_back(store, source.doc_id):
        if version == document.doc_id:
            return None
        newer = store.get_document(version)
        if newer is None or generation_of(newer) <= mine:
            return None
        result = store.get_document_result(version, model_id)
        if result is not None and result.status in RETIRING:
            return "version_retired"
    return None


def enforce(store: ResultStore, doc_id: str, tenant: str, model_id: str | None = None) -> Fence | None:
    """After a write of ``doc_id``'s rows: when the version is fenced (``fence``), delete what it must not keep
    (every row of a deleted one; its rows under ``model_id`` for a retired one). Returns the fence (None: it
    stands).

    Raises:
        StoreError: a read or delete failed transiently (the write's caller runs it again).
    """
    document = store.get_document(doc_id)
    if document is None:
        return None
    found = fence(store, document, tenant, model_id)
    if found == "source_deleted":
        store.delete_document_rows(doc_id)
    elif found == "version_retired" and model_id is not None:
        store.delete_results(doc_id, model_id)
    if found is not None:
        _log.info("version_fenced", doc_id=doc_id, fence=found)
    return found


def _sweep(store: ResultStore, head: str, now: datetime) -> tuple[int, int]:
    """Delete every version's rows from ``head`` back, and mark each documents row deleted; the versions walked
    and the results deleted."""
    versions = results = 0
    for doc_id in versions_back(store, head):
        versions += 1
        results += len(store.list_document_results(doc_id))
        store.mark_document_deleted(doc_id, now)
        store.delete_document_rows(doc_id)
    return versions, results


def delete_source(store: ResultStore, tenant: str, source_key: str, *,
                  announce: Callable[[str], None] | None = None, now: datetime | None = None) -> DeletedSource:
    """Delete every version of a source, in flight or not, for good.

    The sources row is marked deleted through its current generation (a swap: a version submitted at the same
    time goes either before it, and is deleted, or after it, and starts over); every version's rows are deleted
    and their documents rows marked; then ``announce`` (``docstream delete`` and the API publish the intake-topic
    tombstone there, for the sinks). A delete run again (after a failure anywhere) does it all again.

    Raises:
        InputError: ``source_not_found``: the tenant has no such source.
        StoreError: a read or delete failed transiently (run it again).
        RetryableError: what ``announce`` raises (run it again).
    """
    at = now or datetime.now(UTC)
    for attempt in range(_SWAP_ATTEMPTS):
        current = store.get_source(tenant, source_key)
        if current is None:
            raise InputError(f"no source {source_key[:300]!r}", code="source_not_found")
        if not current.live:
            break  # deleted already: finish what an earlier delete may have left
        written, _ = store.swap_source(current, replace(current, deleted_through=current.generation, updated_at=at))
        if written:
            break
        if attempt:
            _pause(attempt)
    else:
        raise _contended("it was deleted")
    versions, results = _sweep(store, current.doc_id, at)
    if announce is not None:
        announce(current.doc_id)
    _log.info("source_deleted", tenant=tenant, doc_id=current.doc_id, versions=versions, results=results,
              generation=current.generation)
    return DeletedSource(tenant, source_key, current.doc_id, versions, results)


def tombstoned(store: ResultStore, doc_id: str) -> tuple[str, DocumentRow] | None:
    """The tenant and the document of a tombstone keyed by ``doc_id``, when the store knows the document (None: an
    unknown document)."""
    document = store.get_document(doc_id)
    job = store.get_job(document.job_id) if document is not None else None
    if document is None or job is None:
        return None
    return job.tenant, document


def delete_by_tombstone(store: ResultStore, doc_id: str, *,
                        check: Callable[[str], None] | None = None) -> DeletedSource | None:
    """Do what a tombstone keyed by ``doc_id`` asks: delete that version's source (the versions of its chain, when
    a delete since has not), or, for a document without a source key, the document's own rows. None: nothing
    (left) to delete.

    Args:
        check: called with the tenant of the document before anything is deleted; what it raises leaves
            everything in place (the chunker refuses there a tombstone of another tenant's intake topic:
            docs/security.md "Intake records").

    Raises:
        StoreError: a read or delete failed transiently.
    """
    found = tombstoned(store, doc_id)
    if found is None:
        return None
    tenant, document = found
    if check is not None:
        check(tenant)
    if document.source_key:
        source = store.get_source(tenant, document.source_key)
        if source is None or fence(store, document, tenant) == "source_deleted":
            return None  # deleted already: a redelivery, or docstream delete ran first
        return delete_source(store, tenant, document.source_key)
    at = datetime.now(UTC)
    results = len(store.list_document_results(doc_id))
    store.mark_document_deleted(doc_id, at)
    store.delete_document_rows(doc_id)
    _log.info("document_deleted", tenant=tenant, doc_id=doc_id, results=results)
    return DeletedSource(tenant, None, doc_id, 1, results)
