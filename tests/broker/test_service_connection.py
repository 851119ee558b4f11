"""The connection state machine of the broker service against raw frames (reference §5,
§6.2, §6.5), on a real :class:`BrokerService` in this process (real bookie, in-memory
metadata store) reached over loopback TCP with our codec.

What the wheel cannot show: CONNECT must come first, a second CONNECT, PING/PONG both ways
and the keep-alive close, a SEND for an unknown producer, and duplicate ``producer_id`` /
``consumer_id`` on one connection ("If creation finished, SUCCESS again; if still pending,
ServiceNotReady"), including a WaitForExclusive producer still queued.

:func:`running_broker` and :class:`AsyncRawClient` are shared with the other
``test_service_*`` modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.common.clock import Clock, ManualClock
from magnetar.common.errors import ServerError
from magnetar.common.names import TopicName
from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import connect
from magnetar.protocol import (
    CloseProducer,
    Command,
    Connect,
    Connected,
    Error,
    FrameDecoder,
    MessageMetadata,
    Ping,
    Pong,
    Producer,
    ProducerAccessMode,
    ProducerSuccess,
    SendError,
    SendReceipt,
    Subscribe,
    SubType,
    Success,
    encode,
    encode_send,
)
from magnetar.protocol.frame import Frame
from magnetar.testing import wait_until_async

TIMEOUT_S = 15.0


@asynccontextmanager
async def running_broker(
    tmp_path: Path,
    *,
    clock: Clock | None = None,
    bookies: list[Bookie] | None = None,
    **config: Any,
) -> AsyncIterator[BrokerService]:
    """A started broker on a free port over one real bookie (E = Qw = Qa = 1), appended to
    ``bookies`` when given; everything is closed on exit, also when the test fails."""
    store = await connect("memory:")
    bookie = Bookie(
        BookieConfig(data_dir=tmp_path / "bookie", port=0, disk_free_min_bytes=0), store
    )
    client: LedgerClient | None = None
    service: BrokerService | None = None
    try:
        await bookie.start()
        if bookies is not None:
            bookies.append(bookie)
        client = LedgerClient(store, local_bookies=[bookie])
        storage = LedgerClientStorage(client, ensemble_size=1, write_quorum=1, ack_quorum=1)
        service = BrokerService(BrokerConfig(port=0, **config), store, storage, clock=clock)
        await service.start()
        yield service
    finally:
        if service is not None:
            await service.close()
        if client is not None:
            await client.close()
        with contextlib.suppress(Exception):
            await bookie.stop()
        await store.close()


def new_topic() -> str:
    return f"persistent://public/default/svc-{uuid.uuid4().hex[:10]}"


class AsyncRawClient:
    """One asyncio connection speaking our codec. Frames not yet asked for wait in
    ``inbox``; PINGs from the broker are answered unless ``answer_pings`` is False."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.inbox: list[Frame] = []
        self.pings = 0
        self.answer_pings = True
        self.eof = False
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int, *, handshake: bool = True) -> AsyncRawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        if handshake:
            raw.send(Connect(client_version="svc-test", protocol_version=20))
            await raw.wait_for(lambda f: isinstance(f.command, Connected))
        return raw

    def next_id(self) -> int:
        return next(self._ids)

    def send(self, *commands: Command) -> None:
        """All ``commands`` in one write (so the broker reads them in one go)."""
        self.writer.write(b"".join(encode(c) for c in commands))

    async def _read(self) -> None:
        data = await self.reader.read(1 << 16)
        if not data:
            self.eof = True
            raise ConnectionError("closed by the broker")
        for frame in self.decoder.feed(data):
            if isinstance(frame.command, Ping):
                self.pings += 1
                if self.answer_pings:
                    self.send(Pong())
            else:
                self.inbox.append(frame)

    async def wait_for(
        self, predicate: Callable[[Frame], bool], timeout_s: float = TIMEOUT_S
    ) -> Frame:
        """The oldest frame matching ``predicate``, removed from the inbox."""
        async with asyncio.timeout(timeout_s):
            while True:
                for i, frame in enumerate(self.inbox):
                    if predicate(frame):
                        return self.inbox.pop(i)
                await self._read()

    async def answer(self, request_id: int, timeout_s: float = TIMEOUT_S) -> Command:
        frame = await self.wait_for(
            lambda f: getattr(f.command, "request_id", None) == request_id, timeout_s
        )
        return frame.command

    async def request(self, command: Command) -> Command:
        self.send(command)
        return await self.answer(command.request_id)  # type: ignore[attr-defined]

    async def closed_by_broker(self, timeout_s: float = TIMEOUT_S) -> bool:
        """Reads (keeping frames) until EOF; False if still open after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                while not self.eof:
                    await self._read()
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def producer_cmd(raw: AsyncRawClient, topic: str, producer_id: int, **fields: Any) -> Producer:
    return Producer(topic=topic, producer_id=producer_id, request_id=raw.next_id(), **fields)


def subscribe_cmd(
    raw: AsyncRawClient, topic: str, consumer_id: int, sub_type: SubType = SubType.Shared
) -> Subscribe:
    return Subscribe(
        topic=topic,
        subscription="s",
        sub_type=sub_type,
        consumer_id=consumer_id,
        request_id=raw.next_id(),
    )


# --- handshake and keep-alive ---------------------------------------------------------------


async def test_connect_must_be_the_first_frame(tmp_path: Path) -> None:
    # §5: "CONNECT must be the first frame." Anything else closes the connection unanswered.
    async with running_broker(tmp_path) as broker:
        for first in (Ping(), Producer(topic=new_topic(), producer_id=1, request_id=1)):
            raw = await AsyncRawClient.open(broker.port, handshake=False)
            raw.send(first)
            assert await raw.closed_by_broker()
            assert raw.inbox == []
        # after a refused one, a proper client still gets in
        raw = await AsyncRawClient.open(broker.port)
        assert not raw.eof
        await raw.close()


async def test_connected_fields_and_second_connect(tmp_path: Path) -> None:
    async with running_broker(tmp_path, max_message_size_bytes=65536) as broker:
        raw = await AsyncRawClient.open(broker.port, handshake=False)
        raw.send(Connect(client_version="old", protocol_version=25))
        connected = (await raw.wait_for(lambda f: isinstance(f.command, Connected))).command
        assert isinstance(connected, Connected)
        assert connected.protocol_version == 20  # min(client, 20)
        assert connected.max_message_size == 65536
        assert connected.server_version.startswith("Magnetar")
        raw.send(Connect(client_version="again", protocol_version=20))
        assert await raw.closed_by_broker()
        assert not any(isinstance(f.command, Connected) for f in raw.inbox)


async def test_ping_pong_and_keep_alive_close(tmp_path: Path) -> None:
    # §5: "a PING must be answered with PONG"; the broker PINGs idle clients and drops one
    # that stays silent for a whole interval.
    async with running_broker(tmp_path, keep_alive_interval_ms=150) as broker:
        raw = await AsyncRawClient.open(broker.port)
        raw.send(Ping())
        await raw.wait_for(lambda f: isinstance(f.command, Pong))
        # answering its PINGs keeps the connection open across several intervals
        async with asyncio.timeout(TIMEOUT_S):
            while raw.pings < 3:
                await raw._read()
        assert not raw.eof
        raw.answer_pings = False
        assert await raw.closed_by_broker()


async def test_keep_alive_runs_on_the_injected_clock(tmp_path: Path) -> None:
    # The keep-alive timer is the broker's clock's: a manual clock decides exactly when a
    # PING goes out and when a silent connection is dropped.
    clock = ManualClock()
    async with running_broker(tmp_path, clock=clock, keep_alive_interval_ms=30_000) as broker:
        raw = await AsyncRawClient.open(broker.port)

        async def round_trip() -> None:
            # A PONG to our PING comes after everything the broker wrote before it, and
            # shows that everything we wrote before it was read; a PONG we sent to a PING
            # read meanwhile went out after our PING, so one more round trip covers it.
            pings = raw.pings
            raw.send(Ping())
            await raw.wait_for(lambda f: isinstance(f.command, Pong))
            if raw.pings != pings:
                await round_trip()

        clock.advance(29.9)
        await round_trip()
        assert raw.pings == 0
        clock.advance(0.1)
        await round_trip()
        assert raw.pings == 1  # answered: the connection stays open across intervals
        clock.advance(30)
        await round_trip()
        assert raw.pings == 2
        raw.answer_pings = False
        clock.advance(30)  # the round trip above was traffic: a PING, not a close
        async with asyncio.timeout(TIMEOUT_S):
            while raw.pings < 3:
                await raw._read()
        assert not raw.eof
        clock.advance(30)  # a whole interval of silence after a PING
        assert await raw.closed_by_broker()


async def test_send_for_an_unknown_producer_closes_the_connection(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        md = MessageMetadata(producer_name="nobody", sequence_id=0, publish_time=1)
        raw.writer.write(b"".join(encode_send(7, 0, md, b"x")))
        assert await raw.closed_by_broker()


async def test_interleaved_sends_of_producers_are_appended_as_one_run_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SENDs of several producers interleaved in one read (a client spreading messages over
    topics): each producer's go to its topic as one append, in its order, and each is
    receipted at its place in that topic."""
    async with running_broker(tmp_path) as broker:
        topics = [new_topic() for _ in range(3)]
        raw = await AsyncRawClient.open(broker.port)
        for pid, topic in enumerate(topics):
            await raw.request(producer_cmd(raw, topic, pid, producer_name=f"p{pid}"))
        appends: list[tuple[str, int]] = []
        publish_run = Topic.publish_run

        def counting(topic: Topic, datas: list[bytes], *args: Any) -> Any:
            appends.append((str(topic.name), len(datas)))
            return publish_run(topic, datas, *args)

        monkeypatch.setattr(Topic, "publish_run", counting)
        frames = []
        for seq in range(4):
            for pid in range(3):
                md = MessageMetadata(producer_name=f"p{pid}", sequence_id=seq, publish_time=1)
                frames.extend(encode_send(pid, seq, md, b"%d-%d" % (pid, seq)))
        raw.writer.write(b"".join(frames))
        receipts = [
            (await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))).command
            for _ in range(12)
        ]
        assert sorted(appends) == sorted((t, 4) for t in topics)
        for pid in range(3):
            mine = [r for r in receipts if r.producer_id == pid]  # type: ignore[attr-defined]
            assert [r.sequence_id for r in mine] == [0, 1, 2, 3]  # type: ignore[attr-defined]
            ids = [r.message_id.entry_id for r in mine]  # type: ignore[attr-defined]
            assert ids == sorted(ids) and len(set(ids)) == 4


async def test_a_closed_connection_is_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    """Nothing of a connection stays after it ends, even on a broker whose cyclic collector
    seldom runs (the serving thresholds): closed, its objects go by reference counting. A
    cycle (the connection's auth pointing back at it) once held ~5 KB per connection."""
    gc.collect()
    gc.disable()
    try:
        async with running_broker(tmp_path) as broker:
            topic = new_topic()
            raws = [await AsyncRawClient.open(broker.port, handshake=False)]
            busy = await AsyncRawClient.open(broker.port)
            await busy.request(producer_cmd(busy, topic, 1))
            await busy.request(subscribe_cmd(busy, topic, 1))
            raws.append(busy)

            def open_connections() -> list[ServerConnection]:
                return [
                    o for o in gc.get_objects() if isinstance(o, ServerConnection) and not o.closed
                ]

            await wait_until_async(lambda: len(open_connections()) == 2, what="both accepted")
            served = [weakref.ref(c) for c in open_connections()]
            for raw in raws:
                await raw.close()
            await wait_until_async(
                lambda: all(ref() is None for ref in served),
                timeout_s=TIMEOUT_S,
                what="the closed connections freed by reference counting",
            )
    finally:
        gc.enable()


# --- duplicate ids on one connection ---------------------------------------------------------


async def test_duplicate_producer_id_pending_then_created(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        topic = new_topic()
        first = producer_cmd(raw, topic, 1, producer_name="p")
        second = producer_cmd(raw, topic, 1, producer_name="p")
        raw.send(first, second)  # the second arrives while the first is being created
        busy = await raw.answer(second.request_id)
        assert isinstance(busy, Error) and busy.error is ServerError.ServiceNotReady
        created = await raw.answer(first.request_id)
        assert isinstance(created, ProducerSuccess) and created.producer_name == "p"
        # creation finished: the same id gets PRODUCER_SUCCESS again, nothing new is made
        again = await raw.request(producer_cmd(raw, topic, 1, producer_name="other"))
        assert isinstance(again, ProducerSuccess) and again.producer_name == "p"
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None and len(loaded.producers) == 1
        await raw.close()


async def test_duplicate_consumer_id_pending_then_created(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        topic = new_topic()
        first, second = subscribe_cmd(raw, topic, 1), subscribe_cmd(raw, topic, 1)
        raw.send(first, second)
        busy = await raw.answer(second.request_id)
        assert isinstance(busy, Error) and busy.error is ServerError.ServiceNotReady
        assert isinstance(await raw.answer(first.request_id), Success)
        assert isinstance(await raw.request(subscribe_cmd(raw, topic, 1)), Success)
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None and len(loaded.subscriptions["s"].consumers) == 1
        await raw.close()


async def test_queued_producer_duplicate_close_and_disconnect(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        holder = await AsyncRawClient.open(broker.port)
        waiter = await AsyncRawClient.open(broker.port)
        held = await holder.request(
            producer_cmd(holder, topic, 1, producer_access_mode=ProducerAccessMode.Exclusive)
        )
        assert isinstance(held, ProducerSuccess)
        wait = ProducerAccessMode.WaitForExclusive
        queued = await waiter.request(producer_cmd(waiter, topic, 1, producer_access_mode=wait))
        assert isinstance(queued, ProducerSuccess) and not queued.producer_ready
        # still pending (queued): a second PRODUCER with that id is ServiceNotReady
        dup = await waiter.request(producer_cmd(waiter, topic, 1, producer_access_mode=wait))
        assert isinstance(dup, Error) and dup.error is ServerError.ServiceNotReady
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None and len(loaded.access.waiting) == 1
        # CLOSE_PRODUCER of a queued producer takes it out of the queue
        closed = await waiter.request(CloseProducer(producer_id=1, request_id=waiter.next_id()))
        assert isinstance(closed, Success)
        assert loaded.access.waiting == []
        # so when the holder leaves, nobody got the topic behind the client's back
        bye = await holder.request(CloseProducer(producer_id=1, request_id=holder.next_id()))
        assert isinstance(bye, Success)
        assert not loaded.producers and loaded.access.exclusive_producer_name is None
        assert not any(
            isinstance(f.command, ProducerSuccess) and f.command.producer_ready
            for f in waiter.inbox
        )
        # a queued producer whose connection drops leaves the queue too
        again = await holder.request(
            producer_cmd(holder, topic, 2, producer_access_mode=ProducerAccessMode.Exclusive)
        )
        assert isinstance(again, ProducerSuccess)
        other = await AsyncRawClient.open(broker.port)
        queued = await other.request(producer_cmd(other, topic, 1, producer_access_mode=wait))
        assert isinstance(queued, ProducerSuccess) and not queued.producer_ready
        assert len(loaded.access.waiting) == 1
        await other.close()
        await wait_until_async(lambda: loaded.access.waiting == [], timeout_s=TIMEOUT_S)
        for raw in (holder, waiter):
            await raw.close()


async def test_a_failed_write_disconnects_its_producer(tmp_path: Path) -> None:
    """As Pulsar's broker does, a producer whose write failed is disconnected
    (CLOSE_PRODUCER): a later SEND of it must not be stored before the client resends the
    failed one, or its order breaks and deduplication takes the resend for a duplicate of
    the later one (receipted, never stored). Found by the data-path simulation."""
    bookies: list[Bookie] = []
    async with running_broker(tmp_path, bookies=bookies, deduplication_enabled=True) as broker:
        topic = new_topic()
        raw = await AsyncRawClient.open(broker.port)
        await raw.request(producer_cmd(raw, topic, 1, producer_name="p"))

        def send(seq: int) -> None:
            md = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
            raw.writer.write(b"".join(encode_send(1, seq, md, b"x")))

        send(0)
        await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
        await bookies[0].stop()  # the only bookie: every write fails from here
        send(1)
        await raw.wait_for(lambda f: isinstance(f.command, SendError))
        closed = await raw.wait_for(lambda f: isinstance(f.command, CloseProducer))
        assert closed.command.producer_id == 1  # type: ignore[attr-defined]
        send(2)  # for a producer the broker closed: the connection goes
        assert await raw.closed_by_broker()
