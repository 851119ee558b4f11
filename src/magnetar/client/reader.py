"""Readers: a non-durable, exclusive subscription that starts at a message id.

The broker starts at the start entry itself; messages before the start id (or equal to
it, unless ``start_message_id_inclusive``) are dropped here, as the C++ client does.
After a reconnect the reader resumes after the last message it returned.
"""

from __future__ import annotations

import asyncio

from magnetar.client.consumer import Consumer
from magnetar.client.errors import InvalidConfiguration
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer


def _available(
    last: MessageId,
    mark_delete: MessageId | None,
    returned: MessageId | None,
    start: MessageId,
    inclusive: bool,
) -> bool:
    """Whether a topic whose last message is ``last`` holds a message after what the reader
    returned (or after its start id, if it returned nothing yet)."""
    if last.entry_id() < 0:
        return False
    if returned is not None:
        return last > returned if last.batch_index() >= 0 else last.position > returned.position
    if start.is_earliest_like():
        return True
    if start == MessageId.latest:
        return mark_delete is not None and last.position > mark_delete.position
    if start.batch_index() < 0 or last.batch_index() < 0:
        return last.position >= start.position if inclusive else last.position > start.position
    return last >= start if inclusive else last > start


class Reader:
    """Reads one topic, one partition, or every partition of a partitioned topic (then
    ``consumer`` is a :class:`MultiTopicsConsumer` and ordering holds per partition)."""

    def __init__(
        self, consumer: Consumer | MultiTopicsConsumer, start: MessageId, inclusive: bool
    ) -> None:
        self._consumer = consumer
        self._start = start
        self._inclusive = inclusive
        self._last: dict[str, MessageId] = {}  # topic or partition -> last id returned

    def _children(self) -> list[Consumer]:
        c = self._consumer
        return c.consumers if isinstance(c, MultiTopicsConsumer) else [c]

    def topic(self) -> str:
        return self._consumer.topic()

    async def read_next(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_ms``."""
        msg = await self._consumer.receive(timeout_ms)
        self._last[msg.topic_name()] = msg.message_id()
        return msg

    async def has_message_available(self) -> bool:
        """Whether :meth:`read_next` would return a message now or soon (asks the broker for
        each partition's last message id unless one is already queued)."""
        if self._consumer.queued():
            return True
        children = self._children()
        answers = await asyncio.gather(*(c.get_last_message_id() for c in children))
        return any(
            _available(last, mark_delete, self._last.get(c.topic()), self._start, self._inclusive)
            for c, (last, mark_delete) in zip(children, answers, strict=True)
        )

    async def read_batch(self, max_num_messages: int = 100, timeout_ms: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages: those already queued, or else whatever
        arrives within ``timeout_ms`` (possibly none; no Timeout is raised)."""
        messages = await self._consumer.batch_receive(max_num_messages, timeout_ms)
        # Only each topic's last message matters for resuming; ids are built lazily.
        seen: set[str] = set()
        for msg in reversed(messages):
            name = msg.topic_name()
            if name not in seen:
                seen.add(name)
                self._last[name] = msg.message_id()
        return messages

    async def get_last_message_id(self) -> MessageId:
        """The id of the last message stored in the topic (or partition) this reader reads,
        asked from the broker (GET_LAST_MESSAGE_ID) whatever the reader has read. A topic
        with no message answers an entry id of -1. Raises InvalidConfiguration on a reader
        of a whole partitioned topic (use :meth:`get_last_message_ids`), ``ConnectError``
        while the reader is not connected, ``Timeout`` after the operation timeout."""
        if isinstance(self._consumer, MultiTopicsConsumer):
            raise InvalidConfiguration(
                "a reader of a partitioned topic has one last message id per partition: "
                "use get_last_message_ids()"
            )
        last, _ = await self._consumer.get_last_message_id()
        return last

    async def get_last_message_ids(self) -> dict[str, MessageId]:
        """Partition (or topic) name -> the id of its last stored message (see
        :meth:`get_last_message_id`); works for every reader."""
        children = self._children()
        answers = await asyncio.gather(*(c.get_last_message_id() for c in children))
        return {c.topic(): last for c, (last, _) in zip(children, answers, strict=True)}

    async def seek(self, target: MessageId | int) -> None:
        """Move to a message id (read from it, inclusive) or a publish time in ms."""
        await self._consumer.seek(target)
        self._last.clear()
        if isinstance(target, MessageId):
            self._start, self._inclusive = target, True
        else:
            self._start, self._inclusive = MessageId.earliest, True

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    async def close(self) -> None:
        await self._consumer.close()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        return await self.read_next()
