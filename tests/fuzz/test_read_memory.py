"""Memory held for frames being read, against a real ``magnetar standalone`` process over
raw sockets (issue 14, item 3): frames that end in a protocol error leave nothing behind,
half-sent frames are bounded broker-wide and dropped when overdue, and the broker still
serves the official client afterwards.

``MAGNETAR_LONG_TESTS=1`` runs the issue's sizes (100 and 150 connections).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from magnetar.protocol import Connect, MessageMetadata, encode, encode_send
from magnetar.testing import StandaloneProcess, wait_until

from .process import MIB, pid_of, produce_and_consume, rss_bytes, wait_for_rss_below, warm_up

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
ERROR_CONNECTIONS = 100 if LONG else 30
HALF_FRAME_CONNECTIONS = 150 if LONG else 50
OVERSIZE_CONNECTIONS = 1500 if LONG else 300
CONNECT = encode(Connect(client_version="memory-test", protocol_version=20))
FRAME_BYTES = 4 * MIB


def send_frame(payload_bytes: int) -> bytes:
    md = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    return b"".join(encode_send(1, 0, md, b"x" * payload_bytes))


def closed_by_broker(sock: socket.socket, timeout_s: float = 20) -> bool:
    """Read until EOF (True) or ``timeout_s`` without it (False)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset
        pass
    return True


def send_and_expect_close(port: int, data: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        try:
            sock.sendall(data)
        except OSError:  # closed under our feet: what we expect, only sooner
            return True
        return closed_by_broker(sock)


def start_warm(
    factory: Callable[..., StandaloneProcess], *args: str
) -> tuple[StandaloneProcess, int]:
    """A standalone that has served one producer and consumer and one admin request (lazy
    imports, the admin app built after the ready line and the first topic's caches are in
    place), and its RSS then."""
    node = factory(*args)
    return node, warm_up(node)


def test_frames_ending_in_a_protocol_error_leave_no_memory_behind(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node, start = start_warm(standalone_factory)
    big_send = send_frame(FRAME_BYTES)
    garbage = struct.pack(">II", FRAME_BYTES - 4, 4) + b"\xff" * (FRAME_BYTES - 8)
    streams = (
        [big_send] * ERROR_CONNECTIONS  # SEND before CONNECT
        + [CONNECT + garbage] * ERROR_CONNECTIONS  # a frame that is no command
        + [CONNECT + big_send] * (ERROR_CONNECTIONS // 2)  # SEND for an unknown producer
    )
    with ThreadPoolExecutor(8) as pool:
        closed = list(pool.map(lambda data: send_and_expect_close(node.port, data), streams))
    assert all(closed), f"{closed.count(False)} connections were left open"
    wait_for_rss_below(node, int(start * 1.2))
    produce_and_consume(node.url)


def test_oversized_frames_leave_no_memory_behind(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    # A SEND announcing 6 MiB (the limit is 5 MiB + 10 KiB) is refused at its size prefix;
    # the read that carried the prefix used to stay referenced by the kept error.
    node, start = start_warm(standalone_factory)
    oversize = CONNECT + send_frame(6 * MIB)[: 256 * 1024]
    with ThreadPoolExecutor(8) as pool:
        closed = list(
            pool.map(
                lambda data: send_and_expect_close(node.port, data),
                [oversize] * OVERSIZE_CONNECTIONS,
            )
        )
    assert all(closed), f"{closed.count(False)} connections were left open"
    wait_for_rss_below(node, int(start * 1.2))
    produce_and_consume(node.url)


def test_half_sent_frames_are_bounded_and_dropped_when_overdue(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    budget_bytes = 16 * MIB
    node, start = start_warm(
        standalone_factory,
        "--partial-frame-bytes-max", str(budget_bytes),
        "--partial-frame-timeout-ms", "3000",
    )  # fmt: skip
    pid = pid_of(node)
    # Each connection announces a 5 MiB frame and sends 2 MiB of it (as much as the socket
    # takes without blocking), then nothing.
    head = CONNECT + struct.pack(">II", 5 * MIB - 4, 100)
    socks = []
    try:
        for _ in range(HALF_FRAME_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", node.port))
            socks.append(sock)
            sock.sendall(head)
            sock.setblocking(False)
            body = memoryview(bytes(2 * MIB))
            try:
                while body:
                    body = body[sock.send(body) :]
            except BlockingIOError:
                pass
        peak = rss_bytes(pid)

        def all_closed() -> bool:
            nonlocal peak
            peak = max(peak, rss_bytes(pid))
            return all(closed_by_broker(s, timeout_s=0.01) for s in socks)

        wait_until(all_closed, timeout_s=30, interval_s=0.1, what="overdue frames dropped")
    finally:
        for sock in socks:
            sock.close()
    # The budget, plus the one frame always read on, plus what each connection read before
    # it was stopped (one read of at most 256 KiB), plus slack for the connections.
    bound = budget_bytes + 5 * MIB + HALF_FRAME_CONNECTIONS * MIB // 4 + 40 * MIB
    assert peak - start <= bound, f"{(peak - start) / MIB:.0f} MiB held for partial frames"
    wait_for_rss_below(node, int(start * 1.2))
    produce_and_consume(node.url)
