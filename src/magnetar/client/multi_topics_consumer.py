"""One consumer over several topics or partitions (partitioned topics, topic lists, regex).

Each topic or partition has its own :class:`~magnetar.client.consumer.Consumer` whose
messages flow into this consumer's queue (the children keep their own permit accounting:
a child earns a permit when its message is taken here). Acks, nacks and seeks are routed
to the child that received the message. Ordering holds per child, not across children.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from magnetar.client.consumer import Consumer, wait_for_message
from magnetar.client.errors import AlreadyClosed, InvalidConfiguration, Timeout
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.common.names import partitioned_topic_name

log = logging.getLogger(__name__)


class MultiTopicsConsumer:
    def __init__(self, topic: str, subscription: str, consumer_name: str = "") -> None:
        self._topic = topic
        self._subscription = subscription
        self._consumer_name = consumer_name
        """The name every child subscribes with ("" for readers: the first child's)."""
        self._children: list[Consumer] = []
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[Message]] = deque()
        self._closed = False
        self._watch_task: asyncio.Task[None] | None = None

    def _attach(self, children: list[Consumer]) -> None:
        self._children.extend(children)

    def _watch(
        self,
        period_s: float,
        clock: Clock,
        discover: Callable[[], Awaitable[list[str]]],
        add: Callable[[list[str]], Awaitable[list[Consumer]]],
    ) -> None:
        """Regex consumers: every ``period_s`` list the matching topics again; subscribe to
        new ones (``add`` returns the started children) and close children of topics that
        are gone. A failed round is logged and retried next period."""

        async def loop() -> None:
            while not self._closed:
                await clock.sleep(period_s)
                try:
                    await self._rediscover(discover, add)
                except MagnetarError as exc:
                    log.info("topic re-discovery for %s failed: %s", self._topic, exc)

        self._watch_task = asyncio.get_running_loop().create_task(loop())

    async def _rediscover(
        self,
        discover: Callable[[], Awaitable[list[str]]],
        add: Callable[[list[str]], Awaitable[list[Consumer]]],
    ) -> None:
        current = set(await discover())
        known = {partitioned_topic_name(c.topic()) for c in self._children}
        new = sorted(current - known)
        if new and not self._closed:
            children = await add(new)
            if self._closed:
                for c in children:
                    await c.close()
                return
            self._attach(children)
        gone = [c for c in self._children if partitioned_topic_name(c.topic()) not in current]
        for c in gone:
            self._children.remove(c)
            self.drop_from(c)
            with contextlib.suppress(MagnetarError):
                await c.close()

    def topics(self) -> list[str]:
        """The topics and partitions this consumer currently reads."""
        return [c.topic() for c in self._children]

    # ------------------------------------------------------------ sink interface (children)

    def push(self, messages: list[Message]) -> None:
        queue = self._queue
        queue.extend(messages)
        waiters = self._waiters
        while waiters and queue:
            w = waiters.popleft()
            if w.done():
                continue
            msg = queue.popleft()
            msg.consumer_ref.taken(msg)
            w.set_result(msg)

    def drop_from(self, child: Consumer) -> None:
        if any(m.consumer_ref is child for m in self._queue):
            self._queue = deque(m for m in self._queue if m.consumer_ref is not child)

    # ------------------------------------------------------------ API

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        if self._consumer_name:
            return self._consumer_name
        return self._children[0].consumer_name() if self._children else ""

    @property
    def consumers(self) -> list[Consumer]:
        return list(self._children)

    def queued(self) -> int:
        return len(self._queue)

    def is_connected(self) -> bool:
        return all(c.is_connected() for c in self._children)

    async def receive(self, timeout_ms: int | None = None) -> Message:
        if self._closed:
            raise AlreadyClosed("consumer is closed")
        if self._queue:
            msg = self._queue.popleft()
            msg.consumer_ref.taken(msg)
        else:
            msg = await wait_for_message(self._waiters, timeout_ms)
        if msg.consumer_ref.auto_consume:
            await msg.consumer_ref.resolve_schema(msg)  # AUTO_CONSUME: by its topic's version
        return msg

    async def batch_receive(
        self, max_num_messages: int = 100, timeout_ms: int = 100
    ) -> list[Message]:
        out: list[Message] = []
        if not self._queue:
            try:
                out.append(await self.receive(timeout_ms))
            except Timeout:
                return []
        while self._queue and len(out) < max_num_messages:
            msg = self._queue.popleft()
            msg.consumer_ref.taken(msg)
            if msg.consumer_ref.auto_consume:
                await msg.consumer_ref.resolve_schema(msg)
            out.append(msg)
        return out

    def __aiter__(self) -> MultiTopicsConsumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    def _child_for(self, message: Message | MessageId) -> Consumer:
        if isinstance(message, Message):
            child: Consumer = message.consumer_ref
            return child
        for c in self._children:
            if c.partition == message.partition() and c.partition >= 0:
                return c
        if len(self._children) == 1:
            return self._children[0]
        raise InvalidConfiguration(
            "acknowledge by MessageId needs the Message on a multi-topic consumer"
        )

    async def acknowledge(self, message: Message | MessageId) -> None:
        await self._child_for(message).acknowledge(message)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        await self._child_for(message).acknowledge_cumulative(message)

    def negative_acknowledge(
        self, message: Message | MessageId, delay_ms: int | None = None
    ) -> None:
        self._child_for(message).negative_acknowledge(message, delay_ms)

    async def reconsume_later(
        self,
        message: Message,
        delay_ms: int,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """See :meth:`Consumer.reconsume_later`."""
        await self._child_for(message).reconsume_later(message, delay_ms, properties)

    def redeliver_unacknowledged_messages(self) -> None:
        for c in self._children:
            c.redeliver_unacknowledged_messages()

    async def seek(self, target: MessageId | int) -> None:
        if isinstance(target, MessageId) and target.partition() >= 0:
            await self._child_for(target).seek(target)
            return
        await asyncio.gather(*(c.seek(target) for c in self._children))

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self._children))
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watch_task is not None:
            self._watch_task.cancel()
        await asyncio.gather(*(c.close() for c in self._children), return_exceptions=True)
        waiters, self._waiters = self._waiters, deque()
        for w in waiters:
            if not w.done():
                w.set_exception(AlreadyClosed("consumer closed"))

    async def __aenter__(self) -> MultiTopicsConsumer:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
