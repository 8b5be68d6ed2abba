"""Finding a task by name: the built-ins, the ``docstream.tasks`` entry points, ``tasks.custom`` and ``module:Class``.

Importing a task's module loads no model: a class's ``name`` and ``fold`` are read by the reducer,
which never runs the model. ``load_task`` is the one place a runner is loaded.
"""

from __future__ import annotations

import importlib
import threading
from importlib.metadata import entry_points
from typing import Any, cast

from docstream.errors import ConfigError
from docstream.logging import get_logger
from docstream.tasks.base import (
    CLASSIFY,
    EMBED,
    ENTITIES,
    GENERATE,
    Task,
    TaskClass,
    TaskContext,
    TaskFold,
    check_task_name,
)

__all__ = ["ENTRY_POINT_GROUP", "known_task_names", "load_task", "resolve_task", "task_class", "task_fold"]

ENTRY_POINT_GROUP = "docstream.tasks"

_BUILTIN = {
    EMBED: "docstream.tasks.embed:EmbedTask",
    CLASSIFY: "docstream.tasks.classify:ClassifyTask",
    ENTITIES: "docstream.tasks.entities:EntitiesTask",
    GENERATE: "docstream.tasks.generate:GenerateTask",
}
_log = get_logger(__name__)
_lock = threading.Lock()
_by_reference: dict[str, str] = {}  # name -> module:Class of the classes found by reference in this process


def _import(reference: str) -> TaskClass:
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"task reference {reference!r} is not module:Class", code="task_unavailable")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import task {reference!r}: {exc}", code="task_unavailable") from exc
    name = getattr(found, "name", None)
    if not isinstance(name, str) or not callable(getattr(found, "load", None)) or \
            not isinstance(getattr(found, "fold", None), TaskFold):
        raise ConfigError(f"{reference!r} is not a task class: it needs a name, a fold and a load() classmethod "
                          "(docs/tasks.md)", code="task_unavailable")
    check_task_name(name)
    return cast(TaskClass, found)


def _entry_point(name: str) -> str | None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            return str(point.value)
    return None


def resolve_task(spec: str, custom: dict[str, str] | None = None) -> str:
    """The task name ``spec`` stands for: a name, or ``module:Class`` (whose class is then found by that name).

    Raises:
        ConfigError: ``task_unavailable``: no task by that name, or the class cannot be imported.
        InputError: ``task_invalid``: not a valid task name.
    """
    if ":" in spec:
        cls = _import(spec)
        with _lock:
            _by_reference[cls.name] = spec
        return cls.name
    task_class(spec, custom)
    return spec


def task_class(name: str, custom: dict[str, str] | None = None) -> TaskClass:
    """The class of task ``name``: built in, ``custom`` (``tasks.custom``), an entry point, or one resolved earlier
    by ``module:Class`` in this process.

    Raises:
        ConfigError: ``task_unavailable``.
        InputError: ``task_invalid``.
    """
    check_task_name(name)
    reference = _BUILTIN.get(name) or (custom or {}).get(name) or _entry_point(name)
    if reference is None:
        with _lock:
            reference = _by_reference.get(name)
    if reference is None:
        raise ConfigError(f"no task named {name!r}: built in are {', '.join(_BUILTIN)}; a user task is found "
                          f"through an entry point in group {ENTRY_POINT_GROUP!r}, tasks.custom or module:Class",
                          code="task_unavailable")
    cls = _import(reference)
    if cls.name != name:
        raise ConfigError(f"{reference!r} is task {cls.name!r}, not {name!r}", code="task_unavailable")
    return cls


def task_fold(name: str, custom: dict[str, str] | None = None) -> TaskFold:
    """The fold of task ``name`` (no model is loaded)."""
    return task_class(name, custom).fold


def known_task_names(custom: dict[str, str] | None = None) -> list[str]:
    """The built-in task names, then the entry points' and ``custom``'s, sorted."""
    extra = {point.name for point in entry_points(group=ENTRY_POINT_GROUP)} | set(custom or {})
    return list(_BUILTIN) + sorted(extra - set(_BUILTIN))


def load_task(spec: str, context: TaskContext) -> Task:
    """Load the runner of task ``spec`` (a name or ``module:Class``) from ``context`` (``tasks.custom`` names the
    user tasks; the task's ``load`` reads the rest).

    Raises:
        ConfigError: ``task_unavailable`` or the task's own model errors (``model_unavailable``).
        InputError: ``task_invalid``.
    """
    custom = dict(context.tasks.custom)
    name = resolve_task(spec, custom)
    cls = task_class(name, custom)
    task = cls.load(context)
    if task.name != name:
        raise ConfigError(f"task class {name!r} loaded a runner named {task.name!r}", code="task_unavailable")
    _log.info("task_loaded", task=name, model_id=task.model_id, runtime=task.runtime, device=task.device)
    return task
