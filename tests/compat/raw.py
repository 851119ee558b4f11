"""A minimal blocking binary-protocol client built on :mod:`magnetar.protocol`, for what the
official wheel cannot express (consumer priority levels, CONSUMER_STATS, topic epochs,
SENDs pipelined on the wire)."""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

from magnetar.protocol import (
    Command,
    Connect,
    Connected,
    FrameDecoder,
    MessageMetadata,
    Ping,
    Pong,
    Producer,
    encode,
    encode_send,
)
from magnetar.protocol.frame import Frame


def message_frame(producer_id: int, sequence_id: int, payload: bytes, **meta: Any) -> bytes:
    """One SEND frame (checksummed) with a fresh ``MessageMetadata``; ``meta`` are its fields
    (``producer_name`` defaults to "raw")."""
    md = MessageMetadata(
        producer_name=meta.pop("producer_name", "raw"),
        sequence_id=sequence_id,
        publish_time=int(time.time() * 1000),
        **meta,
    )
    return b"".join(encode_send(producer_id, sequence_id, md, payload))


class RawClient:
    """One connection; ``request`` sends a command and returns the answer to its
    ``request_id``; other frames are kept in ``inbox``."""

    def __init__(self, port: int, timeout_s: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.decoder = FrameDecoder()
        self.inbox: list[Frame] = []
        self._ids = itertools.count(1)
        self.timeout_s = timeout_s
        self.sock.sendall(encode(Connect(client_version="raw-test", protocol_version=20)))
        self.wait_for(lambda f: isinstance(f.command, Connected))

    def next_id(self) -> int:
        return next(self._ids)

    def close(self) -> None:
        self.sock.close()

    def send_command(self, command: Command) -> None:
        self.sock.sendall(encode(command))

    def send_message(self, producer_id: int, sequence_id: int, payload: bytes, **meta: Any) -> None:
        self.sock.sendall(message_frame(producer_id, sequence_id, payload, **meta))

    def send_bytes(self, data: bytes) -> None:
        """Raw bytes, e.g. several frames joined so they reach the broker in one segment."""
        self.sock.sendall(data)

    def create_producer(self, topic: str, producer_id: int, **fields: Any) -> Command:
        """PRODUCER; returns the first answer (PRODUCER_SUCCESS, maybe not ready, or ERROR)."""
        return self.request(
            Producer(topic=topic, producer_id=producer_id, request_id=self.next_id(), **fields)
        )

    def closed_by_broker(self) -> bool:
        """True once the broker closed this connection (reads until EOF or the timeout;
        frames read meanwhile stay in the inbox)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                self._read()
            except TimeoutError:  # the socket's own timeout: still open
                return False
            except OSError:  # ConnectionError included: EOF or reset
                return True
        return False

    def _read(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the broker")
        for frame in self.decoder.feed(data):
            if isinstance(frame.command, Ping):
                self.sock.sendall(encode(Pong()))
            else:
                self.inbox.append(frame)

    def wait_for(self, predicate: Any) -> Frame:
        """The first frame (oldest first) matching ``predicate``, removed from the inbox."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            for i, frame in enumerate(self.inbox):
                if predicate(frame):
                    return self.inbox.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no matching frame; inbox {[f.command for f in self.inbox]}")
            self._read()

    def request(self, command: Command) -> Command:
        """Send ``command`` and return the first frame answering its request id."""
        self.send_command(command)
        rid = command.request_id  # type: ignore[attr-defined]
        return self.wait_for(lambda f: getattr(f.command, "request_id", None) == rid).command
