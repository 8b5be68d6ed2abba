"""`docstream document-stage`: the document-level step of a task that declares one (``TaskClass.document_step``:
generate; docs/tasks.md "Map-reduce").

The reducer folds a document's chunk results; where that leaves a model call to make (generate: a summary of two
or more chunk summaries, or chunk values that disagree) it publishes the document's DocumentCompleted on the
mapped topic instead of the completed one, and writes no row. This stage reads the mapped topic in its own
consumer group and, per record:

1. finds the job's request of the task (its jobs row) and checks that it gives the record's ``model_id``;
2. makes the step: the task's ``finish_document`` (generate: ``GenerateTask.reduce_document``, a tree of reduce
   calls, each level recorded in the output); an answer that is no answer fails the document with its code
   (``generation_*``), its chunk answers kept;
3. writes the document's rows (``store.completion.record_completion``: the result row, and the job's view of
   it, which the job counts wait for);
4. returns the finished DocumentCompleted for the completed topic: the ConsumeLoop commits the offset only once
   it is delivered.

A record whose result row already holds its step (a crash after the write, before the commit) is written and
published again from that row, with no model call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from docstream.errors import ConfigError, PoisonRecord
from docstream.kafka.loop import Envelope, Output
from docstream.logging import get_logger
from docstream.records import DocumentCompleted, DocumentStatus, output_too_large, record_limit, utc_now
from docstream.store import ResultStore
from docstream.store.completion import record_completion
from docstream.tasks.base import DocumentStepTask, TaskRequest, failure_output, has_document_step
from docstream.tasks.reduction import DOCUMENT_STEP, needs_document_step
from docstream.tasks.selection import job_tasks
from docstream.tenants.usage import add_counts
from docstream.topics import Topics

__all__ = ["SERVICE", "STAGE_DOCUMENT", "DocumentStage"]

SERVICE = "document-stage"
STAGE_DOCUMENT = "document"
"""Stage key of the document stage's time on a document (its reduce calls and writes)."""

_MAX_ERROR_CHARS = 500
_log = get_logger(__name__)


class NotADocumentStep(PoisonRecord):
    """A record on the mapped topic that is no document of the stage's task waiting for its step."""

    code = "document_step_unexpected"


class DocumentStage:
    """The ConsumeLoop handler of the mapped topic (see the module)."""

    def __init__(self, task: DocumentStepTask, store: ResultStore, topics: Topics, *,
                 clock: Callable[[], datetime] = utc_now, monotonic: Callable[[], float] = time.monotonic,
                 measure: Callable[[DocumentCompleted], int] | None = None,
                 max_message_bytes: int | None = None) -> None:
        """``task``: the runner of a task that declares a document step. ``measure``: the size of a
        DocumentCompleted as it is produced (the serializer's bytes); with ``max_message_bytes``, a document whose
        finished record would pass ``records.record_limit`` of it fails with ``output_too_large``
        (docs/reliability.md "Invariants": every record is bounded).

        Raises:
            ConfigError: ``task_unavailable``: the task declares no document step.
        """
        if not has_document_step(task):
            raise ConfigError(f"task {task.name!r} declares no document step", code="task_unavailable")
        self._measure = measure
        self._limit = record_limit(max_message_bytes) if max_message_bytes is not None else None
        self._task = task
        self._store = store
        self._topics = topics
        self._clock = clock
        self._monotonic = monotonic

    def __call__(self, envelope: Envelope) -> Sequence[Output]:
        """Finish one document.

        Raises:
            PoisonRecord: the record is not a document of the stage's task waiting for its step, or its job's
                request does not give its model_id (the settings differ from the inference service's): the DLQ.
            EndpointUnavailable: the model does not answer within its retry budget (retried, then fatal).
            StoreError: the store is unavailable (retried).
        """
        completed = envelope.value
        name = self._task.name
        if not isinstance(completed, DocumentCompleted) or completed.task != name or completed.model_id is None:
            raise NotADocumentStep(f"the mapped topic holds {type(completed).__name__} of task "
                                   f"{getattr(completed, 'task', None)!r}, not a {name} document")
        output = _decoded(completed.output)
        if not needs_document_step(output):
            raise NotADocumentStep(f"document {completed.doc_id}: its output has no document step pending")
        written = self._store.get_document_result(completed.doc_id, completed.model_id)
        done = _decoded(written.output) if written is not None else {}
        if written is not None and done.get(DOCUMENT_STEP) in ("done", "failed"):
            finished = _finished(completed, done, written.status, self._task.device)
            _log.info("document_step_already_written", doc_id=completed.doc_id, model_id=completed.model_id)
        else:
            finished = self._step(completed, output)
        finished = record_completion(self._store, self._bounded(finished), self._clock())
        _log.info("document_completed", job_id=finished.job_id, doc_id=finished.doc_id, status=finished.status,
                  error_code=finished.error_code)
        return [Output(self._topics.completed, finished.doc_id, finished)]

    def _bounded(self, finished: DocumentCompleted) -> DocumentCompleted:
        if self._measure is None or self._limit is None:
            return finished
        size = self._measure(finished)
        if size <= self._limit:
            return finished
        _log.warning("document_output_too_large", job_id=finished.job_id, doc_id=finished.doc_id, size=size,
                     limit=self._limit)
        return output_too_large(finished, size, self._limit)

    def _step(self, completed: DocumentCompleted, output: dict[str, Any]) -> DocumentCompleted:
        request = self._request(completed)
        started = self._monotonic()
        status: DocumentStatus = completed.status
        try:
            result = self._task.finish_document(output, request)
        except PoisonRecord as exc:  # this document alone: its chunk answers stay, its step failed
            status = "failed"
            spent = failure_output(exc) or {}  # the tokens of the step's calls before it failed
            result = {**output, DOCUMENT_STEP: "failed", "error_code": exc.code,
                      "error": f"the document step failed: {exc.message}"[:_MAX_ERROR_CHARS],
                      **{key: int(output.get(key, 0) or 0) + int(spent.get(key, 0) or 0)
                         for key in ("prompt_tokens", "completion_tokens")}}
            _log.warning("document_step_failed", doc_id=completed.doc_id, error_code=exc.code,
                         error=exc.message[:300])
        result["step_us"] = int((self._monotonic() - started) * 1_000_000)
        return _finished(completed, result, status, self._task.device)

    def _request(self, completed: DocumentCompleted) -> TaskRequest:
        """The job's request of the stage's task (generate: its prompt), checked against the record's model_id.

        Raises:
            PoisonRecord: ``document_step_prompt_mismatch``: no request of the job gives the record's model_id.
        """
        name = self._task.name
        job = self._store.get_job(completed.job_id)
        requests = [r for r in job_tasks(job) if r.name == name] if job is not None else []
        for request in requests or [TaskRequest(name)]:
            if self._task.model_id_for(request) == completed.model_id:
                return request
        raise PoisonRecord(f"document {completed.doc_id}: no {name} prompt of job {completed.job_id} gives "
                           f"model_id {completed.model_id} here (tasks.{name} differs from the inference "
                           "service's?)", code="document_step_prompt_mismatch")


def _finished(completed: DocumentCompleted, output: dict[str, Any], status: DocumentStatus,
              device: str) -> DocumentCompleted:
    """``completed`` with its step's ``output`` (as the stage wrote it: ``error_code``, ``error`` and ``step_us``
    in it), its status, and the step's time added to the model's and the stages'."""
    step_us = int(output.get("step_us", 0) or 0)
    failed = output.get(DOCUMENT_STEP) == "failed"
    return replace(completed, status=status,
                   error_code=str(output.get("error_code")) if failed else completed.error_code,
                   error=str(output.get("error")) if failed else completed.error,
                   output=json.dumps(output, ensure_ascii=False, allow_nan=False, separators=(",", ":")),
                   model_us=add_counts(completed.model_us, {device: step_us}),
                   stage_us=add_counts(completed.stage_us, {STAGE_DOCUMENT: step_us}))


def _decoded(output: str | None) -> dict[str, Any]:
    try:
        value = json.loads(output) if output else {}
    except ValueError as exc:
        raise NotADocumentStep(f"the document output is not JSON: {exc}") from exc
    return value if isinstance(value, dict) else {}
