"""Settings: env vars, TOML file, validation, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from docstream.errors import ConfigError
from docstream.settings import Settings, load_settings, user_dir


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


def test_user_dir_follows_xdg_and_falls_back_to_home() -> None:
    assert user_dir("data", {"XDG_DATA_HOME": "/x/data", "HOME": "/h"}) == Path("/x/data/docstream")
    assert user_dir("data", {"HOME": "/h"}) == Path("/h/.local/share/docstream")
    assert user_dir("cache", {"XDG_CACHE_HOME": "/x/cache", "HOME": "/h"}) == Path("/x/cache/docstream")
    assert user_dir("cache", {"HOME": "/h"}) == Path("/h/.cache/docstream")
    # the XDG specification: a relative value is ignored
    assert user_dir("data", {"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/share/docstream")


def test_local_defaults_are_one_absolute_place_whatever_the_cwd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    seen = set()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        s = load_settings()
        seen.add((s.object_store.url, s.store.sqlite_path, s.reducer.data_dir))
    assert seen == {(str(tmp_path / "data/docstream/objects"), tmp_path / "data/docstream/docstream.db",
                     tmp_path / "data/docstream/reducer")}


@pytest.mark.parametrize("var", ["DOCSTREAM_OBJECT_STORE__URL", "DOCSTREAM_OBJECT_STORE__ALLOWED_ROOTS"])
@pytest.mark.parametrize("value", [".docstream/objects", "file:objects"])
def test_relative_object_store_paths_are_refused(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, f'["{value}"]' if var.endswith("ROOTS") else value)
    with pytest.raises(ConfigError, match="absolute path or a URL"):
        load_settings()


def test_object_store_paths_expand_home_and_keep_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setenv("DOCSTREAM_OBJECT_STORE__URL", "~/objects")
    monkeypatch.setenv("DOCSTREAM_OBJECT_STORE__ALLOWED_ROOTS", '["s3://bucket/in", "file:///srv/in", "/data"]')
    s = load_settings()
    assert s.object_store.url == "/home/u/objects"
    assert s.object_store.allowed_roots == ["s3://bucket/in", "file:///srv/in", "/data"]
