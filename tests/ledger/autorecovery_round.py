"""The controller's autorecovery loop, played by a test against real bookies: one round
feeds the replica state machine the registrations and a tick, and carries out its tasks
with :func:`rereplicate_fragment` (the processes' own loops are tested in
``tests/cluster/test_autorecovery.py``)."""

from __future__ import annotations

import asyncio

from magnetar.broker.controller import ReplicaStateMachine, ReplicateFragment
from magnetar.common.errors import MagnetarError
from magnetar.ledger import LedgerClient
from magnetar.ledger.rereplication import rereplicate_fragment


async def controller_round(
    machine: ReplicaStateMachine, client: LedgerClient
) -> list[ReplicateFragment]:
    """One round; the tasks it ran."""
    loop = asyncio.get_running_loop()
    now_ms = int(loop.time() * 1000)
    registered = set(await client.available_bookies())
    effects = []
    tasks: list[ReplicateFragment] = []
    for bookie in sorted(registered - machine.live_bookies):
        effects += machine.bookie_joined(bookie, now_ms)
    for bookie in sorted(machine.live_bookies - registered):
        effects += machine.bookie_left(bookie, now_ms)
    effects += machine.tick(now_ms)
    for effect in effects:
        if not isinstance(effect, ReplicateFragment):
            continue
        tasks.append(effect)
        try:
            written, written_version = await rereplicate_fragment(
                client,
                effect.ledger_id,
                effect.first_entry,
                effect.bookie_index,
                effect.missing_bookie,
                effect.target_bookie,
            )
        except (MagnetarError, ValueError):
            machine.fragment_failed(effect, int(loop.time() * 1000))
        else:
            machine.fragment_replicated(effect, written, written_version, int(loop.time() * 1000))
    return tasks
