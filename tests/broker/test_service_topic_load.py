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

from magnetar.broker.topic import Topic
from magnetar.common.errors import ServerError
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.state import State
from magnetar.protocol import Error, ProducerSuccess
from magnetar.testing import wait_until_async

from .test_service_connection import (
    TIMEOUT_S,
    AsyncRawClient,
    new_topic,
    producer_cmd,
    running_broker,
)


class _GatedHook:
    """A topic hook whose ``topic_loaded`` waits for ``gate`` (after setting ``reached``);
    it keeps the managed ledger of every load it was told of."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()
        self.loaded: list[ManagedLedger] = []

    def open_managed_ledgers(self) -> list[ManagedLedger]:
        """The managed ledgers of the loads so far that are not closed."""
        return [ml for ml in self.loaded if ml.state is not State.CLOSED]

    async def topic_loaded(self, topic: Topic) -> None:
        self.loaded.append(topic.ml)
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
        assert len(hook.open_managed_ledgers()) == 1  # opened; Topic.open is reading
        # a second PRODUCER waits for the same load
        second = producer_cmd(waiting, topic, 1)
        waiting.send(second)
        await leaving.close()  # the broker cancels the first PRODUCER, and the load
        await wait_until_async(
            lambda: not hook.open_managed_ledgers(),
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
        assert len(hook.open_managed_ledgers()) == 1
        await waiting.close()
