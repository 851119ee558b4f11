"""SEEK against a consumer that re-subscribes while the cursor reset is still in progress,
on an in-process broker over raw frames.

A seek disconnects the subscription's consumers (CLOSE_CONSUMER), then resets the cursor;
the client re-subscribes as soon as it is told. Pulsar fences the subscription for the
reset, so a consumer never attaches to the read position the reset replaces. The broker
used to attach it at once: it was fed from the old position, or (everything acknowledged
there) its dispatcher parked and nothing woke it once the reset had moved the cursor. The
official consumer then received nothing after ``seek(publish_time)`` (the compat test
``test_seek_by_id_and_time_and_last_message_id``, about one full-suite run in three).

The reset is held open by holding the log's reads (the search by publish time reads
entries before the cursor moves) until the re-subscribe has reached the broker.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.broker.subscription import Subscription
from magnetar.common.names import TopicName
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.protocol import (
    Ack,
    AckType,
    CloseConsumer,
    Flow,
    Message,
    MessageMetadata,
    ProducerSuccess,
    Seek,
    SendReceipt,
    Subscribe,
    SubType,
    Success,
    encode_send,
)
from magnetar.testing import wait_until_async

from .test_service_connection import (
    TIMEOUT_S,
    AsyncRawClient,
    new_topic,
    producer_cmd,
    running_broker,
    subscribe_cmd,
)

CONSUMER_ID = 1
ENTRIES = 3


def _subscribe(raw: AsyncRawClient, topic: str) -> Subscribe:
    return subscribe_cmd(raw, topic, CONSUMER_ID, SubType.Exclusive)


async def _next_message(raw: AsyncRawClient) -> Position:
    frame = await raw.wait_for(lambda f: isinstance(f.command, Message))
    assert isinstance(frame.command, Message)
    mid = frame.command.message_id
    return Position(mid.ledger_id, mid.entry_id)


async def _resubscribe_and_receive(raw: AsyncRawClient, topic: str) -> Position:
    """What the client does on CLOSE_CONSUMER: SUBSCRIBE again, FLOW once it succeeded;
    returns the first message it is sent."""
    answer = await raw.request(_subscribe(raw, topic))
    assert isinstance(answer, Success), answer
    raw.send(Flow(consumer_id=CONSUMER_ID, message_permits=100))
    return await _next_message(raw)


@pytest.mark.parametrize(
    ("acknowledge_all", "seek_to"),
    [(True, 0), (False, 2)],
    ids=["all-acknowledged-seek-back", "nothing-acknowledged-seek-forward"],
)
async def test_subscribe_during_a_seek_attaches_to_the_reset_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, acknowledge_all: bool, seek_to: int
) -> None:
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        raw = await AsyncRawClient.open(broker.port)
        assert isinstance(await raw.request(_subscribe(raw, topic)), Success)
        assert isinstance(await raw.request(producer_cmd(raw, topic, 1)), ProducerSuccess)
        for seq in range(ENTRIES):
            md = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
            raw.writer.write(b"".join(encode_send(1, seq, md, b"m")))
        receipts = [
            await raw.wait_for(lambda f: isinstance(f.command, SendReceipt)) for _ in range(ENTRIES)
        ]
        ids = [f.command.message_id for f in receipts if isinstance(f.command, SendReceipt)]
        positions = [Position(m.ledger_id, m.entry_id) for m in ids if m is not None]
        raw.send(Flow(consumer_id=CONSUMER_ID, message_permits=100))
        assert [await _next_message(raw) for _ in range(ENTRIES)] == positions
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None
        sub: Subscription = loaded.subscriptions["s"]
        if acknowledge_all:
            last = ids[-1]
            assert last is not None
            raw.send(Ack(consumer_id=CONSUMER_ID, ack_type=AckType.Cumulative, message_id=(last,)))
            await wait_until_async(
                lambda: sub.cursor.mark_delete_position == positions[-1], timeout_s=TIMEOUT_S
            )
        # Reads of the log wait for the gate: the seek's search by publish time (which runs
        # before the cursor moves) stays open, as a read from a slow bookie does.
        gate = asyncio.Event()
        read_range = ManagedLedger.read_range
        gated_ml = loaded.ml

        async def gated_read_range(
            ml: ManagedLedger, ledger_id: int, first: int, last: int, *, read_ahead: bool = True
        ) -> list[bytes]:
            if ml is gated_ml:  # (a slotted class: patched on the class, for this one)
                await gate.wait()
            return await read_range(ml, ledger_id, first, last, read_ahead=read_ahead)

        monkeypatch.setattr(ManagedLedger, "read_range", gated_read_range)
        seek = Seek(
            consumer_id=CONSUMER_ID, request_id=raw.next_id(), message_publish_time=1000 + seek_to
        )
        raw.send(seek)
        closed = await raw.wait_for(lambda f: isinstance(f.command, CloseConsumer))
        assert isinstance(closed.command, CloseConsumer)
        assert closed.command.consumer_id == CONSUMER_ID
        assert sub.resetting
        received = asyncio.create_task(_resubscribe_and_receive(raw, topic))
        # the gate opens once the SUBSCRIBE reached the subscription: it waits for the
        # reset (as it used to: it was attached at once and given permits)
        await wait_until_async(
            lambda: sub.waiting_for_reset > 0 or any(c.permits for c in sub.consumers.values()),
            timeout_s=TIMEOUT_S,
        )
        gate.set()
        try:
            first = await asyncio.wait_for(received, TIMEOUT_S)
        except TimeoutError:
            pytest.fail("the re-subscribed consumer was sent nothing after the seek")
        assert first == positions[seek_to]
        assert isinstance(await raw.answer(seek.request_id), Success)
        await raw.close()
