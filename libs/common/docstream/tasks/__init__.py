"""Tasks: what inference runs per chunk and how the reducer folds it into a document (docs/tasks.md).

The contract is in ``docstream.tasks.base``; ``docstream.tasks.registry`` finds tasks by name. The
built-in runners (``embed``, ``classify``, ``entities``) are in their own modules, which load no model
until ``load()`` is called; their pure folds are ``docstream.tasks.fold_embed``, ``fold_classify`` and
``fold_entities``; ``docstream.tasks.selection`` reads and checks the tasks a job asks for.
"""

from docstream.tasks.base import (
    BUILTIN_TASKS,
    CLASSIFY,
    EMBED,
    ENTITIES,
    ChunkOutput,
    DocumentOutput,
    EntitySummary,
    FoldInput,
    Label,
    Mention,
    PreparedTexts,
    Span,
    Task,
    TaskClass,
    TaskFold,
    TaskRequest,
    place_spans,
    requested_tasks,
    task_names,
)

__all__ = [
    "BUILTIN_TASKS",
    "CLASSIFY",
    "EMBED",
    "ENTITIES",
    "ChunkOutput",
    "DocumentOutput",
    "EntitySummary",
    "FoldInput",
    "Label",
    "Mention",
    "PreparedTexts",
    "Span",
    "Task",
    "TaskClass",
    "TaskFold",
    "TaskRequest",
    "place_spans",
    "requested_tasks",
    "task_names",
]
