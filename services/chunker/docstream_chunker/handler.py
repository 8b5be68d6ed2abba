"""The chunker's transform: one DocumentSubmitted → its ChunkCreated records, or one failed DocumentCompleted.

A record is first checked against the store (``docstream.tenants.tenancy``): its tenant must own its job, its
doc_id, its earlier version and, on a tenant's own intake topic, the document a tombstone names; a record that does
not goes to the DLQ with its code (docs/security.md "Intake records").

The documents and job_documents rows are upserted before the outputs are returned; the
ConsumeLoop produces the outputs and commits the input's offset only once every output is
delivered, so a crash anywhere redoes the document (same chunk ids, same rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial

from docstream.errors import DocumentError, InputError, PoisonRecord, RetryableError
from docstream.ids import check_source_key, chunk_id
from docstream.kafka.loop import Envelope, Output
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import (
    CHUNK_MAX_TOKENS,
    ChunkCreated,
    DocumentChunked,
    DocumentCompleted,
    DocumentSubmitted,
    JobOptions,
    copy_fields,
    utc_now,
)
from docstream.settings import ChunkerSettings, KafkaSettings
from docstream.store.base import (
    TERMINAL_DOC_STATES,
    DocState,
    DocumentRow,
    JobDocumentRow,
    JobRow,
    ResultStore,
)
from docstream.store.sources import advance_source, delete_by_tombstone, fence
from docstream.tasks.base import requested_tasks
from docstream.tasks.chat_protocol import check_json_schema
from docstream.tenants.tenancy import Refusal, Submission, refuse_submission, refuse_tombstone, tenant_of_topic
from docstream.tenants.usage import STAGE_CHUNKER, Usage, apportion
from docstream.topics import Topics
from docstream_chunker.extraction import ChunkedDocument, OcrPageStarted
from docstream_chunker.provenance import ChunkSource, DocumentSources
from docstream_chunker.worker import ChunkRequest, Extractor

__all__ = ["ChunkerHandler", "chunk_request", "max_poll_interval_ms"]

_log = get_logger(__name__)
_JOB_STATUS_TTL_S = 2.0
_OCR_PROGRESS_S = 2.0  # a document in OCR has its rows' progress written at most this often
_JOB_STATUS_CACHE_SIZE = 10_000
_ROWS_WRITTEN: frozenset[str] = frozenset({"chunked", *TERMINAL_DOC_STATES})
"""Statuses of a document's rows once a pass of the chunker has written them (the reducer may be ending it)."""
_TEXT_LAYER = ChunkSource("text_layer", None, ())


def max_poll_interval_ms(kafka: KafkaSettings, chunker: ChunkerSettings) -> int:
    """A consumer max.poll.interval.ms long enough for one document at its longest time limit (and retries).

    The longest is ``chunker.max_timeout_s``, which a document OCRed on many pages grows to
    (``docstream_chunker.provenance.time_limit``): the poll loop waits for the document that long.
    """
    needed = int((chunker.max_timeout_s + 30.0) * 1000) * 2
    return max(int(kafka.max_poll_interval_ms), needed)


def chunk_request(submitted: DocumentSubmitted, chunker: ChunkerSettings) -> ChunkRequest:
    """The extractor's request for a submission; per-job chunk sizes override the service's.

    A job that sets ``chunk_max_tokens`` but not ``chunk_overlap_tokens`` gets the service's
    overlap capped at a quarter of its max_tokens.

    Raises:
        InputError: ``invalid_options`` when the job's chunk_max_tokens is outside ``CHUNK_MAX_TOKENS``.
    """
    max_tokens = chunker.max_tokens if submitted.chunk_max_tokens is None else submitted.chunk_max_tokens
    if max_tokens not in CHUNK_MAX_TOKENS:
        raise InputError(
            f"chunk_max_tokens must be in [{CHUNK_MAX_TOKENS.least}, {CHUNK_MAX_TOKENS.most}], got {max_tokens}",
            code="invalid_options",
        )
    overlap = submitted.chunk_overlap_tokens
    if overlap is None:
        overlap = chunker.overlap_tokens if submitted.chunk_max_tokens is None else min(
            chunker.overlap_tokens, max_tokens // 4
        )
    return ChunkRequest(
        source_uri=submitted.source_uri,
        content_sha256=submitted.content_sha256,
        max_tokens=max_tokens,
        overlap_tokens=overlap,
        filename=submitted.filename,
        media_type=submitted.media_type,
        job_id=submitted.job_id,
        doc_id=submitted.doc_id,
    )


class ChunkerHandler:
    """``ConsumeLoop`` handler of the intake topic.

    Args:
        chunker: the chunker's settings (defaults, limits, OCR).
        topics: the topics it writes (chunks, completed for documents that fail here).
        store: where the documents and job_documents rows go.
        extractor: fetch + extract + chunk (``ProcessExtractor`` in the service).
        metrics: counts failed documents by error_code, and refused intake records by reason.
        clock: the time stamped on records and rows.
        job_status_ttl_s: how long a job's row (its tenant, cancelled or not) is reused before it is read
            again: documents of a job cancelled (``POST /v1/jobs/{id}/cancel``) are skipped
            (rows status skipped, error_code job_cancelled, no chunks) within this time.
        monotonic: the clock of that cache and of the OCR progress writes.
        limited: whether a tenant has quotas (``FairnessSettings.limited``): a chunked document of one has its
            tokens written to the tenant's admission ledger; None: no tenant has.
    """

    def __init__(
        self,
        chunker: ChunkerSettings,
        topics: Topics,
        store: ResultStore,
        extractor: Extractor,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = utc_now,
        job_status_ttl_s: float = _JOB_STATUS_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
        limited: Callable[[str], bool] | None = None,
    ) -> None:
        self._limited = limited
        self._chunker = chunker
        self._topics = topics
        self._store = store
        self._extractor = extractor
        self._metrics = metrics
        self._clock = clock
        self._job_status_ttl_s = job_status_ttl_s
        self._monotonic = monotonic
        self._jobs: dict[str, tuple[float, JobRow | None]] = {}

    def on_tombstone(self, topic: str, doc_id: str) -> Sequence[Output]:
        """A tombstone on the intake topic, keyed by a version's doc_id: delete that version's source, in flight or
        not (or the document's own rows, without one; ``docstream.store.sources.delete_by_tombstone``). Nothing to
        delete (already deleted, unknown, or a version an earlier delete covered) is done.

        Raises:
            IntakeRefused: ``tenant_mismatch_source``: on a tenant's own intake topic, the document is another
                tenant's (nothing is deleted).
            RetryableError: the store is unavailable.
        """
        topic_tenant = tenant_of_topic(self._topics.prefix, topic)

        def check(tenant: str) -> None:
            refusal = refuse_tombstone(topic_tenant, tenant)
            if refusal is not None:
                self._refuse(refusal)

        done = delete_by_tombstone(self._store, doc_id, check=check)
        _log.info("tombstone_applied", doc_id=doc_id, deleted=done is not None,
                  versions=done.versions if done is not None else 0)
        return []

    def __call__(self, envelope: Envelope) -> Sequence[Output]:
        """Handle one intake record.

        Raises:
            PoisonRecord: the record is not a DocumentSubmitted; ``invalid_source_key``: its source key is none
                (``docstream.ids.check_source_key``); ``IntakeRefused``: it names what its tenant does not own
                (``_admit``).
            RetryableError: the object store or the result store is unavailable.
        """
        if not isinstance(envelope.value, DocumentSubmitted):
            raise PoisonRecord(
                f"the intake topic holds {type(envelope.value).__name__}, not DocumentSubmitted",
                code="unexpected_record",
            )
        self._admit(envelope.topic, envelope.value)
        return self.handle(envelope.value)

    def _admit(self, topic: str, submitted: DocumentSubmitted) -> None:
        """Refuse a record whose tenant does not own what it names (``docstream.tenants.tenancy.refuse_submission``).

        The first record of a job without a ``jobs`` row (an external producer's) claims the job for its tenant.

        Reads the documents row of its doc_id; the job's row is the one ``_job_cancelled`` reads (cached); a record
        naming an earlier version reads that version's documents row too, and its job's row."""
        if submitted.source_key is not None:
            try:
                check_source_key(submitted.source_key)
            except InputError as exc:
                self._refuse(Refusal(exc.code, exc.message))
        job = self._job(submitted.job_id)
        document = self._store.get_document(submitted.doc_id)
        previous_tenant = None
        if submitted.previous_doc_id is not None:
            previous = self._store.get_document(submitted.previous_doc_id)
            owner = self._job(previous.job_id) if previous is not None else None
            previous_tenant = owner.tenant if owner is not None else None
        refusal = refuse_submission(Submission(
            submitted.tenant, submitted.job_id, submitted.doc_id,
            document_job_id=document.job_id if document is not None else None,
            topic_tenant=tenant_of_topic(self._topics.prefix, topic),
            job_tenant=job.tenant if job is not None else None,
            previous_doc_id=submitted.previous_doc_id, previous_tenant=previous_tenant,
        ))
        if refusal is not None:
            self._refuse(refusal)
        if job is None:
            self._claim(submitted)

    def _claim(self, submitted: DocumentSubmitted) -> None:
        """Write the jobs row of a job that has none, for the record's tenant: the row docs/intake.md "External
        producers" describes (running, document_count 0: unknown, origin external). Later records of the job are
        checked against it."""
        now = self._clock()
        row = JobRow(submitted.job_id, submitted.tenant, now, "running", 0,
                     options=JobOptions(origin="external").to_mapping(), updated_at=now)
        self._store.upsert_job(row)
        self._jobs[submitted.job_id] = (self._monotonic(), row)
        _log.info("job_claimed", tenant=submitted.tenant)

    def _refuse(self, refusal: Refusal) -> None:
        if self._metrics is not None:
            self._metrics.intake_refused.labels("chunker", refusal.code).inc()
        raise refusal.error()

    def handle(self, submitted: DocumentSubmitted) -> list[Output]:
        """Chunk one document, or fail it; write its rows; return the records to produce (``__call__`` checks the
        record first).

        Raises:
            RetryableError: the object store or the result store is unavailable.
        """
        if self._job_cancelled(submitted.job_id):
            skipped = self._skipped(submitted)
            if skipped is not None:
                return skipped
        submitted = self._versioned(submitted)
        deleted = self._deleted(submitted)
        if deleted is not None:
            return deleted
        started = time.perf_counter()
        try:
            _check_prompts(submitted)
            result = self._extractor.extract(chunk_request(submitted, self._chunker),
                                             on_ocr_page=_OcrProgress(self, submitted))
        except (DocumentError, InputError) as exc:
            return self._failed(submitted, exc.code, exc.message, _micros_since(started))
        busy_us = _micros_since(started)
        now = self._clock()
        resent = not self._write_rows(submitted, "chunked", now, page_count=result.page_count,
                                      media_type=result.media_type, sources=result.sources, unless_written=True)
        if not resent:
            if self._limited is not None and self._limited(submitted.tenant):
                # its tokens are enqueued until it ends (docs/operations.md "Quotas and admission")
                self._store.set_document_tokens(submitted.tenant, submitted.doc_id, result.token_count)
        else:
            # a redelivered, duplicated or replayed submission: the chunks go out again (every write
            # downstream is idempotent), marked so that inference reuses what it stored of them, and the rows
            # stay as an earlier pass and the reducer left them
            _log.info("document_rechunked_rows_kept", chunk_count=len(result.chunks))
        self._count_pages(result.sources)
        _log.info(
            "document_chunked",
            chunk_count=len(result.chunks),
            page_count=result.page_count,
            token_count=result.token_count,
            media_type=result.media_type,
            pages_by_verdict=dict(result.sources.by_verdict),
            pages_by_source=dict(result.sources.by_source),
            ocr_pages=result.sources.ocr_pages,
            duration_s=round(busy_us / 1e6, 3),
        )
        return self._chunk_outputs(submitted, result, now, busy_us, resent=resent)

    def _chunk_outputs(
        self, submitted: DocumentSubmitted, result: ChunkedDocument, now: datetime, busy_us: int, *, resent: bool
    ) -> list[Output]:
        count = len(result.chunks)
        # each chunk carries its share of the document's time: the reducer adds each index once
        shares = apportion(busy_us, [chunk.token_count for chunk in result.chunks])
        sources = result.chunk_sources or (_TEXT_LAYER,) * count
        # after its chunks: the reducer counts the job's tokens waiting for the model (docs/operations.md
        # "Where a job stands"); a document without chunks waits for nothing
        chunked = [] if not count else [Output(
            topic=self._topics.chunked,
            key=submitted.doc_id,
            value=DocumentChunked(job_id=submitted.job_id, doc_id=submitted.doc_id, chunk_count=count,
                                  token_count=result.token_count, chunked_at=now, tenant=submitted.tenant,
                                  priority=submitted.priority, page_count=result.page_count),
        )]
        return [
            Output(
                topic=self._topics.lane(submitted.priority),
                key=submitted.doc_id,
                value=copy_fields(
                    ChunkCreated, submitted, chunk, source,
                    chunk_id=chunk_id(submitted.content_sha256, result.chunker_settings, chunk.index),
                    model_id=self._chunker.model_id or submitted.model_id,
                    chunk_index=chunk.index,
                    chunk_count=count,
                    chunker_settings=result.chunker_settings,
                    created_at=now,
                    stage_us={STAGE_CHUNKER: share} if share else {},
                    table=chunk.table.to_record() if chunk.table is not None else None,
                    resent=resent,
                    tokenizer=result.tokenizer if chunk.token_ids else None,
                ),
            )
            for chunk, share, source in zip(result.chunks, shares, sources, strict=True)
        ] + chunked

    def _count_pages(self, sources: DocumentSources) -> None:
        if self._metrics is None:
            return
        if sources.ocr_pages:
            self._metrics.ocr_pages.labels("chunker", self._chunker.ocr.engine).inc(sources.ocr_pages)
        for verdict, pages in sources.by_verdict.items():
            self._metrics.page_verdicts.labels("chunker", verdict).inc(pages)

    def _versioned(self, submitted: DocumentSubmitted) -> DocumentSubmitted:
        """``submitted`` with its source's earlier version.

        The intake made its documents current before producing them (``advance_source``), and the record names the
        earlier version. A record of an external producer names the source and not that version: it becomes the
        source's current version here, its documents row first (docs/intake.md "Versions of a document"). A
        document handled before (a redelivery, a replay) keeps its place: a replayed older version never displaces
        a newer one, and a deleted one stays deleted. Rows a pass of the chunker wrote (``chunked``, or final since)
        stay as they stand, decided at the write: another pass of the same record may complete the document
        between this pass's reads and its writes.
        """
        if not submitted.source_key or submitted.previous_doc_id is not None:
            return submitted
        now = self._clock()

        def write_document(previous: str | None) -> None:
            self._write_rows(replace(submitted, previous_doc_id=previous), "submitted", now, unless_written=True)

        previous, _ = advance_source(self._store, submitted.tenant, submitted.source_key, submitted.doc_id,
                                              content_sha256=submitted.content_sha256, job_id=submitted.job_id,
                                              now=now, write_document=write_document)
        return replace(submitted, previous_doc_id=previous)

    def _deleted(self, submitted: DocumentSubmitted) -> list[Output] | None:
        """None: the document is not deleted, or a pass chunked it and it has not ended; else what a deleted one
        gives (docs/reliability.md "Invariants"). One whose chunks never went out (``submitted``, or ``chunking``:
        its rows say ``chunked`` before its chunks are produced) ends failed here (``source_deleted``), so that its
        job completes, and one that ended keeps its rows and gets no chunk: each document ends once.

        One a pass chunked ends where its chunks go (the reducer's ``record_completion`` fails it with the same
        code). That pass may have died before they all went out, and its rows cannot tell: they go out again
        (None), and inference takes back the rows it writes of them (``enforce``)."""
        row = self._store.get_document(submitted.doc_id)
        if row is None or fence(self._store, row, submitted.tenant) != "source_deleted":
            return None
        if row.status == "chunked":
            _log.info("document_deleted_chunks_sent_again")
            return None
        if row.status in TERMINAL_DOC_STATES:
            _log.info("document_deleted_not_rechunked", status=row.status)
            return []
        return self._failed(submitted, "source_deleted", "its source was deleted before it was chunked", 0)

    def _job_cancelled(self, job_id: str) -> bool:
        job = self._job(job_id)
        return job is not None and job.status == "cancelled"

    def _job(self, job_id: str) -> JobRow | None:
        # the jobs row is read at most once per job every job_status_ttl_s, not once per document
        now = self._monotonic()
        cached = self._jobs.get(job_id)
        if cached is not None and now - cached[0] < self._job_status_ttl_s:
            return cached[1]
        job = self._store.get_job(job_id)
        if len(self._jobs) >= _JOB_STATUS_CACHE_SIZE:
            self._jobs.clear()
        self._jobs[job_id] = (now, job)
        return job

    def _skipped(self, submitted: DocumentSubmitted) -> list[Output] | None:
        """A document of a cancelled job: rows marked skipped, nothing produced. One that ended keeps its rows.

        None: a pass chunked it before (a redelivery, a replay) and it has not ended. It ends where its chunks go,
        and that pass may have died before they all went out: they go out again."""
        if not self._write_rows(submitted, "skipped", self._clock(), error_code="job_cancelled", unless_written=True):
            row = self._store.get_document(submitted.doc_id)
            if row is not None and row.status == "chunked" and written_by_a_pass(submitted, row):
                _log.info("document_cancelled_chunks_sent_again")
                return None
            _log.info("document_not_skipped_rows_kept", reason="job_cancelled")
            return []
        if self._limited is not None and self._limited(submitted.tenant):
            # it ends here, unseen by the reducer: its slot frees now (docs/operations.md "Quotas and admission")
            self._store.release_documents(submitted.tenant, [submitted.doc_id])
        _log.info("document_skipped", reason="job_cancelled")
        return []

    def _failed(self, submitted: DocumentSubmitted, code: str, message: str, busy_us: int) -> list[Output]:
        """The document failed here: its rows, then its DocumentCompleted. One that a pass chunked before (a
        redelivery or a replay whose extraction failed where the first did not: a time limit on a loaded machine, a
        lower page limit) keeps its rows, and gets no DocumentCompleted of this pass unless this pass is a replay
        under another model (``chunker.model_id``), whose consumers count that model's completions: it ends where
        its chunks went, once for each model (docs/reliability.md "Invariants")."""
        now = self._clock()
        stage_us = {STAGE_CHUNKER: busy_us} if busy_us else {}
        written = self._write_rows(submitted, "failed", now, error_code=code, error=message,
                                   usage=Usage(stage_us=stage_us), unless_written=True)
        if not written and self._chunker.model_id in (None, submitted.model_id):
            _log.warning("document_failure_after_an_earlier_pass_ignored", error_code=code, error=message[:500])
            return []
        if self._metrics is not None:
            self._metrics.records_failed.labels("chunker", code).inc()
        _log.warning("document_failed", error_code=code, error=message[:500])
        completed = DocumentCompleted(
            job_id=submitted.job_id,
            doc_id=submitted.doc_id,
            status="failed",
            completed_at=now,
            model_id=self._chunker.model_id or submitted.model_id,
            source_uri=submitted.source_uri,
            filename=submitted.filename,
            content_sha256=submitted.content_sha256,
            error_code=code,
            error=message,
            stage_us=stage_us,
            # failed before inference, so for every task the job asks for (empty: embed alone)
            tasks=[str(task["name"]) for task in submitted.tasks],
        )
        return [Output(topic=self._topics.completed, key=submitted.doc_id, value=completed)]

    def _write_rows(
        self,
        submitted: DocumentSubmitted,
        status: DocState,
        now: datetime,
        *,
        page_count: int | None = None,
        media_type: str | None = None,
        error_code: str | None = None,
        error: str | None = None,
        usage: Usage | None = None,
        sources: DocumentSources | None = None,
        ocr: OcrPageStarted | None = None,
        unless_written: bool = False,
    ) -> bool:
        """Write the document's documents and job_documents rows at ``status``; whether they were written.

        ``unless_written``: rows that a pass of the chunker wrote already (``chunked``, or final since) stay as
        they stand, decided by the store at the write (``write_document_unless``), never on a read made before it:
        the reducer may be writing ``completed`` from an earlier pass's chunks at any moment, and a ``chunked``
        that landed after it would take the document back where nothing writes it forward again (the reducer's
        completion marker drops this pass's chunks).
        """
        by_source = dict(sources.by_source) if sources is not None else {}
        if ocr is not None:  # in OCR: the pages it started on so far, of the document's pages
            page_count, by_source = ocr.page_count, {"ocr": ocr.ocr_pages}
        document = (
            copy_fields(  # the submitted record's own fields (ids, source, filename, the earlier version), then these
                DocumentRow, submitted,
                status=status,
                updated_at=now,
                media_type=media_type or submitted.media_type,
                page_count=page_count,
                error_code=error_code,
                error=error,
                pages_by_verdict=dict(sources.by_verdict) if sources is not None else {},
                pages_by_source=by_source,
            )
        )
        in_job = JobDocumentRow(
            job_id=submitted.job_id,
            doc_id=submitted.doc_id,
            status=status,
            updated_at=now,
            filename=submitted.filename,
            error_code=error_code,
            usage=usage,
        )
        if not unless_written:
            self._store.upsert_document(document)
            self._store.upsert_job_document(in_job)
            return True
        if not self._store.write_document_unless(document, partial(written_by_a_pass, submitted)):
            return False
        self._store.write_job_document_unless(in_job, written_in_job)
        return True


class _OcrProgress:
    """Told when OCR starts on a page of one document: counts it (``docstream_ocr_pages_started``, which
    ``docstream run``'s bar shows), and writes the progress to its rows.

    The documents and job_documents rows go to ``chunking``, with the document's page count and
    ``pages_by_source = {"ocr": pages OCR started on}`` (``docstream status`` shows them), at the
    first OCR page and then at most every ``_OCR_PROGRESS_S``; a document whose rows an earlier pass
    wrote (a redelivery: ``chunked`` or final) keeps them. A write that fails is logged: progress never fails
    a document.
    """

    def __init__(self, handler: ChunkerHandler, submitted: DocumentSubmitted) -> None:
        self._handler = handler
        self._submitted = submitted
        self._written_at: float | None = None
        self._final = False  # its rows were found written by a pass: they stay

    def __call__(self, started: OcrPageStarted) -> None:
        handler = self._handler
        if handler._metrics is not None:
            handler._metrics.ocr_pages_started.labels("chunker").inc()
        now = handler._monotonic()
        if self._written_at is not None and now - self._written_at < _OCR_PROGRESS_S:
            return
        self._written_at = now
        try:
            if not self._final:
                self._final = not handler._write_rows(self._submitted, "chunking", handler._clock(), ocr=started,
                                                      unless_written=True)
        except RetryableError as exc:
            _log.warning("ocr_progress_not_written", error_code=exc.code, error=exc.message[:200])


def written_by_a_pass(submitted: DocumentSubmitted, row: DocumentRow) -> bool:
    """Whether a documents row is this very document's (same job, same bytes) at ``chunked`` or past it: a pass of
    the chunker wrote it before sending its chunks, and the reducer may have moved it on since."""
    return (
        row.status in _ROWS_WRITTEN
        and row.job_id == submitted.job_id
        and row.content_sha256 == submitted.content_sha256
    )


def written_in_job(row: JobDocumentRow) -> bool:
    """Whether a job_documents row is at ``chunked`` or past it (its key holds the job)."""
    return row.status in _ROWS_WRITTEN


def _micros_since(started: float) -> int:
    return max(round((time.perf_counter() - started) * 1_000_000), 0)


def _check_prompts(submitted: DocumentSubmitted) -> None:
    # a record's extract schema is checked where the API and the CLI check it (no $ref out of it, RE2 patterns,
    # bounds), before any text is extracted: a producer's record fails its document here, never at the first answer
    for task in requested_tasks(submitted.tasks):
        if task.prompt is not None and task.prompt.schema is not None:
            check_json_schema(task.prompt.schema)
