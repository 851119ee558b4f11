"""Producer topic epochs (reference §6.2) and deduplication of re-sent messages (§6.4), on
the wire (:class:`.raw.RawClient`) and with the official wheel.

* A producer fenced by ExclusiveWithFencing that re-registers with its stale ``topic_epoch``
  gets ERROR ProducerFenced in every exclusive mode, WaitForExclusive included (it used to be
  queued, so the wheel's sends hung until the send timeout).
* The topic epoch survives a broker crash: a producer fenced before it is fenced after it.
* A SEND re-sent before the first copy is persisted is "Unknown" → SEND_ERROR
  PersistenceError; the client reconnects, re-sends, and the retry is a Dup (receipt
  (-1, -1)); the message is stored once.
"""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest

from magnetar.common.errors import ServerError
from magnetar.protocol import (
    CloseProducer,
    Error,
    Flow,
    InitialPosition,
    Message,
    ProducerAccessMode,
    ProducerSuccess,
    SendError,
    SendReceipt,
    Subscribe,
    SubType,
)
from magnetar.testing import StandaloneProcess

from .helpers import assert_nothing_more, new_client, receive_all
from .raw import RawClient, message_frame


def _fenced_takeover(old: RawClient, new: RawClient, topic: str, old_mode: int) -> None:
    """``old`` holds ``topic`` at epoch 0, ``new`` takes it over with fencing (epoch 1)."""
    first = old.create_producer(topic, 1, producer_name="old", producer_access_mode=old_mode)
    assert isinstance(first, ProducerSuccess) and first.producer_ready
    assert first.topic_epoch == 0
    taken = new.create_producer(
        topic,
        1,
        producer_name="new",
        producer_access_mode=ProducerAccessMode.ExclusiveWithFencing,
    )
    assert isinstance(taken, ProducerSuccess) and taken.topic_epoch == 1
    closed = old.wait_for(lambda f: isinstance(f.command, CloseProducer))
    assert closed.command.producer_id == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "mode", [ProducerAccessMode.WaitForExclusive, ProducerAccessMode.Exclusive]
)
def test_stale_epoch_re_registration_is_fenced_not_queued(
    standalone: StandaloneProcess, topic: str, mode: int
) -> None:
    old, new = RawClient(standalone.port), RawClient(standalone.port)
    try:
        _fenced_takeover(old, new, topic, mode)
        # what the client does after CLOSE_PRODUCER: re-register, presenting its epoch
        again = old.create_producer(
            topic, 1, producer_name="old", producer_access_mode=mode, topic_epoch=0
        )
        assert isinstance(again, Error), again
        assert again.error is ServerError.ProducerFenced
        assert "epoch" in again.message
        # and the holder is undisturbed: it still publishes
        new.send_message(1, 0, b"x", producer_name="new")
        receipt = new.wait_for(lambda f: isinstance(f.command, SendReceipt)).command
        assert receipt.message_id.entry_id >= 0  # type: ignore[attr-defined]
    finally:
        old.close()
        new.close()


def test_fenced_wait_for_exclusive_producer_fails_instead_of_hanging(
    client: pulsar.Client, topic: str
) -> None:
    # A send timeout far beyond the test's patience: with the old queueing the send below
    # would end in Timeout after 120 s, not in ProducerFenced / AlreadyClosed.
    old = client.create_producer(
        topic,
        access_mode=pulsar.ProducerAccessMode.WaitForExclusive,
        send_timeout_millis=120_000,
        batching_enabled=False,
    )
    old.send(b"before")
    new = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"after")
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed)):
        old.send(b"stale")
    new.close()


def test_topic_epoch_survives_a_crash(
    standalone_factory: Callable[..., StandaloneProcess], topic: str
) -> None:
    node = standalone_factory()
    old, new = RawClient(node.port), RawClient(node.port)
    try:
        _fenced_takeover(old, new, topic, ProducerAccessMode.Exclusive)
    finally:
        old.close()
        new.close()
    node.kill()  # SIGKILL: the epoch was stored before the takeover was answered
    node.start()
    again = RawClient(node.port)
    try:
        for mode in (ProducerAccessMode.Exclusive, ProducerAccessMode.WaitForExclusive):
            stale = again.create_producer(
                topic, 1, producer_name="old", producer_access_mode=mode, topic_epoch=0
            )
            assert isinstance(stale, Error), stale
            assert stale.error is ServerError.ProducerFenced
        # the holder reconnects with its epoch
        holder = again.create_producer(
            topic,
            2,
            producer_name="new",
            producer_access_mode=ProducerAccessMode.ExclusiveWithFencing,
            topic_epoch=1,
        )
        assert isinstance(holder, ProducerSuccess) and holder.topic_epoch == 1
    finally:
        again.close()
    node.stop()  # clean restart too: a fresh exclusive producer moves on from the stored 1
    node.start()
    fresh = RawClient(node.port)
    try:
        answer = fresh.create_producer(topic, 1, producer_access_mode=ProducerAccessMode.Exclusive)
        assert isinstance(answer, ProducerSuccess) and answer.topic_epoch == 2
    finally:
        fresh.close()


def test_resend_of_an_unpersisted_message_is_unknown_then_dup(
    standalone_factory: Callable[..., StandaloneProcess], topic: str
) -> None:
    node = standalone_factory("--deduplication")
    raw = RawClient(node.port)
    try:
        created = raw.create_producer(topic, 1, producer_name="dp")
        assert isinstance(created, ProducerSuccess) and created.last_sequence_id == -1
        # The same sequence id twice in one segment: the second arrives while the first is
        # pushed but not persisted -> "Unknown" (§6.4). Answers keep SEND order.
        frame = message_frame(1, 0, b"once", producer_name="dp")
        raw.send_bytes(frame + frame)
        first = raw.wait_for(lambda f: isinstance(f.command, SendReceipt | SendError)).command
        assert isinstance(first, SendReceipt), first
        assert first.sequence_id == 0 and first.message_id.entry_id >= 0
        second = raw.wait_for(lambda f: isinstance(f.command, SendReceipt | SendError)).command
        assert isinstance(second, SendError), second
        assert second.error is ServerError.PersistenceError and second.sequence_id == 0
    finally:
        raw.close()
    # The client's reaction to a SEND_ERROR: new connection, same producer name, re-send.
    again = RawClient(node.port)
    try:
        created = again.create_producer(topic, 1, producer_name="dp")
        assert isinstance(created, ProducerSuccess) and created.last_sequence_id == 0
        again.send_message(1, 0, b"once", producer_name="dp")
        receipt = again.wait_for(lambda f: isinstance(f.command, SendReceipt)).command
        assert receipt.sequence_id == 0  # type: ignore[attr-defined]
        assert (receipt.message_id.ledger_id, receipt.message_id.entry_id) == (-1, -1)  # type: ignore[attr-defined]
        # the next sequence id is stored normally
        again.send_message(1, 1, b"next", producer_name="dp")
        receipt = again.wait_for(lambda f: isinstance(f.command, SendReceipt)).command
        assert receipt.message_id.entry_id >= 0  # type: ignore[attr-defined]
    finally:
        again.close()
    # stored exactly once: read everything from the start
    reader = RawClient(node.port)
    try:
        answer = reader.request(
            Subscribe(
                topic=topic,
                subscription="check",
                sub_type=SubType.Exclusive,
                consumer_id=1,
                request_id=reader.next_id(),
                initial_position=InitialPosition.Earliest,
            )
        )
        assert not isinstance(answer, Error), answer
        reader.send_command(Flow(consumer_id=1, message_permits=100))
        payloads = []
        for _ in range(2):
            entry = reader.wait_for(lambda f: isinstance(f.command, Message)).entry
            assert entry is not None
            payloads.append(bytes(entry.payload))
        assert payloads == [b"once", b"next"]
        with pytest.raises(TimeoutError):
            reader.timeout_s = 0.5
            reader.wait_for(lambda f: isinstance(f.command, Message))
    finally:
        reader.close()
    # and the official client sees the same
    client = new_client(node.url)
    try:
        consumer = client.subscribe(
            topic, "wheel", initial_position=pulsar.InitialPosition.Earliest
        )
        assert [m.data() for m in receive_all(consumer, 2)] == [b"once", b"next"]
        assert_nothing_more(consumer)
    finally:
        client.close()
