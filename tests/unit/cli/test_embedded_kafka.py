"""The embedded broker's checks before any JVM starts: Java, the jars, who owns a folder (no broker is started)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from docstream.errors import ConfigError
from docstream_cli.embedded_kafka import KAFKA_JARS_ENV, java_binary, kafka_jars, running_broker


def test_no_java_names_the_fix_and_the_java_home_that_holds_none(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(ConfigError) as missing:
        java_binary()
    assert missing.value.code == "java_missing"
    assert f"JAVA_HOME={tmp_path / 'jdk'} holds no bin/java" in missing.value.message
    assert "make setup" in missing.value.message and "default-jre-headless" in missing.value.message


def test_an_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(ConfigError) as old:
        java_binary()
    assert old.value.code == "java_too_old" and "Java 11" in old.value.message


def test_a_folder_without_kafka_jars_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(KAFKA_JARS_ENV, str(tmp_path))
    (tmp_path / "log4j-core-2.25.3.jar").write_bytes(b"")
    with pytest.raises(ConfigError) as missing:
        kafka_jars()
    assert missing.value.code == "kafka_jars_missing" and "make setup" in missing.value.message
    (tmp_path / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    assert kafka_jars() == tmp_path.resolve()


def test_a_folder_has_a_running_broker_only_while_its_owner_and_its_jvm_live(tmp_path: Path) -> None:
    assert running_broker(tmp_path) is None  # no broker.json
    (tmp_path / "broker.json").write_text("not json")
    assert running_broker(tmp_path) is None
    # a live owner (this process) whose JVM pid is not a JVM of this folder (a reused pid): nothing runs
    owner = {"pid": os.getpid(), "jvm_pid": os.getpid(), "bootstrap_servers": "127.0.0.1:1"}
    (tmp_path / "broker.json").write_text(json.dumps(owner))
    assert running_broker(tmp_path) is None
