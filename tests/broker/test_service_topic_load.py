"""Loading a topic that fails after its managed ledger opened, on an in-process broker.

``BrokerService.get_topic`` opens the managed ledger, then ``Topic.open`` reads the topic's
state (last entry, stored topic epoch, dedup snapshot). When that failed, the managed
ledger stayed open with nobody owning it: its maintenance task ran on (trimming,
persisting cursors) beside the one a later load opened. The usual way there is a client
that closes its connection while its PRODUCER or SUBSCRIBE is loading the topic: the
broker cancels the request, and the load with it.

The load is held in ``Topic.open`` by a topic hook (told the topic loaded, it returns once
a gate opens) until the client has gone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.broker.service import managed_ledger_name
from magnetar.broker.topic import Topic
from magnetar.common.errors import ServerError
from magnetar.common.names import TopicName
from magnetar.protocol import Error, ProducerSuccess
from magnetar.testing import wait_until_async

from .test_service_connection import (
    TIMEOUT_S,
    AsyncRawClient,
    new_topic,
    producer_cmd,
    running_broker,
)


def _managed_ledger_tasks(topic: str) -> list[asyncio.Task[object]]:
    """The running maintenance tasks of ``topic``'s managed ledgers (one per open one)."""
    name = f"ml-{managed_ledger_name(TopicName.parse(topic))}"
    return [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]


class _GatedHook:
    """A topic hook whose ``topic_loaded`` waits for ``gate`` (after setting ``reached``)."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    async def topic_loaded(self, topic: Topic) -> None:
        self.reached.set()
        await self.gate.wait()

    def policies_applied(self, topic: Topic) -> None:
        pass

    async def topic_closing(self, topic: Topic) -> None:
        pass


async def test_a_load_abandoned_after_the_managed_ledger_opened_closes_it(
    tmp_path: Path,
) -> None:
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        hook = _GatedHook()
        reached, gate = hook.reached, hook.gate
        broker.topic_hooks.append(hook)
        leaving = await AsyncRawClient.open(broker.port)
        waiting = await AsyncRawClient.open(broker.port)
        leaving.send(producer_cmd(leaving, topic, 1))
        await asyncio.wait_for(reached.wait(), TIMEOUT_S)
        assert len(_managed_ledger_tasks(topic)) == 1  # opened; Topic.open is reading
        # a second PRODUCER waits for the same load
        second = producer_cmd(waiting, topic, 1)
        waiting.send(second)
        await leaving.close()  # the broker cancels the first PRODUCER, and the load
        await wait_until_async(
            lambda: not _managed_ledger_tasks(topic),
            timeout_s=TIMEOUT_S,
            what="the abandoned managed ledger closed",
        )
        # the request that waited on the abandoned load is answered (retriable), not dropped
        answer = await waiting.answer(second.request_id)
        assert isinstance(answer, Error) and answer.error is ServerError.ServiceNotReady, answer
        gate.set()
        # loading again works, with one managed ledger
        again = await waiting.request(producer_cmd(waiting, topic, 2))
        assert isinstance(again, ProducerSuccess), again
        assert len(_managed_ledger_tasks(topic)) == 1
        await waiting.close()
