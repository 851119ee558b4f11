"""Consumers of one topic (or one partition): subscribe, receive, acknowledge, redeliver.

The shell around the sans-IO cores: :class:`~magnetar.client.receive_queue.ReceiveQueue`
(flow permits), :class:`~magnetar.client.ack_grouping.AckGroupingTracker`,
:class:`~magnetar.client.unacked_tracker.UnackedMessageTracker` (ack timeout),
:class:`~magnetar.client.negative_ack_tracker.NegativeAckTracker` and
:class:`~magnetar.client.chunk_reassembler.ChunkReassembler`; the dead-letter and retry
topics are :class:`~magnetar.client.dead_letter.DeadLetters`, the configuration and its
SUBSCRIBE :mod:`magnetar.client.consumer_config`. One timer task drives the periodic parts
(ack flush, ack timeout, nack delays, chunk expiry).

Ordering: messages are handed out in the order the broker dispatched them. After a
reconnect, a seek or a redeliver-all the local queue is dropped (the broker redelivers what
was not acknowledged) and the full permit window is granted again.

Failover events: ACTIVE_CONSUMER_CHANGE calls the ``consumer_event_listener``'s
``became_active(consumer, partition)`` / ``became_inactive(consumer, partition)`` (coroutine
results are scheduled as tasks), with the consumer the application holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from magnetar.client.ack_grouping import AckGroupingTracker, ack_positions
from magnetar.client.backoff import Backoff
from magnetar.client.chunk_reassembler import ChunkReassembler, reassembled_message
from magnetar.client.connection import Connection
from magnetar.client.consumer_config import ConsumerConfig, ConsumerType, subscribe_command
from magnetar.client.context import ClientContext
from magnetar.client.dead_letter import DeadLetters
from magnetar.client.errors import (
    AlreadyClosed,
    ConnectError,
    CumulativeAcknowledgementNotAllowed,
    Timeout,
)
from magnetar.client.message import (
    CorruptMessage,
    Message,
    MessageRun,
    decode_entry_lazily,
    entry_payload,
)
from magnetar.client.message_id import MessageId
from magnetar.client.negative_ack_tracker import NegativeAckTracker
from magnetar.client.receive_queue import ReceiveQueue
from magnetar.client.reconnect import reconnect
from magnetar.client.schema import BytesSchema
from magnetar.client.topic_schema import AutoConsumeSchema
from magnetar.client.unacked_tracker import UnackedMessageTracker
from magnetar.common.errors import MagnetarError
from magnetar.protocol import (
    Ack,
    AckType,
    CloseConsumer,
    Entry,
    Flow,
    GetLastMessageId,
    GetLastMessageIdResponse,
    RedeliverUnacknowledgedMessages,
    Seek,
    Unsubscribe,
)
from magnetar.protocol import Message as MessageCommand
from magnetar.protocol import MessageId as WireMessageId

log = logging.getLogger(__name__)


class _State(enum.Enum):
    CONNECTING = 0
    READY = 1
    CLOSING = 2
    CLOSED = 3


_CLOSING = _State.CLOSING
_CLOSED = _State.CLOSED


class Consumer:
    """A consumer of one topic or partition; ``Client.subscribe`` creates it."""

    def __init__(
        self,
        ctx: ClientContext,
        topic: str,
        subscription: str,
        partition: int,
        config: ConsumerConfig,
        *,
        facade: Any = None,
        sink: Any = None,
    ) -> None:
        self._ctx = ctx
        self._topic = topic
        self._subscription = subscription
        self._partition = partition
        self._conf = config
        self._auto_schema = config.schema if isinstance(config.schema, AutoConsumeSchema) else None
        self._consumer_id = next(ctx.consumer_ids)
        self._name = config.consumer_name or f"consumer-{ctx.rng.getrandbits(40):010x}"
        self._facade = facade if facade is not None else self
        self._sink = sink  # multi-topic parent: receives messages instead of our queue
        self._state = _State.CONNECTING
        self._cnx: Connection | None = None
        self._queue: ReceiveQueue[Message] = ReceiveQueue(config.receiver_queue_size)
        self._waiters: deque[asyncio.Future[Message]] = deque()
        self._acks = AckGroupingTracker(
            self._consumer_id,
            group_max_size=config.acknowledgment_group_max_size,
            batch_index_ack_enabled=config.batch_index_ack_enabled,
        )
        self._unacked = (
            UnackedMessageTracker(config.unacked_messages_timeout_ms)
            if config.unacked_messages_timeout_ms > 0
            else None
        )
        self._nacks = NegativeAckTracker(config.negative_ack_redelivery_delay_ms)
        self._chunks = ChunkReassembler(
            max_pending_messages=config.max_pending_chunked_message,
            expire_ms=config.expire_time_of_incomplete_chunked_message_ms,
        )
        self._start_id = config.start_message_id
        self._start_inclusive = config.start_message_id_inclusive
        self._last_dequeued: MessageId | None = None
        self._dlq_candidates: dict[tuple[int, int], list[Message]] = {}
        self._letters = DeadLetters(
            ctx,
            topic=topic,
            subscription=subscription,
            partition=partition,
            policy=config.dead_letter_policy,
            candidates=self._dlq_candidates,
            acks=self._acks,
            flush_acks=self._flush_acks,
        )
        self._backoff = Backoff(100, 60_000, ctx.rng)
        self._reconnect_task: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reached_end = False
        self._tracks_dequeue = not config.durable or self._unacked is not None
        self.is_active: bool | None = None
        """Last ACTIVE_CONSUMER_CHANGE state (None before any was received)."""

    # ------------------------------------------------------------ accessors

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._name

    def is_connected(self) -> bool:
        return self._state == _State.READY

    @property
    def partition(self) -> int:
        return self._partition

    # ------------------------------------------------------------ connecting

    async def _start(self) -> None:
        deadline = self._ctx.clock.monotonic_s() + self._ctx.operation_timeout_s
        while True:
            try:
                await self._connect()
                break
            except MagnetarError as exc:
                if not exc.retriable or self._ctx.clock.monotonic_s() >= deadline:
                    self._state = _State.CLOSED
                    raise
                await self._ctx.clock.sleep(self._backoff.next_ms() / 1000)
        self._ctx.handles.add(self)
        self._timer_task = asyncio.get_running_loop().create_task(self._timers())

    async def _connect(self) -> None:
        ctx = self._ctx
        conf = self._conf
        answer = await ctx.lookup.lookup(self._topic)
        cnx = await ctx.pool.get(answer.logical_url, answer.physical_url)
        # Whatever is queued locally will be redelivered by the broker.
        self._clear_queue()
        start: WireMessageId | None = None
        if not conf.durable:
            if self._last_dequeued is not None:
                self._start_id, self._start_inclusive = self._last_dequeued, False
            if self._start_id is not None:
                start = self._start_id.to_wire()
                start = WireMessageId(
                    start.ledger_id, start.entry_id, batch_index=start.batch_index
                )
        rid = next(ctx.request_ids)
        cnx.register_consumer(self._consumer_id, self)
        try:
            await cnx.request(
                subscribe_command(
                    conf,
                    topic=self._topic,
                    subscription=self._subscription,
                    consumer_id=self._consumer_id,
                    request_id=rid,
                    consumer_name=self._name,
                    start_message_id=start,
                ),
                rid,
                ctx.operation_timeout_s,
            )
        except BaseException:
            cnx.unregister_consumer(self._consumer_id)
            raise
        self._cnx = cnx
        self._state = _State.READY
        self._backoff.reset()
        permits = self._queue.initial_permits()
        if permits:
            cnx.send(Flow(consumer_id=self._consumer_id, message_permits=permits))

    def on_disconnect(self, connection: Connection, closed_by_broker: bool) -> None:
        # Not attached to it (a close for a creation still in flight): the creation's own
        # failure retries; a second reconnection here would race it.
        if self._cnx is not connection:
            return
        self._cnx = None
        if self._state in (_State.CLOSING, _State.CLOSED):
            return
        self._state = _State.CONNECTING
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        await reconnect(
            what=f"consumer {self._name} on {self._topic}",
            clock=self._ctx.clock,
            backoff=self._backoff,
            still_connecting=lambda: self._state == _State.CONNECTING,
            connect=self._connect,
            on_fatal=self._fail_on_reconnect,
        )

    def _fail_on_reconnect(self, exc: MagnetarError) -> None:
        self._state = _State.CLOSED
        self._wake_all(exc)

    def _clear_queue(self) -> None:
        dropped = self._queue.clear()
        if self._sink is not None:
            self._sink.drop_from(self)
        if self._dlq_candidates:
            for m in dropped:
                if isinstance(m, Message | MessageRun):
                    self._dlq_candidates.pop(m.position[:2], None)
        self._chunks.clear()

    # ------------------------------------------------------------ incoming

    def on_message(self, command: MessageCommand, entry: Entry) -> None:
        mid = command.message_id
        try:
            md = entry.metadata
            if md.chunk_id is not None and md.num_chunks_from_msg and md.num_chunks_from_msg > 1:
                self._on_chunk(command, entry)
                return
            decoded, skipped = decode_entry_lazily(
                entry,
                topic=self._topic,
                partition=self._partition,
                ledger_id=mid.ledger_id,
                entry_id=mid.entry_id,
                redelivery_count=command.redelivery_count,
                ack_set=command.ack_set,
            )
        except CorruptMessage as exc:
            log.warning("discarding corrupt entry %s on %s: %s", mid, self._topic, exc)
            self._send(
                Ack(
                    consumer_id=self._consumer_id,
                    ack_type=AckType.Individual,
                    message_id=(WireMessageId(mid.ledger_id, mid.entry_id),),
                    validation_error=exc.validation_error,
                )
            )
            self._earn(1)
            return
        except MagnetarError as exc:
            log.warning("discarding unreadable entry %s on %s: %s", mid, self._topic, exc)
            self._earn(1)
            return
        self._deliver(decoded, skipped, command.redelivery_count)

    def _on_chunk(self, command: MessageCommand, entry: Entry) -> None:
        md = entry.metadata
        mid = command.message_id
        chunk_mid = MessageId(self._partition, mid.ledger_id, mid.entry_id)
        try:
            data = entry_payload(entry, md)
        except CorruptMessage:
            self._earn(1)
            return
        assert md.chunk_id is not None and md.num_chunks_from_msg is not None
        done, discarded = self._chunks.add(
            md.uuid or "",
            md.chunk_id,
            md.num_chunks_from_msg,
            md.total_chunk_msg_size or 0,
            data,
            chunk_mid,
            self._ctx.clock.now_ms(),
        )
        self._discard_chunks(discarded)
        if done is None:
            self._earn(1)
            return
        msg = reassembled_message(
            done,
            md,
            topic=self._topic,
            partition=self._partition,
            redelivery_count=command.redelivery_count,
        )
        self._earn(len(done.chunk_ids) - 1)
        self._deliver(msg, 0, command.redelivery_count)

    def _discard_chunks(self, ids: list[MessageId]) -> None:
        if ids:
            self._send(
                Ack(
                    consumer_id=self._consumer_id,
                    ack_type=AckType.Individual,
                    message_id=tuple(WireMessageId(m.ledger_id(), m.entry_id()) for m in ids),
                )
            )

    def _deliver(
        self, decoded: Message | MessageRun | None, skipped: int, redelivery_count: int
    ) -> None:
        if (
            type(decoded) is MessageRun
            and self._start_id is None
            and self._sink is None
            and self._conf.dead_letter_policy is None
        ):
            # The common case: the batch's messages are built as the application takes them.
            if skipped:
                self._earn(skipped)
            if not isinstance(self._conf.schema, BytesSchema):
                decoded.decoder = self._conf.schema
                decoded.consumer_ref = self
            self._queue.push_run(decoded)
            self._hand_to_waiters()
            return
        if decoded is None:
            messages = []
        elif isinstance(decoded, MessageRun):
            messages = decoded.take_all()
        else:
            messages = [decoded]
        start = self._start_id
        if (
            start is not None
            and messages
            and not start.is_earliest_like()
            and start != MessageId.latest
        ):
            kept = [m for m in messages if self._after_start(m.position, start)]
            skipped += len(messages) - len(kept)
            messages = kept
        if skipped:
            self._earn(skipped)
        if not messages:
            return
        policy = self._conf.dead_letter_policy
        decoder = None if isinstance(self._conf.schema, BytesSchema) else self._conf.schema
        if decoder is not None or self._sink is not None or policy is not None:
            for m in messages:
                m.decoder = decoder
                m.consumer_ref = self
        if policy is not None and redelivery_count >= policy.max_redeliver_count:
            key = messages[0].position[:2]
            self._dlq_candidates[key] = list(messages)
        if self._sink is not None:
            self._sink.push(messages)
            return
        self._queue.push_many(messages)
        self._hand_to_waiters()

    def _hand_to_waiters(self) -> None:
        queue = self._queue
        waiters = self._waiters
        while waiters and len(queue):
            waiter = waiters.popleft()
            if waiter.done():
                continue
            msg, permits = queue.pop()
            assert msg is not None
            waiter.set_result(msg)
            self._dequeued(msg)
            if permits:
                self._flow(permits)

    def _after_start(self, position: tuple[int, int, int], start: MessageId) -> bool:
        """Whether a message is delivered given a reader's start id (filtered here, since
        the broker starts at the start entry itself)."""
        inclusive = self._start_inclusive
        if start.batch_index() < 0:
            entry = position[:2]
            return entry > start.position or (inclusive and entry == start.position)
        key = (start.ledger_id(), start.entry_id(), start.batch_index())
        return position > key or (inclusive and position == key)

    def _earn(self, n: int) -> None:
        permits = self._queue.dropped(n)
        if permits:
            self._flow(permits)

    def taken(self, msg: Message) -> None:
        """A multi-topic parent handed ``msg`` (received through the sink) to the app."""
        self._dequeued(msg)
        self._earn(1)

    def _flow(self, permits: int) -> None:
        self._send(Flow(consumer_id=self._consumer_id, message_permits=permits))

    def _send(self, command: Any) -> None:
        cnx = self._cnx
        if cnx is not None:
            with contextlib.suppress(ConnectError):
                cnx.send(command)

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active
        listener = self._conf.consumer_event_listener
        if listener is None:
            return
        try:
            fn = listener.became_active if is_active else listener.became_inactive
            result = fn(self._facade, self._partition)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:
            log.exception("consumer event listener raised")

    def on_reached_end_of_topic(self) -> None:
        self._reached_end = True

    def has_reached_end_of_topic(self) -> bool:
        return self._reached_end

    # ------------------------------------------------------------ receiving

    def _dequeued(self, msg: Message) -> None:
        if not self._conf.durable:
            self._last_dequeued = msg.message_id()
        if self._unacked is not None:
            self._unacked.add(msg.position[:2], self._ctx.clock.now_ms())

    def _check_open(self) -> None:
        if self._state in (_State.CLOSING, _State.CLOSED):
            raise AlreadyClosed(f"consumer on {self._topic} is closed")

    async def receive(self, timeout_ms: int | None = None) -> Message:
        """The next message. Raises Timeout after ``timeout_ms`` (None: wait forever) and
        AlreadyClosed if the consumer closes meanwhile."""
        state = self._state
        if state is _CLOSING or state is _CLOSED:
            self._check_open()
        msg, permits = self._queue.pop()
        if msg is not None:
            # Fast path: a queued message is returned without creating a future or task.
            if self._tracks_dequeue:
                self._dequeued(msg)
            if permits:
                self._flow(permits)
            if self._auto_schema is not None:
                await self.resolve_schema(msg)
            return msg
        if self._conf.receiver_queue_size == 0:
            self._flow(1)
        msg = await wait_for_message(self._waiters, timeout_ms)
        if self._auto_schema is not None:
            await self.resolve_schema(msg)
        return msg

    @property
    def auto_consume(self) -> bool:
        """Whether this consumer reads with :class:`AutoConsumeSchema`."""
        return self._auto_schema is not None

    async def resolve_schema(self, msg: Message) -> None:
        """AUTO_CONSUME: point ``msg``'s decoder at the schema of its version (fetched once
        per version). Raises the GET_SCHEMA errors (Timeout, ConnectError, ...)."""
        auto = self._auto_schema
        version = msg.schema_version()
        if auto is None or not version:
            return
        msg.decoder = auto.cached(version) or await auto.decoder_for(
            self._ctx, self._topic, version
        )

    async def batch_receive(
        self, max_num_messages: int = 100, timeout_ms: int = 100
    ) -> list[Message]:
        """Up to ``max_num_messages`` messages: what is queued, or else whatever arrives
        within ``timeout_ms`` (possibly none)."""
        self._check_open()
        out, permits = self._queue.pop_many(max_num_messages)
        if not out:
            try:
                out = [await self.receive(timeout_ms)]
            except Timeout:
                return []
            more, permits = self._queue.pop_many(max_num_messages - 1)
            for m in more:
                self._dequeued(m)
            out.extend(more)
        else:
            for m in out:
                self._dequeued(m)
        if permits:
            self._flow(permits)
        if self._auto_schema is not None:
            for m in out:
                await self.resolve_schema(m)
        return out

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------ acknowledging

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped; sent within ``acknowledgment_group_time_ms``)."""
        state = self._state
        if state is _CLOSING or state is _CLOSED:
            self._check_open()
        if type(message) is Message and not message.chunk_ids:
            # Fast path: no MessageId built, no lists.
            info = message._info
            ledger, entry = info.ledger_id, info.entry_id
            full = self._acks.add_individual(ledger, entry, message._batch_index, info.batch_size)
            if self._unacked is not None:
                self._unacked.remove((ledger, entry))
            if self._nacks.deadline_ms:
                self._nacks.remove((ledger, entry))
            if self._dlq_candidates:
                self._dlq_candidates.pop((ledger, entry), None)
            if full or self._conf.acknowledgment_group_time_ms <= 0:
                self._flush_acks()
            return
        full = False
        for ledger, entry, index, size in ack_positions(message):
            full = self._acks.add_individual(ledger, entry, index, size) or full
            if self._unacked is not None:
                self._unacked.remove((ledger, entry))
            self._nacks.remove((ledger, entry))
            self._dlq_candidates.pop((ledger, entry), None)
        if full or self._conf.acknowledgment_group_time_ms <= 0:
            self._flush_acks()

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge everything up to and including ``message`` (Exclusive and Failover
        only: raises CumulativeAcknowledgementNotAllowed otherwise)."""
        self._check_open()
        if self._conf.consumer_type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowed(
                "cumulative ack on a Shared/KeyShared subscription"
            )
        ledger, entry, index, size = ack_positions(message)[-1]
        self._acks.add_cumulative(ledger, entry, index, size)
        if self._unacked is not None:
            self._unacked.remove_up_to((ledger, entry))
        if self._conf.acknowledgment_group_time_ms <= 0:
            self._flush_acks()

    def negative_acknowledge(
        self, message: Message | MessageId, delay_ms: int | None = None
    ) -> None:
        """Ask for redelivery after ``negative_ack_redelivery_delay_ms`` (or ``delay_ms``)."""
        self._check_open()
        now = self._ctx.clock.now_ms()
        for ledger, entry, _, _ in ack_positions(message):
            self._nacks.add((ledger, entry), now, delay_ms)
            if self._unacked is not None:
                self._unacked.remove((ledger, entry))

    def _flush_acks(self) -> None:
        for ack in self._acks.flush():
            self._send(ack)

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacknowledged message; drops the local queue."""
        self._clear_queue()
        if self._unacked is not None:
            self._unacked.clear()
        self._send(RedeliverUnacknowledgedMessages(consumer_id=self._consumer_id))
        permits = self._queue.initial_permits()
        if permits:
            self._flow(permits)

    def _redeliver(self, positions: list[tuple[int, int]]) -> None:
        if not positions:
            return
        to_dlq = [p for p in positions if p in self._dlq_candidates]
        if to_dlq:
            task = asyncio.get_running_loop().create_task(self._letters.send(to_dlq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            positions = [p for p in positions if p not in self._dlq_candidates]
            if not positions:
                return
        if self._conf.consumer_type in (ConsumerType.Shared, ConsumerType.KeyShared):
            self._send(
                RedeliverUnacknowledgedMessages(
                    consumer_id=self._consumer_id,
                    message_ids=tuple(WireMessageId(ledger, entry) for ledger, entry in positions),
                )
            )
        else:
            self.redeliver_unacknowledged_messages()

    async def reconsume_later(
        self,
        message: Message,
        delay_ms: int,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Retry ``message`` after ``delay_ms`` (Java ``reconsumeLater``): it is re-published
        to the retry-letter topic with ``deliver_after_ms`` and properties
        ``RECONSUMETIMES`` (+1), ``DELAY_TIME``, ``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``, then
        acknowledged here. Once ``RECONSUMETIMES`` would exceed the dead-letter policy's
        ``max_redeliver_count`` it goes to the dead-letter topic instead. Needs a consumer
        subscribed with ``retry_enable=True`` (raises InvalidConfiguration otherwise)."""
        self._check_open()
        await self._letters.reconsume_later(
            message, delay_ms, properties, retry_enable=self._conf.retry_enable
        )
        await self.acknowledge(message)

    # ------------------------------------------------------------ timers

    async def _timers(self) -> None:
        clock = self._ctx.clock
        group_s = self._conf.acknowledgment_group_time_ms / 1000
        tick_s = min(group_s, 0.1) if group_s > 0 else 0.1
        while self._state != _State.CLOSED:
            await clock.sleep(tick_s)
            if self._state != _State.READY:
                continue
            self._flush_acks()
            now = clock.now_ms()
            due = self._nacks.tick(now)
            if self._unacked is not None:
                due.extend(self._unacked.tick(now))
            self._redeliver(due)
            self._discard_chunks(self._chunks.expire(now))

    # ------------------------------------------------------------ seek, last id, close

    async def seek(self, target: MessageId | int) -> None:
        """Reset the subscription to a message id or to a publish time (ms). The broker
        disconnects the consumer; it reconnects and receives from there."""
        self._check_open()
        cnx = self._cnx
        if cnx is None:
            raise ConnectError("consumer is not connected")
        rid = next(self._ctx.request_ids)
        if isinstance(target, MessageId):
            first = target.first_chunk_message_id() or target
            command = Seek(
                consumer_id=self._consumer_id, request_id=rid, message_id=first.to_wire()
            )
            if not self._conf.durable:
                self._start_id, self._start_inclusive = target, True
        else:
            command = Seek(
                consumer_id=self._consumer_id, request_id=rid, message_publish_time=target
            )
            if not self._conf.durable:
                self._start_id = None
        self._last_dequeued = None
        self._acks.clear()
        await cnx.request(command, rid, self._ctx.operation_timeout_s)
        self._clear_queue()

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        """``(last message id of the topic, the subscription's mark-delete position)``."""
        cnx = self._cnx
        if cnx is None:
            raise ConnectError("consumer is not connected")
        rid = next(self._ctx.request_ids)
        resp: GetLastMessageIdResponse = await cnx.request(
            GetLastMessageId(consumer_id=self._consumer_id, request_id=rid),
            rid,
            self._ctx.operation_timeout_s,
        )
        md = resp.consumer_mark_delete_position
        return (
            MessageId.from_wire(resp.last_message_id, self._partition),
            MessageId.from_wire(md, self._partition) if md is not None else None,
        )

    def queued(self) -> int:
        return len(self._queue)

    async def unsubscribe(self) -> None:
        """Delete the subscription (only its sole consumer may) and close."""
        self._check_open()
        cnx = self._cnx
        if cnx is None:
            raise ConnectError("consumer is not connected")
        rid = next(self._ctx.request_ids)
        await cnx.request(
            Unsubscribe(consumer_id=self._consumer_id, request_id=rid),
            rid,
            self._ctx.operation_timeout_s,
        )
        await self._shutdown(send_close=False)

    async def close(self) -> None:
        if self._state in (_State.CLOSING, _State.CLOSED):
            return
        self._flush_acks()
        await self._shutdown(send_close=True)

    async def _shutdown(self, *, send_close: bool) -> None:
        self._state = _State.CLOSING
        for task in (self._reconnect_task, self._timer_task):
            if task is not None:
                task.cancel()
        cnx = self._cnx
        if cnx is not None:
            if send_close and not cnx.closed:
                rid = next(self._ctx.request_ids)
                with contextlib.suppress(MagnetarError):
                    await cnx.request(
                        CloseConsumer(consumer_id=self._consumer_id, request_id=rid),
                        rid,
                        self._ctx.operation_timeout_s,
                    )
            cnx.unregister_consumer(self._consumer_id)
        self._state = _State.CLOSED
        self._cnx = None
        await self._letters.close()
        self._wake_all(AlreadyClosed(f"consumer on {self._topic} closed"))
        self._ctx.handles.discard(self)

    def _wake_all(self, error: MagnetarError) -> None:
        waiters, self._waiters = self._waiters, deque()
        for w in waiters:
            if not w.done():
                w.set_exception(error)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def wait_for_message(
    waiters: deque[asyncio.Future[Message]], timeout_ms: int | None
) -> Message:
    """Queue a waiter for the next message and wait for it, at most ``timeout_ms`` (None:
    for ever). Raises :class:`Timeout`; a waiter given up on is cancelled, so the dispatch
    that finds it done skips it."""
    waiter: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    waiters.append(waiter)
    try:
        if timeout_ms is None:
            return await waiter
        async with asyncio.timeout(timeout_ms / 1000):
            return await waiter
    except TimeoutError as exc:
        raise Timeout(f"no message within {timeout_ms} ms") from exc
    finally:
        if not waiter.done():
            waiter.cancel()
