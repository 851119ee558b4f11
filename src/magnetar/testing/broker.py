"""``magnetar broker`` as a real subprocess, for cluster integration tests.

Binds free ports (0) and reads them, and its broker id, from the ready line. Its stderr goes
to ``log_path``. Callers must :meth:`BrokerProcess.kill` it in teardown, even when a test
fails.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

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
        with open(self.log_path, "a") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + ready_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"broker did not become ready; log:\n{self.log_tail()}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if "magnetar broker ready" in line:
                break
        words = line.split("ready:", 1)[1].split()
        self.url = words[words.index("broker") + 1]
        self.http_url = words[words.index("http") + 1]
        self.broker_id = words[words.index("id") + 1]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait for the exit; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the process if it runs (resuming it first if stopped), and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
