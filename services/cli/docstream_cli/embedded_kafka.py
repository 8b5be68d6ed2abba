"""EmbeddedKafka: a single-node Apache Kafka (KRaft, broker and controller in one JVM) that keeps its topics in a
folder, for ``docstream run`` and the commands that read a run's topics afterwards.

The jars are those ``deploy/local/stack`` fetches from Maven Central (one cache, ``kafka_jars``); the JVM runs
with flags for a fast start (C1 only, the serial collector, a 256 MiB heap) and a class-data archive
(AppCDS) that ``make setup`` records once (``prepare_class_archive``; a broker started without one records it
when it stops). It is ready when a produce is acknowledged.

One process owns a folder's broker at a time: ``start`` takes an exclusive lock on ``<folder>/lock`` (the
kernel drops it when the process dies, kill -9 included) and records the owner and the broker's address in
``<folder>/broker.json``; another process gets ``BrokerBusyError`` naming the owner, or the address of its live
broker (``running_broker``). The JVM gets SIGTERM when the process that started it dies (Linux), and a JVM left
by an owner that was killed is waited for (then killed) before the folder's broker starts again.

Layout of the folder: ``data/`` (the log dirs and the KRaft metadata), ``server.properties``,
``log4j2.properties``, ``kafka.log`` (the JVM's output), ``lock``, ``broker.json``.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from docstream.errors import ConfigError, FatalError
from docstream.logging import get_logger

__all__ = [
    "KAFKA_JARS_ENV",
    "BrokerBusyError",
    "EmbeddedKafka",
    "java_binary",
    "kafka_jars",
    "prepare_class_archive",
    "running_broker",
]

_log = get_logger(__name__)

KAFKA_JARS_ENV = "DOCSTREAM_KAFKA_JARS"
"""Environment variable naming the folder of the Kafka jars (default: deploy/local/stack's cache)."""
_STACK_HOME_ENV = "DOCSTREAM_STACK_HOME"
_JAVA_FIX = ("install a Java 17+ runtime: `make setup` does (Debian's default-jre-headless, as root), or "
             "`sudo apt-get install default-jre-headless`; or set JAVA_HOME")
_JARS_FIX = "run `make setup` (or `deploy/local/stack fetch kafka`), which fetches them from Maven Central once"
_READY_TOPIC = "__docstream_ready"
_PR_SET_PDEATHSIG = 1
_START_ATTEMPTS = 3
_MAX_LOG_BYTES = 8 * 1024 * 1024
_JVM_FLAGS = (
    "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xms64m", "-Xmx256m", "-XX:-UsePerfData",
    "-Djava.awt.headless=true", "-Xlog:cds=off", "-Xlog:cds+dynamic=off",
)
_STORAGE_FILES = ("meta.properties", "bootstrap.checkpoint")  # what Kafka's StorageTool writes for one node
_java_majors: dict[tuple[str, float], int] = {}
_RELEASED: list[subprocess.Popen[bytes]] = []
_QUIET = logging.getLogger("docstream.librdkafka.embedded")
_QUIET.setLevel(logging.ERROR)  # the readiness probe's clients: refused connections and leaderless partitions


class BrokerBusyError(ConfigError):
    """Another live process owns the folder's broker (code ``state_dir_busy``).

    Attributes:
        owner_pid: that process.
        bootstrap_servers: the address of its broker when it is up, else None.
    """

    code = "state_dir_busy"

    def __init__(self, message: str, *, owner_pid: int | None, bootstrap_servers: str | None) -> None:
        super().__init__(message)
        self.owner_pid = owner_pid
        self.bootstrap_servers = bootstrap_servers


def java_binary() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on PATH; version 17 or newer.

    Raises:
        ConfigError: none found (``java_missing``), or an older one (``java_too_old``).
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} holds no bin/java" if home else "no java on PATH"
        raise ConfigError(f"no Java runtime ({where}): the embedded Kafka broker needs one; {_JAVA_FIX}",
                          code="java_missing")
    major = _java_major(java)
    if major < 17:
        raise ConfigError(f"{java} is Java {major}: Kafka needs 17 or newer; {_JAVA_FIX}", code="java_too_old")
    return java


def _java_major(java: str) -> int:
    key = (os.path.realpath(java), os.stat(java).st_mtime)
    if key not in _java_majors:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False).stderr
        found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
        major = int(found.group(1)) if found else 0
        _java_majors[key] = int(found.group(2)) if found and major == 1 else major
    return _java_majors[key]


def kafka_jars() -> Path:
    """The folder of the Kafka broker's jars: ``$DOCSTREAM_KAFKA_JARS``, else deploy/local/stack's cache
    (``$DOCSTREAM_STACK_HOME/lib/kafka``, default ``~/.cache/docstream/stack/lib/kafka``).

    Raises:
        ConfigError: no Kafka jar there (``kafka_jars_missing``).
    """
    given = os.environ.get(KAFKA_JARS_ENV)
    if given:
        folder = Path(given).expanduser()
    else:
        home = os.environ.get(_STACK_HOME_ENV) or "~/.cache/docstream/stack"
        folder = Path(home).expanduser() / "lib" / "kafka"
    if not folder.is_dir() or not any(folder.glob("kafka_2.13-*.jar")):
        raise ConfigError(f"no Kafka jars in {folder}: {_JARS_FIX}", code="kafka_jars_missing")
    return folder.resolve()


def _class_archive(java: str, jars: Path) -> Path:
    """The AppCDS archive of this JVM and these jars (a JVM refuses an archive of another JVM or class path)."""
    names = sorted(p.name for p in jars.glob("*.jar"))
    stamp = f"{os.path.realpath(java)}\n{os.stat(os.path.realpath(java)).st_mtime}\n" + "\n".join(names)
    return jars / f"docstream-broker-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _cluster_id() -> str:
    while True:  # org.apache.kafka.common.Uuid.randomUuid's rule: no leading '-'
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # a broker orphaned by a killed docstream process would hold its folder and port forever: SIGTERM (a
    # clean shutdown) when the thread that started it ends, which is the process for the main thread
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _jvm_of(folder: Path, pid: int) -> bool:
    """Whether ``pid`` is the broker JVM of ``folder`` (its marker argument; guards against a reused pid)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _marker(folder).encode() in args


def _marker(folder: Path) -> str:
    return f"-Ddocstream.broker={folder}"


def _read_owner(folder: Path) -> dict[str, Any]:
    try:
        body = json.loads((folder / "broker.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def running_broker(folder: Path) -> str | None:
    """The address of the live broker another process runs on ``folder``, or None when there is none."""
    folder = Path(folder).resolve()
    owner = _read_owner(folder)
    pid, jvm, bootstrap = owner.get("pid"), owner.get("jvm_pid"), owner.get("bootstrap_servers")
    if not (isinstance(pid, int) and isinstance(jvm, int) and isinstance(bootstrap, str)):
        return None
    if not _pid_alive(pid) or not _jvm_of(folder, jvm):
        return None
    return bootstrap


def _server_properties(data: Path, host: str, port: int, controller: int) -> str:
    return f"""# written by docstream (docstream_cli.embedded_kafka) at every start
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{controller}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
# a run's topics keep everything until the user removes the folder (docs/local-stack.md)
log.retention.ms=-1
log.retention.bytes=-1
log.segment.bytes=67108864
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
"""


_LOG4J = """# written by docstream (docstream_cli.embedded_kafka)
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
"""


class EmbeddedKafka:
    """A single-node Apache Kafka whose data lives in ``folder`` (created), on free 127.0.0.1 ports.

    Use as a context manager, or ``start()`` / ``stop()``. A second ``EmbeddedKafka`` on the same folder in
    another process gets ``BrokerBusyError`` until this one stops.

    Args:
        folder: the broker's folder (this module's docstring gives its layout).
        host: listen address.
        startup_timeout_s: how long ``start`` waits for an acknowledged produce.
        stop_timeout_s: how long ``stop`` waits after SIGTERM before SIGKILL.
    """

    def __init__(
        self, folder: Path, *, host: str = "127.0.0.1", startup_timeout_s: float = 120.0, stop_timeout_s: float = 30.0
    ) -> None:
        self._folder = Path(folder).resolve()
        self._host = host
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._lock: IO[str] | None = None
        self._terminated = False
        self._archive_partial: Path | None = None
        self._archive: Path | None = None
        self.formatted = False
        """Whether this start formatted the folder (no topics were kept in it before)."""

    @property
    def folder(self) -> Path:
        """The broker's folder."""
        return self._folder

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the running broker.

        Raises:
            FatalError: the broker is not started.
        """
        if self._port is None or self._proc is None:
            raise FatalError("the embedded Kafka broker is not running", code="broker_not_running")
        return f"{self._host}:{self._port}"

    @property
    def log_path(self) -> Path:
        """The JVM's output."""
        return self._folder / "kafka.log"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while running."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the JVM is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedKafka:
        """Take the folder, start the broker and wait until a produce is acknowledged.

        Raises:
            BrokerBusyError: another live process owns the folder.
            ConfigError: no Java 17+ (``java_missing``, ``java_too_old``) or no jars (``kafka_jars_missing``).
            FatalError: it did not come up (``broker_start_failed``; see its log).
        """
        if self._proc is not None:
            return self
        java, jars = java_binary(), kafka_jars()
        archive = _class_archive(java, jars)
        self._folder.mkdir(parents=True, exist_ok=True)
        self._take_folder()
        try:
            self._wait_for_left_jvm()
            self._rotate_log()
            self._format(java, jars, archive.with_suffix(".storage"))
            for attempt in range(1, _START_ATTEMPTS + 1):
                port, controller = _free_port(self._host), _free_port(self._host)
                started = time.monotonic()
                self._spawn(java, jars, archive, port, controller)
                if self._wait_ready():
                    _log.info("embedded_broker_started", bootstrap_servers=self.bootstrap_servers, pid=self.pid,
                              folder=str(self._folder), formatted=self.formatted,
                              seconds=round(time.monotonic() - started, 2))
                    return self
                self._halt()
                _log.warning("embedded_broker_retry", port=port, attempt=attempt, log=str(self.log_path))
            raise FatalError(f"the embedded Kafka broker did not start; see {self.log_path}:\n{self._log_tail()}",
                             code="broker_start_failed")
        except BaseException:
            self.stop()
            raise

    def _take_folder(self) -> None:
        lock = open(self._folder / "lock", "a+", encoding="utf-8")  # closed in stop(): that releases it
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            owner = _read_owner(self._folder)
            pid = owner.get("pid") if isinstance(owner.get("pid"), int) else None
            command = str(owner.get("command") or "")[:200]
            raise BrokerBusyError(
                f"{self._folder.parent} is in use by process {pid or '?'} ({command or 'docstream'}): wait for it "
                "to end, or give another --state-dir", owner_pid=pid, bootstrap_servers=running_broker(self._folder),
            ) from None
        self._lock = lock

    def _wait_for_left_jvm(self) -> None:
        """A JVM started by an owner that was killed gets SIGTERM with it; wait for it to let go of the data."""
        jvm = _read_owner(self._folder).get("jvm_pid")
        if not isinstance(jvm, int) or not _jvm_of(self._folder, jvm):
            return
        _log.info("embedded_broker_left_running", pid=jvm)
        with contextlib.suppress(ProcessLookupError):
            os.kill(jvm, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout_s
        while _jvm_of(self._folder, jvm) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _jvm_of(self._folder, jvm):
            with contextlib.suppress(ProcessLookupError):
                os.kill(jvm, signal.SIGKILL)
            while _jvm_of(self._folder, jvm):
                time.sleep(0.05)

    def _rotate_log(self) -> None:
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size > _MAX_LOG_BYTES:
                self.log_path.replace(self.log_path.with_suffix(".log.1"))

    def _jvm(self, java: str, jars: Path, *flags: str) -> list[str]:
        return [java, *_JVM_FLAGS, *flags, f"-Dlog4j2.configurationFile={self._folder / 'log4j2.properties'}",
                _marker(self._folder), "-cp", str(jars / "*")]

    def _format(self, java: str, jars: Path, kept: Path) -> None:
        """Format a new folder's storage: a copy of the formatted storage ``kept`` beside the jars (two small
        files, the same for every single node of these jars), else Kafka's StorageTool (a JVM start: ~0.7 s),
        whose result is kept there for the next new folder."""
        data = self._folder / "data"
        if (data / "meta.properties").exists():
            return
        started = time.monotonic()
        if all((kept / name).is_file() for name in _STORAGE_FILES):
            data.mkdir(parents=True, exist_ok=True)
            for name in _STORAGE_FILES:
                shutil.copyfile(kept / name, data / name)
            self.formatted = True
            _log.info("embedded_broker_formatted", folder=str(data), seconds=round(time.monotonic() - started, 3),
                      copied_from=str(kept))
            return
        self._write_config(_free_port(self._host), _free_port(self._host))  # what StorageTool reads
        done = subprocess.run(
            [*self._jvm(java, jars), "kafka.tools.StorageTool", "format", "--ignore-formatted", "-t", _cluster_id(),
             "-c", str(self._folder / "server.properties")],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=self._startup_timeout_s, check=False)
        if done.returncode != 0:
            raise FatalError(f"formatting the embedded Kafka broker's storage in {data} failed:\n"
                             f"{(done.stdout + done.stderr)[-2000:]}", code="broker_start_failed")
        self.formatted = True
        _log.info("embedded_broker_formatted", folder=str(data), seconds=round(time.monotonic() - started, 2))
        if os.access(jars, os.W_OK) and all((data / name).is_file() for name in _STORAGE_FILES):
            partial = kept.with_suffix(f".storage.{os.getpid()}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            for name in _STORAGE_FILES:
                shutil.copyfile(data / name, partial / name)
            try:
                partial.rename(kept)  # atomic: another process's copy may have landed first, which is as good
            except OSError:
                shutil.rmtree(partial, ignore_errors=True)

    def _write_config(self, port: int, controller: int) -> None:
        (self._folder / "server.properties").write_text(
            _server_properties(self._folder / "data", self._host, port, controller), encoding="utf-8")
        (self._folder / "log4j2.properties").write_text(_LOG4J, encoding="utf-8")

    def _spawn(self, java: str, jars: Path, archive: Path, port: int, controller: int) -> None:
        self._write_config(port, controller)
        sharing: list[str] = []
        if archive.is_file():
            sharing = [f"-XX:SharedArchiveFile={archive}"]
        elif os.access(jars, os.W_OK):  # recorded when this JVM exits; moved into place by stop()
            self._archive, self._archive_partial = archive, archive.with_suffix(f".{os.getpid()}.partial")
            sharing = [f"-XX:ArchiveClassesAtExit={self._archive_partial}"]
        self._log_file = open(self.log_path, "ab")  # closed in stop()
        self._proc = subprocess.Popen(
            [*self._jvm(java, jars, *sharing), "kafka.Kafka", str(self._folder / "server.properties")],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._port = port
        owner = {"pid": os.getpid(), "jvm_pid": self._proc.pid, "bootstrap_servers": f"{self._host}:{port}",
                 "command": " ".join(sys.argv)[:200], "started_at": time.time()}
        partial = self._folder / f".broker.json.{os.getpid()}"
        partial.write_text(json.dumps(owner), encoding="utf-8")
        partial.replace(self._folder / "broker.json")

    def _wait_ready(self) -> bool:
        """An acknowledged produce: the controller elected, the broker registered, a partition led."""
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._listening():  # first the port: a client would log every refused connection
            if not self.is_running() or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        producer = Producer({
            "bootstrap.servers": f"{self._host}:{self._port}", "acks": "all", "linger.ms": 0,
            "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100, "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100, "message.timeout.ms": int(self._startup_timeout_s * 1000),
            "topic.metadata.refresh.interval.ms": 100, "logger": _QUIET,
        })
        acked: list[KafkaError | None] = []
        try:
            producer.produce(_READY_TOPIC, b"ready", on_delivery=lambda err, _msg: acked.append(err))
            while not acked and time.monotonic() < deadline:
                if not self.is_running():
                    return False
                producer.poll(0.02)
        except KafkaException:
            return False
        finally:
            producer.purge()
            producer.flush(0)
        if not acked or acked[0] is not None:
            return False
        return self._groups_loaded(deadline)

    def _groups_loaded(self, deadline: float) -> bool:
        """The group coordinator answers: on a new folder it has made ``__consumer_offsets`` (a group's first
        FindCoordinator makes it), on kept topics it has loaded the committed offsets; before that a group's
        offsets and description are refused (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS).
        ``__consumer_offsets`` has one partition here, so any group answers for all of them."""
        conf: dict[str, Any] = {"bootstrap.servers": f"{self._host}:{self._port}", "logger": _QUIET}
        admin = AdminClient(conf)
        while time.monotonic() < deadline and self.is_running():
            try:
                admin.describe_consumer_groups([_READY_TOPIC], request_timeout=5)[_READY_TOPIC].result()
                return True
            except KafkaException as exc:
                if exc.args[0].code() not in (KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR):
                    return True  # the coordinator answers
                time.sleep(0.02)
        return False

    def _listening(self) -> bool:
        try:
            with socket.create_connection((self._host, self._port or 0), timeout=0.5):
                return True
        except OSError:
            return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_bytes()[-8192:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def begin_stop(self) -> None:
        """Send the JVM SIGTERM (a clean shutdown) without waiting; ``stop()`` waits for it."""
        if self._proc is not None and self._proc.poll() is None and not self._terminated:
            self._proc.terminate()
            self._terminated = True

    def _halt(self) -> None:
        proc, self._proc = self._proc, None
        terminated, self._terminated = self._terminated, False
        if proc is not None:
            if proc.poll() is None:
                if not terminated:
                    proc.terminate()
                try:
                    proc.wait(self._stop_timeout_s)
                except subprocess.TimeoutExpired:
                    _log.warning("embedded_broker_killed", pid=proc.pid)
                    proc.kill()
                    proc.wait()
            _log.info("embedded_broker_stopped", pid=proc.pid, returncode=proc.returncode)
        self._close_log()
        self._port = None

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _let_go_of_folder(self, *, forget_jvm: bool) -> None:
        """Close the lock (which releases it); ``forget_jvm``: remove ``broker.json`` too (the JVM has ended)."""
        if self._lock is not None:
            if forget_jvm:
                with contextlib.suppress(OSError):
                    (self._folder / "broker.json").unlink(missing_ok=True)
            self._lock.close()
            self._lock = None

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after ``stop_timeout_s``) and let go of the folder. Idempotent."""
        self._halt()
        if self._archive_partial is not None and self._archive is not None:
            partial, self._archive_partial = self._archive_partial, None
            with contextlib.suppress(OSError):
                if partial.is_file() and partial.stat().st_size > 0:
                    partial.replace(self._archive)
                    _log.info("embedded_broker_class_archive_recorded", archive=str(self._archive))
                partial.unlink(missing_ok=True)
        self._let_go_of_folder(forget_jvm=True)

    def release(self) -> None:
        """Let go of the folder without waiting for the JVM's clean shutdown (SIGTERM is sent): for a caller about
        to return whose clients are closed (``docstream run``: the shutdown took 0.37 s of its fixed cost).
        ``broker.json`` keeps the JVM's pid, so the folder's next owner waits for it to end before starting its
        own (``_wait_for_left_jvm``). While a class-data archive is being recorded it waits, as ``stop`` does:
        the archive is written at the JVM's exit. Idempotent."""
        proc = self._proc
        if proc is None or self._archive_partial is not None:
            self.stop()
            return
        self.begin_stop()
        self._proc, self._terminated, self._port = None, False, None
        self._close_log()
        self._let_go_of_folder(forget_jvm=False)
        _RELEASED.append(proc)  # not collected while it runs (Popen warns of a child still running)
        _log.info("embedded_broker_released", pid=proc.pid)

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def prepare_class_archive() -> Path:
    """Record the class-data archive of the broker once (``make setup``): start and stop a broker in a temporary
    folder. A no-op when the archive of this JVM and these jars is there.

    Raises:
        ConfigError: no Java or no jars.
        FatalError: the broker did not start.
    """
    java, jars = java_binary(), kafka_jars()
    archive = _class_archive(java, jars)
    if not archive.is_file():
        with tempfile.TemporaryDirectory(prefix="docstream-broker-") as folder, EmbeddedKafka(Path(folder)):
            pass
    return archive


if __name__ == "__main__":  # python -m docstream_cli.embedded_kafka: make setup records the class-data archive
    try:
        sys.stdout.write(f"broker class-data archive: {prepare_class_archive()}\n")
    except ConfigError as exc:
        sys.stderr.write(f"docstream: {exc.message}\n")
        sys.exit(2)
