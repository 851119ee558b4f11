"""Broker throughput, latency, CPU per message, start-up time and memory of ``magnetar standalone``.

The load generator is not the bottleneck (about 2-3 us of its CPU per message): like
``pulsar-perf`` it builds SEND frames itself, around one pre-built entry (a batch of 100
messages, or one message), with the command's few bytes written by hand and checked against
our codec; it keeps a window of 500 SENDs in flight on a raw asyncio connection, topped up
as receipts arrive, and reads receipts and messages by their command type only. A raw
consumer on another connection drains every partition (exclusive subscription), granting
permits and acknowledging cumulatively. Generator and consumer share this process (uvloop);
the broker and its bookie are the standalone process.

Matrix: 100 B and 1 KiB messages, unbatched and batched, 1 and 4 partitions (maximum rates,
produced and consumed end to end, with the broker's and the generator's CPU per message);
publish latency p50/p99/p99.9 at half the maximum unbatched rate of one partition (SEND
written to receipt read), measured once the broker is idle again, with the disk's own
fdatasync latency (p50/p99 of 4 KiB write + sync, just before: the floor under it); the official wheel's
rates beside them; standalone ready time and resident memory (idle at start, the peak of
each phase and of all, and settled after each pass: ``--repeat N`` runs the matrix N times
on new topics against the same standalone, so growth across passes shows). Usage::

    python benchmarks/broker.py [--seconds S] [--sizes 100,1024] [--partitions 1,4]
        [--modes unbatched,batched,latency] [--wheel-messages N] [--repeat N] [--profile DIR]
        [--compare-to TREE [--rounds N]] [--latency-rate MSG_PER_S] [--nats]

Writes ``benchmarks/results/broker.json``. With ``--compare-to`` (a checkout's directory, or
a commit of this repository, exported with ``git archive``) the standalone of that tree and
this one's run the matrix in turn, ``--rounds`` times each (old, new, old, new, ...: a
shared machine's drift hits both alike; the latency runs of both use the rate of the first
pass); it prints a before/after table of the medians with their ratio and writes
``benchmarks/results/broker-compare.json`` (every pass's figures too). Both trees run on
this virtualenv's interpreter and packages. ``--nats`` also runs the issue's peer, NATS
JetStream (``nats_peer.py``: the same window of unbatched 100 B publishes, end to end), once
per pass, and prints Magnetar's unbatched and batched rates as ratios to it.

``--modes latency --latency-rate 37500 --compare-to TREE --rounds N`` measures publish
latency alone, on a fresh standalone each pass (once its start-up work is done), the two
trees alternating. The generator's own garbage collector is off during every timed phase:
its pauses would show as the broker's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import gc
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import uvloop
from nats_peer import measure_nats  # this directory: the script's own

from magnetar.bookie.gc_tuning import tune_gc_for_serving
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
from magnetar.testing import StandaloneProcess

PAYLOAD = b"x" * 100
BATCH = 100
WINDOW_SENDS = 500  # below the broker's 1000 pending SENDs per connection
WRITE_BATCH_SENDS = 64
CLK_TCK = os.sysconf("SC_CLK_TCK")
_PONG = Pong()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sys_cpu_s(pid: int) -> float:
    """The kernel's share of :func:`cpu_s` (system calls, loopback TCP, page faults)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / CLK_TCK


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


def wait_quiet(pid: int, timeout_s: float = 30.0) -> None:
    """Until the broker has been (nearly) idle for half a second: the storage work a
    maximum-rate run leaves behind (checkpoints, ledger roll-overs) is done, so the latency
    run measures the broker at the rate asked, not the tail of the previous run."""
    deadline = time.monotonic() + timeout_s
    before = cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_s(pid)
        if now - before < 0.05:  # under 10% of a core
            return
        before = now


def disk_sync_ms(directory: Path, seconds: float = 1.0) -> dict[str, float]:
    """The disk's own floor under publish latency, measured beside it: ``seconds`` of 4 KiB
    writes each followed by an fdatasync, 1 ms apart, into a zero-filled file in
    ``directory`` (as the journal writes its preallocated files); p50 and p99 in ms. A
    receipt waits for at least one such sync, and for the one in flight when its SEND came:
    on a shared virtual disk whose p99 is milliseconds, that bounds the publish p99 from
    below whatever the broker does."""
    path = directory / "disk-sync-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(8 * 1024 * 1024))
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        block = b"x" * 4096
        syncs: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and len(syncs) < 2000:  # 8 MiB
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            syncs.append(time.perf_counter() - t0)
            time.sleep(0.001)
    finally:
        os.close(fd)
        path.unlink()
    syncs.sort()
    return {
        "p50": syncs[len(syncs) // 2] * 1000,
        "p99": syncs[int(len(syncs) * 0.99) - 1] * 1000,
    }


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the standalone's journal writer among them)."""
    out = [pid]
    for parent in out:
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                out.extend(int(c) for c in children.read_text().split())
            except OSError:  # the thread or process ended meanwhile
                continue
    return out


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of ``pid`` (``VmHWM``: its peak so far) plus what its descendants
    (the journal's writer process) hold of their own: their anonymous resident memory. The
    interpreter's file pages they map are the ones ``pid`` maps, counted once."""
    total_kb = _status_kb(pid, field)
    for child in process_tree(pid)[1:]:
        total_kb += _status_kb(child, "RssAnon")
    return total_kb / 1024


def _status_kb(pid: int, field: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # it ended meanwhile
        return 0
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def settled_rss_mb(pid: int, timeout_s: float = 30.0) -> float:
    """Resident memory once it stops falling (caches drained, freed heap returned by the
    standalone's trimmer): two readings a second apart within 2 % of each other."""
    deadline = time.monotonic() + timeout_s
    last = rss_mb(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss_mb(pid)
        if now >= last * 0.98:
            return now
        last = now
    return last


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
    permits by default); deliveries beyond the messages sent show as ``excess_deliveries``."""
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
    with collector_paused():
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        if limited:
            assert rate_limit_sends is not None
            # every millisecond, write what is due (a timer per message would be the bottleneck)
            deadline = t0 + seconds
            share = rate_limit_sends / len(producing)
            while (now := time.perf_counter()) < deadline:
                for p in producing:
                    due = min(int((now - t0) * share) - p.sent, WINDOW_SENDS - (p.sent - p.acked))
                    if due > 0:
                        p.send(due)
                await asyncio.sleep(0.001)
        else:
            for p in producing:
                p.send(WINDOW_SENDS)
            await asyncio.sleep(seconds)
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


def run_wheel(url: str, n: int) -> dict[str, float]:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=30)
    out: dict[str, float] = {}
    for batching in (False, True):
        key = "batched" if batching else "unbatched"
        topic = f"wheel-{key}-{time.time_ns()}"
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        producer = client.create_producer(
            topic, batching_enabled=batching, max_pending_messages=5000, block_if_queue_full=True,
            batching_max_messages=BATCH,
        )  # fmt: skip
        t0 = time.perf_counter()
        for _ in range(n):
            producer.send_async(PAYLOAD, None)
        producer.flush()
        out[f"wheel_produce_{key}_msg_per_s"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n):
            consumer.acknowledge(consumer.receive(10_000))
        out[f"wheel_consume_{key}_msg_per_s"] = n / (time.perf_counter() - t0)
    client.close()
    return out


def py_spy_path() -> Path:
    """The ``py-spy`` beside this interpreter (``--profile`` records with it; it is not one
    of the project's dependencies: ``pip install py-spy`` into the same environment)."""
    return Path(sys.executable).parent / "py-spy"


def start_profile(directory: Path | None, pid: int, name: str) -> subprocess.Popen[bytes] | None:
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(py_spy_path()), "record", "--pid", str(pid), "--format", "raw", "--threads", "--nonblocking", "--rate", "400",
         "-o", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def create_partitioned(http_url: str, topic: str, partitions: int) -> list[str]:
    """The partition topics of a new partitioned topic (created through the admin API)."""
    if partitions == 1:
        return [topic]
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/partitions"
    request = urllib.request.Request(url, data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    urllib.request.urlopen(request, timeout=30).close()
    return [f"persistent://public/default/{topic}-partition-{i}" for i in range(partitions)]


def reset_peak_rss(pid: int) -> bool:
    """Start ``VmHWM`` over from the current resident size (``clear_refs`` 5), so the next
    reading is the peak of the next phase only; False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def run_matrix(
    args: argparse.Namespace, node: StandaloneProcess, pid: int, suffix: str, tag: str
) -> dict[str, float]:
    """One pass of the matrix against ``node`` (topic names end in ``suffix``, so a repeated
    pass makes new topics, as a long-lived broker sees); adds each phase's peak resident
    memory as ``standalone_rss_mb_peak_<phase>``. ``tag`` ends the names of its profiles."""
    modes = set(args.modes.split(","))
    sizes = [int(x) for x in args.sizes.split(",")]
    partition_counts = [int(x) for x in args.partitions.split(",")]
    results: dict[str, float] = {}
    peaks_known = reset_peak_rss(pid)

    def phase_peak(key: str) -> None:
        if peaks_known:
            results[f"standalone_rss_mb_peak_{key}"] = rss_mb(pid, "VmHWM")
            reset_peak_rss(pid)

    # Unbatched runs and the latency runs first, batched last: a batched run writes
    # gigabytes, and the disk is still busy with them for a while after it ends.
    for kind in ("unbatched", "batched"):
        latency_too = kind == "unbatched" and "latency" in modes
        if kind not in modes and not latency_too:
            continue
        for size in sizes:
            frames = SendFrames(*entry_for(size, kind == "batched"))
            for partitions in partition_counts if kind in modes else ():
                key = f"{kind}_{size}B_{partitions}p"
                topics = create_partitioned(node.http_url, f"raw-{key}{suffix}", partitions)
                c0 = cpu_s(pid)
                s0 = sys_cpu_s(pid)
                spy = start_profile(args.profile, pid, key + tag)
                r = uvloop.run(run_raw(node.port, topics, frames, args.seconds))
                stop_profile(spy)
                results[f"{key}_produce_msg_per_s"] = r["produce_msg_per_s"]
                results[f"{key}_consume_msg_per_s"] = r["consume_msg_per_s"]
                results[f"{key}_broker_cpu_us_per_msg"] = (cpu_s(pid) - c0) / r["messages"] * 1e6
                results[f"{key}_broker_sys_cpu_us_per_msg"] = (
                    (sys_cpu_s(pid) - s0) / r["messages"] * 1e6
                )
                results[f"{key}_generator_cpu_us_per_msg"] = r["generator_cpu_us_per_msg"]
                phase_peak(key)
            half_key = f"unbatched_{size}B_1p_produce_msg_per_s"
            if latency_too and (size in args.latency_rate or half_key in results):
                # --latency-rate, or with --compare-to both trees at the same rate: half the
                # first maximum measured (args.latency_rate), else half of this run's
                half = args.latency_rate.get(size) or results[half_key] / 2
                key = f"latency_{size}B"
                wait_quiet(pid)
                for q, ms in disk_sync_ms(node.data_dir).items():
                    results[f"{key}_disk_fdatasync_{q}_ms"] = ms
                r = uvloop.run(
                    run_raw(node.port, [f"raw-{key}{suffix}"], frames, args.seconds, half)
                )
                results[f"{key}_rate_msg_per_s"] = half
                for q in ("p50", "p99", "p999"):
                    results[f"{key}_publish_{q}_ms"] = r[f"publish_latency_{q}_ms"]
                phase_peak(key)
    if args.wheel_messages:
        results.update(run_wheel(node.url, args.wheel_messages))
        phase_peak("wheel")
    return results


def start_standalone(data_dir: Path, src: Path | None) -> StandaloneProcess:
    """A started standalone over ``data_dir`` running the ``src`` directory of another
    source tree (None: this one's)."""
    node = StandaloneProcess(data_dir)
    saved_path = os.environ.get("PYTHONPATH")
    if src is not None:  # ahead of the editable install's path entry
        os.environ["PYTHONPATH"] = str(src)
    try:
        node.start()
    finally:
        if src is not None:
            if saved_path is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved_path
    return node


def measure(args: argparse.Namespace, src: Path | None) -> dict[str, float]:
    """``--repeat`` passes of the selected matrix against one fresh standalone; ``src`` is
    the ``src`` directory of another source tree to run the standalone from (None: this
    one)."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        node = start_standalone(Path(tmp) / "data", src)
        results["standalone_ready_s"] = time.perf_counter() - t0
        assert node.proc is not None
        pid = node.proc.pid
        results["standalone_rss_mb_idle"] = rss_mb(pid)
        # The start-up's tail (the functions worker's election, the admin API's first
        # request building its routes) is not the broker's per-message cost.
        wait_quiet(pid)
        tree = "" if src is None else "-before"
        peak_mb = 0.0
        try:
            for run in range(1, args.repeat + 1):
                # The first pass's figures keep their plain names; later passes add _run<N>.
                tag = "" if run == 1 else f"_run{run}"
                figures = run_matrix(args, node, pid, tag.replace("_", "-"), tag + tree)
                results.update({f"{k}{tag}": v for k, v in figures.items()})
                peak_mb = max(
                    [peak_mb, rss_mb(pid, "VmHWM")]
                    + [v for k, v in figures.items() if k.startswith("standalone_rss_mb_peak_")]
                )
                wait_quiet(pid)
                results[f"standalone_rss_mb_settled_run{run}"] = settled_rss_mb(pid)
            results["standalone_rss_mb_peak"] = peak_mb
            results["standalone_rss_mb_settled"] = results[
                f"standalone_rss_mb_settled_run{args.repeat}"
            ]
        finally:
            node.stop()
    return results


def source_tree(spec: str, tmp: Path) -> Path:
    """The ``src`` directory of ``spec``: a checkout (a directory holding ``src/magnetar``)
    or a commit of this repository, exported to ``tmp`` with ``git archive``."""
    given = Path(spec)
    if (given / "src" / "magnetar").is_dir():
        return (given / "src").resolve()
    repo = Path(__file__).resolve().parent.parent
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", spec, "src"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise SystemExit(
            f"--compare-to {spec}: neither a checkout nor a commit ({exc.stderr.decode().strip()})"
        ) from None
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    if (tmp / "src" / "magnetar" / "protocol" / "_cframe.c").exists():
        build_c_codec(repo, spec, tmp)
    return tmp / "src"


def build_c_codec(repo: Path, spec: str, tmp: Path) -> None:
    """Builds the commit's optional C codec in place, as ``pip install`` would, so the old
    tree runs the same codec a user's install of it would."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        blob = subprocess.run(
            ["git", "-C", str(repo), "show", f"{spec}:{name}"], check=True, capture_output=True
        ).stdout
        (tmp / name).write_bytes(blob)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp, check=True, capture_output=True,
    )  # fmt: skip


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compare(args: argparse.Namespace) -> dict[str, object]:
    """``--rounds`` passes of the matrix against the old tree and this one, alternating
    (old, new, old, new, ...: drift of a shared machine hits both alike); prints each
    figure's median for both and the ratio of the medians."""
    before: list[dict[str, float]] = []
    after: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        src = source_tree(args.compare_to, Path(tmp))
        for i in range(args.rounds):
            for label, tree, runs in (("before", src, before), ("after", None, after)):
                print(f"round {i + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
                runs.append(measure(args, tree))
                if args.nats:
                    runs[-1].update(nats_figures(args, runs[-1]))
                if not args.latency_rate:  # one rate for both trees, from the first run
                    sizes = [int(x) for x in args.sizes.split(",")]
                    for size in sizes:
                        key = f"unbatched_{size}B_1p_produce_msg_per_s"
                        if key in runs[-1]:
                            args.latency_rate[size] = runs[-1][key] / 2
    keys = [k for k in after[0] if all(k in r for r in before + after)]
    heading = f"figure (median of {args.rounds} rounds)"
    print(f"{heading:44} {'before':>12} {'after':>12} {'after/before':>13}")
    table: dict[str, object] = {"compare_to": args.compare_to, "rounds": args.rounds}
    for k in keys:
        b = median([r[k] for r in before])
        a = median([r[k] for r in after])
        ratio = a / b if b else float("nan")
        print(f"{k:44} {b:12.3f} {a:12.3f} {ratio:13.2f}")
        table[k] = {"before": b, "after": a, "before_runs": [r[k] for r in before],
                    "after_runs": [r[k] for r in after]}  # fmt: skip
    return table


def nats_figures(args: argparse.Namespace, results: dict[str, float]) -> dict[str, float]:
    """NATS JetStream's unbatched rate (first size) measured now, and Magnetar's rates of
    ``results`` (one partition) as ratios to it."""
    size = int(args.sizes.split(",")[0])
    nats = measure_nats(args.seconds, size)
    base = nats["nats_unbatched_produce_msg_per_s"]
    for kind in ("unbatched", "batched"):
        key = f"{kind}_{size}B_1p_produce_msg_per_s"
        if key in results:
            nats[f"{kind}_{size}B_1p_produce_vs_nats"] = results[key] / base
    return nats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--wheel-messages", type=int, default=20_000, help="0: skip the wheel")
    parser.add_argument("--sizes", default="100,1024", help="message sizes in bytes")
    parser.add_argument("--partitions", default="1,4", help="partition counts")
    parser.add_argument(
        "--modes",
        default="batched,unbatched,latency",
        help="comma-separated subset: batched, unbatched (maximum rates), latency (at half "
        "the maximum unbatched rate, one partition; alone, at --latency-rate on a fresh "
        "standalone)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes of the matrix against the same standalone, each on new topics; the "
        "settled resident memory after each (standalone_rss_mb_settled_run<N>) shows growth",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="record the broker with py-spy during each raw run (collapsed stacks in this dir)",
    )
    parser.add_argument(
        "--compare-to",
        default=None,
        metavar="TREE",
        help="also run the standalone of another source tree (a checkout's directory, or a "
        "commit of this repository), alternating with this one, and print both side by side",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="with --compare-to: passes of each tree"
    )
    parser.add_argument(
        "--nats",
        action="store_true",
        help="also measure NATS JetStream (nats-server -js) unbatched, in the same run, and "
        "print Magnetar's rates as ratios to it",
    )
    parser.add_argument(
        "--latency-rate",
        dest="fixed_latency_rate",
        type=float,
        default=None,
        metavar="MSG_PER_S",
        help="measure publish latency at this rate (every size) instead of half the maximum "
        "unbatched rate measured (with --compare-to: half the first tree's first maximum)",
    )
    args = parser.parse_args()
    if args.profile is not None and not py_spy_path().exists():
        parser.error(
            f"--profile needs py-spy in this environment ({py_spy_path()}): pip install py-spy"
        )
    modes = set(args.modes.split(","))
    if "latency" in modes and "unbatched" not in modes and args.fixed_latency_rate is None:
        parser.error("--modes latency without unbatched needs --latency-rate")
    args.latency_rate = {}  # per size; filled from the first run unless fixed
    if args.fixed_latency_rate is not None:
        args.latency_rate = {int(x): args.fixed_latency_rate for x in args.sizes.split(",")}
    tune_gc_for_serving()  # the generator's per-message objects too: off the collector
    out = Path(__file__).parent / "results" / "broker.json"
    out.parent.mkdir(exist_ok=True)
    if args.compare_to is not None:
        table = compare(args)
        out.with_name("broker-compare.json").write_text(json.dumps(table, indent=2) + "\n")
        return
    results = measure(args, None)
    if args.nats:
        results.update(nats_figures(args, results))
    for k, v in results.items():
        print(f"{k:44} {v:14.3f}")
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
