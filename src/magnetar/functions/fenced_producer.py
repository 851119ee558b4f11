"""The leader's hold on a topic only it writes (``assignments``, ``metadata``, ``packages``):
one exclusive producer, taken with fencing.

Only the leader writes those topics. A new leader takes the topic's producer with
Pulsar's ``ExclusiveWithFencing`` access mode: the broker closes whatever producer held the
topic and refuses its re-registration (its topic epoch is stale), so a deposed leader that
has not noticed yet (paused, partitioned from its coordination consumer) gets
:class:`~magnetar.common.errors.ProducerFenced` on its next write instead of writing
alongside the new leader.

:class:`FencedProducer` is the I/O shell only; *when* to take and release it is decided
by :class:`~magnetar.functions.leadership.LeadershipState`.
"""

from __future__ import annotations

import contextlib
import logging

from magnetar.client import Client, MessageId, Producer, ProducerAccessMode
from magnetar.common.errors import MagnetarError
from magnetar.functions.errors import FunctionsWorkerError, NotLeader

log = logging.getLogger(__name__)


class FencedProducer:
    """Holds (or not) the exclusive producer of one leader-written topic."""

    def __init__(self, client: Client, topic: str, role: str = "assignments") -> None:
        self._client = client
        self.topic = topic
        self.role = role
        """What the topic is for (``assignments``, ``metadata``, ``packages``), for messages."""
        self._producer: Producer | None = None

    @property
    def held(self) -> bool:
        return self._producer is not None

    @property
    def connected(self) -> bool:
        """Whether the held producer is registered with the broker right now (False while
        it reconnects, and for good once the broker refused it: fenced)."""
        return self._producer is not None and self._producer.is_connected()

    async def take(self) -> None:
        """Take the topic's producer, fencing out any other holder. A producer already held
        is closed first (a fenced one cannot be revived). Raises the client's or broker's
        error when the producer cannot be created (the caller retries), and
        :class:`FunctionsWorkerError` when the topic is partitioned (a setting to fix)."""
        await self.release()
        producer = await self._client.create_producer(
            self.topic,
            access_mode=ProducerAccessMode.ExclusiveWithFencing,
            batching_enabled=False,
        )
        if not isinstance(producer, Producer):
            with contextlib.suppress(MagnetarError):
                await producer.close()
            raise FunctionsWorkerError(
                f"the {self.role} topic {self.topic} is partitioned; it must not be"
            )
        self._producer = producer

    async def release(self) -> None:
        """Close the producer if one is held (a no-op otherwise). Never raises: a producer
        the broker already closed or fenced has nothing left to release."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(MagnetarError):
                await producer.close()

    async def send(
        self, key: str, payload: bytes, properties: dict[str, str] | None = None
    ) -> MessageId:
        """Write one record keyed ``key`` and wait for the broker's receipt.

        Raises :class:`NotLeader` when no producer is held, and
        :class:`~magnetar.common.errors.ProducerFenced` when a newer leader took the topic
        (nothing was written then)."""
        producer = self._producer
        if producer is None:
            raise NotLeader(f"this worker does not hold the producer of {self.topic}")
        return await producer.send(payload, partition_key=key, properties=properties)
