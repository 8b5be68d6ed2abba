"""The Infinity fixture's refusal when its virtualenv is not installed (nothing is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.infinity import INSTALL_COMMAND, InfinityServer, MissingInfinityError


def test_a_missing_infinity_venv_says_how_to_install_it(tmp_path: Path) -> None:
    server = InfinityServer(tmp_path / "logs", venv=tmp_path / "no-venv")
    with pytest.raises(MissingInfinityError, match=INSTALL_COMMAND):
        server.start()
    assert not server.process.alive()


def test_the_command_line_serves_the_bundled_model_under_v1_with_a_key(tmp_path: Path) -> None:
    server = InfinityServer(tmp_path, venv=tmp_path / "venv")
    argv = server.argv()
    assert argv[:2] == [str(tmp_path / "venv" / "bin" / "infinity_emb"), "v2"]
    assert argv[argv.index("--api-key") + 1] == server.api_key
    assert argv[argv.index("--url-prefix") + 1] == "/v1"
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    assert (Path(argv[argv.index("--model-id") + 1]) / "modules.json").is_file()
