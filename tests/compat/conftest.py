"""The official ``pulsar-client`` wheel against ``magnetar standalone`` run as a real process.

``standalone`` is one process shared by the whole session (tests use unique topic names);
tests that restart or kill the broker use ``standalone_factory`` (own data dir each).
Every process started here is killed at teardown, even when the test fails.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.testing import StandaloneProcess

from .helpers import new_client

_names = itertools.count()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One shared standalone: small max message size (cheap chunking), short failover delay."""
    with StandaloneProcess(
        tmp_path_factory.mktemp("standalone") / "data",
        "--max-message-size", "131072",
        "--failover-delay-ms", "100",
    ) as node:  # fmt: skip
        yield node


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = new_client(standalone.url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"persistent://public/default/t-{next(_names)}-{uuid.uuid4().hex[:8]}"
