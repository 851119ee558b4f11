"""The schema versions of each topic, kept in the metadata store.

Layout: one node per version, ``/schemas/<tenant>/<namespace>/<quoted local name>/<version>``
(the version as ten digits, so children sort in version order), holding JSON::

    {"type": "AVRO", "data": "<base64>", "properties": {...}, "timestamp": <ms>, "deleted": false}

Partitions share their partitioned topic's versions, and persistent and non-persistent
topics of the same name share them too: the key is the base name without the domain, as
Pulsar's ``TopicName.getSchemaName``. A version is written once, with create-if-absent, so
two brokers racing to add one cannot both win; a written version never changes.

Deleting (Pulsar's semantics): a plain delete appends a *deleted* marker version; the versions
before it stay readable by number but no longer count (the next schema starts a new history
and needs no compatibility with them). A forced delete, and deleting the topic, removes every
node: versions start again at 0.

Versions are numbered from 0; on the wire a version is 8 bytes big-endian
(:func:`version_bytes`), so the first is eight zero bytes.

Bounds: schema data up to ``data_bytes_max`` bytes, at most ``versions_max`` versions per
topic (markers included); past either the request is refused and nothing is stored.

Cache: each registry keeps the histories it read, least recently used first out, within
``cache_bytes_max`` bytes of schema data and ``cache_topics_max`` topics. A cached history
is never trusted blindly, since other brokers write to the same store: each read lists the
topic's version nodes and re-reads the newest cached one. If the cached numbers are a
prefix of the listing and that node is unchanged, only the versions after it are read
(a version never changes once written, so the prefix stands); otherwise, after a delete by
force elsewhere for instance, everything is read again. A PRODUCER or SUBSCRIBE with a
schema thus costs two metadata reads instead of one per version. This registry's own
writes and deletes drop the topic's entry.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import struct
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from magnetar.common.clock import Clock
from magnetar.common.errors import IncompatibleSchema, MetadataError
from magnetar.common.names import TopicName
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, NodeExists, NotFound
from magnetar.schema.compatibility import (
    SchemaPolicy,
    Strategy,
    check_consumer,
    check_new_version,
)
from magnetar.schema.definition import SCHEMA_DATA_BYTES_MAX, InvalidSchema, SchemaDefinition
from magnetar.schema.schema_type import parse_type_name

SCHEMAS_ROOT = "/schemas"
VERSIONS_MAX = 1000
"""Versions (deletion markers included) one topic may hold."""
_PUT_ATTEMPTS_MAX = 5
"""Tries to add a version when other brokers keep adding one first."""
_VERSION = struct.Struct(">q")
CACHE_BYTES_MAX = 64 * 1024 * 1024
"""Schema data (bytes) the history cache of one registry holds at most."""
CACHE_TOPICS_MAX = 10_000
"""Topics whose histories one registry caches at most."""


def version_bytes(version: int) -> bytes:
    """A version as the wire carries it: 8 bytes, big-endian."""
    return _VERSION.pack(version)


def version_number(data: bytes) -> int | None:
    """The version in 8 wire bytes; None for anything else (empty, wrong length)."""
    if len(data) != _VERSION.size:
        return None
    return int(_VERSION.unpack(data)[0])


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One stored version: a schema, or a deletion marker (``definition`` None)."""

    version: int
    definition: SchemaDefinition | None
    timestamp_ms: int

    @property
    def deleted(self) -> bool:
        return self.definition is None

    def encode(self) -> bytes:
        d = self.definition
        body: dict[str, Any] = {"timestamp": self.timestamp_ms, "deleted": d is None}
        if d is not None:
            body.update(
                type=d.type_name,
                data=base64.b64encode(d.data).decode("ascii"),
                properties=d.property_map(),
            )
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, version: int, raw: bytes) -> StoredSchema:
        """Raises :class:`MetadataError` for a node that is not a stored version."""
        try:
            body = json.loads(raw)
            timestamp_ms = int(body.get("timestamp", 0))
            if body.get("deleted"):
                return cls(version, None, timestamp_ms)
            kind = parse_type_name(str(body["type"]))
            if kind is None:
                raise ValueError(f"unknown type {body['type']!r}")
            data = base64.b64decode(body.get("data", ""), validate=True)
            props = body.get("properties") or {}
            definition = SchemaDefinition(
                kind, data, tuple(sorted((str(k), str(v)) for k, v in props.items()))
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise MetadataError(f"schema version {version} is unreadable: {exc}") from exc
        return cls(version, definition, timestamp_ms)


def schema_id(topic: TopicName) -> str:
    """``tenant/namespace/local name`` of the topic's partitioned (base) topic."""
    base = topic.partitioned_topic if topic.is_partition else topic
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


def schema_path(topic: TopicName) -> str:
    base = topic.partitioned_topic if topic.is_partition else topic
    return f"{SCHEMAS_ROOT}/{base.tenant}/{base.namespace}/{quote(base.local_name, safe='')}"


def _live(history: list[StoredSchema]) -> list[StoredSchema]:
    """The versions after the last deletion marker."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].deleted:
            return history[i + 1 :]
    return history


class SchemaRegistry:
    """Schema versions per topic over a metadata store. Safe for concurrent use: writes for
    one topic are serialized in this process and made exclusive across processes by
    create-if-absent. Every method may raise the metadata store's errors."""

    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        *,
        data_bytes_max: int = SCHEMA_DATA_BYTES_MAX,
        versions_max: int = VERSIONS_MAX,
        cache_bytes_max: int = CACHE_BYTES_MAX,
        cache_topics_max: int = CACHE_TOPICS_MAX,
    ) -> None:
        self._store = store
        self._clock = clock
        self.data_bytes_max = data_bytes_max
        self.versions_max = versions_max
        self.cache_bytes_max = cache_bytes_max
        self.cache_topics_max = cache_topics_max
        self._cache: OrderedDict[str, tuple[list[StoredSchema], int]] = OrderedDict()
        """schema id -> (history, its schema data bytes), least recently used first."""
        self.cache_bytes = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}

    # --- reading -------------------------------------------------------------------------

    async def history(self, topic: TopicName) -> list[StoredSchema]:
        """Every stored version, deletion markers included, oldest first. The list is
        shared with the cache: callers must not change it."""
        path = schema_path(topic)
        key = schema_id(topic)
        try:
            names = await self._store.children(path)
        except NotFound:
            names = []
        numbers = sorted(int(n) for n in names if n.isdigit())
        if not numbers:
            self._forget(key)
            return []

        async def load(number: int) -> StoredSchema | None:
            try:
                got = await self._store.get(f"{path}/{number:010d}")
            except NotFound:  # deleted meanwhile
                return None
            return StoredSchema.decode(number, got.value)

        reuse: list[StoredSchema] = []
        cached = self._cache.get(key)
        if cached is not None:
            known = cached[0]
            prefix = [s.version for s in known] == numbers[: len(known)]
            if prefix and await load(known[-1].version) == known[-1]:
                reuse = known
        loaded = await asyncio.gather(*(load(n) for n in numbers[len(reuse) :]))
        history = reuse + [s for s in loaded if s is not None]
        if len(history) == len(numbers):  # nothing vanished while reading: worth keeping
            self._remember(key, history)
        else:
            self._forget(key)
        return history

    def _remember(self, key: str, history: list[StoredSchema]) -> None:
        self._forget(key)
        size = sum(len(s.definition.data) for s in history if s.definition is not None)
        if size > self.cache_bytes_max:
            return
        self._cache[key] = (history, size)
        self.cache_bytes += size
        while self.cache_bytes > self.cache_bytes_max or len(self._cache) > self.cache_topics_max:
            _, (_, dropped) = self._cache.popitem(last=False)
            self.cache_bytes -= dropped

    def _forget(self, key: str) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self.cache_bytes -= entry[1]

    @property
    def cached_topics(self) -> int:
        return len(self._cache)

    async def live(self, topic: TopicName) -> list[StoredSchema]:
        """The versions that count (after the last deletion marker), oldest first."""
        return _live(await self.history(topic))

    async def latest(self, topic: TopicName) -> StoredSchema | None:
        """The newest version that counts; None without a schema (or after a delete)."""
        live = await self.live(topic)
        return live[-1] if live else None

    async def get(self, topic: TopicName, version: int | None = None) -> StoredSchema | None:
        """Version ``version`` (None: the latest that counts); None if there is no such
        schema or it is a deletion marker."""
        if version is None:
            return await self.latest(topic)
        if version < 0:
            return None
        try:
            got = await self._store.get(f"{schema_path(topic)}/{version:010d}")
        except NotFound:
            return None
        stored = StoredSchema.decode(version, got.value)
        return None if stored.deleted else stored

    async def has_schema(self, topic: TopicName) -> bool:
        return await self.latest(topic) is not None

    # --- checking ------------------------------------------------------------------------

    def validate(self, definition: SchemaDefinition) -> None:
        """Raises :class:`InvalidSchema` for a schema no topic may store."""
        definition.validate(self.data_bytes_max)

    async def find_version(self, topic: TopicName, definition: SchemaDefinition) -> int | None:
        """The live version with the same type and data, if any."""
        for stored in reversed(await self.live(topic)):
            if stored.definition is not None and (
                stored.definition.fingerprint == definition.fingerprint
            ):
                return stored.version
        return None

    async def check_compatible(
        self, topic: TopicName, definition: SchemaDefinition, strategy: Strategy
    ) -> None:
        """Would ``definition`` be accepted as a new version? Raises IncompatibleSchema /
        InvalidSchema; stores nothing."""
        self.validate(definition)
        live = await self.live(topic)
        if any(s.definition and s.definition.fingerprint == definition.fingerprint for s in live):
            return
        check_new_version([s.definition for s in live if s.definition], definition, strategy)

    async def check_consumer(
        self, topic: TopicName, definition: SchemaDefinition, strategy: Strategy
    ) -> None:
        """May a consumer with ``definition`` read the topic? Raises IncompatibleSchema."""
        self.validate(definition)
        live = await self.live(topic)
        check_consumer([s.definition for s in live if s.definition], definition, strategy)

    # --- writing -------------------------------------------------------------------------

    async def put_if_absent(
        self, topic: TopicName, definition: SchemaDefinition, policy: SchemaPolicy
    ) -> int:
        """The version of ``definition``: an existing live version with the same type and
        data, else a new version once it passes the compatibility check. Raises
        :class:`InvalidSchema`, :class:`IncompatibleSchema` (also when ``policy`` forbids
        adding versions); nothing is stored then."""
        self.validate(definition)
        async with self._lock(topic):
            for _ in range(_PUT_ATTEMPTS_MAX):
                history = await self.history(topic)
                live = _live(history)
                for stored in reversed(live):
                    if stored.definition is not None and (
                        stored.definition.fingerprint == definition.fingerprint
                    ):
                        return stored.version
                if not policy.allow_auto_update:
                    raise IncompatibleSchema(
                        "Schema not found and schema auto updating is disabled."
                    )
                check_new_version(
                    [s.definition for s in live if s.definition], definition, policy.strategy
                )
                version = history[-1].version + 1 if history else 0
                if await self._append(topic, history, StoredSchema(
                    version, definition, self._clock.now_ms()
                )):  # fmt: skip
                    return version
        raise MetadataError(f"could not add a schema version to {topic}: too much contention")

    async def delete(self, topic: TopicName, *, force: bool = False) -> int | None:
        """Delete the topic's schema. Returns the version deleted (the marker's, or with
        ``force`` the last stored one); None when there was nothing to delete."""
        async with self._lock(topic):
            history = await self.history(topic)
            self._forget(schema_id(topic))
            if force:
                if not history:
                    return None
                await self._store.delete_recursive(schema_path(topic))
                return history[-1].version
            for _ in range(_PUT_ATTEMPTS_MAX):
                if not _live(history):
                    return None
                marker = StoredSchema(history[-1].version + 1, None, self._clock.now_ms())
                if await self._append(topic, history, marker):
                    return marker.version
                history = await self.history(topic)
        raise MetadataError(f"could not delete the schema of {topic}: too much contention")

    async def _append(
        self, topic: TopicName, history: list[StoredSchema], stored: StoredSchema
    ) -> bool:
        """Write ``stored`` as the next version; False if another writer took the number."""
        if len(history) >= self.versions_max:
            raise InvalidSchema(
                f"{topic} has {len(history)} schema versions, the most one topic may hold; "
                "delete its schema first"
            )
        self._forget(schema_id(topic))
        try:
            await self._store.put(
                f"{schema_path(topic)}/{stored.version:010d}", stored.encode(), MUST_NOT_EXIST
            )
        except NodeExists:
            return False
        return True

    @asynccontextmanager
    async def _lock(self, topic: TopicName) -> AsyncIterator[None]:
        key = schema_id(topic)
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._lock_users[key] = self._lock_users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[key] -= 1
            if not self._lock_users[key]:  # nobody waits: forget it (bounded memory)
                del self._lock_users[key]
                del self._locks[key]


__all__ = [
    "SCHEMAS_ROOT",
    "SchemaRegistry",
    "StoredSchema",
    "schema_id",
    "schema_path",
    "version_bytes",
    "version_number",
]
