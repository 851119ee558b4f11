"""Framing: bytes <-> typed commands, sans I/O.

Wire format (all integers big-endian)::

    simple command
    +-----------+-------------+------------------------+
    | totalSize | commandSize | BaseCommand (protobuf) |
    |    u32    |     u32     |   commandSize bytes    |
    +-----------+-------------+------------------------+
                 '------------- totalSize bytes -------'

    payload command (SEND, MESSAGE)
    +-----------+-------------+-------------+ - - - - - - - - - - - - - - - - - - +
    | totalSize | commandSize | BaseCommand | 0x0e02 | u32 size | BrokerEntryMeta |  optional,
    +-----------+-------------+-------------+ - - - - - - - - - - - - - - - - - - +  MESSAGE only
    | 0x0e01 | CRC32C | metadataSize | MessageMetadata | payload ... end of frame |
    +--------+--------+--------------+-----------------+--------------------------+
     '------------------ stored entry bytes (see magnetar.protocol.entry) -------'
                       '----------------- covered by the CRC32C -----------------'

Decoding: :class:`FrameDecoder` takes bytes in chunks of any size and returns
:class:`Frame` objects (typed command, plus an :class:`~magnetar.protocol.entry.Entry` for
SEND and MESSAGE). Every malformed input raises a
:class:`~magnetar.common.errors.ProtocolError` subclass; the connection must then be closed.

Encoding: :func:`encode` for commands without payload; :func:`encode_send` and
:func:`encode_payload_command` for SEND and MESSAGE, which return a list of buffers for
``transport.writelines`` so the entry bytes are never copied. The per-entry MESSAGE and
SEND_RECEIPT encoders of the broker's hot paths are in :mod:`.hand_encoders`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.common.errors import FrameTooLarge, ProtocolError
from magnetar.common.lazy_module import lazy_module
from magnetar.protocol.ack_decoder import ack_from_command_bytes
from magnetar.protocol.command import (
    PAYLOAD_COMMANDS,
    Command,
    Message,
    Send,
    SendReceipt,
)
from magnetar.protocol.entry import MAGIC_BROKER_ENTRY_METADATA, Entry, build_entry
from magnetar.protocol.fast_constructor import fast_constructor
from magnetar.protocol.hand_encoders import (
    BROKER_ENTRY_METADATA_HEADER,
    FRAME_HEADER,
    encode_broker_entry_metadata,
    encode_send_receipt,
)
from magnetar.protocol.message_id import BytesLike
from magnetar.protocol.metadata import BrokerEntryMetadata, MessageMetadata
from magnetar.protocol.speedups import CFRAME

if TYPE_CHECKING:
    from magnetar.protocol import _convert
    from magnetar.protocol.generated import PulsarApi_pb2 as pb
else:  # imported at the first frame: an idle process holds no protobuf classes
    _convert = lazy_module("magnetar.protocol._convert")
    pb = lazy_module("magnetar.protocol.generated.PulsarApi_pb2")

DEFAULT_MAX_MESSAGE_SIZE_BYTES = 5 * 1024 * 1024
"""Pulsar's default ``maxMessageSize`` (5 MiB), advertised in CONNECTED."""

FRAME_PADDING_BYTES = 10 * 1024
"""Room for command and metadata on top of the message size (Pulsar's frame padding)."""

DEFAULT_MAX_FRAME_SIZE_BYTES = DEFAULT_MAX_MESSAGE_SIZE_BYTES + FRAME_PADDING_BYTES
"""Default frame-size limit of :class:`FrameDecoder` (5 MiB + 10 KiB)."""

_SCAN_SENDS = None if CFRAME is None else CFRAME.scan_sends
"""The C loop over a read's whole SEND frames of the usual shape (the Python loop in
:meth:`FrameDecoder._feed` does the same where it is not built)."""

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    ``entry`` is set for SEND and MESSAGE only: the stored entry bytes (a view into the
    decoder's input, kept alive by the frame). ``broker_entry_metadata`` is set when the
    frame carried a 0x0e02 section.
    """

    command: Command
    entry: Entry | None = None
    broker_entry_metadata: BrokerEntryMetadata | None = None


_new_frame = fast_constructor(Frame)

SendFields = tuple[int, int, int, int, int, int, bool, bool]
"""A SEND command's fields 1-8: producer_id, sequence_id, num_messages, txnid_least_bits,
txnid_most_bits, highest_sequence_id, is_chunk, marker."""


def send_fields(cmd: Send) -> SendFields:
    """The :data:`SendFields` of a SEND decoded the general way."""
    return (
        cmd.producer_id,
        cmd.sequence_id,
        cmd.num_messages,
        cmd.txnid_least_bits,
        cmd.txnid_most_bits,
        cmd.highest_sequence_id,
        cmd.is_chunk,
        cmd.marker,
    )


SendRun = list[tuple[SendFields, Entry]]
"""SENDs of the usual shape that follow each other in the stream, in order."""
SendHandler = Callable[[SendRun], object]
"""``on_sends(run)`` of :meth:`FrameDecoder.feed_each`."""
_PAYLOAD_TYPES = frozenset(int(t) for t in PAYLOAD_COMMANDS)


class FrameDecoder:
    """Incremental frame decoder: feed bytes as they arrive, get whole frames back.

    Any chunking of the same byte stream yields the same frames. The decoder holds at most
    one partial frame, and checks a frame's announced size against ``max_frame_size_bytes``
    (which counts the whole frame including its 4-byte size prefix) as soon as the prefix
    is known, before buffering any of the body: an oversized frame raises
    :class:`~magnetar.common.errors.FrameTooLarge`.

    Memory: a partial frame holds only the bytes that have arrived (the announced size is
    untrusted and never allocated up front), as the received chunks; they are joined into
    one buffer when the last byte arrives. :attr:`buffered_bytes` is what it holds, and
    :meth:`release` drops it.

    After :meth:`feed` raised, the decoder is failed: every later call raises
    ProtocolError again (the stream cannot be resynchronised; close the connection). A
    failed decoder holds no buffer and no exception (only its message): an exception's
    traceback would keep the frames of the failed call, and the bytes they referenced,
    alive for as long as the decoder.
    """

    __slots__ = (
        "_failed",
        "_head",
        "_held",
        "_needed",
        "_parts",
        "max_frame_size_bytes",
        "partial_frames_started",
    )

    def __init__(self, max_frame_size_bytes: int = DEFAULT_MAX_FRAME_SIZE_BYTES) -> None:
        if max_frame_size_bytes < 12:
            raise ValueError("max_frame_size_bytes must allow at least an empty command")
        self.max_frame_size_bytes = max_frame_size_bytes
        self._head = bytearray()  # a size prefix split across feeds (< 4 bytes)
        self._parts: list[bytes | memoryview] = []  # received chunks of a split frame
        self._held = 0  # bytes in _parts
        self._needed = 0  # the announced size of the frame in _parts (after its prefix)
        self._failed: str | None = None
        self.partial_frames_started = 0
        """How many times a frame was left incomplete at the end of a feed after none was
        (a counter, so a caller can tell a new partial frame from the same one growing)."""

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame held inside the decoder: only bytes that arrived."""
        return len(self._head) + self._held

    def release(self, reason: str = "decoder released") -> None:
        """Drop any partial frame and fail the decoder (the connection is gone): later
        feeds raise ProtocolError with ``reason``."""
        self._head = bytearray()
        self._parts = []
        self._held = 0
        self._needed = 0
        if self._failed is None:
            self._failed = reason

    def feed(self, data: BytesLike) -> list[Frame]:
        """Consume ``data`` and return the frames it completes, in stream order.

        ``bytes`` input is referenced by the returned entries without copying; other
        buffer types are copied first. Raises ProtocolError (FrameTooLarge for an oversized
        frame) on malformed input; frames completed earlier in the same call are lost then.
        """
        frames: list[Frame] = []
        self.feed_each(data, frames.append)
        return frames

    def feed_each(
        self,
        data: BytesLike,
        on_frame: Callable[[Frame], object],
        on_sends: SendHandler | None = None,
    ) -> None:
        """:meth:`feed` handing frames over as they complete, in stream order, instead of
        returning a list: ``on_frame(frame)``, or, when ``on_sends`` is given, for SENDs
        of the usual shape (see
        :func:`~magnetar.protocol._convert.send_fields_from_command_bytes`)
        ``on_sends(run)``: the consecutive such SENDs of this read as one list of ``(the
        command's eight field values, entry)``, no :class:`Send` or :class:`Frame` built
        (the broker's hot path). A run is handed over before the next other frame and at
        the end of the read; the list then belongs to the handler. ProtocolError on
        malformed input is raised after the frames before it were handed over. An
        exception raised by a handler propagates and fails the decoder like malformed
        input (the caller closes the connection).
        """
        if self._failed is not None:
            raise ProtocolError(f"decoder failed earlier: {self._failed}")
        sends: SendRun | None = [] if on_sends is not None else None
        try:
            try:
                self._feed(
                    data if isinstance(data, bytes) else bytes(data), on_frame, sends, on_sends
                )
            except ProtocolError:
                if sends:  # the SENDs before the malformed frame still count
                    assert on_sends is not None
                    on_sends(sends)
                raise
            if sends:
                assert on_sends is not None
                on_sends(sends)
        except BaseException as exc:
            self.release(str(exc) or type(exc).__name__)
            raise

    def _feed(
        self,
        data: bytes,
        on_frame: Callable[[Frame], object],
        sends: SendRun | None,
        on_sends: SendHandler | None,
    ) -> None:
        n = len(data)
        if not self._needed and not self._head and n >= 4:
            # Common case: the read holds exactly one whole frame.
            total = _U32.unpack_from(data, 0)[0]
            if total + 4 == n and n <= self.max_frame_size_bytes:
                # Hottest of all: one SEND of the usual shape. Checked on the bytes object
                # itself (cheaper to index and slice than a memoryview); anything unusual,
                # a broker-entry-metadata section included, takes the general path.
                if n > 14 and data[8] == 0x08 and data[9] == 0x06:
                    end = 8 + _U32.unpack_from(data, 4)[0]
                    if end < n - 1 and not (data[end] == 0x0E and data[end + 1] == 0x02):
                        fields = _convert.send_fields_from_command_bytes(data[8:end])
                        if fields is not None:
                            entry = Entry(memoryview(data)[end:])
                            if sends is not None:
                                sends.append((fields, entry))
                            else:
                                on_frame(_new_frame(_convert.new_send(*fields, None), entry, None))
                            return
                # Next: one ACK of the usual shape, its command filling the frame (no payload).
                elif (
                    n > 12
                    and data[8] == 0x08
                    and data[9] == 0x0A
                    and _U32.unpack_from(data, 4)[0] + 8 == n
                ):
                    ack = ack_from_command_bytes(data[8:])
                    if ack is not None:
                        on_frame(_new_frame(ack, None, None))
                        return
                on_frame(self._parse(memoryview(data)[4:]))
                return
        view = memoryview(data)
        pos = 0
        if self._needed:
            missing = self._needed - self._held
            if n < missing:
                # Still incomplete: keep the chunk itself (no copy, it is all ours).
                if n:
                    self._parts.append(data)
                    self._held += n
                return
            parts = self._parts
            parts.append(data if missing == n else view[:missing])
            # One copy, into a buffer of exactly the frame's size that then belongs to the
            # frame; the chunks are dropped.
            body = b"".join(parts)
            self._parts = []
            self._held = 0
            self._needed = 0
            pos = missing
            on_frame(self._parse(memoryview(body)))
        scan = _SCAN_SENDS if sends is not None else None
        while True:
            if scan is not None and not self._head:
                pos = scan(data, view, pos, self.max_frame_size_bytes, sends, Entry)
            if pos == n and not self._head:
                return
            if self._head or n - pos < 4:
                if not self._head:
                    self.partial_frames_started += 1
                take = min(4 - len(self._head), n - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < 4:
                    return
                total = _U32.unpack(self._head)[0]
                self._head = bytearray()
                started = False  # counted with its prefix
            else:
                total = _U32.unpack_from(view, pos)[0]
                pos += 4
                started = True
            if total + 4 > self.max_frame_size_bytes:
                raise FrameTooLarge(
                    f"frame of {total + 4} bytes exceeds the limit of {self.max_frame_size_bytes}"
                )
            if n - pos >= total:
                end = pos + total
                # A SEND of the usual shape, decoded inline as in the one-frame case above
                # (a frame of a burst of pipelined SENDs: the broker's hottest input).
                if total > 10 and data[pos + 4] == 0x08 and data[pos + 5] == 0x06:
                    cmd_end = pos + 4 + _U32.unpack_from(data, pos)[0]
                    if cmd_end < end - 1 and not (
                        data[cmd_end] == 0x0E and data[cmd_end + 1] == 0x02
                    ):
                        fields = _convert.send_fields_from_command_bytes(data[pos + 4 : cmd_end])
                        if fields is not None:
                            entry = Entry(view[cmd_end:end])
                            if sends is not None:
                                sends.append((fields, entry))
                            else:
                                on_frame(_new_frame(_convert.new_send(*fields, None), entry, None))
                            pos = end
                            continue
                if sends:  # the run of SENDs ends here: hand it over first (stream order)
                    assert on_sends is not None
                    run = sends[:]
                    sends.clear()  # first: a handler that raises must not see them twice
                    on_sends(run)
                on_frame(self._parse(view[pos:end]))
                pos = end
                continue
            # The rest of the read begins a frame that is not complete: keep what arrived,
            # copied out (a slice; pos > 0 here), so the partial frame does not keep the
            # whole read alive.
            if started:
                self.partial_frames_started += 1
            self._needed = total  # > 0 here: an empty frame is always complete
            self._parts = [data[pos:]] if pos < n else []
            self._held = n - pos
            return

    def _parse(self, frame: memoryview) -> Frame:
        n = len(frame)
        if n < 4:
            raise ProtocolError(f"frame of {n} bytes has no command size")
        cmd_size = _U32.unpack_from(frame, 0)[0]
        end = 4 + cmd_size
        if end > n:
            raise ProtocolError(f"command size {cmd_size} exceeds the frame ({n - 4} bytes)")
        command: Command | None = None
        has_payload = True
        if cmd_size >= 4 and frame[4] == 0x08:
            # The hottest commands, SEND and ACK: try their hand-written decoders first.
            if frame[5] == 0x06:
                if cmd_size < 130:
                    command = _convert.send_from_command_bytes(bytes(frame[4:end]))
            elif frame[5] == 0x0A:
                command = ack_from_command_bytes(bytes(frame[4:end]))
                has_payload = False
        if command is None:
            # A new message per command: upb parses into its message's arena, which a
            # reused message never frees (~200 B per command, for the connection's life).
            base = pb.BaseCommand()
            _convert.parse_into(base, frame[4:end], "command")
            command = _convert.command_from_base(base)
            # Plain ints: hashing an IntEnum member runs Python code, and this runs per frame.
            has_payload = base.type in _PAYLOAD_TYPES
        if end == n:
            if has_payload:
                raise ProtocolError(f"{command.TYPE.name} frame without payload")
            return _new_frame(command, None, None)
        if not has_payload:
            raise ProtocolError(f"unexpected payload after a {command.TYPE.name} command")
        bem = None
        if n - end >= 2 and frame[end] == 0x0E and frame[end + 1] == 0x02:
            if n - end < 6:
                raise ProtocolError("frame truncated inside broker entry metadata")
            size = _U32.unpack_from(frame, end + 2)[0]
            start = end + 6
            end = start + size
            if end > n:
                raise ProtocolError("broker entry metadata overruns the frame")
            bem = _parse_broker_entry_metadata(frame[start:end])
        return _new_frame(command, Entry(frame[end:]), bem)


def _parse_broker_entry_metadata(data: memoryview) -> BrokerEntryMetadata:
    m = pb.BrokerEntryMetadata()
    _convert.parse_into(m, data, "broker entry metadata")
    return BrokerEntryMetadata(
        broker_timestamp=m.broker_timestamp if m.HasField("broker_timestamp") else None,
        index=m.index if m.HasField("index") else None,
    )


# ---------------------------------------------------------------- encoding


def encode(command: Command) -> bytes:
    """The frame of a command without payload.

    Raises ValueError for SEND and MESSAGE (use :func:`encode_send`, :func:`encode_message`
    or :func:`encode_payload_command`) and ValueError/TypeError for field values the wire
    cannot carry (e.g. a negative uint64).
    """
    if type(command) is SendReceipt:
        return encode_send_receipt(command)
    if command.TYPE in PAYLOAD_COMMANDS:
        raise ValueError(f"{command.TYPE.name} carries a payload; use encode_payload_command")
    body = _convert.command_to_base(command).SerializeToString()
    return FRAME_HEADER.pack(len(body) + 4, len(body)) + body


def encode_payload_command(
    command: Send | Message,
    entry: BytesLike | Sequence[BytesLike],
    broker_entry_metadata: BrokerEntryMetadata | None = None,
) -> list[bytes | memoryview]:
    """A SEND or MESSAGE frame around stored entry bytes, as buffers for ``writelines``.

    ``entry`` (one buffer, or several written in order, e.g. from
    :func:`~magnetar.protocol.entry.build_entry`) is passed through without copying.
    """
    body = _convert.command_to_base(command).SerializeToString()
    return _frame_around(body, entry, broker_entry_metadata)


def _frame_around(
    body: bytes,
    entry: BytesLike | Sequence[BytesLike],
    bem: BrokerEntryMetadata | None,
) -> list[bytes | memoryview]:
    parts: list[bytes | memoryview]
    if isinstance(entry, bytes | bytearray | memoryview):
        parts = [entry if isinstance(entry, bytes | memoryview) else memoryview(entry)]
        entry_size = memoryview(entry).nbytes
    else:
        parts = [b if isinstance(b, bytes | memoryview) else memoryview(b) for b in entry]
        entry_size = sum(memoryview(b).nbytes for b in parts)
    cmd_size = len(body)
    if bem is None:
        head = FRAME_HEADER.pack(4 + cmd_size + entry_size, cmd_size) + body
    else:
        bem_bytes = encode_broker_entry_metadata(bem)
        total = 4 + cmd_size + 6 + len(bem_bytes) + entry_size
        head = (
            FRAME_HEADER.pack(total, cmd_size)
            + body
            + BROKER_ENTRY_METADATA_HEADER.pack(MAGIC_BROKER_ENTRY_METADATA, len(bem_bytes))
            + bem_bytes
        )
    parts.insert(0, head)
    return parts


def encode_send(
    producer_id: int,
    sequence_id: int,
    metadata: MessageMetadata | bytes,
    payload: BytesLike,
    *,
    num_messages: int | None = None,
    highest_sequence_id: int = 0,
    is_chunk: bool = False,
    marker: bool = False,
    txnid_least_bits: int = 0,
    txnid_most_bits: int = 0,
    checksum: bool = True,
) -> list[bytes | memoryview]:
    """A SEND frame (producer side) as buffers for ``writelines``; the payload is not copied.

    ``num_messages`` is sent only when given (the C++ client sends it for batches only).
    The CRC32C is computed over metadata size, metadata and payload.
    """
    send = Send(
        producer_id=producer_id,
        sequence_id=sequence_id,
        num_messages=1 if num_messages is None else num_messages,
        highest_sequence_id=highest_sequence_id,
        is_chunk=is_chunk,
        marker=marker,
        txnid_least_bits=txnid_least_bits,
        txnid_most_bits=txnid_most_bits,
    )
    base = _convert.command_to_base(send)
    if num_messages is not None:
        base.send.num_messages = num_messages  # present even when 1, like the C++ client
    return _frame_around(
        base.SerializeToString(), build_entry(metadata, payload, checksum=checksum), None
    )
