"""Deleting a source: every version of a document retired from the store (docs/intake.md "Versions of a document").

``docstream delete`` and ``DELETE /v1/sources`` call ``delete_source``. It walks the source's versions from the
current one back through ``previous_doc_id`` (``docstream.store.completion.versions_back``) and deletes each
one's chunk rows, vectors and document results under every model (``ResultStore.delete_results``), then the
sources row. The versions' ``documents`` and ``job_documents`` rows stay: their jobs keep their counts and usage.
Every delete is idempotent, so a delete that failed halfway is finished by running it again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from docstream.errors import DocstreamError, InputError
from docstream.ids import MAX_SOURCE_KEY_CHARS, validate_id
from docstream.logging import get_logger
from docstream.settings import Settings
from docstream.store import open_store
from docstream.store.base import TERMINAL_DOC_STATES, ResultStore
from docstream.store.completion import versions_back

__all__ = ["DeletedSource", "SourceInFlightError", "delete_command",
           "delete_source", "source_key_of"]

_log = get_logger(__name__)


class SourceInFlightError(DocstreamError):
    """The source's current version is still being processed: its results would be written after the delete."""

    code = "source_in_flight"


@dataclass(frozen=True, slots=True)
class DeletedSource:
    """What ``delete_source`` retired.

    Attributes:
        tenant: the source's tenant.
        source_key: the source.
        doc_id: its current version when it was deleted.
        versions: the versions walked, the current one included.
        results: the (version, model) results deleted.
    """

    tenant: str
    source_key: str
    doc_id: str
    versions: int
    results: int


def source_key_of(given: str) -> str:
    """The source key of a document as a user names it: a URI as given, a path as its absolute ``file://`` URI
    (links resolved), as the intake keys the files it reads.

    Raises:
        InputError: ``invalid_source_key``: empty, or longer than ``MAX_SOURCE_KEY_CHARS``.
    """
    if not given.strip() or len(given) > MAX_SOURCE_KEY_CHARS:
        raise InputError(f"a source is a path or a URI of 1 to {MAX_SOURCE_KEY_CHARS} characters",
                         code="invalid_source_key")
    if "://" in given:
        return given
    return Path(os.path.realpath(given)).as_uri()


def delete_source(store: ResultStore, tenant: str, source_key: str) -> DeletedSource:
    """Retire every version of a source and forget it.

    Raises:
        InputError: ``source_not_found``: the tenant has no such source.
        SourceInFlightError: its current version is not terminal yet (delete it once it is).
        StoreError: a read or delete failed transiently (run it again).
    """
    current = store.get_source(tenant, source_key)
    if current is None:
        raise InputError(f"no source {source_key[:300]!r}", code="source_not_found")
    document = store.get_document(current.doc_id)
    if document is not None and document.status not in TERMINAL_DOC_STATES:
        raise SourceInFlightError(f"the current version of {source_key[:300]!r} (document {current.doc_id}) is "
                             f"{document.status}: delete it once it is done")
    versions = results = 0
    for doc_id in versions_back(store, current.doc_id):
        versions += 1
        for result in store.list_document_results(doc_id):
            store.delete_results(doc_id, result.model_id)
            results += 1
    store.delete_source(tenant, source_key)
    _log.info("source_deleted", tenant=tenant, doc_id=current.doc_id, versions=versions, results=results)
    return DeletedSource(tenant, source_key, current.doc_id, versions, results)


def delete_command(settings: Settings, given: Sequence[str], *, tenant: str, console: Console,
                   confirm: Callable[[str], bool] | None = None) -> int:
    """``docstream delete``: delete each named source (a path as it was submitted, or a URI) of ``tenant``.

    Returns the exit status: 0 every source deleted; 2 one is unknown (or nothing was confirmed); 1 one's current
    version is still in flight. The others are deleted either way.

    Raises:
        InputError: a bad tenant or source.
        StoreError: the store failed transiently (run it again: what was deleted stays deleted).
    """
    validate_id(tenant, "tenant")
    keys = [source_key_of(g) for g in given]
    if confirm is not None and not confirm(f"delete {len(keys)} source(s) of tenant {tenant}, every version's "
                                           "chunks and results?"):
        console.print("nothing deleted")
        return 2
    store = open_store(settings)
    status = 0
    table = Table("source", "current doc_id", "versions", "results deleted")
    try:
        store.migrate()
        for key in keys:
            try:
                done = delete_source(store, tenant, key)
            except SourceInFlightError as exc:
                console.print(f"[yellow]{exc.code}[/]: {exc.message}")
                status = status or 1
                continue
            except InputError as exc:
                console.print(f"[red]{exc.code}[/]: {exc.message}")
                status = 2
                continue
            table.add_row(key, done.doc_id, str(done.versions), str(done.results))
    finally:
        store.close()
    if table.row_count:
        console.print(table)
    return status
