"""Broker throughput, latency, CPU per message, start-up time and memory of ``magnetar standalone``.

The load generator is not the bottleneck: like ``pulsar-perf`` it builds SEND frames itself
with our codec (``encode_payload_command`` around one pre-built entry; batches made with
``build_batch``: 100 messages of 100 B per SEND), pipelines them on a raw asyncio connection
with a bounded window (frames written together, at most 64 SENDs per write), and a raw
consumer on another connection counts MESSAGE frames, grants permits and acknowledges
cumulatively. Generator and consumer run in this process on uvloop. The official wheel's rate is measured beside it.

Reported: standalone ready time and resident memory; produce and end-to-end consume rates
(batched and unbatched); publish latency percentiles at half the maximum unbatched rate;
broker CPU seconds per message (``/proc/<pid>/stat`` utime+stime over the run). Usage::

    python benchmarks/broker.py [--seconds S] [--wheel-messages N]

Writes ``benchmarks/results/broker.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import uvloop

from magnetar.protocol import (
    Ack,
    AckType,
    CommandType,
    Connect,
    Flow,
    FrameDecoder,
    Message,
    MessageId,
    MessageMetadata,
    Pong,
    Producer,
    SendReceipt,
    Subscribe,
    SubType,
    encode,
    encode_payload_command,
)
from magnetar.protocol.batch import build_batch
from magnetar.protocol.command import Send
from magnetar.protocol.entry import build_entry
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


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Conn(asyncio.Protocol):
    """A raw connection: frames go to ``on_frame``."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.frames: asyncio.Queue[object] = asyncio.Queue()
        self.on_frame = lambda frame: self.frames.put_nowait(frame)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
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


async def connect(port: int) -> Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
    assert conn.transport is not None
    conn.transport.write(encode(Connect(client_version="bench", protocol_version=20)))
    await asyncio.wait_for(conn.frames.get(), 30)
    return conn


def entry_for(batched: bool) -> tuple[list[bytes | memoryview], int]:
    now = int(time.time() * 1000)
    if batched:
        payload = build_batch([(SingleMessageMetadata(), PAYLOAD)] * BATCH)
        md = MessageMetadata(
            producer_name="bench", sequence_id=0, publish_time=now, num_messages_in_batch=BATCH
        )
        return build_entry(md, payload), BATCH
    md = MessageMetadata(producer_name="bench", sequence_id=0, publish_time=now)
    return build_entry(md, PAYLOAD), 1


async def run_raw(
    port: int, topic: str, batched: bool, seconds: float, rate_limit_sends: float | None = None
) -> dict[str, float]:
    """Produce for ``seconds`` while a consumer drains; returns rates and latencies."""
    entry, per_send = entry_for(batched)
    prod = await connect(port)
    cons = await connect(port)
    await cons.request(
        Subscribe(topic=topic, subscription="bench", sub_type=SubType.Exclusive,
                  consumer_id=1, request_id=1)
    )  # fmt: skip
    await prod.request(Producer(topic=topic, producer_id=1, request_id=2))
    permits = 20_000 if not batched else 200_000
    assert cons.transport is not None and prod.transport is not None
    cons.transport.write(encode(Flow(consumer_id=1, message_permits=permits)))
    received = 0
    granted = 0
    last_id: MessageId | None = None
    acked_at = 0

    def on_message(frame: object) -> None:
        nonlocal received, granted, last_id, acked_at
        cmd = frame.command  # type: ignore[attr-defined]
        if not isinstance(cmd, Message):
            return
        received += per_send
        granted += per_send
        last_id = cmd.message_id
        if granted >= permits // 2:
            assert cons.transport is not None
            cons.transport.write(encode(Flow(consumer_id=1, message_permits=granted)))
            granted = 0
        if received - acked_at >= permits // 4:
            acked_at = received
            assert cons.transport is not None
            cons.transport.write(
                encode(Ack(consumer_id=1, ack_type=AckType.Cumulative, message_id=(last_id,)))
            )

    cons.on_frame = on_message
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    window = asyncio.Semaphore(WINDOW_SENDS)
    done_sends = 0

    def on_receipt(frame: object) -> None:
        nonlocal done_sends
        cmd = frame.command  # type: ignore[attr-defined]
        if isinstance(cmd, SendReceipt):
            t = sent_at.pop(cmd.sequence_id, None)
            if t is not None and rate_limit_sends is not None:
                latencies.append(time.perf_counter() - t)
            done_sends += 1
            window.release()
        else:
            print("producer got", cmd)

    prod.on_frame = on_receipt
    write = prod.transport.writelines
    # Frames are gathered and written together (at most WRITE_BATCH_SENDS, and always before
    # waiting), like the broker's own output: one system call per message would make the
    # generator, not the broker, the bottleneck on two shared cores.
    out: list[bytes | memoryview] = []
    seq = itertools.count()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    deadline = t0 + seconds
    interval = None if rate_limit_sends is None else 1 / rate_limit_sends
    next_at = t0
    while True:
        now = time.perf_counter()
        if now >= deadline:
            break
        if interval is not None:
            if now < next_at:
                if out:
                    write(out)
                    out = []
                await asyncio.sleep(next_at - now)
            next_at += interval
        if window.locked() and out:
            write(out)
            out = []
        await window.acquire()
        s = next(seq)
        sent_at[s] = time.perf_counter()
        out.extend(
            encode_payload_command(Send(producer_id=1, sequence_id=s, num_messages=per_send), entry)
        )
        if len(out) >= 2 * WRITE_BATCH_SENDS:
            write(out)
            out = []
    if out:
        write(out)
    sent = next(seq)
    while done_sends < sent:
        await asyncio.sleep(0.01)
    produce_s = time.perf_counter() - t0
    target = sent * per_send
    drain_deadline = time.perf_counter() + 60
    while received < target and time.perf_counter() < drain_deadline:
        await asyncio.sleep(0.01)
    consume_s = time.perf_counter() - t0
    generator_cpu_s = time.process_time() - cpu0
    for c in (prod, cons):
        assert c.transport is not None
        c.transport.close()
    out = {
        "messages": float(target),
        "produce_msg_per_s": target / produce_s,
        "consume_msg_per_s": received / consume_s,
        "generator_cpu_us_per_msg": generator_cpu_s / max(target, 1) * 1e6,
    }
    if latencies:
        latencies.sort()
        out["publish_latency_p50_ms"] = statistics.median(latencies) * 1000
        out["publish_latency_p99_ms"] = latencies[int(len(latencies) * 0.99) - 1] * 1000
        out["rate_sends_per_s"] = float(rate_limit_sends or 0)
    return out


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


def start_profile(directory: Path | None, pid: int, name: str) -> subprocess.Popen[bytes] | None:
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--threads", "--nonblocking", "--rate", "400",
         "-o", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--wheel-messages", type=int, default=20_000, help="0: skip the wheel")
    parser.add_argument(
        "--modes", default="batched,unbatched,latency", help="comma-separated subset to run"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="record the broker with py-spy during each raw run (collapsed stacks in this dir)",
    )
    args = parser.parse_args()
    modes = set(args.modes.split(","))
    # The load generator allocates per frame like the broker does: keep the collector from
    # rescanning in-flight objects every 700 allocations (it was ~10% of its CPU).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        node = StandaloneProcess(Path(tmp) / "data")
        t0 = time.perf_counter()
        node.start()
        results["standalone_ready_s"] = time.perf_counter() - t0
        assert node.proc is not None
        pid = node.proc.pid
        results["standalone_rss_mb_idle"] = rss_mb(pid)
        try:
            for batched in (True, False):
                if ("batched" if batched else "unbatched") not in modes:
                    continue
                key = "batched" if batched else "unbatched"
                c0 = cpu_s(pid)
                spy = start_profile(args.profile, pid, key)
                r = uvloop.run(run_raw(node.port, f"raw-{key}", batched, args.seconds))
                stop_profile(spy)
                results[f"{key}_produce_msg_per_s"] = r["produce_msg_per_s"]
                results[f"{key}_consume_msg_per_s"] = r["consume_msg_per_s"]
                results[f"{key}_broker_cpu_us_per_msg"] = (cpu_s(pid) - c0) / r["messages"] * 1e6
                results[f"{key}_generator_cpu_us_per_msg"] = r["generator_cpu_us_per_msg"]
            if "latency" in modes and "unbatched_produce_msg_per_s" in results:
                half = results["unbatched_produce_msg_per_s"] / 2
                r = uvloop.run(run_raw(node.port, "raw-latency", False, args.seconds, half))
                results["latency_rate_msg_per_s"] = half
                results["publish_latency_p50_ms"] = r["publish_latency_p50_ms"]
                results["publish_latency_p99_ms"] = r["publish_latency_p99_ms"]
            if args.wheel_messages:
                results.update(run_wheel(node.url, args.wheel_messages))
            results["standalone_rss_mb_after"] = rss_mb(pid)
        finally:
            node.stop()
    for k, v in results.items():
        print(f"{k:36} {v:14.3f}")
    out = Path(__file__).parent / "results" / "broker.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
