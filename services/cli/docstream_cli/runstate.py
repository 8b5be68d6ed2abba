"""What a `docstream run` leaves in its state dir, and which store the other commands read: pure.

``docstream run`` writes ``<state-dir>/run.json`` (``RunRecord``, versioned) when its job starts and
again when it finishes. ``docstream status|results|search|dlq|replay`` then choose their store with
``choose_store``, one rule (docs/storage.md, "Which store a command reads"):

1. settings that name a store (``DOCSTREAM_STORE__*``, ``DOCSTREAM_CASSANDRA__*``, or those sections
   of a ``--config`` file) win;
2. else ``--state-dir DIR``: the run recorded there (none there: an error);
3. else ``./.docstream`` when it holds a run;
4. else the configured store (by default Cassandra).

A run's broker is the state dir's own Kafka (``<state-dir>/kafka``), which keeps the run's topics, or the
cluster the run's settings named. ``run_broker`` says which one ``dlq``/``replay`` read: the settings' when
they name a broker, else the run's. No I/O here: callers read the files and the settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from docstream.errors import ConfigError, InputError

__all__ = [
    "EMBEDDED",
    "LOCAL_STATE_DIR",
    "RUN_FILE",
    "RUN_RECORD_VERSION",
    "RunBroker",
    "RunRecord",
    "StoreSource",
    "choose_store",
    "decode_run_record",
    "encode_run_record",
    "run_broker",
    "run_label",
]

RUN_FILE = "run.json"
"""The file of a state dir that says a run was made there."""
RUN_RECORD_VERSION = 2
EMBEDDED = "embedded"
"""``RunRecord.broker`` of a run on its state dir's own Kafka."""
LOCAL_STATE_DIR = ".docstream"
"""The state dir of `docstream run` by default, and the one the readers look for in the working directory."""
_MAX_RECORD_CHARS = 64 * 1024

StoreOrigin = Literal["settings", "state_dir", "local_run", "configured"]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """``<state-dir>/run.json``: what one `docstream run` used.

    Attributes:
        state_dir: the absolute state dir.
        sqlite_path: the absolute SQLite file of its result store.
        job_id: the run's job (the store keeps the jobs of earlier runs too).
        model_id: the model the run recorded its results under.
        model_path: the model folder it loaded (None: the bundled model).
        started_at: when the job started (UTC).
        finished_at: when it finished (None: running, or it stopped before the end).
        broker: ``embedded`` (the state dir's Kafka, ``<state-dir>/kafka``) or the bootstrap servers of the
            cluster the run's settings named.
        topic_prefix: the run's topic prefix.
        reducer_app_id: the run's reducer app id (its consumer group and changelog topics).
        version: the format of the file (1: a run on the memory broker of earlier versions, whose topics are
            gone; read as ``embedded``).
    """

    state_dir: str
    sqlite_path: str
    job_id: str
    model_id: str
    model_path: str | None
    started_at: datetime
    finished_at: datetime | None = None
    broker: str = EMBEDDED
    topic_prefix: str = "docstream"
    reducer_app_id: str = "docstream-reducer"
    version: int = RUN_RECORD_VERSION


@dataclass(frozen=True, slots=True)
class StoreSource:
    """Where a reading command's store comes from (``choose_store``).

    Attributes:
        origin: ``settings`` (they name a store), ``state_dir`` (``--state-dir``), ``local_run``
            (``./.docstream``) or ``configured`` (the settings' store, by default Cassandra).
        run: the run whose store it is (``state_dir`` and ``local_run``).
        ignored_state_dir: a ``--state-dir`` given while the settings named the store.
    """

    origin: StoreOrigin
    run: RunRecord | None = None
    ignored_state_dir: str | None = None


def encode_run_record(record: RunRecord) -> str:
    """``record`` as the JSON text of ``run.json``."""
    body: dict[str, Any] = {
        "version": record.version,
        "state_dir": record.state_dir,
        "store": {"backend": "sqlite", "path": record.sqlite_path},
        "broker": record.broker,
        "topic_prefix": record.topic_prefix,
        "reducer_app_id": record.reducer_app_id,
        "job_id": record.job_id,
        "model_id": record.model_id,
        "model_path": record.model_path,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }
    return json.dumps(body, indent=2) + "\n"


def decode_run_record(text: str, *, where: str = RUN_FILE) -> RunRecord:
    """Parse the JSON text of ``run.json`` (``where`` names it in errors).

    Raises:
        ConfigError: not a run record (``run_record_invalid``), or one of a newer format
            (``run_record_version``).
    """
    if len(text) > _MAX_RECORD_CHARS:
        raise ConfigError(f"{where} is not a docstream run record (too large)", code="run_record_invalid")
    try:
        body = json.loads(text)
        version = int(body["version"])
        if version > RUN_RECORD_VERSION:
            raise ConfigError(f"{where} has format {version}, written by a newer docstream (this one reads "
                              f"{RUN_RECORD_VERSION})", code="run_record_version")
        store = body["store"]
        if store.get("backend") != "sqlite":
            raise ValueError(f"store backend {store.get('backend')!r}")
        finished = body.get("finished_at")
        return RunRecord(
            state_dir=_text(body["state_dir"]), sqlite_path=_text(store["path"]), job_id=_text(body["job_id"]),
            model_id=_text(body["model_id"]), model_path=body.get("model_path") and _text(body["model_path"]),
            started_at=_aware(body["started_at"]), finished_at=_aware(finished) if finished else None,
            broker=_text(body["broker"]) if version >= 2 else EMBEDDED,
            topic_prefix=_text(body.get("topic_prefix", "docstream")),
            reducer_app_id=_text(body.get("reducer_app_id", "docstream-reducer")), version=version,
        )
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{where} is not a docstream run record: {exc}", code="run_record_invalid") from exc


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {type(value).__name__}")
    return value


def _aware(value: Any) -> datetime:
    moment = datetime.fromisoformat(_text(value))
    if moment.tzinfo is None:
        raise ValueError(f"time without a zone: {value!r}")
    return moment


def choose_store(
    *,
    settings_name_store: bool,
    state_dir: str | None,
    state_dir_run: RunRecord | None,
    local_run: RunRecord | None,
) -> StoreSource:
    """Which store a reading command uses: the rule of this module's docstring, in one place.

    Args:
        settings_name_store: the settings (environment or ``--config``) set the store or Cassandra sections.
        state_dir: the ``--state-dir`` option, as given (None: not given).
        state_dir_run: the run recorded in ``state_dir`` (None: none there, or not given).
        local_run: the run recorded in ``./.docstream`` (None: none).

    Raises:
        InputError: ``--state-dir`` names a folder without a run (``no_run_state``).
    """
    if settings_name_store:
        return StoreSource("settings", ignored_state_dir=state_dir)
    if state_dir is not None:
        if state_dir_run is None:
            raise InputError(f"--state-dir {state_dir} holds no docstream run (no {RUN_FILE}); give the folder "
                             "`docstream run --state-dir` used", code="no_run_state")
        return StoreSource("state_dir", state_dir_run)
    if local_run is not None:
        return StoreSource("local_run", local_run)
    return StoreSource("configured")


def run_label(run: RunRecord) -> str:
    """``docstream run of <start> (…)``: which run a store belongs to, for the ``store:`` line."""
    started = run.started_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    ended = "" if run.finished_at else ", not finished"
    return f"docstream run of {started}, job {run.job_id}{ended}"


@dataclass(frozen=True, slots=True)
class RunBroker:
    """The broker a ``dlq``/``replay`` command reads for a run (``run_broker``).

    Attributes:
        run: the run.
        state_dir: the run's state dir when its broker is its own (``<state-dir>/kafka``), else None.
        bootstrap_servers: the cluster the run's settings named, else None.
    """

    run: RunRecord
    state_dir: str | None
    bootstrap_servers: str | None


def run_broker(source: StoreSource, *, settings_name_broker: bool) -> RunBroker | None:
    """The run's broker a ``dlq``/``replay`` command reads, or None: the settings' broker (they name one,
    ``DOCSTREAM_KAFKA__*`` or ``--config``), or no run is involved.

    Args:
        source: the store choice of the command (``choose_store``).
        settings_name_broker: the settings set the kafka section.
    """
    if settings_name_broker or source.run is None:
        return None
    run = source.run
    if run.broker == EMBEDDED:
        return RunBroker(run, run.state_dir, None)
    return RunBroker(run, None, run.broker)
