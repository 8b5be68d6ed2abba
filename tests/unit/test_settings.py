"""Settings: env vars, TOML file, validation, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from docstream.errors import ConfigError
from docstream.settings import Settings, load_settings


def test_defaults_are_valid() -> None:
    settings = load_settings()
    assert settings.chunker.max_tokens == 256
    assert settings.chunker.overlap_tokens == 32
    assert settings.inference.model_id == "all-MiniLM-L6-v2"
    assert settings.kafka.session_timeout_ms == 6000


def test_env_vars_use_prefix_and_nested_delimiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS", "broker-1:9092")
    monkeypatch.setenv("DOCSTREAM_INFERENCE__MAX_LATENCY_MS", "75")
    monkeypatch.setenv("DOCSTREAM_CASSANDRA__CONTACT_POINTS", '["c1", "c2"]')
    settings = load_settings()
    assert settings.kafka.bootstrap_servers == "broker-1:9092"
    assert settings.inference.max_latency_ms == 75
    assert settings.cassandra.contact_points == ["c1", "c2"]


def test_toml_file_below_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "docstream.toml"
    config.write_text('[chunker]\nmax_tokens = 128\noverlap_tokens = 16\n[kafka]\ntopic_prefix = "t1"\n')
    monkeypatch.setenv("DOCSTREAM_KAFKA__TOPIC_PREFIX", "from-env")
    settings = load_settings(config)
    assert settings.chunker.max_tokens == 128
    assert settings.kafka.topic_prefix == "from-env"


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DOCSTREAM_CHUNKER__OVERLAP_TOKENS", "300"),
        ("DOCSTREAM_INFERENCE__MAX_BATCH_SIZE", "0"),
        ("DOCSTREAM_STORE__BACKEND", "postgres"),
        ("DOCSTREAM_KAFKA__NOT_A_SETTING", "1"),
    ],
)
def test_impossible_settings_are_refused(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError):
        load_settings()


def test_secrets_are_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSTREAM_KAFKA__SASL_PASSWORD", "hunter2")
    settings = load_settings()
    assert "hunter2" not in repr(settings)
    assert settings.kafka.sasl_password is not None
    assert settings.kafka.sasl_password.get_secret_value() == "hunter2"


def test_settings_are_frozen_and_overridable() -> None:
    settings = Settings()
    with pytest.raises(ValueError):
        settings.service = "x"  # type: ignore[misc]
    changed = settings.with_overrides(kafka={"topic_prefix": "other"})
    assert changed.kafka.topic_prefix == "other"
    assert settings.kafka.topic_prefix == "docstream"


def test_every_field_is_documented() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if not field.description:
                missing.append(f"{model.__name__}.{name}")
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                missing += walk(annotation)
        return missing

    assert walk(Settings) == []
