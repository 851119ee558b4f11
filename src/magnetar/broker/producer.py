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

from magnetar.broker.deduplication import DupStatus
from magnetar.broker.producer_access import AccessMode, ProducerKey
from magnetar.broker.stats import ProducerMeters
from magnetar.common.errors import MagnetarError, ProtocolError, ServerError, wire_error
from magnetar.managed_ledger.position import Position
from magnetar.protocol import (
    Command,
    Entry,
    MessageId,
    ProducerSuccess,
    Send,
    SendError,
    SendReceipt,
)

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)


class _PendingSend:
    __slots__ = ("reply", "sequence_id")

    def __init__(self, sequence_id: int) -> None:
        self.sequence_id = sequence_id
        self.reply: Command | None = None


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
    ) -> None:
        self.topic = topic
        self.connection = connection
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.epoch = epoch
        self.topic_epoch = topic_epoch
        self.key = ProducerKey(connection.connection_id, producer_id)
        self._pending: deque[_PendingSend] = deque()
        self._drained: asyncio.Event = asyncio.Event()
        self._drained.set()
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.connected_since_ms = topic.service.clock.now_ms()
        self.meters = ProducerMeters(topic.service.clock, topic.service.meter_sampler)

    def success_response(self, request_id: int, *, ready: bool = True) -> ProducerSuccess:
        return ProducerSuccess(
            request_id=request_id,
            producer_name=self.name,
            last_sequence_id=self.topic.last_sequence_id(self.name),
            topic_epoch=self.topic_epoch,
            producer_ready=ready,
        )

    # --- publishing ----------------------------------------------------------------------

    def handle_send(self, send: Send, entry: Entry) -> None:
        """Called inline by the connection, in arrival order."""
        op = _PendingSend(send.sequence_id)
        self._pending.append(op)
        self._drained.clear()
        self.connection.send_started()
        if not entry.verify_checksum():
            self._answer(op, self._error(op, ServerError.ChecksumError, "Checksum failed"))
            return
        try:
            md = entry.metadata
            num_messages = md.num_messages
            batch_size = md.num_messages_in_batch
            chunk_id = md.chunk_id
            num_chunks = md.num_chunks_from_msg
        except ProtocolError as exc:
            self._answer(op, self._error(op, ServerError.UnknownError, f"bad metadata: {exc}"))
            return
        topic = self.topic
        dedup = topic.dedup
        if dedup is not None:
            status = dedup.check(
                self.name, send.sequence_id, send.highest_sequence_id, chunk_id, num_chunks
            )
            if status is DupStatus.DUP:
                self._answer(
                    op,
                    SendReceipt(
                        producer_id=self.producer_id,
                        sequence_id=send.sequence_id,
                        message_id=MessageId(-1, -1),
                        highest_sequence_id=send.highest_sequence_id,
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
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(data)
        self.meters.msg_in.record(num_messages, len(data))
        if chunk_id is not None:
            self.meters.chunked.record(1)

        def done(position: Position | None, err: BaseException | None) -> None:
            if err is not None or position is None:
                if dedup is not None:
                    dedup.reset_pushed()
                code, message = wire_error(err or MagnetarError("publish failed"))
                if code is ServerError.UnknownError:
                    code = ServerError.PersistenceError
                self._answer(op, self._error(op, code, message))
                return
            if dedup is not None:
                dedup.record_persisted(
                    self.name, send.sequence_id, send.highest_sequence_id, chunk_id, num_chunks
                )
                topic.dedup_advanced(position)
            self._answer(
                op,
                SendReceipt(
                    producer_id=self.producer_id,
                    sequence_id=send.sequence_id,
                    message_id=MessageId(position[0], position[1]),
                    highest_sequence_id=send.highest_sequence_id,
                ),
            )

        topic.publish_callback(data, num_messages, batch_size, done)

    def _error(self, op: _PendingSend, code: ServerError, message: str) -> SendError:
        return SendError(
            producer_id=self.producer_id, sequence_id=op.sequence_id, error=code, message=message
        )

    def _answer(self, op: _PendingSend, reply: Command) -> None:
        op.reply = reply
        pending = self._pending
        conn = self.connection
        while pending and pending[0].reply is not None:
            head = pending.popleft()
            assert head.reply is not None
            if not self.closed:
                conn.send_command(head.reply)
            conn.send_finished()
        if not pending:
            self._drained.set()

    async def drain(self) -> None:
        """Return once every SEND received so far is answered."""
        await self._drained.wait()
