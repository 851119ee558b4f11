"""Producer access decisions the service relies on beyond ``test_producer_access.py``:
stale topic epochs of every exclusive mode and the bound of the WaitForExclusive queue
(reference §6.2)."""

from __future__ import annotations

import pytest

from magnetar.broker.producer_access import (
    AccessMode,
    CloseProducer,
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


def fenced_takeover() -> ProducerAccess:
    """``old`` held the topic at epoch 0; ``new`` took over with ExclusiveWithFencing (1)."""
    access = ProducerAccess()
    assert access.add(req(1, 1, "old", AccessMode.WaitForExclusive)).topic_epoch == 0
    new = access.add(req(2, 1, "new", AccessMode.ExclusiveWithFencing))
    assert new.topic_epoch == 1
    assert new.effects == (CloseProducer(ProducerKey(1, 1), notify_client=True),)
    return access


@pytest.mark.parametrize(
    "mode", [AccessMode.WaitForExclusive, AccessMode.Exclusive, AccessMode.ExclusiveWithFencing]
)
def test_stale_epoch_is_fenced_while_the_topic_is_held(mode: AccessMode) -> None:
    # "The old producer is closed with CLOSE_PRODUCER. When it re-registers (it sends its
    # stale topic_epoch), answer ERROR ProducerFenced." -- also when it asks to wait: queued,
    # its client would wait for a turn fencing meant it never gets, and its sends would hang.
    access = fenced_takeover()
    with pytest.raises(ProducerFenced, match="Topic epoch has already moved") as info:
        access.add(req(1, 1, "old", mode, topic_epoch=0))
    assert info.value.code is ServerError.ProducerFenced
    assert access.waiting == []
    assert access.exclusive_producer_name == "new"
    assert access.producers == {"new": ProducerKey(2, 1)}


def test_stale_wait_for_exclusive_is_fenced_when_the_topic_is_free() -> None:
    access = fenced_takeover()
    access.remove(ProducerKey(2, 1))
    with pytest.raises(ProducerFenced):
        access.add(req(1, 1, "old", AccessMode.WaitForExclusive, topic_epoch=0))
    # a current epoch waits as usual
    assert access.add(req(3, 1, "w", AccessMode.WaitForExclusive, topic_epoch=1)).ready


def test_current_epoch_still_waits_behind_the_holder() -> None:
    access = fenced_takeover()
    queued = access.add(req(3, 1, "w", AccessMode.WaitForExclusive, topic_epoch=1))
    assert not queued.ready and access.waiting == [ProducerKey(3, 1)]
    assert access.remove(ProducerKey(2, 1)) == [ProducerReady(ProducerKey(3, 1), 1)]


def test_wait_queue_is_bounded() -> None:
    access = ProducerAccess(waiting_max=2)
    access.add(req(1, 1, "h", AccessMode.Exclusive))
    for i in range(2):
        assert not access.add(req(2, i, f"w{i}", AccessMode.WaitForExclusive)).ready
    with pytest.raises(ProducerBusy, match="max waiting exclusive producers"):
        access.add(req(3, 1, "w2", AccessMode.WaitForExclusive))
    assert access.waiting == [ProducerKey(2, 0), ProducerKey(2, 1)]
    # the queue drains one by one: each promotion makes room again
    assert access.remove(ProducerKey(1, 1)) == [ProducerReady(ProducerKey(2, 0), 1)]
    assert not access.add(req(3, 1, "w2", AccessMode.WaitForExclusive)).ready
