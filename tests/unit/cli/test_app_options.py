"""docstream_cli.app.apply_cli_options: command-line options beat the environment and the config file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docstream.errors import ConfigError
from docstream.settings import load_settings
from docstream_cli.app import app, apply_cli_options


def test_given_options_beat_env_and_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "docstream.toml"
    config.write_text('[api]\nhost = "10.0.0.1"\nport = 8000\n[metrics]\nport = 9000\n')
    monkeypatch.setenv("DOCSTREAM_API__PORT", "8001")
    monkeypatch.setenv("DOCSTREAM_METRICS__HOST", "10.0.0.2")
    settings = load_settings(config)
    assert (settings.api.host, settings.api.port, settings.metrics.port) == ("10.0.0.1", 8001, 9000)

    flagged = apply_cli_options(settings, api={"host": "127.0.0.1", "port": 8090},
                                metrics={"host": "127.0.0.3", "port": 9100})
    assert (flagged.api.host, flagged.api.port) == ("127.0.0.1", 8090)
    assert (flagged.metrics.host, flagged.metrics.port) == ("127.0.0.3", 9100)
    assert flagged.api.max_upload_bytes == settings.api.max_upload_bytes  # the rest of the section stays


def test_options_not_given_leave_the_settings() -> None:
    settings = load_settings(api={"port": 8001})
    assert apply_cli_options(settings, api={"host": None, "port": None}) is settings
    assert apply_cli_options(settings, api={"host": None, "port": 8090}).api.host == settings.api.host


def test_an_invalid_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid option"):
        apply_cli_options(load_settings(), metrics={"port": 70_000})


@pytest.mark.parametrize("argv", [["api", "--port", "0"], ["api", "--port", "65536"],
                                  ["chunker", "--metrics-port", "-1"], ["reducer", "--metrics-port", "x"]])
def test_out_of_range_ports_are_refused_before_anything_starts(argv: list[str]) -> None:
    assert CliRunner().invoke(app, argv).exit_code == 2


@pytest.mark.parametrize("command", ["api", "ingest", "chunker", "inference", "reducer"])
def test_every_server_command_has_its_address_options(command: str) -> None:
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    for option in (("--host", "--port") if command == "api" else ("--metrics-port", "--metrics-host")):
        assert option in text


def test_replay_takes_a_timeout_and_refuses_a_negative_one_before_anything_starts() -> None:
    text = CliRunner().invoke(app, ["replay", "--help"], env={"COLUMNS": "200"}).output
    assert "--timeout" in text and "give up processing the replay after N seconds" in " ".join(text.split())
    refused = CliRunner().invoke(app, ["replay", "--service", "chunker", "--to-offset", "earliest", "--timeout", "-1"])
    assert refused.exit_code == 2


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_docstream_run_lets_openmp_threads_sleep_unless_the_environment_names_a_policy(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str | None, expected: str) -> None:
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    seen: dict[str, str | None] = {}

    def run_command(paths: list[str], **_: object) -> int:  # what the run would start with
        seen["policy"] = os.environ.get("OMP_WAIT_POLICY")
        return 0

    monkeypatch.setattr("docstream_cli.runner.run_command", run_command)
    monkeypatch.setattr("docstream_cli.app._exit_now", lambda code: None)
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    assert seen == {"policy": expected}
