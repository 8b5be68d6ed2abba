"""Intake: files, folders and archives → object store → job rows → DocumentSubmitted records.

``submit_paths`` (local paths), ``submit_uploads`` (seekable streams, e.g. HTTP uploads) and
``submit_uris`` (documents already in object storage, read in place) differ only in where the
documents come from: each takes the job's options as one ``JobRequest``
(``docstream_ingest.request``) and what it writes through as one ``IntakeClients``. They run in
three phases, in this order, so that the reducer can always know a job's document_count before
it sees the job's first result:

1. collect: walk the paths, expand archives, hash each document (SHA-256, streamed) and
   put its bytes in the object store (content-addressed, idempotent);
2. record: write the job_documents and documents rows (status submitted), then the jobs row
   with document_count;
3. produce: one DocumentSubmitted per document, keyed by doc_id, then flush and check every
   delivery.

A crash between 2 and 3 leaves rows in status submitted; submitting the same paths again
with the same job id produces them (documents past submitted are left alone). The rules
are written down in docs/intake.md.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import unquote, urlsplit

from fsspec.core import url_to_fs

from docstream import ids
from docstream.errors import ConfigError, InputError
from docstream.logging import get_logger
from docstream.objectstore import ObjectStore
from docstream.records import AnyRecord, DocumentSubmitted, JobOptions, utc_now
from docstream.settings import (
    ChunkerSettings,
    FairnessSettings,
    IngestSettings,
    KafkaSettings,
    ObjectStoreSettings,
    ReducerSettings,
    TasksSettings,
)
from docstream.store.base import DocState, DocumentRow, JobDocumentRow, JobRow, JobsStore, ResultStore
from docstream.store.sources import advance_source
from docstream.tasks.base import BUILTIN_TASKS, TaskRequest
from docstream.tasks.registry import known_task_names, task_class
from docstream.tasks.selection import job_tasks, task_records
from docstream.tenants.addresses import check_addresses, is_loopback_name
from docstream.tenants.admission import DAILY
from docstream.topics import Topics
from docstream_ingest.admission import Admitting, admit, admit_some, release
from docstream_ingest.archives import ArchiveKind, ArchiveLimits, archive_kind, expand_archive
from docstream_ingest.request import JobRequest, validate_job_request

__all__ = [
    "DuplicateFile",
    "Gradually",
    "IntakeClients",
    "IntakeContext",
    "IntakeProducer",
    "RecordSerializer",
    "RefusedFile",
    "SubmitResult",
    "SubmittedDocument",
    "Upload",
    "submit_paths",
    "submit_uploads",
    "submit_uris",
]

_log = get_logger(__name__)

_CHUNK = 1024 * 1024
_SPOOL_IN_MEMORY = 8 * 1024 * 1024
_HIDDEN_PREFIXES = (".", "__MACOSX")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class IntakeProducer(Protocol):
    """What intake needs of a producer (``docstream.kafka.clients.ReliableProducer`` fits)."""

    def produce(self, topic: str, key: str | bytes | None, value: bytes | None) -> None:
        """Queue one record; raise a kept delivery error."""

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every delivery; raise if any failed or is still in flight."""


class RecordSerializer(Protocol):
    """What intake needs of a serde (``docstream.avro.serde.AvroSerde`` fits)."""

    def serialize(self, record: AnyRecord, topic: str) -> bytes:
        """Encode a record for a topic."""


@dataclass(frozen=True, slots=True)
class IntakeContext:
    """What a submission reads of the settings: the sections of the same names.

    Attributes:
        kafka: the prefix of the intake topics.
        ingest: the intake's limits.
        chunker: a job's default chunk size (``max_tokens``).
        tasks: the default classify labels and the user tasks (``custom``).
        fairness: the tenants' highest priorities and quotas.
        reducer: whether a webhook may reach a private address (``webhook_allow_private``).
        object_store: where documents' bytes go, and where source URIs may point.
    """

    kafka: KafkaSettings
    ingest: IngestSettings
    chunker: ChunkerSettings
    tasks: TasksSettings
    fairness: FairnessSettings
    reducer: ReducerSettings
    object_store: ObjectStoreSettings


@dataclass(frozen=True, slots=True)
class IntakeClients:
    """What a submission runs under and writes through, the same for every entry point.

    Attributes:
        context: the settings sections a submission reads (limits, chunker defaults, topic prefix, object store).
        store: where jobs, job_documents and documents rows go.
        producer: delivers the records; ``flush`` must raise on any failed delivery.
        serde: encodes the records.
        objects: the object store (default: one from ``context.object_store``).
        flush_timeout_s: how long to wait for every delivery.
        clock: now, UTC.
    """

    context: IntakeContext
    store: ResultStore
    producer: IntakeProducer
    serde: RecordSerializer
    objects: ObjectStore | None = None
    flush_timeout_s: float = 60.0
    clock: Callable[[], datetime] = utc_now


@dataclass(frozen=True, slots=True)
class Upload:
    """A file handed over as a stream (an HTTP upload): read from its start, never closed by intake.

    Attributes:
        filename: the name its sender gave it (the document's filename; ``.zip`` etc. mark archives).
        stream: its bytes; must be seekable (a spooled temporary file is).
        source_key: the identity its sender gives it across versions (docs/intake.md "Versions of a document");
            None: none, each upload is a document of its own.
    """

    filename: str
    stream: IO[bytes]
    source_key: str | None = None


@dataclass(frozen=True, slots=True)
class SubmittedDocument:
    """A document of the job, produced on the intake topic by this submission."""

    doc_id: str
    filename: str
    source_uri: str
    content_sha256: str
    size_bytes: int
    media_type: str | None = None
    source_key: str | None = None
    """Its identity across versions (``_Candidate.source_key``); None: an upload its sender gave none."""
    previous_doc_id: str | None = None
    """The source's version current when this one was submitted (``_versions``)."""


@dataclass(frozen=True, slots=True)
class RefusedFile:
    """A file (or archive member) that was not submitted, and why (``code`` is stable)."""

    path: str
    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class DuplicateFile:
    """A file whose content is already a document of the job (same doc_id)."""

    path: str
    doc_id: str


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """What one submission did."""

    job_id: str
    documents: tuple[SubmittedDocument, ...]
    refused: tuple[RefusedFile, ...]
    duplicates: tuple[DuplicateFile, ...] = ()
    document_count: int = 0


@dataclass(frozen=True, slots=True)
class _Candidate:
    display: str  # what the user sees (and the document's filename)
    name: str  # the file name that tells an archive
    opener: Callable[[], AbstractContextManager[IO[bytes]]]  # its bytes, from the start
    size: Callable[[], int | None]  # known size, or None: counted while reading
    in_place: str | None = None  # a source URI read where it is: the bytes are not copied
    source_key: str | None = None  # its identity across versions: its absolute file URI, or the URI given


def _path_candidate(path: Path, display: str) -> _Candidate:
    return _Candidate(display, path.name, partial(_open_file, path), lambda: path.stat().st_size,
                      source_key=path.as_uri())


@contextmanager
def _borrowed(stream: IO[bytes]) -> Iterator[IO[bytes]]:
    stream.seek(0)
    yield stream


def _stream_size(stream: IO[bytes]) -> int:
    size = stream.seek(0, os.SEEK_END)
    stream.seek(0)
    return size


def _upload_candidate(upload: Upload) -> _Candidate:
    return _Candidate(
        upload.filename,
        upload.filename,
        partial(_borrowed, upload.stream),
        partial(_stream_size, upload.stream),
        source_key=upload.source_key,
    )


def _open_uri(uri: str, objects: ObjectStore, settings: ObjectStoreSettings) -> IO[bytes]:
    """The bytes at a source URI, confined like the chunker's reads (``ObjectStore.check_uri``)."""
    path = objects.check_uri(uri)
    scheme = urlsplit(uri).scheme.lower() or "file"
    if scheme == "file":
        return _open_file(Path(path))
    store_scheme = urlsplit(settings.url).scheme.lower() or "file"
    options: dict[str, Any] = dict(settings.storage_options) if scheme == store_scheme else {}
    fs, _ = url_to_fs(uri, **options)
    stream: IO[bytes] = fs.open(path, "rb")
    return stream


def _uri_candidate(uri: str, objects: ObjectStore, settings: ObjectStoreSettings) -> _Candidate:
    name = unquote(urlsplit(uri).path).rsplit("/", 1)[-1]
    return _Candidate(uri, name, partial(_open_uri, uri, objects, settings), lambda: None, in_place=uri,
                      source_key=uri)


def _is_hidden(relative: str) -> bool:
    return any(part.startswith(_HIDDEN_PREFIXES) for part in relative.split("/"))


def _real(path: Path) -> Path:
    # os.path.realpath, unlike Path.resolve on 3.11, does not raise on a link loop.
    return Path(os.path.realpath(path))


def _walk(paths: Sequence[str | Path], refuse: Callable[[str, str, str], None]) -> Iterator[_Candidate]:
    for given in paths:
        path = Path(given)
        if path.is_dir():
            yield from _walk_dir(path, refuse)
        elif path.is_file():
            yield _path_candidate(_real(path), str(given))
        elif path.exists():
            refuse(str(given), "not_a_file", "not a regular file or folder")
        else:
            refuse(str(given), "not_found", "no such file or folder")


def _walk_dir(root: Path, refuse: Callable[[str, str, str], None]) -> Iterator[_Candidate]:
    """Regular files under ``root``, sorted, hidden ones skipped; links followed only inside ``root``."""
    real_root = _real(root)

    def on_error(exc: OSError) -> None:
        refuse(str(exc.filename or root), "unreadable", exc.strerror or str(exc))

    for folder, subfolders, files in os.walk(root, onerror=on_error):
        here = Path(folder)
        subfolders[:] = sorted(name for name in subfolders if not _is_hidden(name))
        for name in subfolders:
            # os.walk does not descend into linked folders; one pointing outside is refused, loudly.
            if (here / name).is_symlink() and not _real(here / name).is_relative_to(real_root):
                refuse(str(here / name), "symlink_outside_root", "link to a folder outside the submitted folder")
        for name in sorted(files):
            if _is_hidden(name):
                continue
            path = here / name
            target = _real(path)
            if path.is_symlink() and not target.is_relative_to(real_root):
                refuse(str(path), "symlink_outside_root", "link to a file outside the submitted folder")
            elif not target.is_file():
                refuse(str(path), "not_a_file", "not a regular file")
            else:
                yield _path_candidate(target, str(path))


def _open_file(path: Path) -> IO[bytes]:
    # The path is already resolved: refusing a link here closes the swap-after-check window.
    return os.fdopen(os.open(path, os.O_RDONLY | _O_NOFOLLOW), "rb")


def _hash_stream(stream: IO[bytes], limit: int, sink: IO[bytes] | None = None) -> tuple[str, int] | None:
    """(sha256, size) of the stream's bytes, copied to ``sink``; None once past ``limit`` bytes."""
    digest = hashlib.sha256()
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            return None
        digest.update(chunk)
        if sink is not None:
            sink.write(chunk)
    return digest.hexdigest(), size


@dataclass(slots=True)
class _Blob:
    display: str
    sha256: str
    size: int
    source_uri: str
    source_key: str | None = None


@dataclass(slots=True)
class _Collector:
    """Phase 1: what a submission holds, accumulated file by file."""

    job_id: str
    ingest: IngestSettings
    object_store: ObjectStoreSettings
    objects: ObjectStore
    existing: Mapping[str, DocState]
    resubmit: Callable[[str, DocState], bool]
    documents: dict[str, SubmittedDocument] = field(default_factory=dict)
    refused: list[RefusedFile] = field(default_factory=list)
    duplicates: list[DuplicateFile] = field(default_factory=list)
    count: int = 0

    def __post_init__(self) -> None:
        self.count = len(self.existing)

    @property
    def _max_bytes(self) -> int:
        return self.ingest.max_document_bytes

    def refuse(self, path: str, code: str, reason: str) -> None:
        self.refused.append(RefusedFile(path, code, reason))

    def add(self, candidate: _Candidate) -> None:
        kind = archive_kind(candidate.name)
        try:
            if candidate.source_key is not None:
                ids.check_source_key(candidate.source_key)  # a path's URI or a URI: invalid_source_key when too long
            if kind is None:
                self._add_file(candidate)
            else:
                self._add_archive(candidate, kind)
        except InputError as exc:
            self.refuse(candidate.display, exc.code, exc.message)
        except FileNotFoundError:
            self.refuse(candidate.display, "not_found", "no such file or object")
        except OSError as exc:
            self.refuse(candidate.display, "unreadable", exc.strerror or str(exc))

    def _full(self, display: str) -> bool:
        if self.count < self.ingest.max_files_per_job:
            return False
        limit = self.ingest.max_files_per_job
        self.refuse(display, "too_many_files", f"the job already holds {limit} documents (ingest.max_files_per_job)")
        return True

    def _too_large(self, display: str) -> None:
        self.refuse(display, "too_large", f"larger than {self._max_bytes} bytes (ingest.max_document_bytes)")

    def _empty(self, display: str) -> None:
        self.refuse(display, "empty", "the file is empty")

    def _add_file(self, candidate: _Candidate) -> None:
        size = candidate.size()
        if size is not None and size > self._max_bytes:
            self._too_large(candidate.display)
        elif size == 0:
            self._empty(candidate.display)
        elif not self._full(candidate.display):
            with candidate.opener() as stream:
                hashed = _hash_stream(stream, self._max_bytes)
            if hashed is None:
                self._too_large(candidate.display)
            elif hashed[1] == 0:
                self._empty(candidate.display)
            elif self._is_new(candidate.display, hashed[0]):
                uri = candidate.in_place or self._put(candidate, hashed[0])
                self._accept(_Blob(candidate.display, hashed[0], hashed[1], uri, candidate.source_key))

    def _put(self, candidate: _Candidate, sha256: str) -> str:
        with candidate.opener() as stream:
            uri: str = self.objects.put(stream, sha256)
        return uri

    def _add_archive(self, candidate: _Candidate, kind: ArchiveKind) -> None:
        # All or nothing: members are kept aside until the whole archive has passed its checks.
        blobs: list[_Blob] = []
        refused: list[RefusedFile] = []
        limits = ArchiveLimits.from_settings(self.ingest)
        with candidate.opener() as stream:
            for member in expand_archive(stream, kind, limits):
                display = f"{candidate.display}/{member.name}"
                if _is_hidden(member.name):
                    continue
                outcome = self._spool_member(display, member.name, member.size, member.stream)
                if isinstance(outcome, RefusedFile):
                    refused.append(outcome)
                    continue
                # a member's identity: its archive's, then its path inside (a name's control characters encoded)
                outcome.source_key = f"{candidate.source_key}!/{ids.key_part(member.name)}" if candidate.source_key \
                    else None
                try:
                    if outcome.source_key is not None:
                        ids.check_source_key(outcome.source_key)
                except InputError as exc:
                    refused.append(RefusedFile(display, exc.code, exc.message))
                    continue
                blobs.append(outcome)
        self.refused.extend(refused)
        for blob in blobs:
            if self._is_new(blob.display, blob.sha256) and not self._full(blob.display):
                self._accept(blob)

    def _spool_member(self, display: str, name: str, size: int, stream: IO[bytes]) -> _Blob | RefusedFile:
        if archive_kind(name) is not None:
            return RefusedFile(display, "archive_nested", "archives inside archives are not expanded")
        if size > self._max_bytes:
            return RefusedFile(display, "too_large", f"larger than {self._max_bytes} bytes")
        if size == 0:
            return RefusedFile(display, "empty", "the file is empty")
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
            hashed = _hash_stream(stream, self._max_bytes, spool)
            if hashed is None:
                return RefusedFile(display, "too_large", f"larger than {self._max_bytes} bytes")
            spool.seek(0)
            uri = self.objects.put(spool, hashed[0])
        return _Blob(display, hashed[0], hashed[1], uri)

    def _is_new(self, display: str, sha256: str) -> bool:
        doc_id = ids.doc_id(self.job_id, sha256)
        earlier = self.existing.get(doc_id)
        if doc_id in self.documents or (earlier is not None and not self.resubmit(doc_id, earlier)):
            self.duplicates.append(DuplicateFile(display, doc_id))
            return False
        return True

    def _accept(self, blob: _Blob) -> None:
        doc_id = ids.doc_id(self.job_id, blob.sha256)
        if doc_id not in self.existing:
            self.count += 1
        media_type, _ = mimetypes.guess_type(blob.display, strict=False)
        self.documents[doc_id] = SubmittedDocument(
            doc_id, blob.display, blob.source_uri, blob.sha256, blob.size, media_type, source_key=blob.source_key
        )


def _moved_on(row: DocumentRow | JobDocumentRow) -> bool:
    """Whether the pipeline moved a document's row past ``submitted``: a submission's rows never go over it."""
    return row.status != "submitted"


def _resubmit_if_unprocessed(_doc_id: str, status: DocState) -> bool:
    """Default rule: a document of the job is produced again only while still ``submitted``."""
    return status == "submitted"


def _check_tasks_known(tasks: Sequence[TaskRequest], custom: dict[str, str]) -> None:
    """Refuse a task no registry knows. Built-ins are known by name: their runners (and spaCy, torch)
    need not be importable where documents are submitted. A user task's class is imported (no model
    is loaded), as the inference service will."""
    for task in tasks:
        if task.name in BUILTIN_TASKS:
            continue
        try:
            task_class(task.name, custom)
        except ConfigError as exc:
            known = ", ".join(known_task_names(custom))
            raise InputError(f"{exc.message} (known tasks: {known})", code="task_unavailable") from exc


def _existing_job(
    store: JobsStore, job_id: str, request: JobRequest
) -> tuple[JobRow | None, dict[str, DocState]]:
    job = store.get_job(job_id)
    if job is None:
        return None, {}
    if job.tenant != request.tenant:
        raise InputError(f"job {job_id} belongs to another tenant", code="job_tenant_mismatch")
    if job.status == "cancelled":
        raise InputError(f"job {job_id} is cancelled", code="job_cancelled")
    if job_tasks(job) != request.tasks:
        # a job's tasks are fixed when it is created: its completion counts every document for each of them
        asked = ", ".join(task.name for task in job_tasks(job))
        raise InputError(f"job {job_id} asks for tasks {asked} (with their labels): submit to it with the same "
                         "--task and --labels", code="job_tasks_mismatch")
    lane = JobOptions.from_mapping(job.options).lane
    if lane != request.priority:
        raise InputError(f"job {job_id} is a {lane} job: submit to it with that priority",
                         code="job_priority_mismatch")
    return job, {row.doc_id: row.status for row in store.iter_job_documents(job_id)}


def _write_rows(
    store: ResultStore,
    job_id: str,
    earlier: JobRow | None,
    collected: _Collector,
    documents: Sequence[SubmittedDocument],
    request: JobRequest,
    now: datetime,
) -> tuple[SubmittedDocument, ...]:
    """Write the documents' rows, then the job's; returns the documents with the version each follows.

    A document with a source key becomes its source's current version (``advance_source``: its documents row,
    then the sources row by compare-and-set, again behind a version submitted at the same time).

    A document already in the job (produced again: ``resubmit``) keeps its rows as they stand: the pipeline may
    have moved them on since they were read, and a ``submitted`` written now would take a completed document
    back (docs/reliability.md "Invariants": a document's status never moves back). The rows of the others are
    written unless the pipeline moved them on in the meantime (a second submission of the same job at the same
    time), decided by the store at the write (``write_document_unless``)."""
    written: list[SubmittedDocument] = []
    for doc in documents:
        if doc.doc_id in collected.existing:
            row = store.get_document(doc.doc_id)
            if row is not None:
                written.append(replace(doc, previous_doc_id=row.previous_doc_id))
                continue

        def write_document(previous: str | None, doc: SubmittedDocument = doc) -> None:
            store.write_document_unless(
                DocumentRow(
                    doc_id=doc.doc_id,
                    job_id=job_id,
                    source_uri=doc.source_uri,
                    content_sha256=doc.content_sha256,
                    status="submitted",
                    updated_at=now,
                    media_type=doc.media_type,
                    filename=doc.filename,
                    source_key=doc.source_key,
                    previous_doc_id=previous,
                ),
                _moved_on,
            )

        if doc.source_key:  # this version is the source's current one from now on
            previous, _ = advance_source(store, request.tenant, doc.source_key, doc.doc_id,
                                         content_sha256=doc.content_sha256, job_id=job_id, now=now,
                                         write_document=write_document)
            doc = replace(doc, previous_doc_id=previous)
        else:
            write_document(None)
        store.write_job_document_unless(JobDocumentRow(job_id, doc.doc_id, "submitted", now, filename=doc.filename),
                                        _moved_on)
        written.append(doc)
    # The jobs row goes last: it never counts documents whose rows are not written yet.
    store.upsert_job(
        JobRow(
            job_id=job_id,
            tenant=request.tenant,
            created_at=earlier.created_at if earlier else now,
            status="running",
            document_count=collected.count,
            options={**(earlier.options if earlier else {}), **request.job_options()},
            webhook_url=request.webhook_url or (earlier.webhook_url if earlier else None),
            completed=earlier.completed if earlier else 0,
            partial=earlier.partial if earlier else 0,
            failed=earlier.failed if earlier else 0,
            updated_at=now,
            usage=earlier.usage if earlier else None,
        )
    )
    return tuple(written)


def _produce(
    documents: Sequence[SubmittedDocument], job_id: str, request: JobRequest, clients: IntakeClients, now: datetime
) -> None:
    topic = Topics(clients.context.kafka.topic_prefix).intake(request.priority)
    for doc in documents:
        record = DocumentSubmitted(
            job_id=job_id,
            doc_id=doc.doc_id,
            source_uri=doc.source_uri,
            content_sha256=doc.content_sha256,
            size_bytes=doc.size_bytes,
            submitted_at=now,
            tenant=request.tenant,
            filename=doc.filename,
            media_type=doc.media_type,
            model_id=request.model_id,
            chunk_max_tokens=request.chunk_max_tokens,
            chunk_overlap_tokens=request.chunk_overlap_tokens,
            tasks=task_records(request.tasks),
            source_key=doc.source_key,
            previous_doc_id=doc.previous_doc_id,
            priority=request.priority,
        )
        clients.producer.produce(topic, doc.doc_id, clients.serde.serialize(record, topic))
    clients.producer.flush(clients.flush_timeout_s)


def _produce_admitted(
    documents: Sequence[SubmittedDocument], job_id: str, request: JobRequest, clients: IntakeClients, now: datetime,
    *, write_rows: Callable[[], Sequence[SubmittedDocument]] | None = None,
) -> Sequence[SubmittedDocument]:
    """Write the rows (when given) and produce documents just admitted; on any failure give their slots back before
    the error goes on (docs/operations.md "Quotas and admission"). Admitting first keeps the check and the taking
    of the slots under the tenant's lease without holding it across the produce; a record that reached its topic
    before the failure then runs without a slot, one submission's worth at most."""
    done = False
    try:
        if write_rows is not None:
            documents = write_rows()
        _produce(documents, job_id, request, clients, now)
        done = True
    finally:
        if not done:  # whatever the failure, these documents are not in flight: a retry admits them again
            release(clients.store, clients.context.fairness, request.tenant, [d.doc_id for d in documents])
    return documents


_Sources = Callable[[_Collector], Iterable[_Candidate]]
"""A submission's documents, as candidates; refusals found on the way go to the collector."""


@dataclass(frozen=True, slots=True)
class Gradually:
    """Admit a job's documents as its tenant's quotas free, instead of refusing it (``--admit gradually``).

    Attributes:
        on_progress: called after each round with documents admitted so far, of how many, and the capacity then.
        sleep: waits between rounds (seconds); ``time.sleep`` by default.
        poll_s: seconds between rounds while nothing can be admitted.
    """

    on_progress: Admitting | None = None
    sleep: Callable[[float], None] = time.sleep
    poll_s: float = 1.0


def _admit_gradually(
    documents: Sequence[SubmittedDocument], job_id: str, request: JobRequest, clients: IntakeClients,
    gradually: Gradually, now: datetime,
) -> None:
    """Produce ``documents`` (their rows written) as the tenant's quotas admit them, in order."""
    fairness, store = clients.context.fairness, clients.store
    done = 0
    while done < len(documents):
        taken, cap = admit_some(store, fairness, request.tenant, job_id, [d.doc_id for d in documents[done:]],
                                clients.clock())
        if taken:
            _produce_admitted(documents[done:done + taken], job_id, request, clients, now)
            done += taken
        if gradually.on_progress is not None:
            gradually.on_progress(done, len(documents), cap)
        if done < len(documents):
            # documents in flight free as they end, seconds apart: look again soon; the day's limit frees at midnight
            wait = min(cap.retry_after_s, 60) if cap.limited_by == DAILY else gradually.poll_s
            gradually.sleep(max(gradually.poll_s, wait))


def _check_webhook_host(url: str | None, allow_private: bool) -> None:
    """Refuse a webhook URL whose host is an IP address (in any form the C library reads: ``127.1``,
    ``0x7f000001``, ``[::ffff:10.0.0.1]``) or a ``localhost`` name that a webhook may not reach. Names are not
    resolved here: the reducer resolves and checks them before every call, which is what holds against a DNS
    answer that changes (docs/security.md "Webhooks").

    Raises:
        InputError: ``webhook_address_refused``.
    """
    if url is None or allow_private:
        return
    host = urlsplit(url.strip()).hostname
    if not host:
        return
    if is_loopback_name(host):
        check_addresses(host, ["127.0.0.1"])
    try:  # AI_NUMERICHOST: a literal address is read, a name is never looked up
        found = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return
    check_addresses(host, [str(info[4][0]) for info in found])


def _submit(
    sources: _Sources,
    request: JobRequest,
    clients: IntakeClients,
    resubmit: Callable[[str, DocState], bool] | None = None,
    gradually: Gradually | None = None,
) -> SubmitResult:
    context, store = clients.context, clients.store
    request = validate_job_request(request, default_max_tokens=context.chunker.max_tokens,
                                   default_labels=context.tasks.classify.labels,
                                   max_priority=context.fairness.tenant(request.tenant).max_priority)
    _check_webhook_host(request.webhook_url, context.reducer.webhook_allow_private)
    _check_tasks_known(request.tasks, dict(context.tasks.custom))
    job_id = request.job_id or ids.new_job_id()
    log = _log.bind(job_id=job_id, tenant=request.tenant)
    earlier, existing = _existing_job(store, job_id, request)
    objects = clients.objects or ObjectStore(context.object_store)
    collected = _Collector(job_id, context.ingest, context.object_store, objects, existing,
                           resubmit or _resubmit_if_unprocessed)
    for candidate in sources(collected):
        collected.add(candidate)
    documents: Sequence[SubmittedDocument] = tuple(collected.documents.values())
    if request.atomic and collected.refused:
        # nothing of a refused request is recorded; stored bytes stay, unreferenced and harmless
        log.info("job_refused", refused=len(collected.refused), error_code=collected.refused[0].code)
        return SubmitResult(job_id=job_id, documents=(), refused=tuple(collected.refused),
                            duplicates=tuple(collected.duplicates), document_count=len(existing))
    if documents:
        now = clients.clock()
        if gradually is not None:
            # every row first: the job counts all its documents and completes only once each ended
            documents = _write_rows(store, job_id, earlier, collected, documents, request, now)
            _admit_gradually(documents, job_id, request, clients, gradually, now)
        else:
            admit(store, context.fairness, request.tenant, job_id, [d.doc_id for d in documents], now)
            documents = _produce_admitted(documents, job_id, request, clients, now,
                                          write_rows=partial(_write_rows, store, job_id, earlier, collected, documents,
                                                             request, now))
    log.info(
        "job_submitted",
        documents=len(documents),
        refused=len(collected.refused),
        duplicates=len(collected.duplicates),
        document_count=collected.count,
    )
    return SubmitResult(
        job_id=job_id,
        documents=tuple(documents),
        refused=tuple(collected.refused),
        duplicates=tuple(collected.duplicates),
        document_count=collected.count,
    )


def submit_paths(
    paths: Sequence[str | Path],
    request: JobRequest,
    clients: IntakeClients,
    *,
    resubmit: Callable[[str, DocState], bool] | None = None,
    gradually: Gradually | None = None,
) -> SubmitResult:
    """Submit files, folders and archives as one job.

    Folders are walked (sorted; hidden entries skipped; links followed only inside the
    folder); .zip/.tar/.tar.gz/.tgz archives are expanded safely (``docstream_ingest.archives``);
    every document's bytes go to the object store, its rows to ``clients.store`` and one
    DocumentSubmitted (key doc_id) to the intake topic. The same content twice in a job is
    one document. Files that cannot go are listed in ``refused`` with a code and a reason.

    Args:
        paths: files and folders.
        request: the job and its options (checked by ``validate_job_request``).
        clients: the settings sections, stores, producer and serde the submission goes through.
        resubmit: for a document already in the job, whether to produce it again, given its
            doc_id and status; default: only while it is still ``submitted``.
        gradually: admit the documents as the tenant's quotas free (blocking until every one is), instead of
            refusing a submission past them (docs/operations.md "Quotas and admission").

    Raises:
        QuotaExceeded: without ``gradually``, the tenant's quotas hold the documents back: nothing was written
            or produced.
        InputError: bad job id, tenant, chunk options, webhook URL (``webhook_address_refused``: a host that is
            a loopback, link-local or private address) or tasks (``task_invalid``,
            ``labels_*``, ``task_unavailable``: no registry knows the name); the job belongs to
            another tenant, is cancelled, or asks for other tasks (``job_tasks_mismatch``).
        RetryableError: the object store, the result store or the broker failed; rows may be
            written, and submitting again with the same job id completes the job.
        FatalError: the broker refused the records.
    """
    return _submit(lambda collected: _walk(paths, collected.refuse), request, clients, resubmit, gradually)


def submit_uploads(uploads: Sequence[Upload], request: JobRequest, clients: IntakeClients) -> SubmitResult:
    """Submit streams (files and archives, told apart by ``filename``) as one job.

    The same rules as ``submit_paths`` apply to each upload as to a file on disk. Arguments
    not listed here are those of ``submit_paths``.

    Args:
        uploads: the files, each a seekable stream read from its start (left open).

    Raises:
        InputError: as ``submit_paths``.
        RetryableError: as ``submit_paths``.
        FatalError: as ``submit_paths``.
    """
    return _submit(lambda _collected: (_upload_candidate(upload) for upload in uploads), request, clients)


def submit_uris(uris: Sequence[str], request: JobRequest, clients: IntakeClients) -> SubmitResult:
    """Submit documents that already live in object storage, read where they are.

    Each URI must pass ``ObjectStore.check_uri`` (an allowed scheme, under the store root or
    an ``allowed_roots`` prefix), else it is refused with ``source_not_allowed``. A document
    is read once, streamed, to hash it; its record keeps the URI as ``source_uri`` (the bytes
    are not copied). An archive URI is expanded as in ``submit_paths`` and its members are put
    in the object store. Arguments not listed here are those of ``submit_paths``.

    Args:
        uris: source URIs (``file:///...``, ``s3://bucket/key``...).

    Raises:
        InputError: as ``submit_paths``.
        RetryableError: as ``submit_paths``.
        FatalError: as ``submit_paths``.
    """
    return _submit(
        lambda collected: (_uri_candidate(uri, collected.objects, collected.object_store) for uri in uris),
        request,
        clients,
    )
