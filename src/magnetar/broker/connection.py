"""One client connection of the broker: the asyncio shell around the sans-IO codec.

Reading: bytes go through :class:`~magnetar.protocol.FrameDecoder`; the first frame must
be CONNECT (answered with CONNECTED), anything else closes the connection, as does any
malformed or oversized frame (reference §1, §5). SEND, ACK, FLOW and
REDELIVER_UNACKNOWLEDGED_MESSAGES are handled inline, in arrival order; requests that may
wait (lookups, PRODUCER, SUBSCRIBE, SEEK, ...) run as tasks that answer with the request id.

Memory of reading: the decoder holds only the bytes of a partial frame that arrived, and
they count against the broker-wide :class:`~magnetar.broker.partial_frames.PartialFrameBudget`:
past ``partial_frame_bytes_max`` a connection holding part of a frame stops reading until
the total falls below; a frame not complete ``partial_frame_timeout_ms`` after its first
byte closes the connection. A closed connection's partial frame is dropped at once.

Writing: ``transport.write``/``writelines``; MESSAGE frames carry stored entry bytes
without copying. Backpressure both ways: past ``pending_sends_per_connection_max``
unanswered SENDs the transport stops reading until half of them are answered; past
``max_message_publish_buffer_size_mb`` of SENDs not yet answered broker-wide every publishing
connection stops reading until half of those bytes are answered
(:mod:`magnetar.broker.publish_buffer`); dispatchers wait on :meth:`ServerConnection.wait_writable` while the transport's write buffer is full.

Authentication and authorization: :class:`~magnetar.broker.connection_auth.ConnectionAuth`
checks CONNECT's credentials (refused: Error ``AuthenticationError``, then closed), refreshes
expiring ones (AUTH_CHALLENGE/AUTH_RESPONSE), and authorizes LOOKUP, PARTITIONED_METADATA,
PRODUCER, SUBSCRIBE and GET_TOPICS_OF_NAMESPACE against the role.

A PRODUCER or SUBSCRIBE refused as not served here (ServiceNotReady, or this broker's
metadata session lost) is preceded by CLOSE_PRODUCER / CLOSE_CONSUMER for its id. The
official C++ client attaches a producer or consumer to the connection before its request
and, on a retriable error to a first creation, schedules a reconnection that it then skips
because the handler is still attached: the creation waits out the operation timeout. The
close detaches it, so it looks the topic up again (Java's and Magnetar's clients do the
same on either message alone).

Keep-alive: a PING goes out every ``keep_alive_interval_ms``; a connection with no traffic
for a whole interval after a PING is closed. Every PING from the client gets a PONG.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar import __version__
from magnetar.auth import TopicOperation
from magnetar.broker.connection_auth import ConnectionAuth
from magnetar.broker.error_reply import failure_reply
from magnetar.broker.read_slices import SLICE_SENDS, TURN_READ_BYTES, ReadBacklog, plan_read
from magnetar.common.clock import Timer
from magnetar.common.errors import ProtocolError, ServerError, ServiceNotReady
from magnetar.metadata.store import SessionExpired
from magnetar.protocol import (
    FRAME_PADDING_BYTES,
    PROTOCOL_VERSION,
    Ack,
    AuthResponse,
    CloseConsumer,
    CloseProducer,
    Command,
    Connect,
    Connected,
    ConsumerStats,
    Error,
    Flow,
    Frame,
    FrameDecoder,
    GetLastMessageId,
    GetOrCreateSchema,
    GetSchema,
    GetTopicsOfNamespace,
    LookupTopic,
    PartitionedTopicMetadata,
    Ping,
    Pong,
    Producer,
    RedeliverUnacknowledgedMessages,
    Seek,
    Send,
    Subscribe,
    Success,
    Unsubscribe,
    encode,
)
from magnetar.protocol.frame import SendRun, send_fields

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.producer import Producer as TopicProducer
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

SERVER_VERSION = f"Magnetar-{__version__}"
CONNECTION_REFUSED_REQUEST_ID = 2**64 - 1
"""Request id of the Error refusing a connection over a connection limit (Pulsar's -1)."""
_connection_ids = itertools.count(1)


class ServerConnection(asyncio.Protocol):
    """Server side of one TCP connection. Owns the producers and consumers created on it;
    they are removed from their topics when the connection closes."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.connection_id = next(_connection_ids)
        cfg = service.config
        self._decoder = FrameDecoder(cfg.max_message_size_bytes + FRAME_PADDING_BYTES)
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.closed = False
        self.protocol_version = 0
        self.client_version = ""
        self.address = ""
        self.peer_ip = ""
        """The client's IP address ("" when unknown)."""
        self._admitted_ip: str | None = None
        """The client's IP once the connection limits admitted it (released on close)."""
        self.supports_broker_entry_metadata = False
        self.auth = ConnectionAuth(self, SERVER_VERSION)
        """The client's role, the refresh of its credentials, authorization checks."""
        self.producers: dict[int, TopicProducer] = {}
        self.queued_producers: dict[int, TopicProducer] = {}
        """WaitForExclusive producers answered ready=false, not yet holding their topic."""
        self.consumers: dict[int, Consumer] = {}
        self._pending_producers: dict[int, asyncio.Task[None]] = {}
        self._pending_consumers: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.pending_sends = 0
        self._reading_paused = False  # the transport's state: paused for either reason
        self._paused_for_sends = False
        self._paused_for_budget = False
        self._paused_for_rate = False  # a topic published to is over its publish rate
        self._paused_for_publish_buffer = False  # the broker's publishes in flight: too many bytes
        self._paused_for_backlog = False
        self._paused_for_turns = False
        self._read_bytes = 0
        """Bytes read since reading last stopped for two loop turns (``read_slices``)."""
        self._backlog: ReadBacklog | None = None
        """What the reads held after a deferred slice of SENDs, in stream order
        (:mod:`magnetar.broker.read_slices`); None when nothing is deferred."""
        self._rate_resume_at_s = 0.0
        self._rate_timer: Timer | None = None
        self._partial_held_bytes = 0  # what the budget counts for this connection
        self._partial_frames_seen = 0  # the decoder's partial_frames_started, last seen
        self._writable = asyncio.Event()
        self._out: list[bytes | memoryview] | None = None
        self._loop = asyncio.get_running_loop()
        self._writable.set()
        self._traffic = True
        self._keepalive: Timer | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = self.transport.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else ""
        ip = self.peer_ip = str(peer[0]) if peer else ""
        refused = self.service.connection_opened(self, ip)
        if refused is not None:  # over brokerMaxConnections(PerIp): told, then closed
            log.info("connection %s: refused: %s", self.address, refused)
            self.send_command(
                Error(
                    request_id=CONNECTION_REFUSED_REQUEST_ID,
                    error=ServerError.NotAllowedError,
                    message=refused,
                )
            )
            self.close()
            return
        self._admitted_ip = ip
        self._schedule_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        self._backlog = None
        self._release_partial_frame()
        self.service.publish_buffer.forget(self)
        # a clock's timer keeps its callback (a method of this connection) after cancel():
        # dropped here, so no cycle outlives the connection (freed by reference counting)
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self.auth.close()
        if self._rate_timer is not None:
            self._rate_timer.cancel()
            self._rate_timer = None
        for task in [*self._pending_producers.values(), *self._pending_consumers.values()]:
            task.cancel()
        for producer in [*self.producers.values(), *self.queued_producers.values()]:
            producer.topic.remove_producer(producer)
        self.producers.clear()
        self.queued_producers.clear()
        for consumer in list(self.consumers.values()):
            self._spawn(consumer.subscription.remove_consumer(consumer))
        self.consumers.clear()
        if self._admitted_ip is not None:
            self.service.connection_closed(self, self._admitted_ip)
            self._admitted_ip = None

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        self._traffic = True
        if self._backlog is not None:  # read before the pause took effect: after the rest
            self._backlog.append(self._feed, data)
            return
        self._feed(data)
        self._read_bytes += len(data)
        if self._read_bytes >= TURN_READ_BYTES and not self.closed:
            self._read_bytes = 0
            self._paused_for_turns = True
            self._update_reading()
            self._loop.call_soon(self._loop.call_soon, self._resume_after_turns)

    def _resume_after_turns(self) -> None:
        """Two loop turns after reading stopped (``read_slices``): read on."""
        self._paused_for_turns = False
        self._update_reading()

    def _feed(self, data: bytes) -> bool:
        decoder = self._decoder
        try:
            decoder.feed_each(data, self._on_frame, self._on_sends)
        except ProtocolError as exc:  # closed: nothing held is accounted below
            log.info("connection %s: closing: %s", self.address, exc)
            self.close()
        if (decoder.buffered_bytes or self._partial_held_bytes) and not self.closed:
            self._account_partial_frame()
        return False

    def _account_partial_frame(self) -> None:
        """Tell the broker-wide budget what this connection holds now (off the hot path:
        only when a read ends inside a frame, or after one that did)."""
        decoder = self._decoder
        held = decoder.buffered_bytes
        started_s = None
        if held and decoder.partial_frames_started != self._partial_frames_seen:
            self._partial_frames_seen = decoder.partial_frames_started
            started_s = self.service.clock.monotonic_s()
        self._partial_held_bytes = held
        budget = self.service.partial_frames
        if budget.hold(self, held, started_s):
            self._paused_for_budget = True
            self._update_reading()
        elif budget.waiting:  # this read may have freed bytes or completed the oldest frame
            for reader in budget.resumable():
                reader.resume_for_budget()

    def resume_for_budget(self) -> None:
        """The broker-wide budget has room again: read on (unless closed)."""
        self._paused_for_budget = False
        self._update_reading()

    def close_for_overdue_frame(self) -> None:
        """The partial frame took longer than ``partial_frame_timeout_ms``: close, and free
        its bytes now (the transport reports the loss later)."""
        log.info(
            "connection %s: closing: a frame was not completed within %d ms",
            self.address,
            self.service.config.partial_frame_timeout_ms,
        )
        self.close()
        self._release_partial_frame()

    def _release_partial_frame(self) -> None:
        self._decoder.release("connection closed")
        budget = self.service.partial_frames
        budget.release(self)
        self._partial_held_bytes = 0
        for reader in budget.resumable():
            reader.resume_for_budget()

    def pause_reading_for(self, pause_s: float) -> None:
        """Stop reading for ``pause_s`` (a publish rate was exceeded): the client's sends
        wait in its own queue, nothing is refused. A longer pause extends a current one."""
        clock = self.service.clock
        resume_at_s = clock.monotonic_s() + pause_s
        if self._paused_for_rate and resume_at_s <= self._rate_resume_at_s:
            return
        self._rate_resume_at_s = resume_at_s
        if self._rate_timer is not None:
            self._rate_timer.cancel()
        self._rate_timer = clock.call_later(pause_s, self._resume_after_rate_pause)
        self._paused_for_rate = True
        self._update_reading()

    def _resume_after_rate_pause(self) -> None:
        self._rate_timer = None
        self._paused_for_rate = False
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        paused = (
            self._paused_for_sends
            or self._paused_for_budget
            or self._paused_for_rate
            or self._paused_for_publish_buffer
            or self._paused_for_backlog
            or self._paused_for_turns
        )
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _on_frame(self, frame: Frame) -> None:
        if self.closed:
            return
        if self._backlog is not None:
            self._backlog.append(self._handle_later, frame)
        else:
            self._handle(frame)

    def _handle_later(self, frame: Frame) -> bool:
        self._handle(frame)
        return False

    def _on_sends(self, run: SendRun) -> None:
        if self.closed:
            return
        if self._backlog is not None:
            self._backlog.append(self._take_sends, run)
        else:
            self._take_sends(run)

    def _take_sends(self, run: SendRun) -> bool:
        """SENDs of the usual shape, consecutive in the stream, decoded without building
        commands (hot path). Each topic's SENDs of the run are taken in stream order, each
        producer's consecutive ones as one run; the order across topics is free (answers
        are matched by producer and sequence id), so a client spreading messages over many
        topics on one connection gets one append per topic per read, not one per SEND.
        When a producer has more than :data:`SLICE_SENDS` of them, the first slice is taken
        now and the rest on later loop turns (:func:`~magnetar.broker.read_slices.plan_read`);
        returns whether it sliced."""
        pid = run[0][0][0]
        if len(run) <= SLICE_SENDS and all(send[0][0] == pid for send in run):  # the usual
            self._producer_of(pid).handle_sends(run)
            return False
        now, later = plan_read(run, self._producer_of)
        if later:
            backlog = self._backlog
            if backlog is None:
                backlog = self._backlog = ReadBacklog()
                self._paused_for_backlog = True
                self._update_reading()
                self._loop.call_soon(self._run_backlog)
            for runs in later:
                backlog.append(self._take_slice, runs)
        self._take_slice(now)
        return bool(later)

    def _take_slice(self, runs: list[SendRun]) -> bool:
        for sends in runs:
            self._producer_of(sends[0][0][0]).handle_sends(sends)
        return True

    def _run_backlog(self) -> None:
        """One loop turn's share of the deferred work; reading resumes once it is all done.
        A protocol error in it closes the connection, as it would have in the read."""
        backlog = self._backlog
        if backlog is None or self.closed:
            return
        try:
            backlog.run_turn()
        except ProtocolError as exc:
            log.info("connection %s: closing: %s", self.address, exc)
            self.close()
            return
        except Exception:  # as a failing data_received would: logged, connection closed
            log.exception("connection %s: closing after an internal error", self.address)
            self.close()
            return
        if backlog:
            self._loop.call_soon(self._run_backlog)
            return
        self._backlog = None
        self._paused_for_backlog = False
        self._update_reading()

    def _producer_of(self, producer_id: int) -> TopicProducer:
        producer = self.producers.get(producer_id)
        if producer is None:
            if not self.connected:
                raise ProtocolError("SEND before CONNECT")
            raise ProtocolError(f"SEND for unknown producer {producer_id}")
        return producer

    # --- writing -------------------------------------------------------------------------

    # Outgoing frames are gathered and handed to the transport once per event-loop
    # iteration: one writelines (one syscall) for all the receipts and messages a burst of
    # input produced, instead of one per frame. Order is kept: every write goes through here.

    def send_command(self, command: Command) -> None:
        self.send_frame(encode(command))

    def send_frame(self, frame: bytes) -> None:
        """Like :meth:`send_command` for a frame already encoded."""
        if self.transport is not None and not self.closed:
            out = self._out
            if out is None:
                out = self._out = []
                self._loop.call_soon(self._flush)
            out.append(frame)

    def write_buffers(self, buffers: list[bytes | memoryview]) -> None:
        if self.transport is not None and not self.closed:
            out = self._out
            if out is None:
                out = self._out = []
                self._loop.call_soon(self._flush)
            out.extend(buffers)

    def _flush(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None and not self.closed:
            self.transport.writelines(out)

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()  # an ERROR written just before closing still goes out
            self.closed = True
            self.transport.close()

    # --- send backpressure ---------------------------------------------------------------

    def send_started(self, count: int = 1) -> None:
        """``count`` SENDs arrived (unanswered until :meth:`send_finished`)."""
        self.pending_sends += count
        if (
            not self._paused_for_sends
            and self.pending_sends >= self.service.config.pending_sends_per_connection_max
        ):
            self._paused_for_sends = True
            self._update_reading()

    def send_finished(self, count: int = 1) -> None:
        """``count`` SENDs were answered."""
        self.pending_sends -= count
        if (
            self._paused_for_sends
            and self.pending_sends <= self.service.config.pending_sends_per_connection_max // 2
        ):
            self._paused_for_sends = False
            self._update_reading()

    def hold_publish_bytes(self, size_bytes: int) -> None:
        """``size_bytes`` of this connection's SENDs went to storage: they count against
        the broker's publish buffer (:mod:`magnetar.broker.publish_buffer`) until
        :meth:`release_publish_bytes`; past its bound every publishing connection stops
        reading."""
        for conn in self.service.publish_buffer.hold(self, size_bytes):
            conn._paused_for_publish_buffer = True
            conn._update_reading()

    def release_publish_bytes(self, size_bytes: int) -> None:
        """Storage answered ``size_bytes`` held by :meth:`hold_publish_bytes` (stored or
        failed; called whether or not this connection is still open)."""
        for conn in self.service.publish_buffer.release(size_bytes):
            conn._paused_for_publish_buffer = False
            conn._update_reading()

    # --- keep-alive ----------------------------------------------------------------------

    def _schedule_keepalive(self) -> None:
        interval_s = self.service.config.keep_alive_interval_ms / 1000
        if interval_s > 0:
            self._keepalive = self.service.clock.call_later(interval_s, self._on_keepalive)

    def _on_keepalive(self) -> None:
        if self.closed:
            return
        if not self._traffic and not self._reading_paused:  # paused: we stopped listening
            log.info("connection %s: no traffic for a keep-alive interval; closing", self.address)
            self.close()
            return
        self._traffic = False
        if self.connected:
            self.send_command(Ping())
        self._schedule_keepalive()

    # --- dispatching commands ------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection %s: request failed", self.address, exc_info=task.exception())

    def _request(
        self, cmd: Command, work: Callable[[], Coroutine[Any, Any, Command | None]]
    ) -> asyncio.Task[None]:
        """Run ``work`` as a task and answer request ``cmd`` with its result (None: ``work``
        answered itself), or with the failure reply for whatever it raised: every request
        is answered (:mod:`magnetar.broker.error_reply`). Cancelled work answers nothing."""

        async def run() -> None:
            try:
                reply = await work()
            except Exception as exc:
                reply = failure_reply(cmd, exc)
            if reply is not None:
                self.send_command(reply)

        return self._spawn(run())

    def _handle(self, frame: Frame) -> None:
        """Handle one command. Whatever handling raises is the answer to the command's
        request (if it has one); only a :class:`ProtocolError`, or a failure of a command
        that expects no answer, goes up and closes the connection."""
        try:
            self._dispatch(frame)
        except ProtocolError:
            raise
        except Exception as exc:
            reply = failure_reply(frame.command, exc)
            if reply is None:
                raise
            self.send_command(reply)

    def _dispatch(self, frame: Frame) -> None:
        cmd = frame.command
        if not self.connected:
            if not isinstance(cmd, Connect):
                raise ProtocolError(f"{cmd.TYPE.name} before CONNECT")
            self._on_connect(cmd)
            return
        svc = self.service
        match cmd:
            case Send():
                producer = self.producers.get(cmd.producer_id)
                if producer is None or frame.entry is None:
                    raise ProtocolError(f"SEND for unknown producer {cmd.producer_id}")
                producer.handle_sends([(send_fields(cmd), frame.entry)])
            case Ack():
                consumer = self.consumers.get(cmd.consumer_id)
                if consumer is not None:
                    consumer.subscription.handle_ack(consumer, cmd)
            case Flow():
                consumer = self.consumers.get(cmd.consumer_id)
                if consumer is not None:
                    consumer.subscription.handle_flow(consumer, cmd.message_permits)
            case RedeliverUnacknowledgedMessages():
                consumer = self.consumers.get(cmd.consumer_id)
                if consumer is not None:
                    consumer.subscription.handle_redeliver(consumer, cmd.message_ids)
            case Ping():
                self.send_command(Pong())
            case Pong():
                pass
            case PartitionedTopicMetadata():
                self._request(
                    cmd,
                    lambda: self.auth.authorized(
                        cmd.topic, TopicOperation.LOOKUP, svc.handle_partitioned_metadata(cmd)
                    ),
                )
            case LookupTopic():
                self._request(
                    cmd,
                    lambda: self.auth.authorized(
                        cmd.topic, TopicOperation.LOOKUP, svc.handle_lookup(cmd)
                    ),
                )
            case GetTopicsOfNamespace():
                log.debug("connection %s: %s", self.address, cmd)
                self._request(cmd, lambda: self._topics_of_namespace(cmd))
            case GetSchema():
                self._request(cmd, lambda: svc.schemas.handle_get_schema(cmd))
            case GetOrCreateSchema():
                self._request(cmd, lambda: svc.schemas.handle_get_or_create_schema(cmd))
            case Producer():
                self._on_producer(cmd)
            case CloseProducer():
                self._on_close_producer(cmd)
            case Subscribe():
                self._on_subscribe(cmd)
            case CloseConsumer():
                self._on_close_consumer(cmd)
            case Unsubscribe():
                unsubscribing = self._consumer_or_none(cmd.consumer_id)
                if unsubscribing is None:
                    self._consumer_missing(cmd.request_id)
                else:
                    sub = unsubscribing.subscription
                    self._request(cmd, lambda: sub.unsubscribe(unsubscribing, cmd.request_id))
            case Seek():
                seeking = self._consumer_or_none(cmd.consumer_id)
                if seeking is None:
                    self._consumer_missing(cmd.request_id)
                else:
                    seek_sub = seeking.subscription
                    self._request(cmd, lambda: seek_sub.seek(cmd))
            case GetLastMessageId():
                consumer = self._consumer_or_none(cmd.consumer_id)
                if consumer is None:
                    self._consumer_missing(cmd.request_id)
                else:
                    self.send_command(
                        consumer.subscription.last_message_id_response(cmd.request_id)
                    )
            case ConsumerStats():
                consumer = self._consumer_or_none(cmd.consumer_id)
                if consumer is None:
                    self._consumer_missing(cmd.request_id)
                else:
                    self.send_command(consumer.stats_response(cmd.request_id))
            case AuthResponse():
                self.auth.on_auth_response(cmd)
            case Connect():
                raise ProtocolError("second CONNECT on a connection")
            case _:
                request_id = getattr(cmd, "request_id", None)
                if request_id is None:
                    raise ProtocolError(f"unsupported command {cmd.TYPE.name}")
                self.send_command(
                    Error(
                        request_id=request_id,
                        error=ServerError.NotAllowedError,
                        message=f"{cmd.TYPE.name} is not supported by this broker",
                    )
                )

    async def _topics_of_namespace(self, cmd: GetTopicsOfNamespace) -> Command:
        await self.auth.check_namespace(cmd.namespace)
        return await self.service.handle_topics_of_namespace(cmd)

    def _consumer_or_none(self, consumer_id: int) -> Consumer | None:
        return self.consumers.get(consumer_id)

    def _consumer_missing(self, request_id: int) -> None:
        self.send_command(
            Error(
                request_id=request_id, error=ServerError.MetadataError, message="Consumer not found"
            )
        )

    def _on_connect(self, cmd: Connect) -> None:
        if not self.auth.on_connect(cmd):
            return
        self.connected = True
        self.client_version = cmd.client_version
        self.protocol_version = min(cmd.protocol_version, PROTOCOL_VERSION)
        flags = cmd.feature_flags
        self.supports_broker_entry_metadata = bool(
            flags is not None and flags.supports_broker_entry_metadata
        )
        self.send_command(
            Connected(
                server_version=SERVER_VERSION,
                protocol_version=self.protocol_version,
                max_message_size=self.service.config.max_message_size_bytes,
            )
        )

    # --- producers -----------------------------------------------------------------------

    def _on_producer(self, cmd: Producer) -> None:
        existing = self.producers.get(cmd.producer_id)
        if existing is not None:
            self.send_command(existing.success_response(cmd.request_id))
            return
        # still being created, or queued (WaitForExclusive): Java's future is not done yet
        if cmd.producer_id in self._pending_producers or cmd.producer_id in self.queued_producers:
            self.send_command(
                Error(
                    request_id=cmd.request_id,
                    error=ServerError.ServiceNotReady,
                    message="Producer is already being created",
                )
            )
            return

        async def create() -> None:
            try:
                await self.auth.check_topic(cmd.topic, TopicOperation.PRODUCE)
                await self.service.create_producer(self, cmd)
            except (ServiceNotReady, SessionExpired):
                self.send_command(CloseProducer(producer_id=cmd.producer_id, request_id=0))
                raise
            finally:
                self._pending_producers.pop(cmd.producer_id, None)

        self._pending_producers[cmd.producer_id] = self._request(cmd, create)

    def _on_close_producer(self, cmd: CloseProducer) -> None:
        producer = self.producers.pop(cmd.producer_id, None)
        pending = self._pending_producers.pop(cmd.producer_id, None)
        if pending is not None:
            pending.cancel()
        queued = self.queued_producers.pop(cmd.producer_id, None)
        if queued is not None:  # leaves the wait queue
            queued.topic.remove_producer(queued)
        if producer is None:
            self.send_command(Success(request_id=cmd.request_id))
            return

        async def close() -> Success:
            await producer.drain()
            producer.topic.remove_producer(producer)
            return Success(request_id=cmd.request_id)

        self._request(cmd, close)

    # --- consumers -----------------------------------------------------------------------

    def _on_subscribe(self, cmd: Subscribe) -> None:
        if cmd.consumer_id in self.consumers:
            self.send_command(Success(request_id=cmd.request_id))
            return
        if cmd.consumer_id in self._pending_consumers:
            self.send_command(
                Error(
                    request_id=cmd.request_id,
                    error=ServerError.ServiceNotReady,
                    message="Consumer is already being created",
                )
            )
            return

        async def create() -> None:
            try:
                await self.auth.check_topic(cmd.topic, TopicOperation.CONSUME, cmd.subscription)
                await self.service.subscribe(self, cmd)
            except (ServiceNotReady, SessionExpired):
                self.send_command(CloseConsumer(consumer_id=cmd.consumer_id, request_id=0))
                raise
            finally:
                self._pending_consumers.pop(cmd.consumer_id, None)

        self._pending_consumers[cmd.consumer_id] = self._request(cmd, create)

    def _on_close_consumer(self, cmd: CloseConsumer) -> None:
        consumer = self.consumers.pop(cmd.consumer_id, None)
        pending = self._pending_consumers.pop(cmd.consumer_id, None)
        if pending is not None:
            pending.cancel()
        if consumer is None:
            self.send_command(Success(request_id=cmd.request_id))
            return

        async def close() -> Success:
            await consumer.subscription.remove_consumer(consumer)
            return Success(request_id=cmd.request_id)

        self._request(cmd, close)

    def consumer_closed_by_broker(self, consumer: Consumer) -> None:
        """The broker dropped ``consumer`` (seek, unload): tell the client to re-subscribe."""
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
        self.send_command(CloseConsumer(consumer_id=consumer.consumer_id, request_id=0))

    def producer_closed_by_broker(self, producer: TopicProducer) -> None:
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
        self.send_command(CloseProducer(producer_id=producer.producer_id, request_id=0))
