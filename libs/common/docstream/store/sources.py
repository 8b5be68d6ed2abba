"""Deleting a source: every version of a document retired from the store (docs/intake.md "Deleting a source").

``delete_source`` walks the source's versions from the current one back through ``previous_doc_id``
(``docstream.store.completion.versions_back``) and deletes each one's chunk rows, vectors and document results
under every model (``ResultStore.delete_results``), then the sources row. The versions' ``documents`` and
``job_documents`` rows stay: their jobs keep their counts and usage. Every delete is idempotent, so a delete that
failed halfway is finished by running it again.

A tombstone on the intake topic (a record without a value, keyed by the doc_id of a version) asks the same of
that version's source: ``tombstoned`` says whether it still applies, and ``delete_by_tombstone`` (the chunker)
deletes; ``docstream delete`` and ``DELETE /v1/sources`` publish one, so that the sinks remove the source too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from docstream.errors import DocstreamError, InputError
from docstream.logging import get_logger
from docstream.store.base import TERMINAL_DOC_STATES, DocumentRow, ResultStore
from docstream.store.completion import versions_back

__all__ = ["DeletedSource", "SourceInFlightError", "check_deletable", "delete_by_tombstone", "delete_source",
           "tombstoned"]

_log = get_logger(__name__)


class SourceInFlightError(DocstreamError):
    """The source's current version is still being processed: its results would be written after the delete."""

    code = "source_in_flight"


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


def _refuse_in_flight(store: ResultStore, doc_id: str, what: str) -> None:
    document = store.get_document(doc_id)
    if document is not None and document.status not in TERMINAL_DOC_STATES:
        raise SourceInFlightError(f"the current version of {what[:300]!r} (document {doc_id}) is "
                                  f"{document.status}: delete it once it is done")


def check_deletable(store: ResultStore, tenant: str, source_key: str) -> str:
    """The current doc_id of a source that can be deleted now.

    Raises:
        InputError: ``source_not_found``: the tenant has no such source.
        SourceInFlightError: its current version is not terminal yet (delete it once it is).
    """
    current = store.get_source(tenant, source_key)
    if current is None:
        raise InputError(f"no source {source_key[:300]!r}", code="source_not_found")
    _refuse_in_flight(store, current.doc_id, source_key)
    return current.doc_id


def delete_source(store: ResultStore, tenant: str, source_key: str, *,
                  announce: Callable[[str], None] | None = None) -> DeletedSource:
    """Retire every version of a source and forget it.

    Args:
        announce: called with the current doc_id once the source is known deletable, before anything is deleted
            (``docstream delete`` and the API publish the intake-topic tombstone there: when it fails, nothing is
            deleted and the delete can run again). A source gone by then (a chunker acted on the tombstone first)
            counts as deleted.

    Raises:
        InputError: ``source_not_found``: the tenant has no such source.
        SourceInFlightError: its current version is not terminal yet (delete it once it is).
        StoreError: a read or delete failed transiently (run it again).
    """
    current = check_deletable(store, tenant, source_key)
    if announce is not None:
        announce(current)
    versions = results = 0
    for doc_id in versions_back(store, current):
        versions += 1
        for result in store.list_document_results(doc_id):
            store.delete_results(doc_id, result.model_id)
            results += 1
    store.delete_source(tenant, source_key)
    _log.info("source_deleted", tenant=tenant, doc_id=current, versions=versions, results=results)
    return DeletedSource(tenant, source_key, current, versions, results)


def tombstoned(store: ResultStore, doc_id: str) -> tuple[str, DocumentRow] | None:
    """The tenant and the document of a tombstone keyed by ``doc_id``, when it still applies: the document's
    source is deleted, or its current version is ``doc_id`` or follows it. None: an unknown document, or a source
    that started over after an earlier delete (the tombstone was for its earlier versions)."""
    document = store.get_document(doc_id)
    job = store.get_job(document.job_id) if document is not None else None
    if document is None or job is None:
        return None
    if document.source_key:
        current = store.get_source(job.tenant, document.source_key)
        if current is not None and doc_id not in versions_back(store, current.doc_id):
            return None
    return job.tenant, document


def delete_by_tombstone(store: ResultStore, doc_id: str, *,
                        check: Callable[[str], None] | None = None) -> DeletedSource | None:
    """Do what a tombstone keyed by ``doc_id`` asks: delete that version's source, or, for a document without a
    source key, the document's own results. None: nothing (left) to delete.

    Args:
        check: called with the tenant of the document before anything is deleted; what it raises leaves
            everything in place (the chunker refuses there a tombstone of another tenant's intake topic:
            docs/security.md "Intake records").

    Raises:
        SourceInFlightError: the source's current version is not terminal yet.
        StoreError: a read or delete failed transiently.
    """
    found = tombstoned(store, doc_id)
    if found is None:
        return None
    tenant, document = found
    if check is not None:
        check(tenant)
    if document.source_key:
        if store.get_source(tenant, document.source_key) is None:
            return None  # deleted already: a redelivery, or docstream delete ran first
        return delete_source(store, tenant, document.source_key)
    _refuse_in_flight(store, doc_id, doc_id)
    results = 0
    for result in store.list_document_results(doc_id):
        store.delete_results(doc_id, result.model_id)
        results += 1
    _log.info("document_deleted", tenant=tenant, doc_id=doc_id, results=results)
    return DeletedSource(tenant, None, doc_id, 1, results)
