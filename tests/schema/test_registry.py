"""The registry over both real metadata stores (a SQLite file, a ZooKeeper server): versions, reuse of
identical schemas, partitions sharing their base topic's versions, deletion, bounds, and a
refused schema leaving the registry unchanged."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.common.clock import ManualClock
from magnetar.common.errors import IncompatibleSchema
from magnetar.common.names import TopicName
from magnetar.metadata import MetadataStore, connect
from magnetar.protocol import SchemaType
from magnetar.schema import (
    InvalidSchema,
    SchemaDefinition,
    SchemaPolicy,
    SchemaRegistry,
    Strategy,
    version_bytes,
    version_number,
)

from .avro_records import BASE_FIELDS, CHANGES, avro, record

_names = itertools.count()
FULL = SchemaPolicy(Strategy.FULL)


@pytest.fixture(params=["sqlite", "zookeeper"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    """Both metadata backends: the embedded SQLite file and a real ZooKeeper."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/meta.db"
    else:
        url = request.getfixturevalue("zookeeper_url")
    s = await connect(url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def registry(store: MetadataStore) -> SchemaRegistry:
    return SchemaRegistry(store, ManualClock())


@pytest.fixture
def topic() -> TopicName:
    return TopicName.parse(f"persistent://public/default/schema-{next(_names)}")


def test_version_bytes() -> None:
    assert version_bytes(0) == b"\x00" * 8
    assert version_bytes(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert version_number(version_bytes(7)) == 7
    assert version_number(b"") is None and version_number(b"\x01") is None


async def test_versions_count_from_zero_and_identical_data_reuses_one(
    registry: SchemaRegistry, topic: TopicName
) -> None:
    v0 = avro(record(BASE_FIELDS))
    v1 = avro(record(CHANGES["add_optional"]))
    assert await registry.put_if_absent(topic, v0, FULL) == 0
    assert await registry.put_if_absent(topic, v0, FULL) == 0
    assert await registry.put_if_absent(topic, v1, FULL) == 1
    assert await registry.put_if_absent(topic, v0, FULL) == 0  # an older version is reused
    latest = await registry.get(topic)
    assert latest is not None and latest.version == 1 and latest.definition == v1
    first = await registry.get(topic, 0)
    assert first is not None and first.definition == v0
    assert await registry.get(topic, 2) is None


async def test_partitions_share_the_base_topics_versions(
    registry: SchemaRegistry, topic: TopicName
) -> None:
    await registry.put_if_absent(topic.partition(1), avro(record(BASE_FIELDS)), FULL)
    for name in (topic, topic.partition(0), topic.partition(3)):
        got = await registry.get(name)
        assert got is not None and got.version == 0


async def test_incompatible_and_invalid_schemas_store_nothing(
    registry: SchemaRegistry, topic: TopicName
) -> None:
    await registry.put_if_absent(topic, avro(record(BASE_FIELDS)), FULL)
    before = await registry.history(topic)
    with pytest.raises(IncompatibleSchema, match="exists schema type AVRO"):
        await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b""), FULL)
    with pytest.raises(IncompatibleSchema):
        await registry.put_if_absent(topic, avro(record(CHANGES["change_type"])), FULL)
    with pytest.raises(InvalidSchema):
        await registry.put_if_absent(topic, SchemaDefinition(SchemaType.Avro, b"{oops"), FULL)
    no_update = SchemaPolicy(Strategy.ALWAYS_COMPATIBLE, allow_auto_update=False)
    with pytest.raises(IncompatibleSchema, match="auto updating is disabled"):
        await registry.put_if_absent(topic, avro(record(CHANGES["add_optional"])), no_update)
    assert await registry.put_if_absent(topic, avro(record(BASE_FIELDS)), no_update) == 0
    assert await registry.history(topic) == before


async def test_delete_starts_a_new_history_and_force_removes_everything(
    registry: SchemaRegistry, topic: TopicName
) -> None:
    await registry.put_if_absent(topic, avro(record(BASE_FIELDS)), FULL)
    assert await registry.delete(topic) == 1  # the deletion marker's version
    assert await registry.get(topic) is None
    assert await registry.delete(topic) is None  # nothing left to delete
    old = await registry.get(topic, 0)
    assert old is not None  # old versions stay readable by number
    # No compatibility with the deleted history: a STRING schema is now accepted.
    assert await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b""), FULL) == 2
    assert await registry.delete(topic, force=True) == 2
    assert await registry.history(topic) == []
    assert await registry.put_if_absent(topic, avro(record(BASE_FIELDS)), FULL) == 0


async def test_bounds(store: MetadataStore, topic: TopicName) -> None:
    registry = SchemaRegistry(store, ManualClock(), data_bytes_max=100, versions_max=2)
    with pytest.raises(InvalidSchema, match="at most 100"):
        await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b"x" * 101), FULL)
    any_ok = SchemaPolicy(Strategy.ALWAYS_COMPATIBLE)
    await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b"a"), any_ok)
    await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b"b"), any_ok)
    with pytest.raises(InvalidSchema, match="most one topic may hold"):
        await registry.put_if_absent(topic, SchemaDefinition(SchemaType.String, b"c"), any_ok)
    assert len(await registry.history(topic)) == 2


async def test_versions_survive_reopening_the_store(tmp_path: Path, topic: TopicName) -> None:
    url = f"sqlite:///{tmp_path}/durable.db"
    first = await connect(url)
    try:
        await SchemaRegistry(first, ManualClock()).put_if_absent(
            topic, avro(record(BASE_FIELDS)), FULL
        )
    finally:
        await first.close()
    second = await connect(url)
    try:
        got = await SchemaRegistry(second, ManualClock()).get(topic)
        assert got is not None and got.version == 0
        assert got.definition == avro(record(BASE_FIELDS))
    finally:
        await second.close()


async def test_two_registries_racing_never_share_a_version(
    store: MetadataStore, topic: TopicName
) -> None:
    """Two brokers (two registries over one store, no shared lock) adding schemas at once:
    every schema gets its own version, none is lost, numbering has no gap."""

    first, second = SchemaRegistry(store, ManualClock()), SchemaRegistry(store, ManualClock())
    any_ok = SchemaPolicy(Strategy.ALWAYS_COMPATIBLE)
    schemas = [SchemaDefinition(SchemaType.String, f"s{i}".encode()) for i in range(8)]
    versions = await asyncio.gather(
        *(
            (first if i % 2 else second).put_if_absent(topic, schema, any_ok)
            for i, schema in enumerate(schemas)
        )
    )
    assert sorted(versions) == list(range(8))
    history = await first.history(topic)
    assert {s.definition for s in history} == set(schemas)


class CountingStore:
    """The real store, with its node reads counted (how much a registry asks of it)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.gets = 0

    async def get(self, path: str) -> Any:
        self.gets += 1
        return await self._store.get(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


ANY_OK = SchemaPolicy(Strategy.ALWAYS_COMPATIBLE)


def _string(i: int) -> SchemaDefinition:
    return SchemaDefinition(SchemaType.String, f"v{i}".encode())


async def test_cached_versions_cost_one_node_read(store: MetadataStore, topic: TopicName) -> None:
    """A producer's or consumer's schema on a topic with many versions: once the history is
    cached, a check reads the listing and one node, not every version."""
    counting = CountingStore(store)
    registry = SchemaRegistry(counting, ManualClock())  # type: ignore[arg-type]
    for i in range(20):
        assert await registry.put_if_absent(topic, _string(i), ANY_OK) == i
    await registry.history(topic)  # fills the cache
    counting.gets = 0
    assert await registry.put_if_absent(topic, _string(3), ANY_OK) == 3
    await registry.check_consumer(topic, _string(19), Strategy.ALWAYS_COMPATIBLE)
    latest = await registry.get(topic)
    assert latest is not None and latest.version == 19
    assert counting.gets == 3  # one node per call
    # Growth reads only the new versions (and re-reads the newest cached one).
    await registry.put_if_absent(topic, _string(20), ANY_OK)
    await registry.history(topic)
    counting.gets = 0
    await registry.history(topic)
    assert counting.gets == 1


async def test_cache_sees_what_other_brokers_write(store: MetadataStore, topic: TopicName) -> None:
    mine = SchemaRegistry(store, ManualClock())
    other = SchemaRegistry(store, ManualClock())  # another broker over the same store
    await mine.put_if_absent(topic, _string(0), ANY_OK)
    assert [s.version for s in await mine.history(topic)] == [0]  # cached
    assert await other.put_if_absent(topic, _string(1), ANY_OK) == 1
    latest = await mine.get(topic)
    assert latest is not None and latest.definition == _string(1)
    # Removed by force and written again elsewhere: same number, other content.
    assert await other.delete(topic, force=True) == 1
    assert await other.put_if_absent(topic, _string(7), ANY_OK) == 0
    latest = await mine.get(topic)
    assert latest is not None and (latest.version, latest.definition) == (0, _string(7))
    assert await mine.find_version(topic, _string(0)) is None
    assert await other.delete(topic) == 1
    assert await mine.get(topic) is None


async def test_cache_is_bounded(store: MetadataStore) -> None:
    registry = SchemaRegistry(store, ManualClock(), cache_bytes_max=100, cache_topics_max=3)
    topics = [
        TopicName.parse(f"persistent://public/default/bound-{next(_names)}") for _ in range(6)
    ]
    for t in topics:
        await registry.put_if_absent(t, SchemaDefinition(SchemaType.String, b"x" * 30), ANY_OK)
        await registry.history(t)
        assert registry.cache_bytes <= 100 and registry.cached_topics <= 3
    assert registry.cached_topics == 3
    # A history larger than the whole cache is read but not kept.
    big = topics[0]
    await registry.put_if_absent(big, SchemaDefinition(SchemaType.String, b"y" * 90), ANY_OK)
    assert len(await registry.history(big)) == 2
    assert registry.cache_bytes <= 100
