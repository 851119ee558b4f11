"""One ``magnetar standalone`` subprocess for the functions tests of a module (each test uses
its own coordination topics, so they do not see each other's workers)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from magnetar.testing import StandaloneProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    node = StandaloneProcess(tmp_path_factory.mktemp("functions") / "data")
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def unique() -> str:
    """A name part no other test of the session uses."""
    return f"{next(_names)}-{uuid.uuid4().hex[:8]}"
