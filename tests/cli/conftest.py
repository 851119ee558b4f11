"""``magnetar admin|client|perf`` run as real subprocesses against ``magnetar standalone``.

``standalone`` is one process shared by the module's tests (unique topic names per test);
:class:`Cli` runs the command line (``sys.executable -m magnetar.cli.main ...``) to completion
or in the background. Every process started here is killed at teardown, even on failure.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest

from magnetar.testing import StandaloneProcess, wait_until

RUN_TIMEOUT_S = 120.0
_names = itertools.count()


class Background:
    """A CLI process running in the background; its stdout and stderr lines are collected."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
            for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self._pumps:
            t.start()

    @staticmethod
    def _pump(stream: object, sink: list[str]) -> None:
        assert stream is not None
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line.rstrip("\n"))

    def wait_for_line(self, needle: str, *, stderr: bool = True, timeout_s: float = 30.0) -> str:
        lines = self.err if stderr else self.out
        try:
            return wait_until(
                lambda: next((ln for ln in list(lines) if needle in ln), None),
                timeout_s,
                what=f"{needle!r} in the output",
            )
        except AssertionError:
            return self._fail(needle)  # with everything the process wrote so far

    def _fail(self, needle: str) -> str:
        raise AssertionError(f"{needle!r} not seen; stdout={self.out} stderr={self.err}")

    def interrupt(self, sig: int = signal.SIGINT, timeout_s: float = 30.0) -> int:
        self.proc.send_signal(sig)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 60.0) -> int:
        """Wait for the exit, then for every line it wrote to be collected. A process still
        running after ``timeout_s`` fails the test with everything it wrote so far."""
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running after {timeout_s} s; stdout={self.out} stderr={self.err}"
            ) from None
        for t in self._pumps:
            t.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Cli:
    """Runs ``magnetar`` sub-commands against one standalone."""

    def __init__(self, node: StandaloneProcess) -> None:
        self.node = node
        self.started: list[Background] = []

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "magnetar.cli.main", *args]

    def run(self, *args: str, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("admin", "--admin-url", self.node.http_url, *args)

    def client(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("client", "--url", self.node.url, *args)

    def background(self, *args: str) -> Background:
        bg = Background(self.command(*args))
        self.started.append(bg)
        return bg

    def consume(self, *args: str) -> Background:
        return self.background("client", "--url", self.node.url, "consume", *args)

    def kill_all(self) -> None:
        for bg in self.started:
            bg.kill()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone per test module, with a short failover delay."""
    with StandaloneProcess(
        tmp_path_factory.mktemp("standalone") / "data", "--failover-delay-ms", "100"
    ) as node:
        yield node


@pytest.fixture
def cli(standalone: StandaloneProcess) -> Iterator[Cli]:
    c = Cli(standalone)
    try:
        yield c
    finally:
        c.kill_all()


@pytest.fixture
def topic() -> str:
    """A short topic name no other test uses (means persistent://public/default/<name>)."""
    return f"cli-{next(_names)}-{uuid.uuid4().hex[:8]}"
