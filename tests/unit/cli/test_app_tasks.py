"""`--task` and `--labels` on `docstream submit` and `docstream run`: parsed and refused before any work starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from docstream.settings import Settings
from docstream_cli.app import app
from docstream_cli.runner import run_command


@pytest.mark.parametrize("command", ["submit", "run"])
def test_submit_and_run_take_task_and_labels(command: str) -> None:
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    assert "--task" in text and "--labels" in text


@pytest.mark.parametrize(("argv", "code"), [
    (["--labels", "sport,finance"], "labels_without_classify"),
    (["--task", "embed", "--task", "entities", "--labels", "sport"], "labels_without_classify"),
    (["--task", "classify", "--labels", " , "], "labels_invalid"),
    (["--task", "classify", "--labels", "[not json"], "labels_invalid"),
    (["--task", "Not-A-Name"], "task_invalid"),
    (["--task", "nowhere.at.all:Task"], "task_unavailable"),
])
def test_submit_refuses_bad_tasks_before_printing_a_job_id(tmp_path: Path, argv: list[str], code: str) -> None:
    result = CliRunner().invoke(app, ["submit", str(tmp_path), *argv], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert result.stdout == ""  # no job id: nothing was started
    assert f"error [{code}]" in result.stderr


@pytest.mark.parametrize(("tasks", "labels", "message"), [
    (["entities"], "sport", "labels_without_classify"),
    (["classify"], None, "labels_missing"),
    (["embed", "embed"], None, "task_invalid"),
])
def test_run_refuses_bad_tasks_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tasks: list[str], labels: str | None, message: str
) -> None:
    code = run_command([str(tmp_path)], settings=Settings(), out=None, state_dir=tmp_path / "state",
                       tasks=tasks, labels=labels)
    assert code == 2
    assert message in capsys.readouterr().out
    assert not (tmp_path / "state").exists()
