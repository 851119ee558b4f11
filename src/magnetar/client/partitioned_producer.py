"""A producer over a partitioned topic: one :class:`Producer` per partition and a router.

Ordering holds per partition (per key, with keyed routing). ``send_async`` / ``send`` route
each message with the :class:`~magnetar.client.routing.PartitionRouter`; ``flush`` and
``close`` apply to every partition.
"""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.client.message_id import MessageId
from magnetar.client.producer import Producer
from magnetar.client.routing import PartitionRouter


class PartitionedProducer:
    def __init__(self, topic: str, producers: list[Producer], router: PartitionRouter) -> None:
        self._topic = topic
        self._producers = producers
        self._router = router

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._producers[0].producer_name()

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self._producers)

    def is_connected(self) -> bool:
        return all(p.is_connected() for p in self._producers)

    @property
    def partitions(self) -> list[Producer]:
        return list(self._producers)

    def _pick(self, content: Any, kwargs: dict[str, Any]) -> Producer:
        index = self._router.choose(len(self._producers), kwargs.get("partition_key"), content)
        return self._producers[index]

    def send_async(
        self, content: Any, callback: Any = None, **kwargs: Any
    ) -> asyncio.Future[MessageId]:
        return self._pick(content, kwargs).send_async(content, callback, **kwargs)

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        return await self._pick(content, kwargs).send(content, **kwargs)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._producers))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._producers))

    async def __aenter__(self) -> PartitionedProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
