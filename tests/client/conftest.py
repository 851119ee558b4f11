"""Fixtures for the client tests: ``magnetar standalone`` as a real subprocess on free ports.

``standalone`` is shared by the session (tests use unique topics); ``standalone_factory``
gives a test its own process (restarts). Every process is killed at teardown.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
READY_TIMEOUT_S = 30.0
_names = itertools.count()


class Standalone:
    """``magnetar standalone`` in a subprocess; ports are chosen by the process (bind 0) and
    read from its ready line, and kept across restarts."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.port = 0
        self.http_port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            sys.executable, "-m", "magnetar.cli.main", "standalone",
            "--data-dir", str(self.data_dir), "--port", str(self.port),
            "--http-port", str(self.http_port), "--log-level", "INFO", *self.extra,
        ]  # fmt: skip
        with open(self.log_path, "a") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue[str] = queue.Queue()
        out = self.proc.stdout
        assert out is not None
        threading.Thread(target=lambda: [lines.put(x) for x in out], daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"standalone not ready: {self.log_path.read_text()[-3000:]}")
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if "ready" in line:
                break
        words = line.split()
        self.port = int(words[words.index("broker") + 1].rsplit(":", 1)[1])
        self.http_port = int(words[words.index("http") + 1].rsplit(":", 1)[1])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    node = Standalone(
        tmp_path_factory.mktemp("client-standalone") / "data",
        "--max-message-size", "131072", "--failover-delay-ms", "100",
    )  # fmt: skip
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., Standalone]]:
    started: list[Standalone] = []

    def make(*extra: str) -> Standalone:
        node = Standalone(tmp_path / f"data{len(started)}", *extra)
        started.append(node)
        node.start()
        return node

    try:
        yield make
    finally:
        for node in started:
            node.kill()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/c-{next(_names)}-{uuid.uuid4().hex[:8]}"


async def eventually(predicate: Callable[[], T | Awaitable[T]], timeout_s: float = 10.0) -> T:
    """Poll until ``predicate`` is truthy (bounded); fails the test otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
