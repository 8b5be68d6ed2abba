"""The CLI's ends of issue 43, point 3: a deeply nested ``--schema`` file and a source no store could keep are
clear errors, refused before anything starts, never a RecursionError's traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from docstream.settings import Settings
from docstream_cli.app import app
from docstream_cli.ops.submit import PromptFlags
from docstream_cli.runner import run_command

# 1,200 levels in 14 KB: past json.loads' recursion limit, within the --schema file's size
DEEP = '{"properties": {"a": ' * 600 + "{}" + "}}" * 600


@pytest.fixture
def deep_schema(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(DEEP, encoding="utf-8")
    return path


def test_run_with_a_deeply_nested_schema_file_exits_2_with_a_clear_error(
    tmp_path: Path, deep_schema: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_command([str(tmp_path)], settings=Settings(), out=None, state_dir=tmp_path / "state",
                       tasks=["generate"], prompt=PromptFlags(schema_file=str(deep_schema)))
    out = capsys.readouterr().out
    assert code == 2, out
    assert "prompt_invalid" in out and "levels deep" in out and "Recursion" not in out
    assert not (tmp_path / "state").exists()


def test_submit_with_a_deeply_nested_schema_file_says_why_before_printing_a_job_id(
    tmp_path: Path, deep_schema: Path
) -> None:
    result = CliRunner().invoke(app, ["submit", str(tmp_path), "--task", "generate", "--schema", str(deep_schema)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output  # submit's status for any refusal (docs/cli: 1 nothing submitted)
    assert result.stdout == ""
    assert "error [prompt_invalid]" in result.stderr and "levels deep" in result.stderr
    assert not isinstance(result.exception, RecursionError)


@pytest.mark.parametrize("source", ["s3://b/a\x00.pdf", "s3://b/a\u2028.pdf", "s3://b/" + "😀" * 1100])
def test_delete_refuses_a_source_no_store_could_hold_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./.docstream run here: the settings' store is read
    result = CliRunner().invoke(app, ["delete", source, "--yes"],
                                env={"COLUMNS": "200", "DOCSTREAM_STORE__BACKEND": "sqlite",
                                     "DOCSTREAM_STORE__SQLITE_PATH": str(tmp_path / "s.db")})
    assert result.exit_code == 2, result.output
    assert "error: a source key" in result.stderr, result.output
    assert not (tmp_path / "s.db").exists()  # refused before the store was opened
