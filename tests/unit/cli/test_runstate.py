"""Which store the reading commands use after `docstream run`: the rule (pure), run.json, the settings it gives."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.errors import ConfigError, InputError
from docstream.settings import load_settings
from docstream_cli.runstate import (
    EMBEDDED,
    RUN_FILE,
    RunRecord,
    StoreSource,
    choose_store,
    decode_run_record,
    encode_run_record,
    run_broker,
    run_label,
)
from docstream_cli.statedir import read_run_record, reader_broker, resolve_reader, store_line, write_run_record

_STARTED = datetime(2026, 12, 1, 16, 27, 52, tzinfo=UTC)


def _run(state_dir: str = "/work/a/.docstream", **fields: object) -> RunRecord:
    record = RunRecord(state_dir=state_dir, sqlite_path=f"{state_dir}/docstream.db", job_id="job-1",
                       model_id="all-MiniLM-L6-v2", model_path=None, started_at=_STARTED)
    return replace(record, **fields)  # type: ignore[arg-type]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No DOCSTREAM_* variable of the machine running the tests leaks into the settings."""
    for name in [k for k in os.environ if k.startswith("DOCSTREAM_")]:
        monkeypatch.delenv(name)
    return monkeypatch


# the rule --------------------------------------------------------------------------------------


def test_settings_that_name_a_store_win_over_every_run() -> None:
    source = choose_store(settings_name_store=True, state_dir=None, state_dir_run=None, local_run=_run())
    assert source == StoreSource("settings")


def test_settings_that_name_a_store_win_over_state_dir_and_say_it_is_ignored() -> None:
    source = choose_store(settings_name_store=True, state_dir="elsewhere", state_dir_run=_run("/x"), local_run=None)
    assert source.origin == "settings" and source.run is None and source.ignored_state_dir == "elsewhere"


def test_state_dir_wins_over_the_local_run() -> None:
    theirs, local = _run("/elsewhere"), _run("/here/.docstream")
    source = choose_store(settings_name_store=False, state_dir="/elsewhere", state_dir_run=theirs, local_run=local)
    assert source == StoreSource("state_dir", theirs)


def test_a_state_dir_without_a_run_is_refused_not_replaced_by_another_store() -> None:
    with pytest.raises(InputError) as refused:
        choose_store(settings_name_store=False, state_dir="/tmp/nothing", state_dir_run=None, local_run=_run())
    assert refused.value.code == "no_run_state"
    assert "/tmp/nothing" in refused.value.message and RUN_FILE in refused.value.message


def test_the_local_run_is_used_when_nothing_else_is_said() -> None:
    local = _run()
    assert choose_store(settings_name_store=False, state_dir=None, state_dir_run=None, local_run=local) == StoreSource(
        "local_run", local)


def test_without_any_run_the_configured_store_is_used() -> None:
    assert choose_store(settings_name_store=False, state_dir=None, state_dir_run=None, local_run=None) == StoreSource(
        "configured")


# run.json --------------------------------------------------------------------------------------


def test_a_run_record_survives_its_json() -> None:
    finished = _run(model_path="/models/mine", finished_at=datetime(2026, 12, 1, 16, 28, 3, tzinfo=UTC))
    assert decode_run_record(encode_run_record(finished)) == finished
    assert decode_run_record(encode_run_record(_run())) == _run()


@pytest.mark.parametrize(("text", "code"), [
    ("not json", "run_record_invalid"),
    ("[]", "run_record_invalid"),
    ('{"version": 1}', "run_record_invalid"),
    ('{"version": 99, "store": {}}', "run_record_version"),
    ("x" * 70_000, "run_record_invalid"),
])
def test_what_is_not_a_run_record_is_a_config_error(text: str, code: str) -> None:
    with pytest.raises(ConfigError) as bad:
        decode_run_record(text, where="/s/run.json")
    assert bad.value.code == code
    assert "/s/run.json" in bad.value.message


def test_a_record_with_a_naive_time_or_another_store_is_refused() -> None:
    good = encode_run_record(_run())
    for text in (good.replace("+00:00", ""), good.replace('"sqlite"', '"cassandra"')):
        with pytest.raises(ConfigError):
            decode_run_record(text)


def test_the_label_names_the_run_its_job_and_whether_it_finished() -> None:
    assert run_label(_run()) == "docstream run of 2026-12-01 16:27:52 UTC, job job-1, not finished"
    assert run_label(_run(finished_at=_STARTED)) == "docstream run of 2026-12-01 16:27:52 UTC, job job-1"


# the broker of a run ---------------------------------------------------------------------------


def test_dlq_and_replay_read_the_runs_own_broker_or_the_cluster_it_named() -> None:
    own = run_broker(StoreSource("local_run", _run()), settings_name_broker=False)
    assert own is not None and own.state_dir == "/work/a/.docstream" and own.bootstrap_servers is None
    named = run_broker(StoreSource("state_dir", _run(broker="10.0.0.5:9092", topic_prefix="t1")),
                       settings_name_broker=False)
    assert named is not None and named.state_dir is None and named.bootstrap_servers == "10.0.0.5:9092"


def test_dlq_and_replay_go_on_with_a_named_kafka_or_without_a_run() -> None:
    assert run_broker(StoreSource("state_dir", _run()), settings_name_broker=True) is None
    assert run_broker(StoreSource("configured"), settings_name_broker=False) is None


def test_a_record_of_the_memory_broker_era_reads_as_a_run_on_its_own_broker() -> None:
    text = encode_run_record(_run()).replace('"version": 2', '"version": 1').replace('"broker": "embedded"',
                                                                                  '"broker": "memory"')
    old = decode_run_record(text)
    assert old.version == 1 and old.broker == EMBEDDED and old.topic_prefix == "docstream"


def test_the_record_keeps_the_broker_prefix_and_app_id() -> None:
    record = _run(broker="10.0.0.5:9092", topic_prefix="t1", reducer_app_id="t1-reducer")
    assert decode_run_record(encode_run_record(record)) == record


# on disk and in the settings --------------------------------------------------------------------


def test_run_json_is_written_and_read_back(tmp_path: Path) -> None:
    assert read_run_record(tmp_path) is None
    write_run_record(tmp_path, _run(str(tmp_path)))
    assert read_run_record(tmp_path) == _run(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [RUN_FILE]  # no partial file left behind


def test_an_unreadable_run_json_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError):
        read_run_record(tmp_path)


def _made_run(folder: Path, **fields: object) -> RunRecord:
    state = folder / ".docstream"
    state.mkdir(parents=True)
    record = _run(str(state), **fields)
    write_run_record(state, record)
    return record


def test_in_the_folder_of_a_run_the_readers_get_its_sqlite_store_and_model(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record = _made_run(tmp_path, model_id="mine", model_path="/models/mine")
    reader = resolve_reader(load_settings(), state_dir=None, cwd=tmp_path)
    assert reader.source == StoreSource("local_run", record)
    assert reader.settings.store.backend == "sqlite"
    assert str(reader.settings.store.sqlite_path) == record.sqlite_path
    assert (reader.settings.inference.model_id, reader.settings.inference.model_path) == ("mine", "/models/mine")
    assert store_line(reader) == (f"store: sqlite {record.sqlite_path} (docstream run of 2026-12-01 16:27:52 UTC, "
                                  "job job-1, not finished)")


def test_state_dir_finds_the_run_from_another_folder(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    record = _made_run(tmp_path / "project")
    (tmp_path / "elsewhere").mkdir()
    reader = resolve_reader(load_settings(), state_dir=record.state_dir, cwd=tmp_path / "elsewhere")
    assert reader.source.origin == "state_dir"
    assert str(reader.settings.store.sqlite_path) == record.sqlite_path


def test_store_settings_in_the_environment_win_over_the_run(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _made_run(tmp_path)
    clean_env.setenv("DOCSTREAM_CASSANDRA__PORT", "9042")
    reader = resolve_reader(load_settings(), state_dir=None, cwd=tmp_path)
    assert reader.source.origin == "settings"
    assert store_line(reader) == "store: cassandra 127.0.0.1:9042/docstream (from the settings)"


def test_a_model_in_the_settings_is_kept_with_a_runs_store(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _made_run(tmp_path, model_id="mine")
    clean_env.setenv("DOCSTREAM_INFERENCE__MODEL_ID", "theirs")
    assert resolve_reader(load_settings(), state_dir=None, cwd=tmp_path).settings.inference.model_id == "theirs"


def test_without_a_run_the_line_says_why_the_configured_store(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reader = resolve_reader(load_settings(), state_dir=None, cwd=tmp_path)
    assert reader.source.origin == "configured"
    assert store_line(reader) == ("store: cassandra 127.0.0.1:19042/docstream "
                                  "(the configured store: no docstream run in ./.docstream)")


def test_a_named_kafka_lets_dlq_read_it_beside_a_run(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _made_run(tmp_path, broker="10.0.0.5:9092", topic_prefix="t1", reducer_app_id="t1-reducer")
    with reader_broker(resolve_reader(load_settings(), state_dir=None, cwd=tmp_path)) as (settings, line, run):
        assert settings.kafka.bootstrap_servers == "10.0.0.5:9092" and settings.kafka.topic_prefix == "t1"
        assert settings.reducer.app_id == "t1-reducer" and line.startswith("broker: kafka 10.0.0.5:9092 (")
        assert run is not None and run.bootstrap_servers == "10.0.0.5:9092" and run.state_dir is None
    clean_env.setenv("DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    with reader_broker(resolve_reader(load_settings(), state_dir=None, cwd=tmp_path)) as (settings, line, run):
        assert settings.kafka.bootstrap_servers == "127.0.0.1:19092" and settings.kafka.topic_prefix == "docstream"
        assert line == "broker: kafka 127.0.0.1:19092" and run is None
