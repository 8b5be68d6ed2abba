"""docstream.tasks.legacy (data in the shape of before tasks) and the task declarations that replace name checks:
``document_step`` and ``always_reuse_stored``. Pure, but for a SQLite store in a temporary folder."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest

from docstream.errors import ConfigError
from docstream.settings import FaultSettings
from docstream.store.base import DocumentResultRow, JobRow
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import (
    EMBED,
    DocumentStepTask,
    Prompt,
    TaskRequest,
    always_reuses_stored,
    has_document_step,
    requested_tasks,
)
from docstream.tasks.classify import ClassifyTask
from docstream.tasks.embed import EmbedTask
from docstream.tasks.entities import EntitiesTask
from docstream.tasks.generate import DEFAULT_PROMPT, GenerateTask
from docstream.tasks.legacy import (
    PRE_TASK_TASK,
    job_model_id_for,
    keeps_pre_task_group,
    keeps_pre_task_layout,
    pre_task_state,
    task_of,
    tasks_of,
)
from docstream.tasks.selection import DEFAULT_TASKS, job_tasks
from docstream.topics import Topics
from docstream_cli.runner import _resumed_result
from docstream_inference.document_stage import DocumentStage
from docstream_inference.faults import FaultyTask
from examples.custom_task.sentiment import SentimentTask
from tests.fixtures.chat import chat_answer, scripted_task

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def test_the_task_of_before_tasks_is_embed() -> None:
    assert PRE_TASK_TASK == EMBED


def test_a_result_that_names_no_task_is_embeds() -> None:
    assert task_of(None) == task_of("") == "embed"
    assert task_of("classify") == "classify"


def test_a_job_that_names_no_task_asks_for_embed_alone() -> None:
    assert tasks_of(()) == tasks_of([]) == ("embed",)
    assert tasks_of(["classify", "embed"]) == ("classify", "embed")
    assert requested_tasks(()) == DEFAULT_TASKS == (TaskRequest("embed"),)
    assert job_tasks(JobRow("j", "acme", AT, "running", 1)) == DEFAULT_TASKS


def test_the_jobs_model_id_names_the_embedding_model_alone() -> None:
    assert job_model_id_for("embed", "bge@1") == "bge@1"
    assert job_model_id_for("embed", None) is None
    assert job_model_id_for("classify", "bge@1") is None
    assert job_model_id_for("sentiment", "bge@1") is None


def test_embed_alone_keeps_the_layout_and_the_state_keys_of_before_tasks() -> None:
    assert keeps_pre_task_layout(["embed"]) and keeps_pre_task_layout(("embed",))
    assert not keeps_pre_task_layout(["embed", "classify"]) and not keeps_pre_task_layout(["classify"])
    assert not keeps_pre_task_layout([])
    assert pre_task_state("embed") and not pre_task_state("generate")


def test_embeds_inference_keeps_the_group_of_before_tasks() -> None:
    assert keeps_pre_task_group("embed") and not keeps_pre_task_group("classify")
    topics = Topics("p")
    assert topics.inference_group() == "p-inference"
    assert topics.inference_group("embed") == "p-inference"
    assert topics.inference_group("entities") == "p-inference-entities"


@pytest.mark.parametrize("task_class", [EmbedTask, ClassifyTask, EntitiesTask, SentimentTask])
def test_tasks_that_declare_nothing_have_no_document_step_and_reuse_as_configured(task_class: Any) -> None:
    assert not has_document_step(task_class)
    assert not always_reuses_stored(task_class)


def test_generate_declares_its_document_step_and_that_its_answers_are_always_reused() -> None:
    assert has_document_step(GenerateTask) and always_reuses_stored(GenerateTask)
    task, _ = scripted_task(lambda body: chat_answer("x"))
    assert has_document_step(task) and always_reuses_stored(task)
    assert isinstance(task, DocumentStepTask)


def test_generates_document_step_is_its_reduction_with_the_requests_prompt() -> None:
    task, _ = scripted_task(lambda body: chat_answer("Both.", prompt=20, completion=2), context_tokens=512,
                            max_tokens=64)
    output = {"kind": "summarize", "chunk_summaries": [{"index": 0, "text": "One."}, {"index": 1, "text": "Two."}],
              "prompt_tokens": 10, "completion_tokens": 4, "document_step": "pending"}
    shorter = Prompt("summarize", "In three words.")
    assert task.finish_document(dict(output), TaskRequest("generate")) == \
        task.reduce_document(dict(output), DEFAULT_PROMPT)
    assert task.finish_document(dict(output), TaskRequest("generate", prompt=shorter)) == \
        task.reduce_document(dict(output), shorter)


def test_a_faulty_runner_keeps_the_declarations_of_the_task_it_wraps() -> None:
    generate, _ = scripted_task(lambda body: chat_answer("x"))
    faults = FaultSettings(inference_delay_ms=1)
    wrapped = FaultyTask(generate, faults)
    assert has_document_step(wrapped) and always_reuses_stored(wrapped)


class _NoStep:
    name: ClassVar[str] = "mine"


def test_the_document_stage_refuses_a_task_without_a_document_step(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    with pytest.raises(ConfigError) as refused:
        DocumentStage(cast(DocumentStepTask, _NoStep()), store, Topics("t"))
    assert refused.value.code == "task_unavailable"
    store.close()


def _result(doc_id: str, model_id: str, task: str) -> DocumentResultRow:
    return DocumentResultRow(doc_id, model_id, "j", "completed", 2, 0, 10, [0.5] if task == "embed" else [], "c", AT,
                             task=task)


def test_a_resumed_run_counts_embed_under_the_jobs_model_and_other_tasks_under_any(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.migrate()
    store.upsert_document_result(_result("d1", "bge@1", "embed"))
    store.upsert_document_result(_result("d2", "other@1", "embed"))  # a replay under another model
    store.upsert_document_result(_result("d2", "cls@1", "classify"))
    store.upsert_document_result(_result("d1", "cls@1", "classify"))
    found = _resumed_result(store, "d1", ["embed"], "bge@1")
    assert found is not None and (found.model_id, found.task) == ("bge@1", "embed")
    assert _resumed_result(store, "d2", ["embed"], "bge@1") is None
    assert _resumed_result(store, "d2", ["embed", "classify"], "bge@1") is None
    both = _resumed_result(store, "d1", ["classify", "embed"], "bge@1")
    assert both is not None and both.task == "classify"
    assert _resumed_result(store, "d2", ["classify"], "bge@1") is not None
    assert _resumed_result(store, "d3", ["embed"], "bge@1") is None
    store.close()


def test_the_task_defaults_of_records_and_rows_are_the_pre_task_task() -> None:
    """A record or row without a task field reads as the task of before tasks: every schema's ``task`` default and
    the rows generated from them (the Avro default must stay a literal, so this test ties it to the rule)."""
    import json
    from dataclasses import MISSING, fields

    from docstream.records import RECORD_TYPES
    from docstream.store.base import ChunkRow

    schemas = Path(__file__).resolve().parents[4] / "schemas"
    defaults = {path.stem: field["default"] for path in schemas.glob("*.avsc")
                for field in json.loads(path.read_text())["fields"] if field["name"] == "task"}
    assert defaults == {"ChunkResult": PRE_TASK_TASK, "DocumentCompleted": None}
    assert task_of(defaults["DocumentCompleted"]) == PRE_TASK_TASK
    for record in [RECORD_TYPES["ChunkResult"], ChunkRow, DocumentResultRow]:
        task = next(f for f in fields(record) if f.name == "task")  # type: ignore[arg-type]
        assert task.default is not MISSING and task.default == PRE_TASK_TASK, record
