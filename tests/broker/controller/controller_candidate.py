"""A controller candidate process for the multi-process controller tests.

Usage: python controller_candidate.py <store-url> <broker-id> <log-file> <session-timeout-s>

Campaigns with :class:`ControllerElection`. On winning it logs ``LEADER <epoch>`` and one
``STATE <bundle> <state> <broker> <epoch>`` line per bundle it resumed. If no namespace is
known yet it looks up ``persistent://public/default/t`` and acknowledges, as the brokers
would, the first two assignments. Then, every 100 ms, it makes a change — adds namespace
``<broker-id>/n<i>`` — logging ``WRITE_OK <i>`` or ``WRITE_REJECTED <i> <error>``; after a
rejection it stops. Commands are logged as ``COMMAND <kind> <bundle> <broker> <epoch>``.
Every line starts with the unix time.
"""

from __future__ import annotations

import asyncio
import sys
import time

from magnetar.broker.controller import BrokerCommand, NamespaceBundles
from magnetar.broker.controller.election import ControllerElection
from magnetar.common.clock import SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.metadata import connect

CHANGE_INTERVAL_S = 0.1


async def main(url: str, broker_id: str, log_path: str, session_timeout_s: float) -> None:
    with open(log_path, "a", buffering=1) as log:

        def emit(*parts: object) -> None:
            log.write(" ".join([f"{time.time():.6f}", *map(str, parts)]) + "\n")

        class LogCommands:
            async def send(self, command: BrokerCommand) -> None:
                kind = type(command).__name__
                emit("COMMAND", kind, command.bundle, command.broker, command.epoch)

        store = await connect(url, session_timeout_s=session_timeout_s)
        controller = ControllerElection(
            store, broker_id, commands=LogCommands(), clock=SystemClock()
        )
        emit("CAMPAIGN", broker_id)
        epoch = await controller.campaign()
        emit("LEADER", epoch)
        machine = controller.machine
        for bundle, record in machine.records.items():
            emit("STATE", bundle, record.state.value, record.broker, record.epoch)
        if not machine.namespaces:
            await controller.lookup("persistent://public/default/t")
            for bundle, record in list(machine.records.items())[:2]:
                assert record.broker is not None
                await controller.ownership_acquired(bundle, record.broker, epoch)
            emit("READY", epoch)
        for i in range(1_000_000):
            try:
                await controller.namespace_added(NamespaceBundles.default(f"{broker_id}/n{i}", 1))
            except MagnetarError as exc:
                emit("WRITE_REJECTED", i, type(exc).__name__)
                break
            emit("WRITE_OK", i)
            await asyncio.sleep(CHANGE_INTERVAL_S)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
