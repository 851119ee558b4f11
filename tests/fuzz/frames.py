"""A seeded generator of hostile binary-protocol input, and what a broker must answer.

A *case* is the bytes one client connection sends: usually a proper CONNECT, then a few
items, each one of: a valid frame of any command (from :data:`tests.protocol.samples.SAMPLES`,
with a fresh request id), the same mutated (bits flipped, bytes set, cut or inserted), a SEND
with a wrong checksum, a frame whose strings are not UTF-8, a frame of random bytes, a size
prefix beyond the limit, or a frame cut short (always last: the rest never comes).

:func:`expected_requests` decodes a case as the broker would (with our own decoder) and
names the request ids the broker must answer unless it closes the connection: those of the
frames that decode, up to the first malformed one (ACKs aside: see there).
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable
from typing import Any

# tests/ is on sys.path (pytest's rootdir-relative packages): the protocol tests' samples.
from protocol.samples import SAMPLES  # type: ignore[import-not-found]

import magnetar.protocol as p
from magnetar.common.errors import ProtocolError

CONNECT = p.encode(p.Connect(client_version="fuzz", protocol_version=20))

TOPIC = "persistent://public/default/fuzz"


def _with_fresh_ids(cmd: Any, rng: random.Random, request_id: int) -> Any:
    changes: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(cmd)}
    if "request_id" in fields:
        changes["request_id"] = request_id
    if "topic" in fields and isinstance(cmd.topic, str) and rng.random() < 0.7:
        changes["topic"] = f"{TOPIC}-{rng.randrange(4)}"  # a few real topics, reused
    return dataclasses.replace(cmd, **changes)


def frame_of(cmd: Any, payload: bytes = b"payload", *, checksum: bool = True) -> bytes:
    """The frame of ``cmd``; SEND and MESSAGE carry an entry around ``payload``."""
    if cmd.TYPE in p.PAYLOAD_COMMANDS:
        md = p.MessageMetadata(producer_name="fuzz", sequence_id=1, publish_time=1)
        entry = p.build_entry(md, payload, checksum=checksum)
        return b"".join(bytes(b) for b in p.encode_payload_command(cmd, entry))
    return p.encode(cmd)


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        # Mostly past the size prefix, so the frame still frames and the parser sees it.
        lo = 4 if len(data) > 8 and rng.random() < 0.9 else 0
        i = rng.randrange(lo, max(lo + 1, len(data)))
        op = rng.choice(("flip", "set", "cut", "insert"))
        if op == "flip" and i < len(data):
            data[i] ^= 1 << rng.randrange(8)
        elif op == "set" and i < len(data):
            data[i] = rng.randrange(256)
        elif op == "cut":
            del data[i : i + rng.randint(1, 8)]
        else:
            data[i:i] = rng.randbytes(rng.randint(1, 8))
    if lo and rng.random() < 0.8:  # keep the size prefix true to the mutated length
        struct.pack_into(">I", data, 0, len(data) - 4)
    return bytes(data)


def _bad_checksum(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    magic = data.find(b"\x0e\x01")
    if magic < 0:
        return frame
    data[magic + 2 + rng.randrange(4)] ^= 0xFF
    return bytes(data)


def _not_utf8(frame: bytes, rng: random.Random) -> bytes:
    """Replace one byte of an ASCII string of the frame with an invalid UTF-8 byte."""
    data = bytearray(frame)
    for text in (b"persistent://", b"public", b"fuzz", b"Pulsar", b"sub", b"t"):
        at = data.find(text, 8)
        if at >= 0:
            data[at + rng.randrange(len(text))] = rng.choice((0xFF, 0xC0, 0x80, 0xED))
            return bytes(data)
    return frame


def _random_frame(rng: random.Random, limit: int) -> bytes:
    body = rng.randbytes(rng.randint(0, 200))
    if rng.random() < 0.5 and len(body) >= 4:  # a plausible command size
        struct.pack_into(">I", body := bytearray(body), 0, rng.randint(0, len(body)))
    return struct.pack(">I", len(body)) + bytes(body)


@dataclasses.dataclass
class Case:
    """One connection's input: ``data`` is sent at once, then the socket is read."""

    data: bytes
    kinds: list[str]


def generate_case(rng: random.Random, frame_limit: int, request_ids: Callable[[], int]) -> Case:
    """One case; ``request_ids()`` gives request ids unique to the connection."""
    parts: list[bytes] = []
    kinds: list[str] = []
    if rng.random() < 0.9:
        parts.append(CONNECT)
        kinds.append("CONNECT")
    for _ in range(rng.randint(1, 5)):
        cmd, _ = rng.choice(SAMPLES)
        cmd = _with_fresh_ids(cmd, rng, request_ids())
        frame = frame_of(cmd)
        kind = rng.choices(
            ("valid", "mutated", "bad-checksum", "not-utf8", "random", "oversize", "truncated"),
            weights=(40, 25, 8, 10, 8, 3, 6),
        )[0]
        if kind == "mutated":
            frame = _mutate(frame, rng)
        elif kind == "bad-checksum":
            frame = _bad_checksum(frame_of(p.Send(producer_id=1, sequence_id=1)), rng)
        elif kind == "not-utf8":
            frame = _not_utf8(frame, rng)
        elif kind == "random":
            frame = _random_frame(rng, frame_limit)
        elif kind == "oversize":
            frame = struct.pack(">I", rng.randint(frame_limit - 3, (1 << 32) - 1))
        elif kind == "truncated":
            frame = frame[: rng.randrange(len(frame))]
        parts.append(frame)
        kinds.append(f"{kind} {cmd.TYPE.name}")
        if kind in ("oversize", "truncated"):
            break  # nothing after it can be framed
    return Case(b"".join(parts), kinds)


@dataclasses.dataclass(frozen=True)
class Request:
    """A request the broker must answer unless it closes the connection."""

    command: str


def expected_requests(data: bytes, frame_limit: int) -> dict[int, Request]:
    """Request id -> request, for the frames of ``data`` a broker decodes before the first
    malformed one: each must be answered unless the broker closes the connection.

    An ACK's receipt is only owed by a consumer that exists on the connection: Pulsar drops
    an ACK for any other consumer id, with or without a request id; ACKs are left out. A
    PRODUCER (SUBSCRIBE) followed by a CLOSE_PRODUCER (CLOSE_CONSUMER) of the same id is left
    out too: the close cancels a creation still under way, whose request Pulsar then never
    answers (the client stopped waiting for it when it sent the close).
    """
    out: dict[int, Request] = {}
    creating: dict[tuple[str, int], list[int]] = {}  # (kind, id) -> request ids
    pos = 0
    while len(data) - pos >= 4:
        end = pos + 4 + struct.unpack_from(">I", data, pos)[0]
        if end > len(data) or end - pos > frame_limit:
            break
        try:
            (frame,) = p.FrameDecoder(frame_limit).feed(data[pos:end])
        except ProtocolError:
            break
        cmd = frame.command
        rid = getattr(cmd, "request_id", None)
        if isinstance(cmd, p.Producer | p.Subscribe) and rid is not None:
            key = (
                ("producer", cmd.producer_id)
                if isinstance(cmd, p.Producer)
                else ("consumer", cmd.consumer_id)
            )
            creating.setdefault(key, []).append(rid)
        elif isinstance(cmd, p.CloseProducer | p.CloseConsumer):
            key = (
                ("producer", cmd.producer_id)
                if isinstance(cmd, p.CloseProducer)
                else ("consumer", cmd.consumer_id)
            )
            for cancelled in creating.pop(key, []):
                out.pop(cancelled, None)
        if rid is not None and not isinstance(cmd, p.Ack):
            out[rid] = Request(cmd.TYPE.name)
        pos = end
    return out
