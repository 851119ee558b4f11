"""Client message ids: official-client API, ordering, and serialization equal to the wheel's."""

from __future__ import annotations

import pulsar
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client import MessageId
from magnetar.protocol import INT64_MAX

ids = st.tuples(
    st.integers(-1, 1000), st.integers(-1, 2**40), st.integers(-1, 2**40), st.integers(-1, 999)
)


@given(ids)
def test_serialize_matches_official_client(t: tuple[int, int, int, int]) -> None:
    partition, ledger, entry, batch = t
    ours = MessageId(partition, ledger, entry, batch)
    theirs = pulsar.MessageId(partition, ledger, entry, batch)
    assert ours.serialize() == theirs.serialize()
    back = MessageId.deserialize(theirs.serialize())
    assert back == ours
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == t


def test_earliest_and_latest_serialize_like_the_wheel() -> None:
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.latest.ledger_id() == INT64_MAX


def test_equality_includes_partition_ordering_does_not() -> None:
    a = MessageId(0, 5, 7, 1)
    b = MessageId(1, 5, 7, 1)
    assert a != b
    assert not a < b and not b < a
    assert MessageId(0, 5, 7, 0) < a < MessageId(0, 5, 8, -1) < MessageId(0, 6, 0, -1)
    assert len({a, MessageId(0, 5, 7, 1)}) == 1


def test_deserialize_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        MessageId.deserialize(b"\x08")
    with pytest.raises(ValueError):
        MessageId.deserialize(b"\x18\x01")
