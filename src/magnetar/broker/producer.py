"""A producer attached to a topic: SEND in, entries stored, receipts out in SEND order.

Every SEND becomes one entry (a batch is stored whole, reference §6.3). Each SEND gets a
slot in :attr:`Producer._pending` at arrival; the slot is answered (receipt or error) when
its write finishes or at once (checksum error, duplicate), and answers leave strictly from
the head of the queue, so receipts are in SEND order whatever finishes first (§7.4).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from magnetar.auth.rate_limit import PublishRateLimiter
from magnetar.broker.deduplication import DupStatus
from magnetar.broker.producer_access import AccessMode, ProducerKey
from magnetar.broker.stats import ProducerMeters
from magnetar.common.errors import MagnetarError, ProtocolError, ServerError, wire_error
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.position import Position
from magnetar.protocol import Entry, ProducerSuccess, SendError, encode
from magnetar.protocol.frame import encode_send_receipt_at

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)


class _PendingSend:
    __slots__ = ("reply", "sequence_id")

    def __init__(self, sequence_id: int) -> None:
        self.sequence_id = sequence_id
        self.reply: bytes | None = None
        """The encoded SEND_RECEIPT or SEND_ERROR frame, once known."""


class Producer:
    """One producer (``producer_id`` on ``connection``) of ``topic``."""

    def __init__(
        self,
        topic: Topic,
        connection: ServerConnection,
        producer_id: int,
        name: str,
        access_mode: AccessMode,
        epoch: int,
        topic_epoch: int | None,
        metadata: dict[str, str] | None = None,
        schema_version: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.schema_version = schema_version
        """The version of the producer's schema (PRODUCER_SUCCESS), None without one."""
        self.metadata = metadata or {}
        """The client's producer properties (PRODUCER's ``metadata``), shown in stats."""
        self.connection = connection
        self.producer_id = producer_id
        self.name = name
        self.publish_limiter = PublishRateLimiter()
        """This producer's own budget (policy ``publishRatePerProducer``), configured here
        and by the topic on every policy change."""
        self.publish_limiter.configure(
            topic.policies.producer_publish_rate, topic.service.clock.monotonic_s()
        )
        self.access_mode = access_mode
        self.epoch = epoch
        self.topic_epoch = topic_epoch
        self.key = ProducerKey(connection.connection_id, producer_id)
        self._pending: deque[_PendingSend] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.connected_since_ms = topic.service.clock.now_ms()
        self.meters = ProducerMeters(topic.service.clock, topic.service.meter_sampler)

    def success_response(self, request_id: int, *, ready: bool = True) -> ProducerSuccess:
        return ProducerSuccess(
            request_id=request_id,
            producer_name=self.name,
            last_sequence_id=self.topic.last_sequence_id(self.name),
            topic_epoch=self.topic_epoch,
            producer_ready=ready,
            schema_version=self.schema_version,
        )

    # --- publishing ----------------------------------------------------------------------

    def handle_send(
        self,
        sequence_id: int,
        num_messages: int,
        highest_sequence_id: int,
        is_chunk: bool,
        entry: Entry,
    ) -> None:
        """One SEND (its fields as the connection decoded them), called inline by the
        connection, in arrival order.

        The entry's metadata is parsed only when deduplication needs it (chunk ids): the
        message count comes from the SEND (``num_messages``) and chunking from its
        ``is_chunk``, as Pulsar's broker takes them."""
        op = _PendingSend(sequence_id)
        self._pending.append(op)
        self.connection.send_started()
        if self.topic.publish_limited:
            pause_s = self._publish_pause_s(num_messages, len(entry.data))
            if pause_s > 0:
                self.connection.pause_reading_for(pause_s)
        if not entry.verify_checksum():
            self._answer(op, self._error(op, ServerError.ChecksumError, "Checksum failed"))
            return
        topic = self.topic
        dedup = topic.dedup
        chunk_id: int | None = None
        num_chunks: int | None = None
        if dedup is not None:
            try:
                md = entry.metadata
                chunk_id = md.chunk_id
                num_chunks = md.num_chunks_from_msg
            except ProtocolError as exc:
                self._answer(op, self._error(op, ServerError.UnknownError, f"bad metadata: {exc}"))
                return
            status = dedup.check(self.name, sequence_id, highest_sequence_id, chunk_id, num_chunks)
            if status is DupStatus.DUP:
                self._answer(
                    op,
                    encode_send_receipt_at(
                        self.producer_id, sequence_id, -1, -1, highest_sequence_id
                    ),
                )
                return
            if status is DupStatus.UNKNOWN:
                self._answer(
                    op,
                    self._error(op, ServerError.PersistenceError, "Sequence id not yet persisted"),
                )
                return
        data = bytes(entry.data)
        self.meters.msg_in.record(num_messages, len(data))
        if is_chunk:
            self.meters.chunked.record(1)

        def done(position: Position | None, err: BaseException | None) -> None:
            if err is not None or position is None:
                if dedup is not None:
                    dedup.reset_pushed()
                if isinstance(err, ManagedLedgerFenced):
                    # Another broker took the topic over: tell its clients to look it up
                    # again (CLOSE_PRODUCER / CLOSE_CONSUMER), not to retry here.
                    topic.service.spawn(topic.service.topic_taken_over(topic))
                code, message = wire_error(err or MagnetarError("publish failed"))
                if code is ServerError.UnknownError:
                    code = ServerError.PersistenceError
                self._answer(op, self._error(op, code, message))
                return
            if dedup is not None:
                dedup.record_persisted(
                    self.name, sequence_id, highest_sequence_id, chunk_id, num_chunks
                )
                topic.dedup_advanced(position)
            self._answer(
                op,
                encode_send_receipt_at(
                    self.producer_id,
                    sequence_id,
                    position[0],
                    position[1],
                    highest_sequence_id,
                ),
            )

        topic.publish_callback(data, num_messages, done)

    def _publish_pause_s(self, messages: int, size_bytes: int) -> float:
        """Account one publish against the topic's, the namespace's and this producer's
        publish rates; how long to stop reading the connection (0: not at all). A throttle
        by any of them counts once in the topic's ``publishRateLimitedTimes``."""
        topic = self.topic
        now_s = topic.service.clock.monotonic_s()
        pause_s = 0.0
        throttled = False
        for limiter in (topic.namespace_publish_limiter, self.publish_limiter):
            if limiter.rate.limited:
                pause = limiter.on_publish(messages, size_bytes, now_s)
                throttled = throttled or pause > 0
                pause_s = max(pause_s, pause)
        topic_limiter = topic.publish_limiter
        if topic_limiter.rate.limited:
            pause = topic_limiter.on_publish(messages, size_bytes, now_s)
            if pause > 0:
                throttled = False  # the topic's limiter counted it already
            pause_s = max(pause_s, pause)
        if throttled:
            topic_limiter.limited_times += 1
        return pause_s

    def _error(self, op: _PendingSend, code: ServerError, message: str) -> bytes:
        return encode(
            SendError(
                producer_id=self.producer_id,
                sequence_id=op.sequence_id,
                error=code,
                message=message,
            )
        )

    def _answer(self, op: _PendingSend, reply: bytes) -> None:
        op.reply = reply
        pending = self._pending
        conn = self.connection
        if pending[0] is op:  # the usual case: answers come in SEND order
            pending.popleft()
            if not self.closed:
                conn.send_frame(reply)
            conn.send_finished()
        while pending and pending[0].reply is not None:
            head = pending.popleft()
            assert head.reply is not None
            if not self.closed:
                conn.send_frame(head.reply)
            conn.send_finished()
        if not pending and self._drain_waiters:
            waiters, self._drain_waiters = self._drain_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def drain(self) -> None:
        """Return once every SEND received so far is answered."""
        if self._pending:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
