"""Conversion between typed commands and the generated protobuf classes (private).

Generic converters are derived once, at import, from the protobuf descriptors and the field
rules documented in :mod:`magnetar.protocol.command`; the hot-path commands (SEND, MESSAGE,
ACK, FLOW) and ``MessageIdData`` have hand-written converters instead, because the generic
ones cost several microseconds per command.

Nothing outside ``magnetar.protocol`` imports this module.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as PbMessage

from magnetar.common.errors import ProtocolError, ServerError
from magnetar.protocol import command as c
from magnetar.protocol import metadata as md
from magnetar.protocol.fast_constructor import fast_constructor
from magnetar.protocol.generated import PulsarApi_pb2 as pb
from magnetar.protocol.message_id import MessageId, to_signed64, to_unsigned64
from magnetar.protocol.speedups import CFRAME

T = TypeVar("T")

FromPb = Callable[[Any], Any]
FillPb = Callable[[Any, Any], None]

_PKG = "magnetar.pulsar."


def parse_into(m: PbMessage, data: bytes | bytearray | memoryview, what: str) -> None:
    """Parse ``data`` into ``m`` and check required fields; any failure is ProtocolError.
    ``m`` should be new: parsing into a message again does not free what the last parse put
    in its arena."""
    try:
        # upb parses any contiguous buffer; the stubs only admit bytes.
        m.ParseFromString(data)  # type: ignore[arg-type]
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"unparsable {what}: {exc}") from exc
    if not m.IsInitialized():
        missing = ", ".join(m.FindInitializationErrors())  # type: ignore[attr-defined]
        raise ProtocolError(f"{what} lacks required fields: {missing}")


def _message_type(f: FieldDescriptor) -> Descriptor:
    mt = f.message_type
    assert mt is not None, f.full_name
    return mt


# Protobuf enum full name -> typed IntEnum.
ENUMS: dict[str, type[enum.IntEnum]] = {
    _PKG + "ServerError": ServerError,
    _PKG + "AuthMethod": c.AuthMethod,
    _PKG + "CompressionType": c.CompressionType,
    _PKG + "ProducerAccessMode": c.ProducerAccessMode,
    _PKG + "KeySharedMode": c.KeySharedMode,
    _PKG + "TxnAction": c.TxnAction,
    _PKG + "Schema.Type": c.SchemaType,
    _PKG + "CommandSubscribe.SubType": c.SubType,
    _PKG + "CommandSubscribe.InitialPosition": c.InitialPosition,
    _PKG + "CommandAck.AckType": c.AckType,
    _PKG + "CommandAck.ValidationError": c.ValidationError,
    _PKG + "CommandPartitionedTopicMetadataResponse.LookupType": c.MetadataResult,
    _PKG + "CommandLookupTopicResponse.LookupType": c.LookupResult,
    _PKG + "CommandGetTopicsOfNamespace.Mode": c.TopicsMode,
    _PKG + "CommandTopicMigrated.ResourceType": c.ResourceType,
}

# Protobuf message full name -> typed dataclass (commands are added below).
STRUCTS: dict[str, type[Any]] = {
    _PKG + "IntRange": c.IntRange,
    _PKG + "Schema": c.SchemaInfo,
    _PKG + "EncryptionKeys": c.EncryptionKeys,
    _PKG + "FeatureFlags": c.FeatureFlags,
    _PKG + "AuthData": c.AuthData,
    _PKG + "KeySharedMeta": c.KeySharedMeta,
    _PKG + "Subscription": c.TxnSubscription,
    _PKG + "MessageMetadata": md.MessageMetadata,
    _PKG + "SingleMessageMetadata": md.SingleMessageMetadata,
    _PKG + "BrokerEntryMetadata": md.BrokerEntryMetadata,
}

# BaseCommand field name of every command type.
BASE_FIELD: dict[c.CommandType, str] = {}
for _t in c.CommandType:
    _f = pb.BaseCommand.DESCRIPTOR.fields_by_number[int(_t)]
    BASE_FIELD[_t] = _f.name
    STRUCTS[_message_type(_f).full_name] = c.COMMAND_CLASSES[_t]

# Optional fields whose presence matters although the protobuf declares a default: the
# typed field is ``None`` when absent. Required fields that the typed class defaults
# because the codec fills them in.
PRESENCE_FIELDS = frozenset({_PKG + "MessageMetadata.num_messages_in_batch"})
FILLED_BY_CODEC = frozenset({_PKG + "SingleMessageMetadata.payload_size"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def typed_name(pb_field_name: str) -> str:
    """The typed field name of a protobuf field: ``messagePermits`` -> ``message_permits``."""
    return _CAMEL.sub("_", pb_field_name).lower()


# ---------------------------------------------------------------- MessageIdData (hand-written)


_new_message_id = fast_constructor(MessageId)


def message_id_from_pb(m: pb.MessageIdData) -> MessageId:
    return _new_message_id(
        to_signed64(m.ledgerId),
        to_signed64(m.entryId),
        m.partition,
        m.batch_index,
        tuple(m.ack_set),
        m.batch_size if m.HasField("batch_size") else None,
        message_id_from_pb(m.first_chunk_message_id)
        if m.HasField("first_chunk_message_id")
        else None,
    )


def fill_message_id(m: pb.MessageIdData, mid: MessageId) -> None:
    m.ledgerId = to_unsigned64(mid.ledger_id)
    m.entryId = to_unsigned64(mid.entry_id)
    if mid.partition != -1:
        m.partition = mid.partition
    if mid.batch_index != -1:
        m.batch_index = mid.batch_index
    if mid.ack_set:
        m.ack_set.extend(mid.ack_set)
    if mid.batch_size is not None:
        m.batch_size = mid.batch_size
    if mid.first_chunk_message_id is not None:
        fill_message_id(m.first_chunk_message_id, mid.first_chunk_message_id)


def text(value: str | bytes) -> str:
    """A protobuf ``string`` field's value as ``str``.

    upb hands back ``bytes`` instead of ``str`` when a proto2 string field is not valid
    UTF-8; those bytes are decoded with ``surrogateescape`` so every typed string field is a
    ``str`` and the original bytes stay recoverable. Name validation
    (:mod:`magnetar.common.names`) refuses such text; other fields carry it through.
    """
    if type(value) is str:
        return value
    assert isinstance(value, bytes)
    return value.decode("utf-8", "surrogateescape")


def _kv_from_pb(m: Any) -> tuple[str, Any]:
    value = m.value
    return (text(m.key), text(value) if isinstance(value, bytes | str) else value)


def _kv_fill(m: Any, kv: tuple[str, Any]) -> None:
    m.key, m.value = kv


# ---------------------------------------------------------------- generic converters


class StructCodec:
    """Converts one typed dataclass to and from one protobuf message type.

    Its converters are derived by its first use (most command types are rare: deriving
    them all at import was a tenth of the package's import time); :meth:`build` derives
    them at once.

    Decoding visits only the fields the message holds (``ListFields``); every other
    attribute takes the value it has in an empty message (None for a field with presence,
    else its default), worked out once. A command sets a few of its fields, so this is a
    handful of conversions instead of one per field."""

    __slots__ = ("_absent", "_descriptor", "_getters", "_present", "_setters", "pb_cls", "typed")

    def __init__(self, typed: type[Any], descriptor: Descriptor) -> None:
        self.typed = typed
        self.pb_cls: type[PbMessage] = getattr(pb, descriptor.name)
        self._getters: list[tuple[str, FromPb]] | None = None
        self._present: dict[int, tuple[str, FromPb | None]] = {}
        """Field number -> (attribute, converter of its value; None: taken as it is)."""
        self._absent: dict[str, Any] | None = None
        """Attribute -> its value when the message lacks the field (made at first decode:
        the nested codecs must all exist first)."""
        self._setters: list[FillPb] = []
        self._descriptor = descriptor

    def build(self) -> list[tuple[str, FromPb]]:
        """Derive the converters (every codec exists by then, so nested ones resolve);
        returns the getters. Raises TypeError if the typed fields and the proto's differ."""
        if self._getters is not None:
            return self._getters
        names = {f.name for f in fields(self.typed)}
        getters: list[tuple[str, FromPb]] = []
        setters: list[FillPb] = []
        present: dict[int, tuple[str, FromPb | None]] = {}
        for f in self._descriptor.fields:
            attr = typed_name(f.name)
            if attr not in names:
                raise TypeError(f"{self.typed.__name__} lacks field {attr} ({f.full_name})")
            getters.append((attr, _getter(f)))
            present[f.number] = (attr, _value_converter(f))
            setters.append(_setter(f, attr))
        extra = names - {typed_name(f.name) for f in self._descriptor.fields}
        if extra:
            raise TypeError(f"{self.typed.__name__} has fields not in the proto: {extra}")
        self._setters = setters
        self._present = present
        self._getters = getters
        return getters

    def from_pb(self, m: Any) -> Any:
        absent = self._absent
        if absent is None:
            getters = self.build()
            empty = self.pb_cls()
            absent = self._absent = {attr: get(empty) for attr, get in getters}
        values = absent.copy()
        present = self._present
        for f, value in m.ListFields():
            attr, convert = present[f.number]
            values[attr] = value if convert is None else convert(value)
        return self.typed(**values)

    def fill(self, m: Any, obj: Any) -> None:
        if self._getters is None:
            self.build()
        for set_ in self._setters:
            set_(m, obj)


_CODECS: dict[str, StructCodec] = {}


def _codec_for(full_name: str) -> StructCodec:
    return _CODECS[full_name]


def _nested_from(f: FieldDescriptor) -> FromPb:
    name = _message_type(f).full_name
    if name == _PKG + "MessageIdData":
        return message_id_from_pb
    if name in (_PKG + "KeyValue", _PKG + "KeyLongValue"):
        return _kv_from_pb
    codec = _codec_for(name)
    return codec.from_pb


def _nested_fill(f: FieldDescriptor) -> FillPb:
    name = _message_type(f).full_name
    if name == _PKG + "MessageIdData":
        return fill_message_id
    if name in (_PKG + "KeyValue", _PKG + "KeyLongValue"):
        return _kv_fill
    return _codec_for(name).fill


def _presence_only(f: FieldDescriptor) -> bool:
    """True if the typed field is ``None`` when absent."""
    return not f.is_required and (not f.has_default_value or f.full_name in PRESENCE_FIELDS)


def _getter(f: FieldDescriptor) -> FromPb:
    name = f.name
    if f.is_repeated:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            conv = _nested_from(f)
            return lambda m: tuple([conv(x) for x in getattr(m, name)])
        if f.type == FieldDescriptor.TYPE_STRING:
            return lambda m: tuple([text(x) for x in getattr(m, name)])
        return lambda m: tuple(getattr(m, name))
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        conv = _nested_from(f)
        if f.is_required:
            return lambda m: conv(getattr(m, name))
        return lambda m: conv(getattr(m, name)) if m.HasField(name) else None
    if f.type == FieldDescriptor.TYPE_ENUM:
        assert f.enum_type is not None
        enum_cls = ENUMS[f.enum_type.full_name]
        if _presence_only(f):
            return lambda m: enum_cls(getattr(m, name)) if m.HasField(name) else None
        return lambda m: enum_cls(getattr(m, name))
    if f.type == FieldDescriptor.TYPE_STRING:
        if _presence_only(f):
            return lambda m: text(getattr(m, name)) if m.HasField(name) else None
        return lambda m: text(getattr(m, name))
    if _presence_only(f):
        return lambda m: getattr(m, name) if m.HasField(name) else None
    return lambda m: getattr(m, name)


def _value_converter(f: FieldDescriptor) -> FromPb | None:
    """What :func:`_getter` does to a field's value once the field is known present (None:
    nothing)."""
    if f.is_repeated:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            conv = _nested_from(f)
            return lambda v: tuple([conv(x) for x in v])
        if f.type == FieldDescriptor.TYPE_STRING:
            return lambda v: tuple([text(x) for x in v])
        return tuple
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return _nested_from(f)
    if f.type == FieldDescriptor.TYPE_ENUM:
        assert f.enum_type is not None
        return ENUMS[f.enum_type.full_name]
    if f.type == FieldDescriptor.TYPE_STRING:
        return text
    return None


def _setter(f: FieldDescriptor, attr: str) -> FillPb:
    name = f.name
    if f.is_repeated:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            fill = _nested_fill(f)

            def set_repeated_messages(m: Any, obj: Any) -> None:
                container = getattr(m, name)
                for x in getattr(obj, attr):
                    fill(container.add(), x)

            return set_repeated_messages

        def set_repeated(m: Any, obj: Any) -> None:
            values = getattr(obj, attr)
            if values:
                getattr(m, name).extend(values)

        return set_repeated
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        fill = _nested_fill(f)

        def set_message(m: Any, obj: Any) -> None:
            value = getattr(obj, attr)
            if value is not None:
                sub = getattr(m, name)
                sub.SetInParent()  # an all-default sub-message must still be present
                fill(sub, value)

        return set_message
    if f.is_required and f.full_name not in FILLED_BY_CODEC:

        def set_required(m: Any, obj: Any) -> None:
            setattr(m, name, getattr(obj, attr))

        return set_required
    if _presence_only(f):

        def set_present(m: Any, obj: Any) -> None:
            value = getattr(obj, attr)
            if value is not None:
                setattr(m, name, value)

        return set_present
    default = f.default_value

    def set_unless_default(m: Any, obj: Any) -> None:
        value = getattr(obj, attr)
        if value != default:
            setattr(m, name, value)

    return set_unless_default


for _name, _typed in STRUCTS.items():
    _CODECS[_name] = StructCodec(_typed, pb.DESCRIPTOR.message_types_by_name[_name[len(_PKG) :]])


def codec(typed: type[Any]) -> StructCodec:
    """The generic codec of a typed struct or command class."""
    return _CODEC_BY_TYPED[typed]


_CODEC_BY_TYPED: dict[type[Any], StructCodec] = {cd.typed: cd for cd in _CODECS.values()}


# ---------------------------------------------------------------- hot-path commands


_new_send = fast_constructor(c.Send)
_new_message = fast_constructor(c.Message)
_new_flow = fast_constructor(c.Flow)
_new_ack = fast_constructor(c.Ack)


def _send_from_pb(m: pb.CommandSend) -> c.Send:
    return _new_send(
        m.producer_id,
        m.sequence_id,
        m.num_messages,
        m.txnid_least_bits,
        m.txnid_most_bits,
        m.highest_sequence_id,
        m.is_chunk,
        m.marker,
        message_id_from_pb(m.message_id) if m.HasField("message_id") else None,
    )


def _message_from_pb(m: pb.CommandMessage) -> c.Message:
    return _new_message(
        m.consumer_id,
        message_id_from_pb(m.message_id),
        m.redelivery_count,
        tuple(m.ack_set),
        m.consumer_epoch if m.HasField("consumer_epoch") else None,
    )


def _flow_from_pb(m: pb.CommandFlow) -> c.Flow:
    return _new_flow(m.consumer_id, m.messagePermits)


def _ack_from_pb(m: pb.CommandAck) -> c.Ack:
    return _new_ack(
        m.consumer_id,
        c.AckType(m.ack_type),
        tuple([message_id_from_pb(x) for x in m.message_id]),
        c.ValidationError(m.validation_error) if m.HasField("validation_error") else None,
        tuple([(x.key, x.value) for x in m.properties]),
        m.txnid_least_bits,
        m.txnid_most_bits,
        m.request_id if m.HasField("request_id") else None,
    )


_SEND_DEFAULTS = (None, None, 1, 0, 0, 0, False, False)  # fields 1..8, by number - 1
_U64_LIMIT = 1 << 64


def _short_varint(data: bytes, pos: int, n: int) -> tuple[int, int]:
    """The varint at ``pos`` if it takes 2 to 4 bytes, and the position after it; else
    ``(0, -1)`` (the caller then takes the general path)."""
    value = 0
    for shift in (0, 7, 14, 21):
        if pos >= n:
            return 0, -1
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
    return 0, -1


def py_send_fields_from_command_bytes(
    data: bytes,
) -> tuple[int, int, int, int, int, int, bool, bool] | None:
    """The fields 1-8 of the usual shape of a SEND command, decoded without the protobuf
    runtime, or None (give up).

    Handles ``BaseCommand{type=SEND, send{fields 1-8 as varints}}`` in that order and
    nothing else: any other shape (a ``message_id``, unknown fields, odd wire types, a
    missing required field, an over-long varint) returns None, and the caller parses with
    the protobuf runtime, which then does the validating. So this never accepts bytes the
    runtime would reject, and agrees with it on everything it accepts (property-tested).
    """
    n = len(data)
    if n < 4 or data[0] != 0x08 or data[1] != 0x06 or data[2] != 0x32 or data[3] + 4 != n:
        return None
    # What the official clients send for an unbatched message: producer_id and sequence_id
    # only, each a varint of at most 4 bytes (below 2**28). Straight-line code for that.
    if n >= 8 and data[4] == 0x08:
        pid = data[5]
        pos = 6
        if pid >= 0x80:
            pid, pos = _short_varint(data, 5, n)
        if 0 < pos < n - 1 and data[pos] == 0x10:
            seq = data[pos + 1]
            pos += 2
            if seq >= 0x80:
                seq, pos = _short_varint(data, pos - 1, n)
            if pos == n:
                return (pid, seq, 1, 0, 0, 0, False, False)
    values = list(_SEND_DEFAULTS)
    pos = 4
    while pos < n:
        key = data[pos]
        number = key >> 3
        if key & 7 or not 1 <= number <= 8 or pos + 1 >= n:
            return None
        value = data[pos + 1]
        pos += 2
        if value >= 0x80:  # multi-byte varint
            value &= 0x7F
            shift = 7
            while True:
                if pos >= n or shift > 63:
                    return None
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            if value >= _U64_LIMIT:
                return None
        if number == 3:  # int32: the low 32 bits, signed
            value &= 0xFFFFFFFF
            values[2] = value - (1 << 32) if value >= 1 << 31 else value
        elif number >= 7:  # bools
            values[number - 1] = value != 0
        else:
            values[number - 1] = value
    if values[0] is None or values[1] is None:
        return None
    return tuple(values)  # type: ignore[return-value]


send_fields_from_command_bytes = (
    py_send_fields_from_command_bytes if CFRAME is None else CFRAME.send_fields
)
"""The SEND decoder in use: the C one where it was built (:mod:`~magnetar.protocol.speedups`)."""


def send_from_command_bytes(data: bytes) -> c.Send | None:
    """:func:`send_fields_from_command_bytes` as a :class:`~magnetar.protocol.command.Send`."""
    fields = send_fields_from_command_bytes(data)
    return None if fields is None else _new_send(*fields, None)


new_send = _new_send
"""Positional constructor of :class:`~magnetar.protocol.command.Send` (fields in order)."""


# Typed command from its sub-message, by type.
FROM_PB: dict[c.CommandType, FromPb] = {
    t: codec(cls).from_pb for t, cls in c.COMMAND_CLASSES.items()
}
FROM_PB[c.CommandType.SEND] = _send_from_pb
FROM_PB[c.CommandType.MESSAGE] = _message_from_pb
FROM_PB[c.CommandType.FLOW] = _flow_from_pb
FROM_PB[c.CommandType.ACK] = _ack_from_pb

# Types whose sub-message has required fields, so a BaseCommand lacking it is malformed.
NEEDS_SUBMESSAGE = frozenset(
    t
    for t in c.CommandType
    if any(
        f.is_required
        for f in _message_type(pb.BaseCommand.DESCRIPTOR.fields_by_number[int(t)]).fields
    )
)


# Type value -> (BaseCommand field, converter, sub-message required): one dict lookup per
# command instead of an IntEnum call and three lookups.
_DISPATCH: dict[int, tuple[str, FromPb, bool]] = {
    int(t): (BASE_FIELD[t], FROM_PB[t], t in NEEDS_SUBMESSAGE) for t in c.CommandType
}


def command_from_base(base: Any) -> c.Command:
    """Typed command of a parsed, initialized ``BaseCommand``. Raises ProtocolError if the
    sub-message named by ``type`` is missing."""
    field, from_pb, needs_sub = _DISPATCH[base.type]
    if needs_sub and not base.HasField(field):
        raise ProtocolError(f"{c.CommandType(base.type).name} command without its {field}")
    result: c.Command = from_pb(getattr(base, field))
    return result


def command_to_base(cmd: c.Command) -> pb.BaseCommand:
    """A ``BaseCommand`` holding ``cmd``. Raises ValueError/TypeError for invalid values."""
    base = pb.BaseCommand()
    base.type = cmd.TYPE  # type: ignore[assignment]
    sub = getattr(base, BASE_FIELD[cmd.TYPE])
    sub.SetInParent()
    codec(type(cmd)).fill(sub, cmd)
    return base


def struct_from_pb(typed: type[T], m: PbMessage) -> T:
    result: T = codec(typed).from_pb(m)
    return result


def struct_to_pb(obj: Any) -> PbMessage:
    cd = codec(type(obj))
    m = cd.pb_cls()
    cd.fill(m, obj)
    return m
