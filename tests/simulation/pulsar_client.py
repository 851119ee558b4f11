"""Simulated Pulsar clients: a producer and a consumer speaking the binary protocol (the
project's codec, :mod:`magnetar.protocol`) to the real broker over simulated connections
(:mod:`magnetar.testing.simulation.stream`).

Each keeps going the way Pulsar's clients do: on a lost connection, a CLOSE_PRODUCER /
CLOSE_CONSUMER, a SEND_ERROR or a failed request, it connects again, to whichever broker
the simulation names as the topic's owner now (a lookup), after a short backoff.

* :class:`SimProducer` names itself (``user_provided_producer_name``) and numbers its
  messages 0, 1, 2, ...; what is not yet receipted is resent, in order and with the same
  sequence ids, on every new connection (deduplication drops what was stored already).
  Each attempt's metadata carries the term of the broker it went to (as the partition
  key), so the stored log says which owner wrote each entry.
* :class:`SimConsumer` holds an Exclusive subscription from the earliest entry, grants
  permits with FLOW and acknowledges what it receives, individually or cumulatively.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.managed_ledger.position import Position
from magnetar.protocol import (
    PROTOCOL_VERSION,
    Ack,
    AckType,
    CloseConsumer,
    CloseProducer,
    Command,
    Connect,
    Connected,
    Error,
    Flow,
    Frame,
    FrameDecoder,
    Message,
    MessageId,
    MessageMetadata,
    Producer,
    ProducerSuccess,
    SendError,
    SendReceipt,
    Subscribe,
    SubType,
    Success,
    encode,
    encode_send,
)
from magnetar.protocol.command import InitialPosition
from magnetar.testing.simulation import SimulatedNetwork
from magnetar.testing.simulation.stream import StreamTransport, open_stream

REQUEST_TIMEOUT_S = 0.5
BACKOFF_S = (0.005, 0.05)
PERMITS = 20


@dataclass
class Broker:
    """A broker the clients can reach: its node name, term and service."""

    name: str
    term: int
    service: BrokerService


class Gone(Exception):
    """The connection, producer or consumer is gone: connect again."""


class ClientConnection(asyncio.Protocol):
    """The client's end of one connection: requests by id, frames handed to a callback."""

    def __init__(self, on_frame: Callable[[Frame], None]) -> None:
        self._decoder = FrameDecoder()
        self._on_frame = on_frame
        self._requests: dict[int, asyncio.Future[Command]] = {}
        self._ids = itertools.count(1)
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: StreamTransport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, StreamTransport)
        self.transport = transport
        self.send(Connect(client_version="sim", protocol_version=PROTOCOL_VERSION))

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in [self.connected, self.lost, *self._requests.values()]:
            if not fut.done():
                fut.set_exception(Gone("connection lost"))
                fut.exception()  # retrieved: nobody need be waiting for it
        self._requests.clear()

    def data_received(self, data: bytes) -> None:
        self._decoder.feed_each(data, self._frame)

    def _frame(self, frame: Frame) -> None:
        if self.closed:
            return  # what arrives after the client closed the connection is not read
        cmd = frame.command
        if isinstance(cmd, Connected):
            if not self.connected.done():
                self.connected.set_result(None)
        elif isinstance(cmd, (ProducerSuccess, Success, Error)):
            fut = self._requests.pop(cmd.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
        else:
            self._on_frame(frame)

    @property
    def is_open(self) -> bool:
        return not self.lost.done()

    def send(self, command: Command) -> None:
        if self.transport is not None and self.is_open:
            self.transport.write(encode(command))

    def write(self, buffers: list[bytes | memoryview]) -> None:
        if self.transport is not None and self.is_open:
            self.transport.writelines(buffers)

    async def request(self, make: Callable[[int], Command]) -> Command:
        """Send the command ``make(request_id)`` and wait for its answer (Gone if none in
        time or the connection went)."""
        rid = next(self._ids)
        fut: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self._requests[rid] = fut
        self.send(make(rid))
        try:
            return await asyncio.wait_for(fut, REQUEST_TIMEOUT_S)
        except TimeoutError:
            raise Gone("request timed out") from None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None and self.is_open:
            self.transport.close()


class SimClient:
    """What the producer and the consumer share: connecting to the current owner."""

    def __init__(
        self,
        name: str,
        network: SimulatedNetwork,
        rng: random.Random,
        owner: Callable[[], Broker | None],
    ) -> None:
        self.name = name
        self._network = network
        self._rng = rng
        self._owner = owner
        self.conn: ClientConnection | None = None
        self.broker: Broker | None = None
        self.connections = 0
        self.stopped = False

    async def connect(self) -> tuple[ClientConnection, Broker]:
        """A connection on which CONNECTED arrived, to the owner named now (retrying)."""
        while True:
            broker = self._owner()
            if broker is not None and self._network.connected(self.name, broker.name):
                conn = ClientConnection(self.on_frame)
                open_stream(
                    self._network, self.name, conn, broker.name, ServerConnection(broker.service)
                )
                self.connections += 1
                try:
                    await asyncio.wait_for(asyncio.shield(conn.connected), REQUEST_TIMEOUT_S)
                except (Gone, TimeoutError):
                    conn.close()
                else:
                    self.conn, self.broker = conn, broker
                    return conn, broker
            await asyncio.sleep(self._rng.uniform(*BACKOFF_S))

    def on_frame(self, frame: Frame) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        """Close the connection (to connect again)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def reset(self) -> bool:
        """The simulation resets this client's connection; whether there was one."""
        conn = self.conn
        if conn is None or conn.transport is None or not conn.is_open:
            return False
        conn.transport.reset()
        return True

    async def backoff(self) -> None:
        await asyncio.sleep(self._rng.uniform(*BACKOFF_S))


class SimProducer(SimClient):
    """See the module docstring. ``receipted`` maps each receipted sequence id to its
    receipt's position (``None`` for a duplicate's receipt, which names no position)."""

    def __init__(
        self,
        name: str,
        topic: str,
        network: SimulatedNetwork,
        rng: random.Random,
        owner: Callable[[], Broker | None],
        rate_hz: float,
        on_receipt: Callable[[SimProducer, int, Position | None], None],
    ) -> None:
        super().__init__(name, network, rng, owner)
        self.topic = topic
        self.rate_hz = rate_hz
        self.next_seq = 0
        self.pending: dict[int, bytes] = {}
        """Sent, not yet receipted: sequence id → payload, in order."""
        self.receipted: dict[int, Position | None] = {}
        self.errors = 0
        self.violations: list[str] = []
        """Receipts out of order (the broker answers each producer's sends in order)."""
        self._on_receipt = on_receipt
        self._broken: asyncio.Event | None = None

    def payload(self, seq: int) -> bytes:
        return f"{self.name}:{seq}".encode()

    async def run(self) -> None:
        rng = self._rng
        while not self.stopped:
            conn, broker = await self.connect()
            self._broken = broken = asyncio.Event()
            try:
                answer = await conn.request(
                    lambda rid: Producer(
                        topic=self.topic, producer_id=1, request_id=rid, producer_name=self.name
                    )
                )
            except Gone:
                answer = None
            if not isinstance(answer, ProducerSuccess):
                self.drop()
                await self.backoff()
                continue
            for seq in list(self.pending):  # resend what is not receipted, in order
                self._send(conn, broker, seq)
            while conn.is_open and not broken.is_set() and not self.stopped:
                await asyncio.sleep(rng.expovariate(self.rate_hz))
                if len(self.pending) >= 16 or not conn.is_open or broken.is_set():
                    continue
                seq = self.next_seq
                self.next_seq += 1
                self.pending[seq] = self.payload(seq)
                self._send(conn, broker, seq)
            self.drop()
            await self.backoff()

    def _send(self, conn: ClientConnection, broker: Broker, seq: int) -> None:
        metadata = MessageMetadata(
            producer_name=self.name,
            sequence_id=seq,
            publish_time=1,
            partition_key=str(broker.term),
        )
        conn.write(encode_send(1, seq, metadata, self.pending[seq]))

    def on_frame(self, frame: Frame) -> None:
        cmd = frame.command
        if isinstance(cmd, SendReceipt):
            seq = cmd.sequence_id
            if seq not in self.pending:
                return  # a receipt for a resend of what was receipted already
            first = next(iter(self.pending))
            if seq != first:
                self.violations.append(f"{self.name}: receipt for {seq} before {first}")
            del self.pending[seq]
            mid = cmd.message_id
            pos = (
                None if mid is None or mid.ledger_id < 0 else Position(mid.ledger_id, mid.entry_id)
            )
            self.receipted[seq] = pos
            self._on_receipt(self, seq, pos)
        elif isinstance(cmd, (SendError, CloseProducer)):
            # Pulsar's clients close the connection on both, reconnect and resend
            self.errors += isinstance(cmd, SendError)
            self.drop()
            if self._broken is not None:
                self._broken.set()


class SimConsumer(SimClient):
    """See the module docstring. ``on_message(consumer, position)`` sees every MESSAGE."""

    def __init__(
        self,
        name: str,
        topic: str,
        subscription: str,
        network: SimulatedNetwork,
        rng: random.Random,
        owner: Callable[[], Broker | None],
        on_message: Callable[[SimConsumer, Broker, Position], None],
    ) -> None:
        super().__init__(name, network, rng, owner)
        self.topic = topic
        self.subscription = subscription
        self.received = 0
        self._on_message = on_message
        self._broken: asyncio.Event | None = None
        self._unacked: list[MessageId] = []
        self._permits = 0

    async def run(self) -> None:
        rng = self._rng
        while not self.stopped:
            conn, _ = await self.connect()
            self._broken = broken = asyncio.Event()
            try:
                answer = await conn.request(
                    lambda rid: Subscribe(
                        topic=self.topic,
                        subscription=self.subscription,
                        sub_type=SubType.Exclusive,
                        consumer_id=1,
                        request_id=rid,
                        initial_position=InitialPosition.Earliest,
                    )
                )
            except Gone:
                answer = None
            if not isinstance(answer, Success):
                self.drop()
                await self.backoff()
                continue
            self._unacked = []
            self._permits = PERMITS
            conn.send(Flow(consumer_id=1, message_permits=PERMITS))
            while conn.is_open and not broken.is_set() and not self.stopped:
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                self._acknowledge(conn)
                if self._permits <= PERMITS // 2:
                    conn.send(Flow(consumer_id=1, message_permits=PERMITS - self._permits))
                    self._permits = PERMITS
            self.drop()
            await self.backoff()

    def _acknowledge(self, conn: ClientConnection) -> None:
        unacked, self._unacked = self._unacked, []
        if not unacked:
            return
        rng = self._rng
        if rng.random() < 0.3:
            conn.send(Ack(consumer_id=1, ack_type=AckType.Cumulative, message_id=(unacked[-1],)))
            return
        chosen = tuple(mid for mid in unacked if rng.random() < 0.8)
        if chosen:
            conn.send(Ack(consumer_id=1, ack_type=AckType.Individual, message_id=chosen))

    def on_frame(self, frame: Frame) -> None:
        cmd = frame.command
        if isinstance(cmd, Message):
            self.received += 1
            self._permits -= 1
            mid = cmd.message_id
            self._unacked.append(MessageId(mid.ledger_id, mid.entry_id))
            assert self.broker is not None
            self._on_message(self, self.broker, Position(mid.ledger_id, mid.entry_id))
        elif isinstance(cmd, CloseConsumer) and self._broken is not None:
            self._broken.set()


__all__ = ["Broker", "SimConsumer", "SimProducer"]
