"""The controller runner reads the namespace isolation policies once per tick while it
leads (its sync reads them), and on its own timer only while campaigning.

It used to read them twice per tick while leading: once in every sync and once more in
the timer loop that keeps them current for a broker still campaigning. One broker on an
in-memory store with a manual clock; each read of the policies is attributed to the task
that made it.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.controller.election import REGISTRATIONS_PATH
from magnetar.broker.controller.isolation import isolation_policies_path
from magnetar.broker.controller.runner import ControllerRunner
from magnetar.common.clock import ManualClock
from magnetar.metadata import connect
from magnetar.metadata.store import GetResult
from magnetar.testing import wait_until_async

TICK_MS = 1_000
TICKS = 5
TIMEOUT_S = 15.0


async def test_a_leading_controller_reads_the_isolation_policies_only_in_its_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await connect("memory:isolation-reads")
    clock = ManualClock()
    runner = ControllerRunner(store, "b1:6650", clock=clock, tick_interval_ms=TICK_MS)
    readers: list[str] = []
    path = isolation_policies_path("standalone")
    store_get = store.get

    async def recorded_get(p: str) -> GetResult:
        if p == path:
            task = asyncio.current_task()
            readers.append("?" if task is None else task.get_name())
        return await store_get(p)

    monkeypatch.setattr(store, "get", recorded_get)
    try:
        await store.create(f"{REGISTRATIONS_PATH}/b1:6650", b"{}", ephemeral=True)
        runner.start()
        await wait_until_async(
            lambda: "controller" in readers, timeout_s=TIMEOUT_S, what="the first sync"
        )
        readers.clear()
        for tick in range(1, TICKS + 1):
            clock.advance(TICK_MS / 1000)
            await wait_until_async(
                lambda tick=tick: readers.count("controller") >= tick,
                timeout_s=TIMEOUT_S,
                what=f"the sync of tick {tick}",
            )
        # The timer loop, when it reads, wakes at the same advance and reads in fewer
        # steps than the sync: its reads would be in by now.
        assert set(readers) == {"controller"}, readers
    finally:
        await runner.close()
        await store.close()
