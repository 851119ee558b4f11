"""Producer access modes and topic epochs (reference §6.2 "Access modes")."""

from __future__ import annotations

import pytest

from magnetar.broker.producer_access import (
    AccessMode,
    CloseProducer,
    FailWaitingProducer,
    ProducerAccess,
    ProducerKey,
    ProducerReady,
    ProducerRequest,
)
from magnetar.common.errors import ProducerBusy, ProducerFenced, ServerError


def req(
    conn: int, pid: int, name: str, mode: AccessMode = AccessMode.Shared, **kw: int
) -> ProducerRequest:
    return ProducerRequest(ProducerKey(conn, pid), name, mode, **kw)


def test_shared_same_name_is_busy() -> None:
    # "Shared: a second producer with the same name fails with ProducerBusy."
    access = ProducerAccess()
    assert access.add(req(1, 1, "p")).ready
    with pytest.raises(ProducerBusy) as info:
        access.add(req(2, 1, "p"))
    assert info.value.code is ServerError.ProducerBusy
    assert access.add(req(2, 1, "q")).ready


def test_shared_successor_on_same_connection_replaces() -> None:
    access = ProducerAccess()
    access.add(req(1, 1, "p", epoch=0))
    result = access.add(req(1, 1, "p", epoch=1))
    assert result.effects == (CloseProducer(ProducerKey(1, 1), notify_client=False),)
    with pytest.raises(ProducerBusy):
        access.add(req(1, 1, "p", epoch=1))


def test_exclusive_with_another_connected_is_fenced() -> None:
    # "Exclusive: if another producer is already connected, reply ERROR ProducerFenced."
    access = ProducerAccess()
    access.add(req(1, 1, "shared"))
    with pytest.raises(ProducerFenced, match="shared producers"):
        access.add(req(2, 1, "x", AccessMode.Exclusive))
    access.remove(ProducerKey(1, 1))
    first = access.add(req(2, 1, "x", AccessMode.Exclusive))
    assert first.ready and first.topic_epoch == 0
    with pytest.raises(ProducerFenced, match="existing exclusive producer: x"):
        access.add(req(3, 1, "y", AccessMode.Exclusive))
    with pytest.raises(ProducerBusy):
        access.add(req(3, 1, "z"))


def test_wait_for_exclusive_fifo() -> None:
    # "WaitForExclusive: if another producer exists, reply PRODUCER_SUCCESS{producer_ready=false}
    # now ... Later, send a second PRODUCER_SUCCESS ... producer_ready=true."
    access = ProducerAccess()
    assert access.add(req(1, 1, "a", AccessMode.Exclusive)).topic_epoch == 0
    b = access.add(req(2, 1, "b", AccessMode.WaitForExclusive))
    c = access.add(req(3, 1, "c", AccessMode.WaitForExclusive))
    assert not b.ready and not c.ready
    assert access.waiting == [ProducerKey(2, 1), ProducerKey(3, 1)]
    with pytest.raises(ProducerBusy):  # Shared refused while exclusives wait
        access.add(req(4, 1, "d"))
    assert access.remove(ProducerKey(1, 1)) == [ProducerReady(ProducerKey(2, 1), 1)]
    assert access.exclusive_producer_name == "b"
    assert access.remove(ProducerKey(3, 1)) == []  # a waiting producer gave up
    assert access.remove(ProducerKey(2, 1)) == []
    assert access.exclusive_producer_name is None and access.topic_epoch == 1


def test_wait_for_exclusive_behind_shared_producers() -> None:
    access = ProducerAccess()
    access.add(req(1, 1, "s1"))
    access.add(req(1, 2, "s2"))
    assert not access.add(req(2, 1, "w", AccessMode.WaitForExclusive)).ready
    assert access.remove(ProducerKey(1, 1)) == []
    assert access.remove(ProducerKey(1, 2)) == [ProducerReady(ProducerKey(2, 1), 0)]


def test_exclusive_with_fencing_takes_over_and_stale_epoch_is_fenced() -> None:
    # "The new producer takes over and topic_epoch is incremented. The old producer is closed
    # with CLOSE_PRODUCER. When it re-registers (it sends its stale topic_epoch), answer
    # ERROR ProducerFenced."
    access = ProducerAccess()
    old = access.add(req(1, 1, "old", AccessMode.ExclusiveWithFencing))
    assert old.topic_epoch == 0
    queued = access.add(req(3, 1, "w", AccessMode.WaitForExclusive))
    assert not queued.ready
    new = access.add(req(2, 1, "new", AccessMode.ExclusiveWithFencing))
    assert new.ready and new.topic_epoch == 1
    assert new.effects[1] == CloseProducer(ProducerKey(1, 1), notify_client=True)
    fail = new.effects[0]
    assert isinstance(fail, FailWaitingProducer) and fail.key == ProducerKey(3, 1)
    assert fail.error.code is ServerError.ProducerFenced
    assert access.waiting == []
    with pytest.raises(ProducerFenced, match="Topic epoch has already moved"):
        access.add(req(1, 1, "old", AccessMode.ExclusiveWithFencing, topic_epoch=0))
    # The refused stale producer did not disturb the holder.
    assert access.exclusive_producer_name == "new"
    # The holder itself may reconnect with its current epoch.
    access.remove(ProducerKey(2, 1))
    again = access.add(req(2, 1, "new", AccessMode.Exclusive, topic_epoch=1))
    assert again.topic_epoch == 1


def test_epoch_restored_from_storage() -> None:
    access = ProducerAccess(topic_epoch=7)
    assert access.add(req(1, 1, "a", AccessMode.Exclusive)).topic_epoch == 8
    access.remove(ProducerKey(1, 1))
    with pytest.raises(ProducerFenced):
        access.add(req(1, 1, "a", AccessMode.WaitForExclusive, topic_epoch=3))
    assert access.add(req(1, 1, "s")).topic_epoch == 8
