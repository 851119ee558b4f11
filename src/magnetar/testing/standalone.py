"""``magnetar standalone`` as a real subprocess, for integration tests.

The process binds free ports (port 0) on first start; :meth:`StandaloneProcess.start`
waits for its ready line and reads the bound ports from it, and a restart reuses the same
ports and data directory, as a restarted server would. Its stderr goes to a log file beside
the data directory. Callers must :meth:`kill` it in teardown, even when a test fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Self

from magnetar.testing import ready_process

READY_TIMEOUT_S = 30.0


class StandaloneProcess:
    """One ``magnetar standalone`` process over ``data_dir`` with extra CLI arguments."""

    def __init__(self, data_dir: Path, *extra_args: str) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.port = 0
        self.http_port = 0
        self.tls_port: int | None = None
        """The TLS listener's port, read from the ready line (None when it has none)."""
        self.https_port: int | None = None
        """The HTTPS port (``--https-port``), read from the ready line (None when off)."""
        self.proc: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.log_path = data_dir.parent / f"{data_dir.name}-standalone.log"

    @property
    def url(self) -> str:
        """The binary protocol service URL."""
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        """The ``pulsar+ssl://`` service URL (the process must run with ``--tls-port``)."""
        assert self.tls_port is not None, "started without --tls-port"
        return f"pulsar+ssl://127.0.0.1:{self.tls_port}"

    @property
    def http_url(self) -> str:
        """The HTTP (admin, lookup, metrics) URL."""
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the process and wait for its ready line.

        Raises :class:`RuntimeError` (with the log's tail) if it exits or is not ready in time.
        """
        assert self.proc is None or self.proc.poll() is not None, "already running"
        extra = list(self.extra_args)
        if self.tls_port is not None and "--tls-port" in extra:
            # A restart keeps the TLS port picked at the first start, like the others.
            extra[extra.index("--tls-port") + 1] = str(self.tls_port)
        if self.https_port is not None and "--https-port" in extra:
            extra[extra.index("--https-port") + 1] = str(self.https_port)
        args = [
            sys.executable, "-m", "magnetar.cli.main", "standalone",
            "--data-dir", str(self.data_dir),
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--log-level", "INFO",
            *extra,
        ]  # fmt: skip
        self.proc, line = ready_process.start_until_ready(
            args, self.log_path, "ready", "standalone", ready_timeout_s
        )
        self.ready_line = line
        words = line.split()
        self.port = int(words[words.index("broker") + 1].rsplit(":", 1)[1])
        self.http_port = int(words[words.index("http") + 1].rsplit(":", 1)[1])
        tls = [w for w in words if w.startswith("pulsar+ssl://")]
        self.tls_port = int(tls[0].rsplit(":", 1)[1]) if tls else None
        https = [w for w in words if w.startswith("https://")]
        self.https_port = int(https[0].rsplit(":", 1)[1]) if https else None

    def log_tail(self, lines: int = 40) -> str:
        return ready_process.log_tail(self.log_path, lines)

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc is not None
        return ready_process.stop(self.proc, timeout_s)

    def __enter__(self) -> Self:
        """Start the process (``with StandaloneProcess(d) as node:``); killed on exit."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def kill(self) -> None:
        """SIGKILL the process if it runs, and reap it."""
        ready_process.kill(self.proc)
