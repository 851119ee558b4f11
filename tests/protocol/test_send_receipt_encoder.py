"""The hand-written SEND_RECEIPT encoder writes exactly the bytes of the generic protobuf
path, and decodes back to the same command."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, MessageId, SendReceipt, _convert, encode
from magnetar.protocol.hand_encoders import encode_send_receipt

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
SMALL = st.integers(min_value=-1, max_value=1 << 20)


def generic(receipt: SendReceipt) -> bytes:
    body = _convert.command_to_base(receipt).SerializeToString()
    return struct.pack(">II", len(body) + 4, len(body)) + body


message_ids = st.builds(
    MessageId,
    ledger_id=st.one_of(I64, SMALL),
    entry_id=st.one_of(I64, SMALL),
    partition=st.integers(min_value=-1, max_value=(1 << 31) - 1),
    batch_index=st.integers(min_value=-1, max_value=(1 << 31) - 1),
)


@given(
    producer_id=st.one_of(U64, st.integers(0, 20_000)),
    sequence_id=st.one_of(U64, st.integers(0, 20_000)),
    message_id=st.one_of(st.none(), message_ids),
    highest=st.one_of(st.just(0), U64),
)
def test_same_bytes_as_the_generic_encoder(
    producer_id: int, sequence_id: int, message_id: MessageId | None, highest: int
) -> None:
    receipt = SendReceipt(
        producer_id=producer_id,
        sequence_id=sequence_id,
        message_id=message_id,
        highest_sequence_id=highest,
    )
    data = encode_send_receipt(receipt)
    assert data == generic(receipt)
    assert encode(receipt) == data
    (frame,) = FrameDecoder().feed(data)
    assert frame.command == receipt


def test_golden_bytes() -> None:
    receipt = SendReceipt(producer_id=1, sequence_id=5, message_id=MessageId(3, 4))
    assert encode(receipt).hex() == "000000120000000e08073a0a080110051a0408031004"


@pytest.mark.parametrize("field", ["producer_id", "sequence_id", "highest_sequence_id"])
def test_negative_uint64_is_refused_like_the_generic_encoder(field: str) -> None:
    values = {"producer_id": 1, "sequence_id": 1, "highest_sequence_id": 0, field: -5}
    receipt = SendReceipt(**values)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        generic(receipt)
    with pytest.raises(ValueError):
        encode_send_receipt(receipt)
