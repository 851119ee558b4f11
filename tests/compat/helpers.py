"""Helpers for the compatibility tests: the standalone subprocess and polling helpers."""

from __future__ import annotations

import logging
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pulsar
import pytest

T = TypeVar("T")

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)

READY_TIMEOUT_S = 30.0


class StandaloneProcess:
    """``magnetar standalone`` in a subprocess. ``start`` waits for the ready line and reads
    the bound ports from it; a restart reuses the same ports and data dir."""

    def __init__(self, data_dir: Path, *extra_args: str) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.port = 0
        self.http_port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self._log = data_dir.parent / f"{data_dir.name}-standalone.log"

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        args = [
            sys.executable, "-m", "magnetar.cli.main", "standalone",
            "--data-dir", str(self.data_dir),
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--log-level", "INFO",
            *self.extra_args,
        ]  # fmt: skip
        err = open(self._log, "a")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"standalone did not become ready; log: {self.log_tail()}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if "ready" in line:
                self.ready_line = line
                break
        words = line.split()
        broker = words[words.index("broker") + 1]
        http = words[words.index("http") + 1]
        self.port = int(broker.rsplit(":", 1)[1])
        self.http_port = int(http.rsplit(":", 1)[1])

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self._log.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_until(predicate: Callable[[], T], timeout_s: float = 10.0, interval_s: float = 0.02) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval_s)


def receive_all(
    consumer: pulsar.Consumer | pulsar.Reader, count: int, timeout_ms: int = 10_000
) -> list[pulsar.Message]:
    out = []
    read = consumer.read_next if isinstance(consumer, pulsar.Reader) else consumer.receive
    for _ in range(count):
        out.append(read(timeout_ms))
    return out


def assert_nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        m = consumer.receive(timeout_ms)
        raise AssertionError(f"unexpected message {m.data()!r}")


def new_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=_client_log)
