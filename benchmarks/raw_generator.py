"""The raw-protocol load generator of the benchmarks: SEND frames built around one
pre-built entry, a window of SENDs in flight per connection topped up from receipts, raw
consumers that grant permits and acknowledge cumulatively, publish latencies when
rate-limited (``run_raw``). Shared by ``broker.py``, ``omb.py``, ``topics.py`` and
``console.py``.

Like ``pulsar-perf`` the generator builds SEND frames itself, with the command's few bytes
written by hand and checked against our codec, and reads receipts and messages by their
command type only: about 2-3 us of its CPU per message, so it is not the bottleneck. Its own
garbage collector is off during every timed phase (:func:`collector_paused`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import struct
import time
from collections.abc import Callable, Iterator
from typing import cast

from omb_rate import CONTROL_PERIOD_S, RateController  # this directory: the script's own

from magnetar.protocol import (
    Ack,
    AckType,
    CommandType,
    Connect,
    Flow,
    Frame,
    FrameDecoder,
    Message,
    MessageMetadata,
    Pong,
    Producer,
    Subscribe,
    SubType,
    encode,
    encode_payload_command,
)
from magnetar.protocol.batch import build_batch
from magnetar.protocol.command import Send
from magnetar.protocol.entry import build_entry
from magnetar.protocol.hand_encoders import _uvarint as uvarint  # the codec's own varint
from magnetar.protocol.metadata import SingleMessageMetadata

PAYLOAD = b"x" * 100
BATCH = 100
WINDOW_SENDS = 500  # below the broker's 1000 pending SENDs per connection
WRITE_BATCH_SENDS = 64
_PONG = Pong()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The generator's cyclic garbage collector off for a timed phase: a collection of
    this process's heap stops its event loop for milliseconds (10-11 ms measured at 37.5 k
    msg/s with the default thresholds), its sends then go out in one burst, and the
    burst's wait shows as the broker's publish latency. What the phase allocates is freed
    by reference counting; cycles wait for the collector's next run after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Conn(asyncio.Protocol):
    """A raw connection: frames go to ``on_frame``."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.frames: asyncio.Queue[object] = asyncio.Queue()
        self.on_frame = lambda frame: self.frames.put_nowait(frame)
        self.hook: Callable[[bytes], None] | None = None
        """Once set, every received chunk goes here instead (the measured phase)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.hook is not None:
            self.hook(data)
            return
        for frame in self.decoder.feed(data):
            if frame.command.TYPE is CommandType.PING:
                assert self.transport is not None
                self.transport.write(encode(_PONG))
            else:
                self.on_frame(frame)

    async def request(self, command: object) -> object:
        assert self.transport is not None
        self.transport.write(encode(command))  # type: ignore[arg-type]
        while True:
            frame = await asyncio.wait_for(self.frames.get(), 30)
            if getattr(frame.command, "request_id", None) == command.request_id:  # type: ignore[attr-defined]
                return frame.command  # type: ignore[attr-defined]


async def connect(port: int, host: str = "127.0.0.1") -> Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Conn, host, port)
    assert conn.transport is not None
    conn.transport.write(encode(Connect(client_version="bench", protocol_version=20)))
    await asyncio.wait_for(conn.frames.get(), 30)
    return conn


def entry_for(size: int, batched: bool) -> tuple[bytes, int]:
    """One stored entry (metadata + payload, contiguous) and the messages it holds."""
    now = int(time.time() * 1000)
    payload = b"x" * size
    if batched:
        batch = build_batch([(SingleMessageMetadata(), payload)] * BATCH)
        md = MessageMetadata(
            producer_name="bench", sequence_id=0, publish_time=now, num_messages_in_batch=BATCH
        )
        return b"".join(build_entry(md, batch)), BATCH
    md = MessageMetadata(producer_name="bench", sequence_id=0, publish_time=now)
    return b"".join(build_entry(md, payload)), 1


class SendFrames:
    """SEND frames around one pre-built entry, the command written by hand (a few bytes
    around two varints) so that building a frame costs the generator well under a
    microsecond. Checked against the codec's own encoder when made."""

    def __init__(self, entry: bytes, per_send: int) -> None:
        self.entry = entry
        self.per_send = per_send
        # BaseCommand{type=SEND; send{producer_id, sequence_id, num_messages}}
        self._tail = b"" if per_send == 1 else b"\x18" + uvarint(per_send)
        for pid, seq in ((1, 0), (3, 300), (2, 1 << 40)):
            expected = b"".join(
                encode_payload_command(
                    Send(producer_id=pid, sequence_id=seq, num_messages=per_send), [entry]
                )
            )
            assert b"".join(self.frame(pid, seq)) == expected, "hand-built SEND differs"

    def frame(self, producer_id: int, sequence_id: int) -> tuple[bytes, bytes]:
        send = b"\x08" + uvarint(producer_id) + b"\x10" + uvarint(sequence_id) + self._tail
        cmd = b"\x08\x06\x32" + uvarint(len(send)) + send
        return _U32X2.pack(4 + len(cmd) + len(self.entry), len(cmd)) + cmd, self.entry


_U32X2 = struct.Struct(">II")
_U32 = struct.Struct(">I")
_TYPE_SEND_RECEIPT = int(CommandType.SEND_RECEIPT)
_TYPE_MESSAGE = int(CommandType.MESSAGE)
_TYPE_PING = int(CommandType.PING)
_PONG_FRAME = encode(_PONG)


class LeanFrames:
    """Splits a byte stream into frames and reads only the command type (the byte after
    BaseCommand's first tag; every type used here is below 128). ``on_frame(type, frame)``
    sees each frame as a memoryview; PINGs are answered."""

    def __init__(self, transport: asyncio.Transport, on_frame: Callable[[int, memoryview], None]):
        self.transport = transport
        self.on_frame = on_frame
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        view = memoryview(buf)
        pos = 0
        end = len(buf)
        unpack = _U32.unpack_from
        on_frame = self.on_frame
        while end - pos >= 4:
            (size,) = unpack(buf, pos)
            if end - pos - 4 < size:
                break
            kind = buf[pos + 9]
            if kind == _TYPE_PING:
                self.transport.write(_PONG_FRAME)
            else:
                on_frame(kind, view[pos : pos + 4 + size])
            pos += 4 + size
        view.release()
        del buf[:pos]


def decode_one(frame: memoryview) -> Frame:
    (decoded,) = FrameDecoder().feed(bytes(frame))
    return decoded


async def run_raw(
    port: int,
    topics: list[str],
    frames: SendFrames,
    seconds: float,
    rate_limit_sends: float | None = None,
    consume: bool = True,
    *,
    host: str = "127.0.0.1",
    subscriptions: int = 1,
    publish_latencies: list[float] | None = None,
    on_delivery: Callable[[memoryview], None] | None = None,
    drain_s: float = 60.0,
    undrained_ok: bool = False,
    ack_every: int | None = None,
    connections: int = 1,
    rate_controller: RateController | None = None,
    warmup_s: float = 0.0,
    on_warmup_end: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Produce round-robin to ``topics`` for ``seconds`` while a consumer drains every one;
    returns rates, the generator's CPU per message and, when rate-limited, publish
    latencies (SEND written → SEND_RECEIPT read; receipts of one producer come in order).

    The producers are spread over ``connections`` connections (topic ``i`` on connection
    ``i mod connections``, as a Pulsar client with ``connectionsPerBroker`` spreads them),
    each with its own window of ``WINDOW_SENDS`` in flight (below the broker's pending
    limit per connection); with a rate, each connection sends its share of it. The
    consumers likewise, over as many connections of their own.
    ``subscriptions`` per topic (``bench``, ``bench-1``, ...) each receive every message
    (fan-out: the consume rate counts deliveries; at most 127 consumers in all);
    ``publish_latencies``, when given, receives every SEND's latency in seconds, rate-limited
    or not; ``on_delivery`` sees every MESSAGE frame. The consumers wait at most ``drain_s``
    for the last message after the producer's last receipt, then raise TimeoutError, or
    with ``undrained_ok`` report the messages still undelivered (``undrained_messages``).
    Each consumer acknowledges cumulatively every ``ack_every`` messages (a quarter of its
    permits by default); deliveries beyond the messages sent show as ``excess_deliveries``.

    With a ``rate_controller`` (and ``rate_limit_sends`` its starting rate), the rate is
    adjusted every :data:`~omb_rate.CONTROL_PERIOD_S` from the messages receipted and
    received so far (OMB's search for the maximum sustainable rate). After ``warmup_s``
    (then ``on_warmup_end`` runs: clear what was collected) the run goes on for
    ``seconds``, and the rates are those of that window."""
    per_send = frames.per_send
    n = len(topics)
    prods = [await connect(port, host) for _ in range(max(1, min(connections, n)))]
    consumers = n * subscriptions if consume else 0
    assert consumers < 128, "consumer ids are read as one byte"
    conses = [await connect(port, host) for _ in range(max(1, min(connections, consumers)))]
    for i, topic in enumerate(topics, 1):
        if consume:
            for s in range(subscriptions):
                await conses[(s * n + i - 1) % len(conses)].request(
                    Subscribe(topic=topic, subscription=f"bench-{s}" if s else "bench",
                              sub_type=SubType.Exclusive, consumer_id=s * n + i,
                              request_id=100 + s * n + i)
                )  # fmt: skip
        await prods[(i - 1) % len(prods)].request(
            Producer(topic=topic, producer_id=i, request_id=200 + i)
        )
    cons_writes = [c.transport.write for c in conses if c.transport is not None]
    permits = 20_000 if per_send == 1 else 200_000
    ack_at = permits // 4 if ack_every is None else ack_every
    for i in range(1, consumers + 1):
        cons_writes[(i - 1) % len(conses)](encode(Flow(consumer_id=i, message_permits=permits)))
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    # --- consumer: count MESSAGE frames, grant permits, ack cumulatively now and then ---
    received = 0
    granted = [0] * (consumers + 1)
    consumed_at = [0] * (consumers + 1)
    target = -1

    def on_message(cons_write: Callable[[bytes], None], kind: int, frame: memoryview) -> None:
        nonlocal received
        if kind != _TYPE_MESSAGE:
            print("consumer got", decode_one(frame).command)
            return
        if on_delivery is not None:
            on_delivery(frame)
        received += per_send
        cmd = None
        # BaseCommand{type=MESSAGE; message(len < 128){consumer_id(< 128), ...}}
        assert frame[11] < 0x80 and frame[12] == 0x08
        cid = frame[13]
        granted[cid] += per_send
        consumed_at[cid] += per_send
        if granted[cid] >= permits // 2:
            cons_write(encode(Flow(consumer_id=cid, message_permits=granted[cid])))
            granted[cid] = 0
        if consumed_at[cid] >= ack_at:
            consumed_at[cid] = 0
            cmd = decode_one(frame).command
            assert isinstance(cmd, Message) and cmd.consumer_id == cid
            cons_write(
                encode(Ack(consumer_id=cid, ack_type=AckType.Cumulative,
                           message_id=(cmd.message_id,)))
            )  # fmt: skip
        if received >= target >= 0 and not finished.done():
            finished.set_result(None)

    for cons, cons_write in zip(conses, cons_writes, strict=True):
        assert cons.transport is not None
        cons.hook = LeanFrames(cons.transport, functools.partial(on_message, cons_write)).feed

    # --- producers: per connection, a window of SENDs in flight, topped up from receipts ---
    latencies: list[float] = [] if publish_latencies is None else publish_latencies
    limited = rate_limit_sends is not None
    timed = limited or publish_latencies is not None
    stopping = False
    all_acked = loop.create_future()
    producing = [
        _Producing(conn, list(range(c + 1, n + 1, len(prods))), frames, timed, latencies)
        for c, conn in enumerate(prods)
    ]

    def on_receipts(p: _Producing, data: bytes) -> None:
        p.lean.feed(data)
        if not limited and not stopping:
            room = WINDOW_SENDS - (p.sent - p.acked)
            if room >= WRITE_BATCH_SENDS:
                p.send(room)
        if (
            stopping
            and p.acked == p.sent
            and not all_acked.done()
            and all(q.acked == q.sent for q in producing)
        ):
            all_acked.set_result(None)

    for p in producing:
        p.conn.hook = functools.partial(on_receipts, p)

    window_start = (0.0, 0, 0)  # (time, SENDs receipted, messages received)

    def warmed_up() -> None:
        nonlocal window_start
        window_start = (time.perf_counter(), sum(p.acked for p in producing), received)
        latencies.clear()
        if on_warmup_end is not None:
            on_warmup_end()

    with collector_paused():
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        window_start = (t0, 0, 0)
        rate = rate_limit_sends or 0.0
        if warmup_s > 0:
            loop.call_later(warmup_s, warmed_up)
        if limited:
            assert rate_limit_sends is not None
            # every millisecond, write what is due (a timer per message would be the bottleneck)
            deadline = t0 + warmup_s + seconds
            allowed = [0.0] * len(producing)
            last = control_at = t0
            while (now := time.perf_counter()) < deadline:
                share = rate / len(producing)
                for i, p in enumerate(producing):
                    # at most 0.1 s behind: a lower rate is not held to an old debt
                    allowed[i] = min(allowed[i] + (now - last) * share, p.sent + share / 10)
                    due = min(int(allowed[i]) - p.sent, WINDOW_SENDS - (p.sent - p.acked))
                    if due > 0:
                        p.send(due)
                last = now
                if rate_controller is not None and now - control_at >= CONTROL_PERIOD_S:
                    published = sum(p.acked for p in producing) * per_send
                    rate = (
                        rate_controller.next_rate(
                            rate * per_send, now - control_at, published, received
                        )
                        / per_send
                    )
                    control_at = now
                await asyncio.sleep(0.001)
        else:
            for p in producing:
                p.send(WINDOW_SENDS)
            await asyncio.sleep(warmup_s + seconds)
        window_end = (time.perf_counter(), sum(p.acked for p in producing), received)
        stopping = True
        if any(p.acked < p.sent for p in producing):
            await asyncio.wait_for(all_acked, 60)
        produce_s = time.perf_counter() - t0
        produced = sum(p.sent for p in producing) * per_send
        target = produced * subscriptions
        if received < target and consume:
            try:
                await asyncio.wait_for(finished, drain_s)
            except TimeoutError:
                if not undrained_ok:
                    raise
        consume_s = time.perf_counter() - t0
    generator_cpu_s = time.process_time() - cpu0
    for c in (*prods, *conses):
        assert c.transport is not None
        c.transport.close()
    result = {
        "messages": float(produced),
        "produce_msg_per_s": produced / produce_s,
        "consume_msg_per_s": received / consume_s,
        "generator_cpu_us_per_msg": generator_cpu_s / max(produced, 1) * 1e6,
    }
    if warmup_s > 0:  # the window's rates, not the warm-up's nor the drain's
        span_s = window_end[0] - window_start[0]
        result["produce_msg_per_s"] = (window_end[1] - window_start[1]) * per_send / span_s
        result["consume_msg_per_s"] = (window_end[2] - window_start[2]) / span_s
    if rate_controller is not None:
        result["final_rate_msg_per_s"] = rate * per_send
    if consume and received < target:
        result["undrained_messages"] = float(target - received)
    if received > target:
        result["excess_deliveries"] = float(received - target)
    if latencies:
        latencies.sort()
        for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
            result[f"publish_latency_{name}_ms"] = latencies[int(len(latencies) * q) - 1] * 1000
    return result


class _Producing:
    """One producer connection of :func:`run_raw`: its producers' SENDs (round-robin over
    ``producer_ids``), what it has sent and had receipted, and each SEND's send time when
    ``timed`` (receipts of one connection come in the order of its SENDs)."""

    __slots__ = ("acked", "conn", "frame", "ids", "latencies", "lean", "send_times", "sent",
                 "timed", "write")  # fmt: skip

    def __init__(
        self,
        conn: Conn,
        producer_ids: list[int],
        frames: SendFrames,
        timed: bool,
        latencies: list[float],
    ) -> None:
        assert conn.transport is not None
        self.conn = conn
        self.ids = producer_ids
        self.frame = frames.frame
        self.timed = timed
        self.latencies = latencies
        self.send_times: collections.deque[float] = collections.deque()
        self.write = conn.transport.writelines
        self.lean = LeanFrames(conn.transport, self.on_receipt)
        self.sent = 0
        """SENDs written so far; the next one's sequence id."""
        self.acked = 0

    def send(self, count: int) -> None:
        if self.timed:
            self.send_times.extend([time.perf_counter()] * count)
        ids = self.ids
        k = len(ids)
        frame = self.frame
        sent = self.sent
        out: list[bytes] = []
        for s in range(sent, sent + count):
            out.extend(frame(ids[s % k], s))
        self.sent = sent + count
        self.write(out)

    def on_receipt(self, kind: int, data: memoryview) -> None:
        if kind != _TYPE_SEND_RECEIPT:
            raise SystemExit(f"producer got {decode_one(data).command}")
        self.acked += 1
        if self.timed:
            self.latencies.append(time.perf_counter() - self.send_times.popleft())
