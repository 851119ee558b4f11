"""Pulsar-protocol brokers the benchmarks run beside Magnetar: a fresh ``pulsar-lite`` (the
PyPI package's Rust binary) or a broker already running at ``pulsar://host:port``. Used by
``omb.py --peer`` and ``broker.py --pulsar-lite``.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


class Broker:
    """A broker to run one workload against: started fresh when it is a local process."""

    driver = "magnetar"
    pid: int | None = None
    host = "127.0.0.1"
    port = 0

    def __enter__(self) -> Broker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class PulsarLite(Broker):
    """A fresh ``pulsar-lite`` (the PyPI package's Rust binary) on a temporary database."""

    driver = "pulsar-lite"

    def __enter__(self) -> Broker:
        try:
            from pulsar_lite.binary_finder import find_pulsar_lite_binary
        except ImportError:
            raise SystemExit(
                "--peer pulsar-lite needs the pulsar-lite package in this environment: "
                "pip install pulsar-lite"
            ) from None
        self._tmp = tempfile.TemporaryDirectory()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._proc = subprocess.Popen(
            [find_pulsar_lite_binary(), "--addr", f"127.0.0.1:{self.port}",
             "--db-path", str(Path(self._tmp.name) / "db"), "--log-level", "error"],
            cwd=self._tmp.name, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.pid = self._proc.pid
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise SystemExit("pulsar-lite did not start listening") from None
                time.sleep(0.05)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._proc.terminate()
        self._proc.wait(30)
        self._tmp.cleanup()


class External(Broker):
    """A broker already running at ``pulsar://host:port`` (new topics each workload)."""

    def __init__(self, url: str) -> None:
        rest = url.removeprefix("pulsar://")
        host, _, port = rest.rstrip("/").rpartition(":")
        if rest == url or not host or not port.isdigit():
            raise SystemExit(f"--peer {url}: expected pulsar-lite or pulsar://host:port")
        self.driver = url
        self.host = host
        self.port = int(port)
