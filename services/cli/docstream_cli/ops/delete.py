"""``docstream delete``: sources named as users name them, deleted (``docstream.store.sources``), and a tombstone
for each on the intake topic (``docstream_ingest.sources.tombstone_announcer``), so that the sinks delete them too
(docs/intake.md "Deleting a source")."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from docstream.errors import InputError
from docstream.ids import check_source_key, validate_id
from docstream.kafka.clients import ReliableProducer
from docstream.settings import Settings
from docstream.store import open_store
from docstream.store.sources import delete_source
from docstream.topics import Topics
from docstream_ingest.sources import tombstone_announcer

__all__ = ["delete_command", "source_key_of"]


def source_key_of(given: str) -> str:
    """The source key of a document as a user names it: a URI as given, a path as its absolute ``file://`` URI
    (links resolved), as the intake keys the files it reads.

    Raises:
        InputError: ``invalid_source_key``: blank, or a key ``check_source_key`` refuses (longer than
            ``MAX_SOURCE_KEY_BYTES`` UTF-8 bytes, a control character).
    """
    if not given.strip():
        raise InputError("a source is a path or a URI, not blank", code="invalid_source_key")
    if "://" in given:
        return check_source_key(given)
    # a file URI percent-encodes the path's controls and non-ASCII bytes: any file name makes a key
    return check_source_key(Path(os.path.realpath(given)).as_uri())


def delete_command(settings: Settings, given: Sequence[str], *, tenant: str, console: Console,
                   confirm: Callable[[str], bool] | None = None, publish: bool = True) -> int:
    """``docstream delete``: delete each named source (a path as it was submitted, or a URI) of ``tenant``.

    ``publish``: first publish a tombstone for each on the intake topic of the settings' Kafka, so that the sinks
    remove it too (off where the store is a ``docstream run``'s, whose broker is gone).

    Returns the exit status: 0 every source deleted (versions in flight included: they end failed with
    ``source_deleted``); 2 one is unknown (or nothing was confirmed). The others are deleted either way.

    Raises:
        InputError: a bad tenant or source.
        StoreError: the store failed transiently (run it again: what was deleted stays deleted).
        RetryableError: a tombstone was not delivered (that source is deleted from the store, the ones after it
            are not: run it again, and the tombstone goes out again).
    """
    validate_id(tenant, "tenant")
    keys = [source_key_of(g) for g in given]
    if confirm is not None and not confirm(f"delete {len(keys)} source(s) of tenant {tenant}, every version's "
                                           "chunks and results?"):
        console.print("nothing deleted")
        return 2
    store = open_store(settings.store, settings.cassandra)
    producer = ReliableProducer(settings.kafka, client_id="docstream-delete") if publish else None
    announce = (tombstone_announcer(producer, Topics(settings.kafka.topic_prefix), settings.api.flush_timeout_s)
                if producer is not None else None)
    status = 0
    table = Table("source", "current doc_id", "versions", "results deleted")
    try:
        store.migrate()
        for key in keys:
            try:
                done = delete_source(store, tenant, key, announce=announce)
            except InputError as exc:
                console.print(f"[red]{exc.code}[/]: {exc.message}")
                status = 2
                continue
            table.add_row(key, done.doc_id, str(done.versions), str(done.results))
    finally:
        store.close()
        if producer is not None:
            producer.close(settings.api.flush_timeout_s)
    if table.row_count:
        console.print(table)
    if not publish:
        console.print("no tombstone published (the store is a docstream run's): a sink removes these sources on "
                      "`docstream sink verify --repair`")
    return status
