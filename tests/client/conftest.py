"""Fixtures for the client tests: ``magnetar standalone`` as a real subprocess on free ports.

``standalone`` is shared by the session (tests use unique topics); ``standalone_factory``
gives a test its own process (restarts). Every process is killed at teardown.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from magnetar.testing import StandaloneProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path_factory.mktemp("client-standalone") / "data",
        "--max-message-size", "131072", "--failover-delay-ms", "100",
    ) as node:  # fmt: skip
        yield node


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/c-{next(_names)}-{uuid.uuid4().hex[:8]}"
