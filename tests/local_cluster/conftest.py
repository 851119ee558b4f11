"""Fixtures of the local-cluster tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .command import LocalClusterCommand


@pytest.fixture
def commands() -> Iterator[list[LocalClusterCommand]]:
    """The commands a test starts, every one stopped at teardown."""
    started: list[LocalClusterCommand] = []
    yield started
    for cmd in started:
        cmd.stop_everything()
