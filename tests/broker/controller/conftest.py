"""Metadata backends for the controller's election tests: each test gets an ``open_store``
that opens sessions on one fresh database (as processes share one ZooKeeper)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.metadata import MetadataStore, connect

OpenStore = Callable[[], Awaitable[MetadataStore]]

_names = itertools.count()


@pytest.fixture(params=["memory", "sqlite", "zookeeper"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory:controller-{next(_names)}"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'metadata.db'}"
    return str(request.getfixturevalue("zookeeper_url"))


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[OpenStore]:
    opened: list[MetadataStore] = []

    async def open_() -> MetadataStore:
        store = await connect(store_url, session_timeout_s=4.0)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
