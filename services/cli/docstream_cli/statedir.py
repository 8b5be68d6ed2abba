"""The state dir of `docstream run` on disk, and the settings the reading commands resolve from it.

``write_run_record``/``read_run_record`` keep ``<state-dir>/run.json``; ``resolve_reader`` applies
the rule of ``docstream_cli.runstate.choose_store`` to the settings, the ``--state-dir`` option and
the working directory, and ``store_line`` is what each command prints on stderr about it. ``reader_broker``
gives ``dlq``/``replay`` the run's broker for their duration.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from docstream.errors import ConfigError
from docstream.settings import Settings
from docstream_cli.embedded_kafka import BrokerBusyError, EmbeddedKafka, running_broker
from docstream_cli.runstate import (
    LOCAL_STATE_DIR,
    RUN_FILE,
    RunBroker,
    RunRecord,
    StoreSource,
    choose_store,
    decode_run_record,
    encode_run_record,
    run_broker,
    run_label,
)

__all__ = ["ReaderSettings", "read_run_record", "reader_broker", "resolve_reader", "store_line",
           "write_run_record"]

_STORE_SECTIONS = frozenset({"store", "cassandra"})


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    """The settings a reading command runs with, and where its store came from.

    Attributes:
        settings: the settings, pointed at the chosen store.
        source: where the store came from.
        named: the sections the user's settings set (environment or ``--config``), before any change.
    """

    settings: Settings
    source: StoreSource
    named: frozenset[str] = frozenset()


def write_run_record(state_dir: Path, record: RunRecord) -> None:
    """Write ``<state_dir>/run.json`` atomically (a reader never sees half of it)."""
    path = state_dir / RUN_FILE
    partial = path.with_name(f".{RUN_FILE}.{os.getpid()}")
    partial.write_text(encode_run_record(record), encoding="utf-8")
    partial.replace(path)


def read_run_record(state_dir: Path) -> RunRecord | None:
    """The run recorded in ``state_dir``, or None when there is none.

    Raises:
        ConfigError: ``run.json`` is there but unreadable or not a run record.
    """
    path = state_dir / RUN_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", code="run_record_invalid") from exc
    return decode_run_record(text, where=str(path))


def resolve_reader(settings: Settings, *, state_dir: str | None, cwd: Path | None = None) -> ReaderSettings:
    """``settings`` pointed at the store ``choose_store`` picks (a run's SQLite file, or as they are).

    A run's store comes with the run's model, unless the settings name one (``search`` embeds its
    query with it).

    Raises:
        InputError: ``--state-dir`` names a folder without a run.
        ConfigError: a ``run.json`` is unreadable.
    """
    named = frozenset(settings.model_fields_set)
    names_store = bool(_STORE_SECTIONS & named)
    given = Path(state_dir).expanduser() if state_dir is not None else None
    source = choose_store(
        settings_name_store=names_store,
        state_dir=state_dir,
        state_dir_run=read_run_record(given) if given is not None and not names_store else None,
        local_run=read_run_record((cwd or Path.cwd()) / LOCAL_STATE_DIR) if not names_store and given is None else None,
    )
    if source.run is None:
        return ReaderSettings(settings, source, named)
    overrides: dict[str, dict[str, object]] = {"store": {"backend": "sqlite", "sqlite_path": source.run.sqlite_path}}
    if "inference" not in named:
        overrides["inference"] = {"model_id": source.run.model_id, "model_path": source.run.model_path}
    return ReaderSettings(settings.with_overrides(**overrides), source, named)


def store_line(reader: ReaderSettings) -> str:
    """``store: sqlite /abs/.docstream/docstream.db (docstream run of …)`` or ``store: cassandra host:port/ks (…)``."""
    settings, source = reader.settings, reader.source
    if settings.store.backend == "sqlite":
        where = f"sqlite {Path(settings.store.sqlite_path).resolve()}"
    else:
        cassandra = settings.cassandra
        where = f"cassandra {','.join(cassandra.contact_points)}:{cassandra.port}/{cassandra.keyspace}"
    if source.run is not None:
        why = run_label(source.run)
    elif source.origin == "settings":
        why = "from the settings"
        if source.ignored_state_dir is not None:
            why += f"; --state-dir {source.ignored_state_dir} ignored"
    else:
        why = f"the configured store: no docstream run in ./{LOCAL_STATE_DIR}"
    return f"store: {where} ({why})"


@contextlib.contextmanager
def reader_broker(reader: ReaderSettings) -> Iterator[tuple[Settings, str, RunBroker | None]]:
    """The settings of a ``dlq``/``replay`` command pointed at its broker while the block runs, the
    ``broker: …`` line it prints, and the run whose broker it is (None: the settings' broker).

    The settings' broker when they name one (or no run is involved); else the run's: the cluster it named, or
    its state dir's own Kafka (``<state-dir>/kafka``): the live one when a process runs it (a run going on),
    else one started for the block and stopped after it. The run's topic prefix and reducer app id come along.

    Raises:
        ConfigError: the state dir's broker cannot start (no Java, no jars: the message names the fix).
        FatalError: it did not come up.
    """
    choice = run_broker(reader.source, settings_name_broker="kafka" in reader.named)
    if choice is None:
        yield reader.settings, f"broker: kafka {reader.settings.kafka.bootstrap_servers}", None
        return
    run = choice.run

    def pointed(bootstrap: str) -> Settings:
        return reader.settings.with_overrides(kafka={"bootstrap_servers": bootstrap, "topic_prefix": run.topic_prefix},
                                              reducer={"app_id": run.reducer_app_id})

    label = run_label(run)
    if choice.bootstrap_servers is not None:
        yield pointed(choice.bootstrap_servers), f"broker: kafka {choice.bootstrap_servers} ({label})", choice
        return
    folder = Path(run.state_dir) / "kafka"
    live = running_broker(folder)
    if live is None:
        broker = EmbeddedKafka(folder)
        try:
            broker.start()
        except BrokerBusyError as busy:  # its owner is starting it, or stopping: theirs if it answers
            if busy.bootstrap_servers is None:
                raise
            live = busy.bootstrap_servers
        else:
            try:
                yield pointed(broker.bootstrap_servers), f"broker: kafka {broker.bootstrap_servers} (started " \
                    f"for this command from {folder}; {label})", choice
            finally:
                broker.stop()
            return
    yield pointed(live), f"broker: kafka {live} (the running broker of {folder}; {label})", choice
