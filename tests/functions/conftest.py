"""One ``magnetar standalone`` subprocess for the functions tests of a module (each test uses
its own coordination topics, so they do not see each other's workers). It runs without its
own Functions Worker: the tests' workers are the only ones."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing import StandaloneProcess
from tests.functions.processes import WorkerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    node = StandaloneProcess(tmp_path_factory.mktemp("functions") / "data", "--no-functions-worker")
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def unique() -> str:
    """A name part no other test of the session uses."""
    return f"{next(_names)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def spawn(standalone: StandaloneProcess, tmp_path: Path) -> Iterator[Any]:
    """Start worker processes against the module's standalone: ``spawn("w1", *args)``;
    all are killed at teardown."""
    procs: list[WorkerProcess] = []

    def make(worker_id: str, *args: str) -> WorkerProcess:
        p = WorkerProcess(standalone, tmp_path, worker_id, *args)
        procs.append(p)
        return p

    try:
        yield make
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
            p.proc.wait(10)
