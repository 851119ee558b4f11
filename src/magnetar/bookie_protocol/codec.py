"""Sans-IO codec of the bookie protocol: bytes in, typed frames out, and back.

Wire format of one frame (big-endian)::

    +----------------+-----------------+----------------------+-----------------+
    | frame_size u32 | header_size u32 | header (protobuf)    | payload bytes   |
    +----------------+-----------------+----------------------+-----------------+
      frame_size = 4 + header_size + len(payload)

The header is a ``magnetar.bookie.Request`` (client → bookie) or ``Response`` (bookie →
client), see ``bookie.proto`` next to this module; their ``op`` is an :class:`OpType` and a
response's ``status`` a :class:`Status`. The payload is the entry body of ADD_ENTRY requests
and of READ_ENTRY / RECOVERY_READ responses, the bodies concatenated for ADD_ENTRIES requests
and READ_ENTRIES responses. Requests and responses are matched by
``request_id``; a connection carries any number of requests in flight for any ledgers.

The decoders never buffer more than one frame beyond what was fed: a frame announcing more
than ``frame_size_max_bytes`` raises :class:`~magnetar.common.errors.FrameTooLarge` before
any of it is buffered, and a header that does not parse raises
:class:`~magnetar.common.errors.ProtocolError`. Both mean: close the connection.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from google.protobuf.message import DecodeError

from magnetar.common.errors import FrameTooLarge, ProtocolError
from magnetar.common.lazy_module import lazy_module
from magnetar.protocol.frame import DEFAULT_MAX_MESSAGE_SIZE_BYTES, FRAME_PADDING_BYTES

if TYPE_CHECKING:
    from magnetar.bookie_protocol import bookie_pb2 as pb
    from magnetar.bookie_protocol.bookie_pb2 import Request, Response
else:  # imported at the first request: an idle bookie holds no protobuf classes
    pb = lazy_module("magnetar.bookie_protocol.bookie_pb2")


def __getattr__(name: str) -> Any:
    """``Request`` and ``Response``, the generated header classes, imported at the first
    read of either (``codec.Request(...)``; a ``from`` import of them imports them then)."""
    if name in ("Request", "Response"):
        value = getattr(pb, name)
        globals()[name] = value  # later reads find it without this call
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OpType(enum.IntEnum):
    """What a request asks (``Request.op``, echoed in ``Response.op``); values as on the wire
    (the ``OpType`` enum of ``bookie.proto``)."""

    OP_UNKNOWN = 0
    ADD_ENTRY = 1
    READ_ENTRY = 2
    READ_LAC = 3
    FENCE = 4
    RECOVERY_READ = 5
    LEDGER_INFO = 6
    READ_ENTRIES = 7
    ADD_ENTRIES = 8


class Status(enum.IntEnum):
    """How a request ended (``Response.status``); values as on the wire (the ``Status`` enum of
    ``bookie.proto``). Every status but OK maps to one error class
    (:func:`magnetar.bookie_protocol.errors.error_for_status`)."""

    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    READ_ONLY = 4
    TOO_LARGE = 5
    BAD_REQUEST = 6
    INTERNAL_ERROR = 7


ENTRY_SIZE_MAX_BYTES: Final = DEFAULT_MAX_MESSAGE_SIZE_BYTES + FRAME_PADDING_BYTES
"""Largest entry a bookie stores by default, and the ledger client's default limit: a
message of the broker's default max size plus the frame padding Pulsar allows for its
metadata (BookKeeper's ``nettyMaxFrameSizeBytes`` as Pulsar configures it, 5 MiB + 10 KiB).
A chunk of a chunked message is that large."""

FRAME_PREFIX: Final = struct.Struct(">II")
FRAME_SIZE_MAX_BYTES: Final = 6 * 1024 * 1024
"""Default frame limit: the default entry size limit (5 MiB) plus room for the header."""

_U32: Final = struct.Struct(">I")


def encode_frame(header: bytes, payload: bytes = b"") -> list[bytes]:
    """The frame as a list of buffers for ``transport.writelines`` (the payload is not
    copied)."""
    prefix = FRAME_PREFIX.pack(4 + len(header) + len(payload), len(header))
    if payload:
        return [prefix, header, payload]
    return [prefix + header]


def encode_frame_parts(header: bytes, payloads: Sequence[bytes]) -> list[bytes]:
    """The frame of ``header`` whose payload is ``payloads`` concatenated, as buffers for
    ``transport.writelines`` (no payload is copied)."""
    prefix = FRAME_PREFIX.pack(4 + len(header) + sum(map(len, payloads)), len(header))
    return [prefix, header, *payloads]


def split_bodies(payload: bytes, sizes: Sequence[int]) -> list[bytes]:
    """The bodies of a payload that concatenates them (ADD_ENTRIES requests, READ_ENTRIES
    responses): the first ``sizes[0]`` bytes, the next ``sizes[1]``, ... The caller checks
    that the sizes add up to the payload's length."""
    bodies: list[bytes] = []
    start = 0
    for size in sizes:
        end = start + size
        bodies.append(payload[start:end])
        start = end
    return bodies


def encode_request(request: pb.Request, payload: bytes = b"") -> list[bytes]:
    return encode_frame(request.SerializeToString(), payload)


def encode_response(response: pb.Response, payload: bytes = b"") -> list[bytes]:
    return encode_frame(response.SerializeToString(), payload)


class FrameDecoder:
    """Splits a byte stream into ``(header bytes, payload bytes)`` frames.

    Feed it whatever the transport delivered; it returns every frame completed so far, in
    order. Returned bytes belong to the caller.
    """

    def __init__(self, frame_size_max_bytes: int = FRAME_SIZE_MAX_BYTES) -> None:
        self._buf = bytearray()
        self._frame_size_max_bytes = frame_size_max_bytes

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        buf = self._buf
        buf += data
        frames: list[tuple[bytes, bytes]] = []
        pos = 0
        end = len(buf)
        limit = self._frame_size_max_bytes
        while end - pos >= 8:
            frame_size, header_size = FRAME_PREFIX.unpack_from(buf, pos)
            if frame_size > limit:
                raise FrameTooLarge(f"frame of {frame_size} bytes exceeds {limit}")
            if header_size > frame_size - 4:
                raise ProtocolError(f"header size {header_size} exceeds frame size {frame_size}")
            if end - pos - 4 < frame_size:
                break
            h = pos + 8
            p = h + header_size
            q = pos + 4 + frame_size
            frames.append((bytes(buf[h:p]), bytes(buf[p:q])))
            pos = q
        if pos:
            del buf[:pos]
        return frames


class RequestDecoder:
    """Bytes in, ``(Request, payload)`` out: the bookie side of a connection."""

    def __init__(self, frame_size_max_bytes: int = FRAME_SIZE_MAX_BYTES) -> None:
        self._frames = FrameDecoder(frame_size_max_bytes)

    def feed(self, data: bytes) -> list[tuple[pb.Request, bytes]]:
        out: list[tuple[pb.Request, bytes]] = []
        for header, payload in self._frames.feed(data):
            request = pb.Request()
            try:
                request.ParseFromString(header)
            except DecodeError as exc:
                raise ProtocolError(f"malformed request header: {exc}") from exc
            out.append((request, payload))
        return out


class ResponseDecoder:
    """Bytes in, ``(Response, payload)`` out: the client side of a connection."""

    def __init__(self, frame_size_max_bytes: int = FRAME_SIZE_MAX_BYTES) -> None:
        self._frames = FrameDecoder(frame_size_max_bytes)

    def feed(self, data: bytes) -> list[tuple[pb.Response, bytes]]:
        out: list[tuple[pb.Response, bytes]] = []
        for header, payload in self._frames.feed(data):
            response = pb.Response()
            try:
                response.ParseFromString(header)
            except DecodeError as exc:
                raise ProtocolError(f"malformed response header: {exc}") from exc
            out.append((response, payload))
        return out


__all__ = [
    "ENTRY_SIZE_MAX_BYTES",
    "FRAME_SIZE_MAX_BYTES",
    "FrameDecoder",
    "OpType",
    "Request",
    "RequestDecoder",
    "Response",
    "ResponseDecoder",
    "Status",
    "encode_frame",
    "encode_frame_parts",
    "encode_request",
    "encode_response",
    "split_bodies",
]
