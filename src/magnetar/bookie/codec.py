"""Sans-IO codec of the bookie protocol: bytes in, typed frames out, and back.

Wire format of one frame (big-endian)::

    +----------------+-----------------+----------------------+-----------------+
    | frame_size u32 | header_size u32 | header (protobuf)    | payload bytes   |
    +----------------+-----------------+----------------------+-----------------+
      frame_size = 4 + header_size + len(payload)

The header is a ``magnetar.bookie.Request`` (client → bookie) or ``Response`` (bookie →
client), see ``protocol/bookie.proto``. The payload is the entry body of ADD_ENTRY requests
and of READ_ENTRY / RECOVERY_READ responses. Requests and responses are matched by
``request_id``; a connection carries any number of requests in flight for any ledgers.

The decoders never buffer more than one frame beyond what was fed: a frame announcing more
than ``frame_size_max_bytes`` raises :class:`~magnetar.common.errors.FrameTooLarge` before
any of it is buffered, and a header that does not parse raises
:class:`~magnetar.common.errors.ProtocolError`. Both mean: close the connection.
"""

from __future__ import annotations

import struct
from typing import Final

from google.protobuf.message import DecodeError

from magnetar.bookie.protocol import bookie_pb2 as pb
from magnetar.common.errors import FrameTooLarge, ProtocolError

Request = pb.Request
Response = pb.Response
OpType = pb.OpType
Status = pb.Status

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
    "FRAME_SIZE_MAX_BYTES",
    "FrameDecoder",
    "OpType",
    "Request",
    "RequestDecoder",
    "Response",
    "ResponseDecoder",
    "Status",
    "encode_frame",
    "encode_request",
    "encode_response",
]
