"""Fixtures for the client tests: ``magnetar standalone`` as a real subprocess on free ports.

``standalone`` is shared by the session (tests use unique topics); ``standalone_factory``
gives a test its own process (restarts). Every process is killed at teardown.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from magnetar.testing import StandaloneProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    node = StandaloneProcess(
        tmp_path_factory.mktemp("client-standalone") / "data",
        "--max-message-size", "131072", "--failover-delay-ms", "100",
    )  # fmt: skip
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., StandaloneProcess]]:
    started: list[StandaloneProcess] = []

    def make(*extra: str) -> StandaloneProcess:
        node = StandaloneProcess(tmp_path / f"data{len(started)}", *extra)
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
