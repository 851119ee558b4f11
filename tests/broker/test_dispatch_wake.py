"""A parked dispatcher woken by an append, on an in-process broker over raw frames.

An Exclusive or Failover subscription whose consumer keeps up parks at the end of the log;
the append that wakes it is dispatched on that loop turn, from the entry cache, without a
task (with many topics a task per wake-up was a tenth of the broker's work per message).
What the cache does not hold is read by the dispatcher's task, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.broker.subscription import Subscription
from magnetar.common.names import TopicName
from magnetar.protocol import (
    CloseConsumer,
    Flow,
    Message,
    MessageMetadata,
    ProducerSuccess,
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


@pytest.mark.parametrize("cache_mb", [16, 0], ids=["cached", "uncached"])
async def test_each_append_reaches_a_parked_exclusive_consumer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_mb: int
) -> None:
    tasks_started = 0
    ensure_task = Subscription._ensure_task

    def counted(sub: Subscription) -> None:
        nonlocal tasks_started
        if sub._task is None or sub._task.done():
            tasks_started += 1
        ensure_task(sub)

    monkeypatch.setattr(Subscription, "_ensure_task", counted)
    async with running_broker(tmp_path, managed_ledger_cache_size_mb=cache_mb) as broker:
        topic = new_topic()
        raw = await AsyncRawClient.open(broker.port)
        assert isinstance(
            await raw.request(subscribe_cmd(raw, topic, 1, SubType.Exclusive)), Success
        )
        assert isinstance(await raw.request(producer_cmd(raw, topic, 1)), ProducerSuccess)
        raw.send(Flow(consumer_id=1, message_permits=100))
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None
        sub: Subscription = loaded.subscriptions["s"]
        for seq in range(5):
            await wait_until_async(lambda: sub._wake.parked, timeout_s=TIMEOUT_S)
            md = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
            raw.writer.write(b"".join(encode_send(1, seq, md, b"m%d" % seq)))
            receipt = await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
            message = await raw.wait_for(lambda f: isinstance(f.command, Message))
            assert isinstance(receipt.command, SendReceipt)
            assert isinstance(message.command, Message)
            assert message.command.message_id.entry_id == receipt.command.message_id.entry_id
            assert message.entry is not None
            assert bytes(message.entry.payload) == b"m%d" % seq
            if seq == 0:
                tasks_started = 0  # from the first append on
        if cache_mb:
            assert tasks_started == 0  # each wake-up dispatched without a task
        else:
            assert tasks_started >= 4  # read from the bookie by the task
        await raw.close()


async def test_readers_closed_on_an_idle_topic_leave_nothing_parked(tmp_path: Path) -> None:
    """Each reader's dispatcher parks on the idle log; closing the reader (its non-durable
    subscription goes) takes the registration back, so a topic nobody publishes to does not
    collect one per reader that came and went."""
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        raw = await AsyncRawClient.open(broker.port)
        assert isinstance(await raw.request(producer_cmd(raw, topic, 1)), ProducerSuccess)
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None
        for consumer_id in range(1, 21):
            name = f"reader-{consumer_id}"
            subscribe = Subscribe(
                topic=topic, subscription=name, sub_type=SubType.Exclusive,
                consumer_id=consumer_id, request_id=raw.next_id(), durable=False,
            )  # fmt: skip
            assert isinstance(await raw.request(subscribe), Success)
            raw.send(Flow(consumer_id=consumer_id, message_permits=100))
            wake = loaded.subscriptions[name]._wake
            await wait_until_async(lambda w=wake: w.parked, timeout_s=TIMEOUT_S)
            close = CloseConsumer(consumer_id=consumer_id, request_id=raw.next_id())
            assert isinstance(await raw.request(close), Success)
            await wait_until_async(
                lambda n=name: n not in loaded.subscriptions, timeout_s=TIMEOUT_S
            )
        assert not loaded.ml._append_callbacks
        await raw.close()
