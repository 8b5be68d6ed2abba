"""docstream.logging: secrets never reach a log line; figures that merely mention tokens do."""

from __future__ import annotations

import pytest

from docstream.logging import _drop_secrets


@pytest.mark.parametrize("key", ["password", "sasl_password", "api_key", "secret", "client_secret", "token",
                                 "auth_token", "bearer_token", "credentials", "ApiKey"])
def test_secret_fields_are_masked(key: str) -> None:
    assert _drop_secrets(None, "info", {key: "hunter2", "event": "x"}) == {key: "***", "event": "x"}


@pytest.mark.parametrize("key", ["token_count", "tokens", "max_tokens", "chunk_max_tokens", "overlap_tokens",
                                 "prompt_token_count"])
def test_token_figures_are_kept(key: str) -> None:
    assert _drop_secrets(None, "info", {key: 230}) == {key: 230}
