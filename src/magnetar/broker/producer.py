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
from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from magnetar.broker.deduplication import DupStatus
from magnetar.broker.producer_access import AccessMode, ProducerKey
from magnetar.broker.rate_limit import PublishRateLimiter
from magnetar.broker.stats import ProducerMeters
from magnetar.common.errors import MagnetarError, ProtocolError, ServerError, wire_error
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.position import Position
from magnetar.protocol import ProducerSuccess, SendError, encode
from magnetar.protocol.frame import SendRun
from magnetar.protocol.hand_encoders import encode_send_receipt_at

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)

NO_METADATA: Final[Mapping[str, str]] = MappingProxyType({})
"""The properties of a producer whose client gave none (one shared, read-only mapping: an
empty dict per producer is ~64 bytes on a broker holding thousands of idle ones)."""


class _PendingSend:
    __slots__ = ("highest_sequence_id", "reply", "sequence_id", "size_bytes")

    def __init__(self, sequence_id: int, highest_sequence_id: int) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.reply: bytes | None = None
        """The encoded SEND_RECEIPT or SEND_ERROR frame, once known."""
        self.size_bytes = 0
        """The entry's bytes held in the broker's publish buffer while it is stored."""


_Persisted = tuple[int, int, int | None, int | None]
"""What deduplication records of a stored SEND: sequence id, highest sequence id, chunk id,
number of chunks."""


_NO_SENDS: deque[_PendingSend] = deque()
"""The answer queue of a producer that has sent nothing, shared and never appended to (an
empty deque holds a 760 B block: most of an idle producer's memory)."""


class Producer:
    """One producer (``producer_id`` on ``connection``) of ``topic``."""

    # Slots: one per topic on a broker holding thousands of idle topics.
    __slots__ = (
        "_drain_waiters",
        "_pending",
        "access_mode",
        "closed",
        "connected_since_ms",
        "connection",
        "epoch",
        "key",
        "metadata",
        "meters",
        "name",
        "producer_id",
        "publish_limiter",
        "schema_version",
        "topic",
        "topic_epoch",
    )

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
        key: ProducerKey | None = None,
    ) -> None:
        """``key``: the producer's key when the caller has made it (else made here)."""
        self.topic = topic
        self.schema_version = schema_version
        """The version of the producer's schema (PRODUCER_SUCCESS), None without one."""
        self.metadata: Mapping[str, str] = metadata if metadata else NO_METADATA
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
        self.key = ProducerKey(connection.connection_id, producer_id) if key is None else key
        self._pending: deque[_PendingSend] = _NO_SENDS
        """Made the producer's own at its first SEND (see :data:`_NO_SENDS`)."""
        self._drain_waiters: list[asyncio.Future[None]] | None = None
        """Callers of :meth:`drain` waiting (None: none yet)."""
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

    def handle_sends(self, sends: SendRun) -> None:
        """This producer's SENDs (the command's fields as the connection decoded them, and
        the entry), consecutive in arrival order, called inline by the connection.

        Each SEND is checked on its own (checksum, deduplication, rate accounting) and takes
        its slot in the order of answers; those accepted go to the topic as one run. The
        entry's metadata is parsed only when deduplication needs it (chunk ids): the
        message count comes from the SEND (``num_messages``) and chunking from its
        ``is_chunk``, as Pulsar's broker takes them."""
        pending = self._pending
        if pending is _NO_SENDS:
            pending = self._pending = deque()
        topic = self.topic
        dedup = topic.dedup
        limited = topic.publish_limited
        datas: list[bytes] = []
        counts: list[int] = []
        accepted: list[_PendingSend] = []
        persisted: list[_Persisted] = []
        size = 0
        messages = 0
        chunks = 0
        refused = False
        self.connection.send_started(len(sends))
        for fields, entry in sends:
            sequence_id = fields[1]
            num_messages = fields[2]
            highest_sequence_id = fields[5]
            op = _PendingSend(sequence_id, highest_sequence_id)
            pending.append(op)
            if limited:
                pause_s = self._publish_pause_s(num_messages, len(entry.data))
                if pause_s > 0:
                    self.connection.pause_reading_for(pause_s)
            if not entry.verify_checksum():
                op.reply = self._error(op, ServerError.ChecksumError, "Checksum failed")
                refused = True
                continue
            if dedup is not None:
                try:
                    md = entry.metadata
                    chunk_id = md.chunk_id
                    num_chunks = md.num_chunks_from_msg
                except ProtocolError as exc:
                    op.reply = self._error(op, ServerError.UnknownError, f"bad metadata: {exc}")
                    refused = True
                    continue
                status = dedup.check(
                    self.name, sequence_id, highest_sequence_id, chunk_id, num_chunks
                )
                if status is DupStatus.DUP:
                    op.reply = encode_send_receipt_at(
                        self.producer_id, sequence_id, -1, -1, highest_sequence_id
                    )
                    refused = True
                    continue
                if status is DupStatus.UNKNOWN:
                    op.reply = self._error(
                        op, ServerError.PersistenceError, "Sequence id not yet persisted"
                    )
                    refused = True
                    continue
                persisted.append((sequence_id, highest_sequence_id, chunk_id, num_chunks))
            data = bytes(entry.data)
            datas.append(data)
            counts.append(num_messages)
            accepted.append(op)
            op.size_bytes = n = len(data)
            size += n
            messages += num_messages
            if fields[6]:
                chunks += 1
        if datas:
            self.connection.hold_publish_bytes(size)
            self.meters.msg_in.record(messages, size)
            if chunks:
                self.meters.chunked.record(chunks)
            topic.publish_run(
                datas, counts, messages, size, partial(self._stored, accepted, persisted)
            )
        if refused:
            self._flush_answers()

    def _stored(
        self,
        accepted: list[_PendingSend],
        persisted: list[_Persisted],
        offset: int,
        count: int,
        first: Position | None,
        err: BaseException | None,
    ) -> None:
        """The outcome of ``accepted[offset:offset + count]`` (a piece of a run given to
        the topic): receipts at ``first`` and the positions after it, or errors."""
        topic = self.topic
        dedup = topic.dedup
        self.connection.release_publish_bytes(
            sum([op.size_bytes for op in accepted[offset : offset + count]])
        )
        disconnect = False
        if err is not None or first is None:
            if dedup is not None:
                dedup.reset_pushed()
            if isinstance(err, ManagedLedgerFenced):
                # Another broker took the topic over: tell its clients to look it up
                # again (CLOSE_PRODUCER / CLOSE_CONSUMER), not to retry here.
                topic.service.spawn(topic.service.topic_taken_over(topic))
            else:
                disconnect = True
            code, message = wire_error(err or MagnetarError("publish failed"))
            if code is ServerError.UnknownError:
                code = ServerError.PersistenceError
            for i in range(offset, offset + count):
                op = accepted[i]
                op.reply = self._error(op, code, message)
        else:
            ledger_id, entry_id = first
            producer_id = self.producer_id
            for i in range(offset, offset + count):
                op = accepted[i]
                op.reply = encode_send_receipt_at(
                    producer_id, op.sequence_id, ledger_id, entry_id, op.highest_sequence_id
                )
                entry_id += 1
            if dedup is not None:
                name = self.name
                for i in range(offset, offset + count):
                    dedup.record_persisted(name, *persisted[i])
                topic.dedup_advanced(Position(ledger_id, entry_id - 1))
        self._flush_answers()
        if disconnect and not self.closed:
            # Disconnect the producer (its errors sent first), as Pulsar's broker does on a
            # failed write: a later SEND of it must not be stored before the client resends
            # the failed ones, or its order breaks and deduplication takes a resend for a
            # duplicate of the later one (receipted, never stored).
            topic.remove_producer(self)
            self.connection.producer_closed_by_broker(self)

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

    def _flush_answers(self) -> None:
        """Write the answers known at the head of the queue, in SEND order, in one go."""
        pending = self._pending
        out: list[bytes | memoryview] = []
        while pending and pending[0].reply is not None:
            reply = pending.popleft().reply
            assert reply is not None
            out.append(reply)
        if out:
            conn = self.connection
            if not self.closed:
                conn.write_buffers(out)
            conn.send_finished(len(out))
        if not pending and self._drain_waiters:
            waiters, self._drain_waiters = self._drain_waiters, None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def drain(self) -> None:
        """Return once every SEND received so far is answered."""
        if self._pending:
            waiter = asyncio.get_running_loop().create_future()
            if self._drain_waiters is None:
                self._drain_waiters = []
            self._drain_waiters.append(waiter)
            await waiter
