"""Producers: one topic (or one partition), with batching, chunking and reconnection.

Life of a message::

    send_async() --> batch builder --(full / delay / flush)--> OpSend --> SEND on the wire
                                                                  |
                              pending deque (until SEND_RECEIPT) <-'   re-sent in order on reconnect

Per message, ``send_async`` does the batch builder's few byte operations and creates one
future; nothing else runs until the batch is written. Receipts must arrive in SEND order;
each resolves the futures of its batch with ``(ledger, entry, partition, batch_index)``.

On connection loss or a broker-initiated close the producer looks the topic up again,
re-registers (epoch + 1, same producer name) and re-sends every pending SEND with its
sequence id, so a broker with deduplication stores each message once. Fatal registration
errors (``ProducerFenced``, ``TopicTerminated``, ...) fail every pending message.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from magnetar.client.backoff import Backoff
from magnetar.client.batch_builder import BatchBuilder, OpSend
from magnetar.client.connection import Connection
from magnetar.client.context import ClientContext
from magnetar.client.errors import (
    AlreadyClosed,
    ConnectError,
    InvalidConfiguration,
    MessageTooBig,
    ProducerQueueIsFull,
    Timeout,
)
from magnetar.client.message_builder import CHUNK_METADATA_RESERVE_BYTES, build_sends
from magnetar.client.message_id import MessageId, batch_message_ids
from magnetar.client.reconnect import reconnect
from magnetar.client.schema import BytesSchema, Schema
from magnetar.client.topic_schema import AutoProduceBytesSchema, get_or_create_schema
from magnetar.common.errors import ChecksumMismatch, MagnetarError, ServerError, error_for_code
from magnetar.protocol import (
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    CloseProducer,
    CompressionType,
    ProducerAccessMode,
    ProducerSuccess,
    SchemaInfo,
    SendError,
    SendReceipt,
    encode_send,
)
from magnetar.protocol import Producer as ProducerCommand

log = logging.getLogger(__name__)

SendCallback = Callable[[MagnetarError | None, MessageId | None], None]


class _State(enum.Enum):
    CONNECTING = 0
    READY = 1
    CLOSING = 2
    CLOSED = 3


_CLOSING = _State.CLOSING
_CLOSED = _State.CLOSED


@dataclass(slots=True, kw_only=True)
class ProducerConfig:
    """Producer options, named as in the official client (units in the names)."""

    producer_name: str | None = None
    schema: Schema[Any] = field(default_factory=BytesSchema)
    initial_sequence_id: int | None = None
    send_timeout_ms: int = 30_000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    block_if_queue_full: bool = True
    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    chunking_enabled: bool = False
    chunk_max_message_size: int | None = None
    properties: Mapping[str, str] | None = None
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    initial_subscription_name: str | None = None


class SendOptions(TypedDict, total=False):
    """The options of :meth:`Producer.send_async` and :meth:`Producer.send`, all optional."""

    properties: Mapping[str, str] | None
    partition_key: str | None
    ordering_key: str | bytes | None
    sequence_id: int | None
    """Default: the producer's next sequence id."""
    event_timestamp: int | None
    deliver_at: int | None
    """Delayed delivery at this time (ms since the epoch)."""
    deliver_after_ms: int | None
    replication_clusters: Sequence[str] | None
    disable_replication: bool


def _resolve(handle: Any, mid: MessageId) -> None:
    if isinstance(handle, asyncio.Future):
        if not handle.done():
            handle.set_result(mid)
    elif handle is not None:
        try:
            handle(None, mid)
        except Exception:
            log.exception("send callback raised")


def _fail(handle: Any, error: MagnetarError) -> None:
    if isinstance(handle, asyncio.Future):
        if not handle.done():
            handle.set_exception(error)
            handle.exception()  # a fire-and-forget send must not log "never retrieved"
    elif handle is not None:
        try:
            handle(error, None)
        except Exception:
            log.exception("send callback raised")


class Producer:
    """A producer on one topic or partition. Create it with ``Client.create_producer``."""

    def __init__(
        self, ctx: ClientContext, topic: str, partition: int, config: ProducerConfig
    ) -> None:
        if config.chunking_enabled and config.batching_enabled:
            raise InvalidConfiguration(
                "chunking needs batching_enabled=False (as in the official client)"
            )
        self._ctx = ctx
        self._topic = topic
        self._partition = partition
        self._conf = config
        self._schema = config.schema
        # Bytes skip the schema (sent as they are), except where the schema checks bytes.
        self._raw_bytes_ok = not isinstance(config.schema, AutoProduceBytesSchema)
        self._producer_id = next(ctx.producer_ids)
        self._name: str = config.producer_name or ""
        self._user_named = config.producer_name is not None
        self._epoch = 0
        self._topic_epoch: int | None = None
        self._schema_version: bytes | None = None
        self._next_seq = 0
        self._last_seq_published = -1
        self._state = _State.CONNECTING
        self._cnx: Connection | None = None
        self._batch: BatchBuilder | None = None
        self._batch_started_s = -1.0
        """When the open batch got its first message (monotonic s); -1: the batch is empty."""
        self._pending: deque[OpSend] = deque()
        self._pending_messages = 0  # in the batch builder and in flight
        self._space_waiters: deque[asyncio.Future[None]] = deque()
        self._first_chunk_id: MessageId | None = None
        self._fatal: MagnetarError | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._timers_idle: asyncio.Future[None] | None = None
        """Set while the timer task waits for a batch or a send to watch (see _timers)."""
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE_BYTES
        self._flush_waiters: list[tuple[OpSend, asyncio.Future[None]]] = []
        self._backoff = Backoff(100, 60_000, ctx.rng)
        self._loop = asyncio.get_running_loop()
        self._max_pending = config.max_pending_messages
        self._batch_max_bytes = config.batching_max_allowed_size_in_bytes

    # ------------------------------------------------------------ accessors

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._name

    def last_sequence_id(self) -> int:
        return self._last_seq_published

    def is_connected(self) -> bool:
        return self._state == _State.READY

    @property
    def pending_messages(self) -> int:
        return self._pending_messages

    # ------------------------------------------------------------ connecting

    async def _start(self) -> None:
        """Connect and register; raises the broker's error (nothing is retried except
        retriable errors, until the operation timeout)."""
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
        answer = await ctx.lookup.lookup(self._topic)
        cnx = await ctx.pool.get(answer.logical_url, answer.physical_url)
        rid = next(ctx.request_ids)
        conf = self._conf
        cnx.register_producer(self._producer_id, self)
        command = ProducerCommand(
            topic=self._topic,
            producer_id=self._producer_id,
            request_id=rid,
            producer_name=self._name or None,
            metadata=tuple((conf.properties or {}).items()),
            schema=self._schema.schema_info(),
            epoch=self._epoch,
            user_provided_producer_name=self._user_named,
            producer_access_mode=conf.access_mode,
            topic_epoch=self._topic_epoch,
            initial_subscription_name=conf.initial_subscription_name,
        )
        try:
            wait_exclusive = conf.access_mode == ProducerAccessMode.WaitForExclusive
            resp: ProducerSuccess = await cnx.request(
                command, rid, None if wait_exclusive else ctx.operation_timeout_s
            )
            if not resp.producer_ready:
                resp = await cnx.expect(rid)
        except BaseException:
            cnx.unregister_producer(self._producer_id)
            cnx.forget(rid)
            raise
        self._epoch += 1
        self._name = resp.producer_name
        self._schema_version = resp.schema_version
        if resp.topic_epoch is not None:
            self._topic_epoch = resp.topic_epoch
        if cnx.max_message_size:
            self._max_message_size = cnx.max_message_size
        if self._state == _State.CONNECTING and not self._pending and self._batch is None:
            # First registration: sequence ids continue after what the broker knows.
            if self._conf.initial_sequence_id is not None:
                self._next_seq = self._conf.initial_sequence_id + 1
                self._last_seq_published = self._conf.initial_sequence_id
            else:
                self._last_seq_published = resp.last_sequence_id
                self._next_seq = resp.last_sequence_id + 1
        if self._conf.batching_enabled and self._batch is None:
            self._batch = BatchBuilder(
                producer_name=self._name,
                max_messages=self._conf.batching_max_messages,
                max_bytes=self._conf.batching_max_allowed_size_in_bytes,
                compression=self._conf.compression_type,
                schema_version=self._schema_version,
            )
        self._cnx = cnx
        self._state = _State.READY
        self._backoff.reset()
        for op in self._pending:  # re-send in order, with their sequence ids
            self._write(cnx, op)

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
            what=f"producer {self._name} on {self._topic}",
            clock=self._ctx.clock,
            backoff=self._backoff,
            still_connecting=lambda: self._state == _State.CONNECTING,
            connect=self._connect,
            on_fatal=self._fail_on_reconnect,
        )

    def _fail_on_reconnect(self, exc: MagnetarError) -> None:
        self._fatal = exc
        self._state = _State.CLOSED
        self._fail_everything(exc)
        self._wake_timers()  # to see CLOSED and end

    # ------------------------------------------------------------ sending

    def _check_open(self) -> None:
        if self._state in (_State.CLOSING, _State.CLOSED):
            raise self._fatal or AlreadyClosed(f"producer on {self._topic} is closed")

    def send_async(
        self,
        content: Any,
        callback: SendCallback | None = None,
        **options: Unpack[SendOptions],
    ) -> asyncio.Future[MessageId]:
        """Queue a message; returns a future resolved with its id once the broker stored it.

        ``options`` are those of :class:`SendOptions` (key, properties, event time, delayed
        delivery, replication). With ``callback`` the callback ``(error, message_id)`` is
        called instead and the returned future is not created (None is returned, typed as
        the future for convenience). Raises ProducerQueueIsFull if ``max_pending_messages``
        are pending, AlreadyClosed after close, MessageTooBig for an oversized message
        without chunking, TypeError for an unknown option.
        """
        state = self._state
        if state is _CLOSING or state is _CLOSED:
            self._check_open()
        if self._pending_messages >= self._max_pending:
            raise ProducerQueueIsFull(f"{self._pending_messages} messages pending on {self._topic}")
        handle: Any
        fut: asyncio.Future[MessageId] | None = None
        if callback is None:
            fut = handle = self._loop.create_future()
        else:
            handle = callback
        payload = (
            content
            if type(content) is bytes and self._raw_bytes_ok
            else self._schema.encode(content)
        )
        batch = self._batch
        if batch is not None and not options and len(payload) <= self._batch_max_bytes:
            # The common case, kept short: a plain message joining the open batch. (Options
            # come as **options: keyword-only parameters with defaults would cost a
            # dictionary look-up each on every call.)
            seq = self._next_seq
            self._next_seq = seq + 1
            self._pending_messages += 1
            if self._batch_started_s < 0:
                self._batch_started_s = self._ctx.clock.monotonic_s()
                if self._timers_idle is not None:
                    self._wake_timers()
            full = batch.try_add_plain(payload, seq, handle)
            if full is None:  # it does not fit: the open batch goes first
                self._flush_batch()
                self._batch_started_s = self._ctx.clock.monotonic_s()
                full = batch.add_plain(payload, seq, handle)
            if full:
                self._flush_batch()
            return fut  # type: ignore[return-value]
        self._send_with_options(payload, handle, **options)
        return fut  # type: ignore[return-value]

    def _send_with_options(
        self,
        payload: bytes,
        handle: Any,
        *,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after_ms: int | None = None,
        replication_clusters: Sequence[str] | None = None,
        disable_replication: bool = False,
    ) -> None:
        """:meth:`send_async` past its fast path: ``payload`` encoded, ``handle`` the future
        or callback to resolve."""
        batch = self._batch
        self._check_open()
        if sequence_id is None:
            seq = self._next_seq
            self._next_seq = seq + 1
        else:
            seq = sequence_id
            self._next_seq = max(self._next_seq, seq + 1)
        if deliver_after_ms is not None:
            deliver_at = self._ctx.clock.now_ms() + deliver_after_ms
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        replicate_to: Sequence[str] = (
            ("__local__",) if disable_replication else (replication_clusters or ())
        )
        if (
            batch is not None
            and deliver_at is None
            and not replicate_to
            and len(payload) <= self._batch_max_bytes
        ):
            self._pending_messages += 1
            if not batch.fits(len(payload)):
                self._flush_batch()
            if self._batch_started_s < 0:
                self._batch_started_s = self._ctx.clock.monotonic_s()
                if self._timers_idle is not None:
                    self._wake_timers()
            if (
                properties is None
                and partition_key is None
                and ordering_key is None
                and not event_timestamp
            ):
                full = batch.add_plain(payload, seq, handle)
            else:
                full = batch.add(
                    payload,
                    seq,
                    handle,
                    properties=tuple(properties.items()) if properties else (),
                    partition_key=partition_key,
                    ordering_key=ordering_key,
                    event_time=event_timestamp or 0,
                )
            if full:
                self._flush_batch()
            return
        # Not batchable: keep order by flushing the open batch first.
        self._flush_batch()
        limit = self._max_message_size
        chunk_max: int | None = None
        if self._conf.chunking_enabled:
            chunk_max = min(
                limit - CHUNK_METADATA_RESERVE_BYTES,
                self._conf.chunk_max_message_size or limit,
            )
        ops = build_sends(
            payload,
            handle,
            producer_name=self._name,
            sequence_id=seq,
            publish_time_ms=self._ctx.clock.now_ms(),
            chunk_max_bytes=chunk_max,
            properties=tuple(properties.items()) if properties else (),
            partition_key=partition_key,
            ordering_key=ordering_key,
            event_time=event_timestamp or 0,
            deliver_at_ms=deliver_at,
            compression=self._conf.compression_type,
            schema_version=self._schema_version,
            replicate_to=replicate_to,
        )
        if chunk_max is None and len(ops[0].payload) > limit:
            raise MessageTooBig(f"message of {len(ops[0].payload)} bytes exceeds {limit} bytes")
        self._pending_messages += 1
        now = self._ctx.clock.monotonic_s()
        for op in ops:
            op.created_s = now
            self._enqueue(op)

    async def register_schema(self, schema: SchemaInfo) -> bytes:
        """Register ``schema`` on this producer's topic (or find it there): its version
        there, for :meth:`send_entry`'s metadata (the geo-replicator's path: entries keep
        the schemas they were written with). Raises as
        :func:`~magnetar.client.topic_schema.get_or_create_schema`."""
        self._check_open()
        return await get_or_create_schema(self._ctx, self._topic, schema)

    def send_entry(
        self, metadata: bytes, payload: bytes, *, sequence_id: int, num_messages: int
    ) -> asyncio.Future[MessageId]:
        """Send a stored entry as it is, one SEND (the geo-replicator's path): ``metadata``
        serialized ``MessageMetadata``, ``payload`` the entry's (possibly compressed,
        possibly batched) payload of ``num_messages`` messages. The SEND carries
        ``sequence_id`` as both sequence id and highest sequence id, so the broker
        deduplicates it by that. The returned future resolves with the id of the entry's
        last message. Use on a producer created with ``batching_enabled=False``. Raises
        AlreadyClosed after close."""
        self._check_open()
        assert self._batch is None and num_messages >= 1
        fut: asyncio.Future[MessageId] = self._loop.create_future()
        self._next_seq = max(self._next_seq, sequence_id + 1)
        self._pending_messages += num_messages
        op = OpSend(
            sequence_id=sequence_id,
            highest_sequence_id=sequence_id,
            num_messages=num_messages,
            metadata=metadata,
            payload=payload,
            handles=[*([None] * (num_messages - 1)), fut],
            batched=True,
            payload_bytes_total=len(payload),
            created_s=self._ctx.clock.monotonic_s(),
        )
        self._enqueue(op)
        return fut

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Send one message and wait for its id. Waits for room when ``max_pending_messages``
        are pending (if ``block_if_queue_full``). The message is written with the current
        batch at once rather than waiting for the batching delay only if the batch fills;
        concurrent ``send`` calls share batches."""
        while (
            self._pending_messages >= self._conf.max_pending_messages
            and self._conf.block_if_queue_full
        ):
            self._check_open()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._space_waiters.append(waiter)
            await waiter
        fut = self.send_async(content, **kwargs)
        return await fut

    def _flush_batch(self) -> None:
        batch = self._batch
        if batch is None or not batch:
            return
        op = batch.build(self._ctx.clock.now_ms())
        assert op is not None
        op.created_s = self._batch_started_s
        self._batch_started_s = -1.0
        self._enqueue(op)

    def _enqueue(self, op: OpSend) -> None:
        self._pending.append(op)
        if self._timers_idle is not None:
            self._wake_timers()
        cnx = self._cnx
        if cnx is not None and self._state == _State.READY:
            self._write(cnx, op)

    def _write(self, cnx: Connection, op: OpSend) -> None:
        # On ConnectError on_disconnect follows; the op stays pending and is re-sent.
        with contextlib.suppress(ConnectError):
            cnx.write_buffers(
                encode_send(
                    self._producer_id,
                    op.sequence_id,
                    op.metadata,
                    op.payload,
                    num_messages=op.num_messages if op.batched else None,
                    highest_sequence_id=op.highest_sequence_id if op.batched else 0,
                    is_chunk=op.is_chunk,
                )
            )

    async def flush(self) -> None:
        """Write the open batch and wait until every message sent so far is acknowledged
        (or failed)."""
        self._flush_batch()
        if not self._pending:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((self._pending[-1], fut))
        await fut

    def _notify_flushed(self, op: OpSend) -> None:
        # Ops complete in order, so a waiter is done when its op completes or nothing is left.
        if not self._flush_waiters:
            return
        keep = []
        for target, fut in self._flush_waiters:
            if target is op or not self._pending:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self._flush_waiters = keep

    # ------------------------------------------------------------ receipts

    def on_send_receipt(self, receipt: SendReceipt) -> None:
        pending = self._pending
        if not pending:
            return
        op = pending[0]
        seq = receipt.sequence_id
        if seq < op.sequence_id:
            return  # a receipt for an op already timed out
        if seq > op.sequence_id:
            log.warning(
                "receipt %d ahead of pending %d on %s; reconnecting",
                seq,
                op.sequence_id,
                self._topic,
            )
            if self._cnx is not None:
                self._cnx.close()
            return
        pending.popleft()
        wire = receipt.message_id
        ledger, entry = (wire.ledger_id, wire.entry_id) if wire is not None else (-1, -1)
        partition = self._partition
        if op.is_chunk:
            if op.chunk_id == 0:
                self._first_chunk_id = MessageId(partition, ledger, entry)
            if not op.is_last_chunk:
                return
            mid = MessageId(partition, ledger, entry, -1, first_chunk=self._first_chunk_id)
            self._first_chunk_id = None
            self._finish(op, [mid])
            return
        if op.batched:
            self._finish(op, batch_message_ids(partition, ledger, entry, op.num_messages))
        else:
            self._finish(op, [MessageId(partition, ledger, entry)])

    def _finish(self, op: OpSend, ids: list[MessageId]) -> None:
        self._last_seq_published = max(self._last_seq_published, op.highest_sequence_id)
        future = asyncio.Future
        for handle, mid in zip(op.handles, ids, strict=True):
            # _resolve inlined for futures: this runs once per message.
            if isinstance(handle, future):
                if not handle.done():
                    handle.set_result(mid)
            else:
                _resolve(handle, mid)
        self._release(len(op.handles))
        self._notify_flushed(op)

    def _release(self, n: int) -> None:
        self._pending_messages -= n
        waiters = self._space_waiters
        while waiters and self._pending_messages < self._conf.max_pending_messages:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)

    def on_send_error(self, error: SendError) -> None:
        if error.error == ServerError.ChecksumError and self._pending:
            op = self._pending.popleft()
            exc = ChecksumMismatch(error.message)
            for h in op.handles:
                _fail(h, exc)
            self._release(len(op.handles))
            self._notify_flushed(op)
            return
        # Any other error: reconnect and re-send everything pending (C++ behaviour).
        log.info(
            "send error on %s: %s %s; reconnecting", self._topic, error.error.name, error.message
        )
        if self._cnx is not None:
            self._cnx.close()

    # ------------------------------------------------------------ timers

    async def _timers(self) -> None:
        """Flush a batch ``batching_max_publish_delay_ms`` after its first message; fail
        sends unanswered for ``send_timeout_ms``. Ticks only while a batch is open or a send
        is in flight, and waits for one otherwise: an idle producer ticking every 10 ms
        forever was ~100 wake-ups a second each (the standalone's functions worker holds
        several, on the broker's own event loop)."""
        clock = self._ctx.clock
        delay_s = max(0.001, self._conf.batching_max_publish_delay_ms / 1000)
        timeout_s = self._conf.send_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        while self._state not in (_State.CLOSED,):
            if self._batch_started_s < 0 and not self._pending:
                self._timers_idle = loop.create_future()
                try:
                    await self._timers_idle
                finally:
                    self._timers_idle = None
                continue
            await clock.sleep(delay_s)
            now = clock.monotonic_s()
            batch = self._batch
            if batch is not None and batch and now - self._batch_started_s >= delay_s:
                self._flush_batch()
            if timeout_s > 0 and self._pending and now - self._pending[0].created_s >= timeout_s:
                self._expire(now - timeout_s)

    def _wake_timers(self) -> None:
        """The timer task has something to watch again (or the producer closed)."""
        idle = self._timers_idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _expire(self, cutoff_s: float) -> None:
        expired = Timeout(
            f"send to {self._topic} not acknowledged within {self._conf.send_timeout_ms} ms"
        )
        while self._pending and self._pending[0].created_s <= cutoff_s:
            op = self._pending.popleft()
            for h in op.handles:
                _fail(h, expired)
            self._release(len(op.handles))
            self._notify_flushed(op)

    def _fail_everything(self, error: MagnetarError) -> None:
        ops = list(self._pending)
        self._pending.clear()
        if self._batch is not None:
            self._batch_started_s = -1.0
            for h in self._batch.discard():
                _fail(h, error)
                self._release(1)
        for op in ops:
            for h in op.handles:
                _fail(h, error)
            self._release(len(op.handles))
        for _, fut in self._flush_waiters:
            if not fut.done():
                fut.set_result(None)
        self._flush_waiters = []
        for w in self._space_waiters:
            if not w.done():
                w.set_result(None)
        self._space_waiters.clear()

    # ------------------------------------------------------------ closing

    async def close(self) -> None:
        """Flush pending messages (bounded by the send timeout), then deregister."""
        if self._state in (_State.CLOSING, _State.CLOSED):
            return
        with contextlib.suppress(MagnetarError):
            if self._state == _State.READY:
                async with asyncio.timeout(self._conf.send_timeout_ms / 1000 or None):
                    await self.flush()
        with contextlib.suppress(TimeoutError):
            await self._shutdown(send_close=True)

    async def _shutdown(self, *, send_close: bool) -> None:
        self._state = _State.CLOSING
        cnx = self._cnx
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
        if self._timer_task is not None:
            self._timer_task.cancel()
        if cnx is not None and send_close and not cnx.closed:
            rid = next(self._ctx.request_ids)
            with contextlib.suppress(MagnetarError):
                await cnx.request(
                    CloseProducer(producer_id=self._producer_id, request_id=rid),
                    rid,
                    self._ctx.operation_timeout_s,
                )
            cnx.unregister_producer(self._producer_id)
        self._state = _State.CLOSED
        self._cnx = None
        self._fail_everything(AlreadyClosed(f"producer on {self._topic} closed"))
        self._ctx.handles.discard(self)

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def broker_error(code: int, message: str) -> MagnetarError:
    return error_for_code(code, message)
