"""The peer the issue measures unbatched publishing against: NATS JetStream, driven the way
``broker.py`` drives Magnetar, so that the two figures come from one run on one machine.

``nats-server -js`` (Debian's ``nats-server``, 2.9) runs with a file-backed stream on a
temporary directory (JetStream does not fsync each message; Magnetar's receipts do mean
fsynced). A raw pipelined publisher on one asyncio connection keeps a window of 500
publishes in flight, each with a reply subject, and counts the stream's publish
acknowledgements (``PubAck``: the message is stored); a push consumer on a second
connection (ack policy ``all``, acknowledged every 5 000 messages, as the Magnetar consumer
acknowledges cumulatively) counts deliveries. One message per publish, 100 B by default:
the same work as Magnetar's unbatched run. Both parsers read only what they need of each
protocol line; like Magnetar's generator, the client is not the bottleneck (its CPU per
message is printed).

Used by ``broker.py --nats``; runnable alone: ``python benchmarks/nats_peer.py [--seconds S]
[--size B]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

WINDOW = 500
WRITE_BATCH = 64
ACK_EVERY = 5_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsConnection(asyncio.Protocol):
    """The client side of NATS's text protocol: ``INFO``/``PING`` handled, ``MSG``/``HMSG``
    handed to ``on_msg(subject, reply, payload)``, ``-ERR`` raised."""

    def __init__(self, on_msg: Callable[[bytes, bytes, bytes], None]) -> None:
        self.on_msg = on_msg
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.pong: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True}
        transport.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        while pos < end:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                words = line.split()
                size = int(words[-1])
                if eol + 2 + size + 2 > end:
                    break
                payload = bytes(buf[eol + 2 : eol + 2 + size])
                reply = words[3] if len(words) == (6 if words[0] == b"HMSG" else 5) else b""
                pos = eol + 2 + size + 2
                self.on_msg(words[1], reply, payload)
                continue
            pos = eol + 2
            if line == b"PING":
                assert self.transport is not None
                self.transport.write(b"PONG\r\n")
            elif line == b"PONG":
                if not self.pong.done():
                    self.pong.set_result(None)
            elif line.startswith(b"-ERR"):
                raise SystemExit(f"nats-server: {line.decode()}")
        del buf[:pos]

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


async def connect(port: int, on_msg: Callable[[bytes, bytes, bytes], None]) -> NatsConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: NatsConnection(on_msg), "127.0.0.1", port)
    await asyncio.wait_for(conn.pong, 10)
    return conn


async def api_request(port: int, subject: str, body: dict[str, object]) -> dict[str, object]:
    """One JetStream API request (stream or consumer creation); raises on an API error."""
    answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    conn = await connect(port, lambda _s, _r, payload: answer.set_result(payload))
    data = json.dumps(body).encode()
    conn.write(
        b"SUB _INBOX.api 1\r\nPUB %s _INBOX.api %d\r\n%s\r\n" % (subject.encode(), len(data), data)
    )
    reply = json.loads(await asyncio.wait_for(answer, 10))
    assert conn.transport is not None
    conn.transport.close()
    if "error" in reply:
        raise SystemExit(f"JetStream API {subject}: {reply['error']}")
    return dict(reply)


async def run_jetstream(port: int, seconds: float, size: int) -> dict[str, float]:
    """Publish for ``seconds`` with a window of publishes in flight while a push consumer
    drains the stream; returns the end-to-end rates and the client's CPU per message."""
    stream = f"BENCH{time.time_ns()}"
    subject = f"bench.{stream}"
    await api_request(port, f"$JS.API.STREAM.CREATE.{stream}",
                      {"name": stream, "subjects": [subject], "storage": "file"})  # fmt: skip
    deliver = f"deliver.{stream}"
    await api_request(
        port,
        f"$JS.API.CONSUMER.CREATE.{stream}",
        {"stream_name": stream,
         "config": {"deliver_subject": deliver, "ack_policy": "all", "deliver_policy": "all",
                    "max_ack_pending": 4 * ACK_EVERY}},
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    all_acked: asyncio.Future[None] = loop.create_future()
    received = 0
    since_ack = 0
    target = -1

    def on_delivery(_subject: bytes, reply: bytes, _payload: bytes) -> None:
        nonlocal received, since_ack
        received += 1
        since_ack += 1
        if since_ack >= ACK_EVERY:
            since_ack = 0
            cons.write(b"PUB %s 0\r\n\r\n" % reply)  # ack all up to this one
        if received == target and not finished.done():
            finished.set_result(None)

    cons = await connect(port, on_delivery)
    cons.write(f"SUB {deliver} 1\r\n".encode())
    sent = 0
    acked = 0
    stopping = False
    publish = b"PUB %s _INBOX.acks %d\r\n%s\r\n" % (subject.encode(), size, b"x" * size)

    def send(count: int) -> None:
        nonlocal sent
        sent += count
        prod.write(publish * count)

    def on_ack(_subject: bytes, _reply: bytes, payload: bytes) -> None:
        nonlocal acked
        if b'"error"' in payload:
            raise SystemExit(f"publish refused: {payload.decode()}")
        acked += 1
        if not stopping:
            room = WINDOW - (sent - acked)
            if room >= WRITE_BATCH:
                send(room)
        elif acked == sent and not all_acked.done():
            all_acked.set_result(None)

    prod = await connect(port, on_ack)
    prod.write(b"SUB _INBOX.acks 1\r\nPING\r\n")
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    send(WINDOW)
    await asyncio.sleep(seconds)
    stopping = True
    if acked < sent:
        await asyncio.wait_for(all_acked, 60)
    produce_s = time.perf_counter() - t0
    target = sent
    if received < target:
        await asyncio.wait_for(finished, 60)
    consume_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    for c in (prod, cons):
        assert c.transport is not None
        c.transport.close()
    return {
        "nats_unbatched_produce_msg_per_s": sent / produce_s,
        "nats_unbatched_consume_msg_per_s": received / consume_s,
        "nats_generator_cpu_us_per_msg": cpu_s / max(sent, 1) * 1e6,
    }


def measure_nats(seconds: float, size: int) -> dict[str, float]:
    """Start ``nats-server -js`` on a free port over a temporary store, run
    :func:`run_jetstream`, stop it. Exits with one line when ``nats-server`` is missing."""
    server = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
    )
    if server is None:
        raise SystemExit("nats-server not found: install it (Debian: apt-get install nats-server)")
    port = free_port()
    with tempfile.TemporaryDirectory() as store:
        proc = subprocess.Popen(
            [server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("nats-server did not start") from None
                    time.sleep(0.05)
            return uvloop.run(run_jetstream(port, seconds, size))
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    for k, v in measure_nats(args.seconds, args.size).items():
        print(f"{k:44} {v:14.3f}")


if __name__ == "__main__":
    main()
