"""``encode_message_at``, the dispatch path's MESSAGE encoder, builds exactly the bytes of
the general ``encode_message`` for every id it is given (large and negative ones included)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import magnetar.protocol as p

ids = st.integers(-1, (1 << 63) - 1)


@given(
    consumer_id=st.integers(0, (1 << 64) - 1),
    ledger_id=ids,
    entry_id=ids,
    partition=st.integers(-1, 1 << 20),
    redelivery_count=st.integers(0, 1 << 32),
    entry=st.binary(max_size=64),
    as_view=st.booleans(),
)
def test_same_bytes_as_encode_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    entry: bytes,
    as_view: bool,
) -> None:
    data: bytes | memoryview = memoryview(entry) if as_view else entry
    fast = p.encode_message_at(consumer_id, ledger_id, entry_id, partition, data, redelivery_count)
    general = p.encode_message(
        consumer_id, p.MessageId(ledger_id, entry_id, partition), redelivery_count, data
    )
    assert b"".join(fast) == b"".join(general)
    assert fast[-1] is data  # the stored entry is passed through, not copied


def test_decodes_back_to_the_message() -> None:
    entry = b"".join(
        p.build_entry(p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"x")
    )
    (frame,) = p.FrameDecoder().feed(b"".join(p.encode_message_at(7, 123_456, 70_000, 2, entry)))
    assert frame.command == p.Message(consumer_id=7, message_id=p.MessageId(123_456, 70_000, 2))
    assert frame.entry is not None and bytes(frame.entry.data) == bytes(entry)
