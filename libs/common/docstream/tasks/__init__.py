"""Tasks: what inference runs per chunk and how the reducer folds it into a document (docs/tasks.md).

The contract is in ``docstream.tasks.base``; ``docstream.tasks.registry`` finds tasks by name. The
built-in runners (``embed``, ``classify``, ``entities``) are in their own modules, which load no model
until ``load()`` is called; their pure folds are in ``docstream.tasks.folds``.
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
