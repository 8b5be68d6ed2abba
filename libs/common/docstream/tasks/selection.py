"""The tasks a job asks for: parsed from the command line, checked once, kept on the job row (docs/intake.md).

Pure: no registry lookup (which imports a user's module) and no I/O; ``docstream_ingest.intake`` checks
that a registry knows every name. A job that names no task asks for ``embed`` alone, and is written as
it was before tasks existed: records with ``tasks = []`` and no ``tasks`` job option, byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from docstream.errors import InputError
from docstream.records import JobOptions
from docstream.tasks.base import (
    CLASSIFY,
    EMBED,
    GENERATE,
    MAX_LABELS,
    MAX_TASKS,
    Label,
    Prompt,
    TaskRequest,
    requested_tasks,
)
from docstream.tasks.chat_protocol import check_json_schema
from docstream.tenants.json_input import loads_bounded

if TYPE_CHECKING:
    from docstream.store.base import JobRow

__all__ = [
    "DEFAULT_TASKS",
    "check_job_tasks",
    "command_line_prompt",
    "command_line_tasks",
    "job_task_names",
    "job_tasks",
    "parse_labels",
    "task_records",
    "tasks_option",
]

DEFAULT_TASKS: tuple[TaskRequest, ...] = (TaskRequest(EMBED),)
"""What a job asks for when it names no task."""

_MAX_LABELS_TEXT = 64 * 1024
_MAX_OPTION_BYTES = 4 * 1024 * 1024  # MAX_TASKS requests, each with a prompt and a schema at their bounds


def parse_labels(text: str) -> tuple[Label, ...]:
    """The labels of ``--labels``: ``name`` or ``name=description`` items separated by commas, or a JSON list.

    The JSON form (text starting with ``[``) holds strings (``"name"`` / ``"name=description"``) or
    objects ``{"name": ..., "description": ...}``; it is the way to give a description holding a comma.
    Empty comma-separated items are skipped.

    Raises:
        InputError: ``labels_invalid``: no label, malformed JSON, an invalid or duplicate label, too many.
    """
    if len(text) > _MAX_LABELS_TEXT:
        raise InputError(f"--labels is longer than {_MAX_LABELS_TEXT} characters", code="labels_invalid")
    stripped = text.strip()
    if stripped.startswith("["):
        labels = _json_labels(stripped)
    else:
        labels = tuple(Label.parse(item) for item in stripped.split(",") if item.strip())
    if not labels:
        raise InputError("--labels names no label", code="labels_invalid")
    if len(labels) > MAX_LABELS:
        raise InputError(f"at most {MAX_LABELS} labels, got {len(labels)}", code="labels_invalid")
    return labels


def _json_labels(text: str) -> tuple[Label, ...]:
    items = loads_bounded(text, what="--labels", code="labels_invalid", max_bytes=4 * _MAX_LABELS_TEXT)
    if not isinstance(items, list):
        raise InputError("--labels JSON must be a list", code="labels_invalid")
    labels = []
    for item in items:
        if isinstance(item, str):
            labels.append(Label.parse(item))
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= {"name", "description"} \
                and isinstance(item.get("description"), str | None):
            labels.append(Label(item["name"].strip(), item.get("description") or None))
        else:
            raise InputError(f"--labels item {str(item)[:120]!r} is neither a string nor {{name, description}}",
                             code="labels_invalid")
    return tuple(labels)


def command_line_prompt(prompt: str | None, schema: str | None) -> Prompt | None:
    """The generate prompt of ``--prompt`` (``summarize``, or the instruction itself: the text of
    ``--prompt-file``) and ``--schema`` (the JSON Schema's text): extract with a schema, else summarize.
    Neither: None (generate then summarizes).

    Raises:
        InputError: ``prompt_invalid``: the schema is not a JSON object, or an instruction or schema over its bound
            (its size, its nesting: ``docstream.tenants.json_input.loads_bounded``).
            ``check_job_tasks`` checks the rest.
    """
    if prompt is None and schema is None:
        return None
    instruction = "" if prompt is None or prompt.strip() == "summarize" else prompt.strip()
    if schema is None:
        return Prompt("summarize", instruction)
    decoded = loads_bounded(schema, what="--schema", code="prompt_invalid")
    if not isinstance(decoded, dict):
        raise InputError("--schema must hold a JSON Schema object", code="prompt_invalid")
    return Prompt.of("extract", instruction, decoded)


def command_line_tasks(names: Sequence[str], labels: Sequence[Label] = (),
                       prompt: Prompt | None = None) -> tuple[TaskRequest, ...]:
    """The tasks of ``--task NAME`` (repeated; resolved to task names), ``--labels``, which go to classify, and
    the generate prompt (``command_line_prompt``).

    No name: ``embed``. The result still goes through ``check_job_tasks``.

    Raises:
        InputError: ``labels_without_classify``: labels, and no classify to give them to;
            ``prompt_without_generate``: a prompt, and no generate; ``task_invalid``.
    """
    chosen = list(names) or [task.name for task in DEFAULT_TASKS]
    if labels and CLASSIFY not in chosen:
        raise InputError(f"--labels are for the classify task, and the job asks for {', '.join(chosen)} only: "
                         "add --task classify", code="labels_without_classify")
    if prompt is not None and GENERATE not in chosen:
        raise InputError(f"--prompt and --schema are for the generate task, and the job asks for "
                         f"{', '.join(chosen)} only: add --task generate", code="prompt_without_generate")
    return tuple(TaskRequest(name, tuple(labels) if name == CLASSIFY else (), prompt if name == GENERATE else None)
                 for name in chosen)


def check_job_tasks(tasks: Sequence[TaskRequest], *, default_labels: Sequence[str] = ()) -> tuple[TaskRequest, ...]:
    """``tasks`` when a job may ask for them, classify's labels filled in from ``default_labels`` when it has none,
    generate's prompt with ``summarize`` when it has none (written into the request, as the labels).

    Args:
        tasks: what the job asks for.
        default_labels: ``tasks.classify.labels`` of the submitting process (``name`` or
            ``name=description``): the labels of a classify request that gives none. They are written
            into the request, so the records and the job row say which labels the job was scored on.

    Raises:
        InputError: ``task_invalid`` (none, more than ``MAX_TASKS``, a name twice),
            ``labels_without_classify`` (labels on another task), ``labels_missing`` (classify
            without labels, and no default), ``labels_invalid`` (a default label), ``prompt_without_generate``
            (a prompt on another task), ``prompt_invalid`` (an extract schema that is no JSON Schema, or one an
            extract prompt may not carry: ``docstream.tasks.chat_protocol.check_json_schema``: a ``$ref`` out of the
            schema, a pattern RE2 does not run, past its bounds).
    """
    if not tasks:
        raise InputError("a job asks for at least one task", code="task_invalid")
    if len(tasks) > MAX_TASKS:
        raise InputError(f"at most {MAX_TASKS} tasks, got {len(tasks)}", code="task_invalid")
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise InputError(f"a task is named twice: {', '.join(names)}", code="task_invalid")
    resolved = []
    for task in tasks:
        if task.labels and task.name != CLASSIFY:
            raise InputError(f"task {task.name!r} takes no labels: labels are for classify",
                             code="labels_without_classify")
        if task.prompt is not None and task.name != GENERATE:
            raise InputError(f"task {task.name!r} takes no prompt: a prompt is for generate",
                             code="prompt_without_generate")
        if task.name == GENERATE and task.prompt is None:
            task = TaskRequest(GENERATE, prompt=Prompt("summarize"))
        if task.prompt is not None and task.prompt.schema is not None:
            check_json_schema(task.prompt.schema)
        if task.name == CLASSIFY and not task.labels:
            if not default_labels:
                raise InputError("classify needs labels: give them with the job (--labels, or the task's labels "
                                 "over HTTP) or set tasks.classify.labels", code="labels_missing")
            task = TaskRequest(CLASSIFY, tuple(Label.parse(text) for text in default_labels))
        resolved.append(task)
    return tuple(resolved)


def task_records(tasks: Sequence[TaskRequest]) -> list[dict[str, Any]]:
    """The ``tasks`` field of the job's records: ``TaskRequest`` dicts; ``[]`` for ``DEFAULT_TASKS``."""
    if tuple(tasks) == DEFAULT_TASKS:
        return []
    return [task.to_record() for task in tasks]


def tasks_option(tasks: Sequence[TaskRequest]) -> str | None:
    """The ``tasks`` job option (``JobOptions.tasks``): canonical JSON of ``task_records``; None for
    ``DEFAULT_TASKS`` (no option)."""
    records = task_records(tasks)
    if not records:
        return None
    return json.dumps(records, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def job_tasks(row: JobRow) -> tuple[TaskRequest, ...]:
    """The tasks a job asks for, from its row's ``tasks`` option (``JobOptions.tasks``); none or empty (jobs from
    before tasks, jobs of embed alone, external producers' jobs): embed alone (``requested_tasks`` of no record:
    ``legacy.tasks_of``).

    Raises:
        InputError: the option is not a JSON list of valid ``TaskRequest`` records.
    """
    text = JobOptions.from_mapping(row.options).tasks
    if not text:
        return requested_tasks(())
    records = loads_bounded(text, what="the job's tasks option", code="task_invalid", max_bytes=_MAX_OPTION_BYTES)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise InputError("the job's tasks option is not a list of task records", code="task_invalid")
    return requested_tasks(records)


def job_task_names(row: JobRow) -> tuple[str, ...]:
    """The names of the tasks a job asks for (``job_tasks``), for the row's readers (the reducer's recount, the
    exports): a tasks option that is not valid (a foreign writer's) reads as the default, embed alone."""
    try:
        return tuple(task.name for task in job_tasks(row))
    except InputError:
        return tuple(task.name for task in DEFAULT_TASKS)
