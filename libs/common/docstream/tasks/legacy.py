"""Data in the shape of before tasks: every rule that reads it as the embed task's, in one place. Pure.

Before tasks docstream ran one model, an embedding model. Its records named no task, its jobs named no tasks and
one ``model_id``, its rows had no ``task`` column, its reducer kept embed's fold under keys of its own, and its
inference service joined the group ``<prefix>-inference``. Tasks came with DocumentSubmitted v2, ChunkCreated v4,
ChunkEmbedded v5 and DocumentCompleted v6 (``schemas/history/`` keeps the versions before: a ``tasks`` or
``task`` field absent there gets the schema default, empty or ``embed`` or null, when such a record is read) and
with store migration 007 (the ``task`` columns, null in rows written before).

That shape is still in two kinds of data:

* **written before tasks**: records on the topics, in the DLQs and in what ``docstream replay`` reads again; rows
  of ``chunks``, ``document_results`` and ``job_documents``; jobs rows without a ``tasks`` option; the reducer's
  changelogs (document states, job documents); the inference group's committed offsets;
* **written today for a job of embed alone**, on purpose (docs/intake.md "The default is written as before
  tasks"): its records carry ``tasks = []`` and its jobs row no ``tasks`` option
  (``docstream.tasks.selection.task_records``), its reducer states keep embed's keys (``pre_task_state``), its
  inference service keeps the group's name (``keeps_pre_task_group``), and every job names its embedding model in
  the job's ``model_id`` (``job_model_id_for``). So services from before tasks read it in a rolling upgrade, and
  ``docstream run`` keeps the job ids (and so the doc_ids) it gave before.

When to remove: a rule goes once no data of either kind is left for it to read, which takes both

1. the writers stop writing the shape (each function says who still does): a change of bytes, planned as one:
   embed-alone jobs written with their tasks change ``docstream run``'s job ids, a renamed group starts from
   its ``auto.offset.reset`` unless its offsets are copied, embed states written with ``task``/``fold`` are not
   read by a reducer from before tasks;
2. nothing written before that is kept: every record older than the first release with ChunkEmbedded v5 and
   DocumentCompleted v6 has left every topic and DLQ (retention) and will not be replayed, the reducer's
   changelogs were rebuilt since, and a migration has filled the ``task`` columns that migration 007 left null
   (read today through the ``task`` defaults of ``ChunkRow``, ``DocumentResultRow`` and ``ChunkResult``,
   which are this module's ``PRE_TASK_TASK``).

``PRE_TASK_TASK`` is ``docstream.tasks.base.EMBED`` (tests/unit/lib/tasks/test_legacy.py holds them equal); it is
spelled here so that this module imports nothing and the contract's own readers (``base.requested_tasks``) can
use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = [
    "PRE_TASK_TASK",
    "job_model_id_for",
    "keeps_pre_task_group",
    "keeps_pre_task_layout",
    "pre_task_state",
    "task_of",
    "tasks_of",
]

PRE_TASK_TASK: Final = "embed"
"""The task of everything written before tasks: embed, then the only one."""


def task_of(task: str | None) -> str:
    """The task of a result that may name none: its own, else ``PRE_TASK_TASK``.

    Reads ``ChunkResult.task`` (records of ChunkEmbedded v4 and before: the schema default),
    ``DocumentCompleted.task`` of a record that holds a result (null in records of v5 and before), the ``task``
    column of ``chunks`` and ``document_results`` (null in rows from before migration 007), and the ``task`` key of
    the reducer's document state (absent in states of before tasks and in embed's: ``pre_task_state``).

    Not for a DocumentCompleted without a ``model_id``: its null ``task`` says that the document failed before
    inference, for every task of its job.
    """
    return task or PRE_TASK_TASK


def tasks_of(names: Sequence[str]) -> tuple[str, ...]:
    """The names of the tasks a job asks for, from a field that may name none: empty is embed alone.

    Reads the names of ``DocumentSubmitted.tasks`` and ``ChunkCreated.tasks`` (absent before v2 and v4),
    ``ChunkResult.tasks`` and ``DocumentCompleted.tasks`` (absent before ChunkEmbedded v5 and DocumentCompleted v6),
    the reducer's document state and job-documents entries (which copy them), and a job without a ``tasks`` option
    or without a row. Still written empty for every job of embed alone (``docstream.tasks.selection.task_records``).
    """
    return tuple(names) or (PRE_TASK_TASK,)


def job_model_id_for(task: str, job_model_id: str | None) -> str | None:
    """The ``model_id`` that a job's own ``model_id`` gives the results of ``task``: it names the embedding model,
    and no other task's (None: the task's model is known once it has a result row, keyed by it).

    Reads the job-level ``model_id`` (``DocumentSubmitted.model_id``, ``ChunkCreated.model_id``, the jobs row's
    ``model_id`` option, the default ``inference.embed_model_id``): one model per job, from before tasks, still
    written for every job. It goes when a ``TaskRequest`` names its own model.
    """
    return job_model_id if task == PRE_TASK_TASK else None


def keeps_pre_task_layout(tasks: Sequence[str]) -> bool:
    """Whether what is shown of a job of ``tasks`` (its names, or the names an export chose) keeps the layout of
    before tasks: embed alone.

    That layout is the export's (``docstream export``, ``docstream run --out``: one record per document, without
    task fields, ``docstream_ingest.export.DOCUMENT_SCHEMA``), the lines of ``GET /v1/jobs/{id}/results``, and
    ``docstream run``'s progress row (``chunks embedded``). Every other selection is a record per (document, task).
    It goes when readers of those outputs take the per-task layout for embed too.
    """
    return tuple(tasks) == (PRE_TASK_TASK,)


def pre_task_state(task: str) -> bool:
    """Whether the reducer's document state of ``task`` keeps the changelog keys of before tasks: embed's, whose
    fold state is ``weight_total`` and ``embedding_sum`` (no ``task``, no ``fold`` key).

    Reads and writes the reducer's document-states table and its changelog. Still written for every embed document
    (so a reducer from before tasks reads the state); it goes once embed's states are written with ``task`` and
    ``fold`` and the changelog holds none of the old ones.
    """
    return task == PRE_TASK_TASK


def keeps_pre_task_group(task: str) -> bool:
    """Whether ``task``'s inference service keeps the name of before tasks, ``inference``, and with it the consumer
    group ``<prefix>-inference`` (``Topics.inference_group``): embed's. The other tasks' are ``inference-<task>``.

    Reads the committed offsets of that group, which a deployment keeps from before tasks; ``docstream run`` names
    its services and their ``run_phase`` events the same way. It goes when a deployment's embed offsets are moved
    to an ``inference-embed`` group.
    """
    return task == PRE_TASK_TASK
