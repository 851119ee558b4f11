"""Fixtures shared by the ledger tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.testing.bookie import BookieProcess


@pytest.fixture
def procs() -> Iterator[list[BookieProcess]]:
    """Bookie processes a test starts (it appends them); killed at teardown whatever
    happened."""
    started: list[BookieProcess] = []
    yield started
    for p in started:
        p.kill()
