"""``magnetar broker`` as a real subprocess, for cluster integration tests.

Binds free ports (0) and reads them, and its broker id, from the ready line. Its stderr goes
to ``log_path``. Callers must :meth:`BrokerProcess.kill` it in teardown, even when a test
fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from magnetar.testing import ready_process

READY_TIMEOUT_S = 30.0


class BrokerProcess:
    """One ``magnetar broker`` on ``metadata_url`` (``zk://...``) with extra CLI arguments."""

    def __init__(self, metadata_url: str, log_path: Path, *extra_args: str) -> None:
        self.metadata_url = metadata_url
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.url = ""
        """``pulsar://host:port`` once ready."""
        self.http_url = ""
        self.broker_id = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start and wait for the ready line; raises :class:`RuntimeError` with the log's
        tail if the process exits or is not ready in time."""
        args = [
            sys.executable, "-m", "magnetar.cli.main", "broker",
            "--metadata-url", self.metadata_url,
            "--port", "0",
            "--http-port", "0",
            "--log-level", "INFO",
            *self.extra_args,
        ]  # fmt: skip
        self.proc, line = ready_process.start_until_ready(
            args, self.log_path, "magnetar broker ready", "broker", ready_timeout_s
        )
        words = line.split("ready:", 1)[1].split()
        self.url = words[words.index("broker") + 1]
        self.http_url = words[words.index("http") + 1]
        self.broker_id = words[words.index("id") + 1]

    def log_tail(self, lines: int = 40) -> str:
        return ready_process.log_tail(self.log_path, lines)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait for the exit; returns the exit code."""
        assert self.proc is not None
        return ready_process.stop(self.proc, timeout_s)

    def kill(self) -> None:
        """SIGKILL the process if it runs (resuming it first if stopped), and reap it."""
        ready_process.kill(self.proc)
