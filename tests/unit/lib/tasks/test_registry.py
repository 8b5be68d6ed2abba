"""Finding tasks: built-ins, module:Class, a real ``docstream.tasks`` entry point, tasks.custom, and refusals."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from docstream.errors import ConfigError, InputError
from docstream.settings import InferenceSettings, TasksSettings
from docstream.tasks.base import BUILTIN_TASKS, CLASSIFY, EMBED, ENTITIES, DocumentOutput, FoldInput, TaskContext
from docstream.tasks.classify import ClassifyTask
from docstream.tasks.embed import EmbedTask
from docstream.tasks.entities import EntitiesTask
from docstream.tasks.fold_classify import ClassifyFold
from docstream.tasks.fold_embed import EmbedFold
from docstream.tasks.fold_entities import EntitiesFold
from docstream.tasks.registry import ENTRY_POINT_GROUP, known_task_names, load_task, resolve_task, task_class, task_fold

HERE = "tests.unit.lib.tasks.test_registry"


class _CountFold:
    def empty(self) -> int:
        return 0

    def add(self, state: int, chunk: FoldInput) -> int:
        return state + 1

    def finish(self, state: int, *, chunk_count: int) -> DocumentOutput:
        return DocumentOutput(output={"chunks": state})


class RegistryDemoTask:
    """A task class found by module:Class (its runner is the registry's business only through load)."""

    name: ClassVar[str] = "registry-demo"
    fold: ClassVar[_CountFold] = _CountFold()

    @classmethod
    def load(cls, settings: Any) -> Any:
        return _DemoRunner(settings.tasks.options.get(cls.name, {}).get("model_id", "demo@1"))


class _DemoRunner:
    name = "registry-demo"
    max_tokens = 16
    runtime = "python/cpu"
    device = "cpu"

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id


class _NoFold:
    name: ClassVar[str] = "no-fold"

    @classmethod
    def load(cls, settings: Any) -> Any:
        raise AssertionError("never loaded")


class _NoLoad:
    name: ClassVar[str] = "no-load"
    fold: ClassVar[_CountFold] = _CountFold()


class _NoName:
    fold: ClassVar[_CountFold] = _CountFold()

    @classmethod
    def load(cls, settings: Any) -> Any:
        raise AssertionError("never loaded")


class _BadFold:
    name: ClassVar[str] = "bad-fold"
    fold: ClassVar[object] = object()

    @classmethod
    def load(cls, settings: Any) -> Any:
        raise AssertionError("never loaded")


@pytest.mark.parametrize(("name", "cls", "fold"),
                         [(EMBED, EmbedTask, EmbedFold), (CLASSIFY, ClassifyTask, ClassifyFold),
                          (ENTITIES, EntitiesTask, EntitiesFold)])
def test_built_ins_resolve_without_loading_a_model(name: str, cls: type, fold: type) -> None:
    assert resolve_task(name) == name
    assert task_class(name) is cls
    assert isinstance(task_fold(name), fold)


def test_known_names_list_the_built_ins_first() -> None:
    assert known_task_names()[:len(BUILTIN_TASKS)] == list(BUILTIN_TASKS)
    assert "mine" in known_task_names({"mine": f"{HERE}:RegistryDemoTask"})


def test_module_and_class_resolves_and_is_remembered_by_name() -> None:
    assert resolve_task(f"{HERE}:RegistryDemoTask") == "registry-demo"

    assert task_class("registry-demo") is RegistryDemoTask  # by name now, in this process
    assert task_fold("registry-demo").finish(3, chunk_count=3).output == {"chunks": 3}


def test_load_task_by_module_and_class_passes_the_task_context() -> None:
    """A loader written when ``load`` was given the whole ``Settings`` (``settings: Any``, reading
    ``settings.tasks.options``) works unchanged with the ``TaskContext``."""
    context = TaskContext(InferenceSettings(), TasksSettings(options={"registry-demo": {"model_id": "demo@7"}}))

    runner = load_task(f"{HERE}:RegistryDemoTask", context)

    assert runner.model_id == "demo@7"


def test_tasks_custom_names_a_class() -> None:
    custom = {"custom-demo": f"{HERE}:RegistryDemoTask"}

    with pytest.raises(ConfigError, match="is task 'registry-demo', not 'custom-demo'"):
        task_class("custom-demo", custom)
    assert task_class("registry-demo", {"registry-demo": f"{HERE}:RegistryDemoTask"}) is RegistryDemoTask


def test_an_entry_point_in_the_docstream_tasks_group_is_found(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A real installed distribution: a dist-info folder on sys.path, read by importlib.metadata."""
    (tmp_path / "ep_demo_task.py").write_text(textwrap.dedent("""
        from docstream.tasks.fold_classify import ClassifyFold

        class EntryPointTask:
            name = "ep-demo"
            fold = ClassifyFold()

            @classmethod
            def load(cls, settings):
                raise NotImplementedError
    """))
    info = tmp_path / "ep_demo_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-demo-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nep-demo = ep_demo_task:EntryPointTask\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # undone after the test
    try:
        assert "ep-demo" in known_task_names()
        assert resolve_task("ep-demo") == "ep-demo"
        assert task_class("ep-demo").__name__ == "EntryPointTask"
        assert isinstance(task_fold("ep-demo"), ClassifyFold)
    finally:
        sys.modules.pop("ep_demo_task", None)
    monkeypatch.undo()
    assert "ep-demo" not in known_task_names()


@pytest.mark.parametrize("cls", ["_NoFold", "_NoLoad", "_NoName", "_BadFold"])
def test_a_class_without_name_fold_or_load_is_refused(cls: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task(f"{HERE}:{cls}")
    assert caught.value.code == "task_unavailable"
    assert "docs/tasks.md" in caught.value.message


@pytest.mark.parametrize("spec", ["no_such_module_xyz:Task", f"{HERE}:Missing", "docstream.tasks:"])
def test_an_unimportable_reference_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task(spec)
    assert caught.value.code == "task_unavailable"


def test_an_unknown_name_is_refused_naming_the_built_ins() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task("sentiment-nowhere")
    assert caught.value.code == "task_unavailable"
    assert all(name in caught.value.message for name in BUILTIN_TASKS)
    assert ENTRY_POINT_GROUP in caught.value.message


@pytest.mark.parametrize("name", ["Embed", "1task", "has space", "x" * 41, ""])
def test_an_invalid_name_is_refused(name: str) -> None:
    with pytest.raises(InputError) as caught:
        resolve_task(name)
    assert caught.value.code == "task_invalid"
