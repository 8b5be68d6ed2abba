"""A task's completed document in the store: the rows the reducer writes for a DocumentCompleted, and the generate
task's document stage for the DocumentCompleted it finishes (docs/reducer.md, docs/tasks.md "generate").

Every write is an upsert keyed by the document (and its model_id and task): written again, after a crash before
the offset commit, it leaves the same rows.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from docstream.records import DocumentCompleted, copy_fields
from docstream.store.base import DocumentResultRow, DocumentRow, JobDocumentRow, ResultsStore, ResultStore, TaskTally
from docstream.store.sources import RETIRING, enforce, fence, versions_back
from docstream.tasks.legacy import task_of, tasks_of
from docstream.tenants.usage import document_usage

__all__ = ["latest_completed", "record_completion", "result_row", "retire_earlier"]

def result_row(completed: DocumentCompleted) -> DocumentResultRow:
    """The document_results row of a task's DocumentCompleted."""
    assert completed.model_id is not None
    return copy_fields(DocumentResultRow, completed, chunker_settings=completed.chunker_settings or "",
                 task=task_of(completed.task))


def retire_earlier(store: ResultsStore, doc_id: str, model_id: str) -> int:
    """Retire the earlier versions of a source under one model, from ``doc_id`` back: each one's results are
    deleted, down to the first that had completed or partial results (it retired the ones before it when it
    completed); a version that failed, or never got this model's result, is passed through. Returns the
    versions walked (``versions_back``)."""
    walked = 0
    for version in versions_back(store, doc_id):
        walked += 1
        result = store.get_document_result(version, model_id)
        store.delete_results(version, model_id)
        if result is not None and result.status in RETIRING:
            break
    return walked


def latest_completed(store: ResultsStore, doc_id: str, model_id: str) -> str | None:
    """The newest version, from ``doc_id`` back, whose result under ``model_id`` completed (``RETIRING``): the
    version whose results the store holds for the source while a newer one is in flight or after one failed
    (``retire_earlier`` keeps them until a newer version completes). None: no version has."""
    for version in versions_back(store, doc_id):
        result = store.get_document_result(version, model_id)
        if result is not None and result.status in RETIRING:
            return version
    return None


def record_completion(store: ResultStore, completed: DocumentCompleted, now: datetime) -> DocumentCompleted:
    """Write one task's result of a document, and the job's view of it; returns ``completed`` with what the
    documents row knows (source, filename, pages), as it is published.

    Rows: the document result; the job document's entry for the task (its terminal status and usage: the jobs
    agent's recount reads them); and, for a job of this one task, the document's status and the job document's.
    A new version of a source that completed (``RETIRING``) deletes its earlier version's chunk rows and result under
    the same model: the earlier version is retired, and a search finds the current text only. A version that
    completes after a newer one did is retired as it is written, and one whose source was deleted writes no
    result and is published failed (``source_deleted``): ``docstream.store.sources.enforce``.
    A job of several tasks gets the document's status from the jobs agent once every task is in.
    """
    document: DocumentRow | None = store.get_document(completed.doc_id)
    job = store.get_job(completed.job_id)
    if document is not None:
        completed = replace(completed, source_uri=document.source_uri, filename=document.filename,
                            content_sha256=document.content_sha256, page_count=document.page_count,
                            pages_by_verdict=dict(document.pages_by_verdict),
                            pages_by_source=dict(document.pages_by_source))
    if document is not None and job is not None and fence(store, document, job.tenant) == "source_deleted":
        # deleted while in flight: no result, and its job sees it end failed (docs/reliability.md "Invariants")
        completed = replace(completed, status="failed", error_code="source_deleted",
                            error="its source was deleted while it was processed")
    else:
        store.upsert_document_result(result_row(completed))
        if document is not None and document.previous_doc_id and completed.status in RETIRING:
            retire_earlier(store, document.previous_doc_id, completed.model_id or "")
        if job is not None:  # after the write: a delete or a newer version's completion since takes it back
            enforce(store, completed.doc_id, job.tenant, completed.model_id)
    task = task_of(completed.task)
    usage = document_usage(completed)
    store.upsert_job_document_task(completed.job_id, completed.doc_id, task, TaskTally(completed.status, usage), now)
    if tasks_of(completed.tasks) != (task,):
        return completed
    if document is not None:
        store.upsert_document(replace(document, status=completed.status, updated_at=now,
                                      error_code=completed.error_code, error=completed.error))
    # the document's usage goes with its terminal status: the jobs agent's recount reads both
    store.upsert_job_document(JobDocumentRow(
        job_id=completed.job_id, doc_id=completed.doc_id, status=completed.status, updated_at=now,
        filename=document.filename if document is not None else None, error_code=completed.error_code,
        usage=usage))
    return completed
