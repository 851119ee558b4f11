"""The ZooKeeper backend (in progress)."""

from __future__ import annotations

from magnetar.common.clock import Clock
from magnetar.common.errors import MetadataError
from magnetar.metadata.store import MetadataStore


class ZooKeeperStore:
    @classmethod
    async def open(
        cls,
        url: str,
        *,
        session_timeout_s: float,
        clock: Clock | None,
        value_size_max_bytes: int,
    ) -> MetadataStore:
        raise MetadataError("the ZooKeeper backend is not implemented yet")
