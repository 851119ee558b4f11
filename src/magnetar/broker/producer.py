"""A producer attached to a topic: SEND in, entries stored, receipts out in SEND order.

Every SEND becomes one entry (a batch is stored whole, reference §6.3). Each SEND gets a
slot in :attr:`Producer._pending` at arrival (the SENDs of one read together, a
:class:`_SendRun`); the slot is answered (receipt or error) when its write finishes or at
once (checksum error, duplicate), and answers leave strictly from the head of the queue, so
receipts are in SEND order whatever finishes first (§7.4).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from functools import partial
from itertools import repeat
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from magnetar.broker.deduplication import DupStatus
from magnetar.broker.producer_access import AccessMode, ProducerKey
from magnetar.broker.rate_limit import PublishRateLimiter
from magnetar.broker.stats import ProducerMeters
from magnetar.common import crc32c
from magnetar.common.errors import MagnetarError, ProtocolError, ServerError, wire_error
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.position import Position
from magnetar.protocol import ProducerSuccess, SendError, encode
from magnetar.protocol.entry import Entry
from magnetar.protocol.frame import SendFields, SendRun
from magnetar.protocol.hand_encoders import encode_send_receipt_at

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)

NO_METADATA: Final[Mapping[str, str]] = MappingProxyType({})
"""The properties of a producer whose client gave none (one shared, read-only mapping: an
empty dict per producer is ~64 bytes on a broker holding thousands of idle ones)."""


class _SendRun:
    """The SENDs of one :meth:`Producer.handle_sends` call, answered in their order."""

    __slots__ = ("accepted", "flushed", "highest_sequence_ids", "replies", "sequence_ids", "sizes")

    def __init__(self, sequence_ids: list[int], highest_sequence_ids: list[int]) -> None:
        self.sequence_ids = sequence_ids
        self.highest_sequence_ids = highest_sequence_ids
        self.replies: list[bytes | None] = [None] * len(sequence_ids)
        """Each SEND's encoded SEND_RECEIPT or SEND_ERROR frame, once known."""
        self.flushed = 0
        """How many replies, from the first, are written."""
        self.accepted: list[int] | None = None
        """The indexes of the SENDs given to the topic, in order (None: every one)."""
        self.sizes: list[int] = []
        """The bytes of each SEND given to the topic (in the order of :attr:`accepted`),
        held in the broker's publish buffer while it is stored."""


_C_LOOPS_MIN: Final = 8
"""A producer's SENDs of one read, this many or more, are checked and receipted in C loops
when all are accepted; fewer (a producer among many on one connection sends one to five per
read) take a Python step each, cheaper below it."""
_fields_of: Final = itemgetter(0)
_entry_of: Final = itemgetter(1)
_sequence_id_of: Final = itemgetter(1)
_num_messages_of: Final = itemgetter(2)
_highest_sequence_id_of: Final = itemgetter(5)
_is_chunk_of: Final = itemgetter(6)
_data_of: Final = attrgetter("data")
_checksum_of: Final = attrgetter("checksum")
_past_checksum: Final = itemgetter(slice(6, None))
"""An entry's bytes that its checksum covers (after the magic and the checksum)."""


_Persisted = tuple[int, int, int | None, int | None]
"""What deduplication records of a stored SEND: sequence id, highest sequence id, chunk id,
number of chunks."""


_NO_SENDS: deque[_SendRun] = deque()
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
        self._pending: deque[_SendRun] = _NO_SENDS
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
        if not sends:
            return
        pending = self._pending
        if pending is _NO_SENDS:
            pending = self._pending = deque()
        topic = self.topic
        dedup = topic.dedup
        fields = list(map(_fields_of, sends))
        entries = list(map(_entry_of, sends))
        run = _SendRun(
            list(map(_sequence_id_of, fields)), list(map(_highest_sequence_id_of, fields))
        )
        pending.append(run)
        self.connection.send_started(len(sends))
        persisted: list[_Persisted] = []
        views = None
        if len(fields) >= _C_LOOPS_MIN and not topic.publish_limited and dedup is None:
            views = list(map(_data_of, entries))
            checksums = list(map(_checksum_of, entries))
            if None in checksums or checksums != list(
                map(crc32c.crc32c, map(_past_checksum, views))
            ):
                views = None
        if views is not None:  # a long run, every SEND accepted: in C loops
            datas = list(map(bytes, views))
            counts = list(map(_num_messages_of, fields))
            run.sizes = list(map(len, datas))
            chunks = len(fields) - list(map(_is_chunk_of, fields)).count(False)
        else:
            datas, counts, chunks = self._check_sends(run, fields, entries, persisted)
        if datas:
            size = sum(run.sizes)
            messages = sum(counts)
            self.connection.hold_publish_bytes(size)
            self.meters.msg_in.record(messages, size)
            if chunks:
                self.meters.chunked.record(chunks)
            # a run taken without deduplication records nothing in it, though the topic may
            # switch deduplication on before the run is stored
            recorded = persisted if dedup is not None else None
            topic.publish_run(datas, counts, messages, size, partial(self._stored, run, recorded))
        if len(datas) < len(fields):
            self._flush_answers()

    def _check_sends(
        self,
        run: _SendRun,
        fields: list[SendFields],
        entries: list[Entry],
        persisted: list[_Persisted],
    ) -> tuple[list[bytes], list[int], int]:
        """Each SEND of ``run`` checked on its own (rates, checksum, deduplication): the
        refused answered in ``run``, the rest's entries and message counts returned, with
        how many are chunks, and their indexes in ``run.accepted``."""
        topic = self.topic
        dedup = topic.dedup
        limited = topic.publish_limited
        replies = run.replies
        datas: list[bytes] = []
        counts: list[int] = []
        accepted: list[int] = []
        sizes = run.sizes
        chunks = 0
        for i, (fields_i, entry) in enumerate(zip(fields, entries, strict=True)):
            sequence_id = fields_i[1]
            num_messages = fields_i[2]
            highest_sequence_id = fields_i[5]
            if limited:
                pause_s = self._publish_pause_s(num_messages, len(entry.data))
                if pause_s > 0:
                    self.connection.pause_reading_for(pause_s)
            if not entry.verify_checksum():
                replies[i] = self._error(sequence_id, ServerError.ChecksumError, "Checksum failed")
                continue
            if dedup is not None:
                try:
                    md = entry.metadata
                    chunk_id = md.chunk_id
                    num_chunks = md.num_chunks_from_msg
                except ProtocolError as exc:
                    replies[i] = self._error(
                        sequence_id, ServerError.UnknownError, f"bad metadata: {exc}"
                    )
                    continue
                status = dedup.check(
                    self.name, sequence_id, highest_sequence_id, chunk_id, num_chunks
                )
                if status is DupStatus.DUP:
                    replies[i] = encode_send_receipt_at(
                        self.producer_id, sequence_id, -1, -1, highest_sequence_id
                    )
                    continue
                if status is DupStatus.UNKNOWN:
                    replies[i] = self._error(
                        sequence_id, ServerError.PersistenceError, "Sequence id not yet persisted"
                    )
                    continue
                persisted.append((sequence_id, highest_sequence_id, chunk_id, num_chunks))
            data = bytes(entry.data)
            datas.append(data)
            counts.append(num_messages)
            accepted.append(i)
            sizes.append(len(data))
            if fields_i[6]:
                chunks += 1
        run.accepted = accepted
        return datas, counts, chunks

    def _stored(
        self,
        run: _SendRun,
        persisted: list[_Persisted] | None,
        offset: int,
        count: int,
        first: Position | None,
        err: BaseException | None,
    ) -> None:
        """The outcome of the SENDs ``offset .. offset + count - 1`` of those ``run`` gave
        the topic (a piece of its run of entries): receipts at ``first`` and the positions
        after it, or errors. ``persisted``: what deduplication records of each SEND given,
        ``None`` if the run was taken while the topic had deduplication off."""
        topic = self.topic
        dedup = topic.dedup
        end = offset + count
        self.connection.release_publish_bytes(sum(run.sizes[offset:end]))
        indexes = range(offset, end) if run.accepted is None else run.accepted[offset:end]
        replies = run.replies
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
            for i in indexes:
                replies[i] = self._error(run.sequence_ids[i], code, message)
        else:
            ledger_id, entry_id = first
            receipts = map(
                encode_send_receipt_at,
                repeat(self.producer_id),
                map(run.sequence_ids.__getitem__, indexes),
                repeat(ledger_id),
                range(entry_id, entry_id + count),
                map(run.highest_sequence_ids.__getitem__, indexes),
            )
            if run.accepted is None:
                replies[offset:end] = receipts
            else:
                for i, receipt in zip(indexes, receipts, strict=True):
                    replies[i] = receipt
            if dedup is not None and persisted is not None:
                name = self.name
                for i in range(offset, end):
                    dedup.record_persisted(name, *persisted[i])
                topic.dedup_advanced(Position(ledger_id, entry_id + count - 1))
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

    def _error(self, sequence_id: int, code: ServerError, message: str) -> bytes:
        return encode(
            SendError(
                producer_id=self.producer_id,
                sequence_id=sequence_id,
                error=code,
                message=message,
            )
        )

    def _flush_answers(self) -> None:
        """Write the answers known at the head of the queue, in SEND order, in one go."""
        pending = self._pending
        out: list[bytes | memoryview] = []
        while pending:
            run = pending[0]
            replies = run.replies
            if None not in replies:
                out += replies[run.flushed :] if run.flushed else replies  # type: ignore[arg-type]
                pending.popleft()
                continue
            known = replies.index(None, run.flushed)
            out += replies[run.flushed : known]  # type: ignore[arg-type]
            run.flushed = known
            break
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
