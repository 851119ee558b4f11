"""Backends for the contract suite: each test gets an ``open_store`` that opens sessions on
one fresh database (so several sessions of a test share data, as processes share ZooKeeper)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.metadata import MetadataStore, connect

OpenStore = Callable[[], Awaitable[MetadataStore]]

_names = itertools.count()

BACKENDS = ["memory", "sqlite", "zookeeper"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return f"memory:test-{next(_names)}"
    if backend == "sqlite":
        return f"sqlite://{tmp_path / 'metadata.db'}"
    if backend == "zookeeper":
        return str(request.getfixturevalue("zookeeper_url"))
    raise AssertionError(backend)


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


@pytest.fixture
async def store(open_store: OpenStore) -> MetadataStore:
    return await open_store()
