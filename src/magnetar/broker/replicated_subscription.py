"""Whether a subscription is replicated (Pulsar's PIP-33): a durable cursor property
``pulsar.replicated.subscription`` = 1, as Pulsar stores it, so the flag survives restarts
and moves with the topic. Set by SUBSCRIBE with ``replicate_subscription_state`` and by
admin (``…/subscription/{sub}/replicatedSubscriptionStatus``); read by the replicated
subscriptions controller (:mod:`magnetar.replication.replicated_subscriptions`) and stats
(``isReplicated``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_cursor import ManagedCursor

REPLICATED_SUBSCRIPTION_PROPERTY = "pulsar.replicated.subscription"


def is_replicated(cursor: ManagedCursor) -> bool:
    return cursor.state.properties.get(REPLICATED_SUBSCRIPTION_PROPERTY, 0) == 1


async def set_replicated(cursor: ManagedCursor, replicated: bool) -> None:
    """Flag or unflag ``cursor``'s subscription as replicated, persisted before returning
    (raises the cursor's storage errors). A non-durable cursor is never replicated."""
    if not cursor.durable or is_replicated(cursor) == replicated:
        return
    state = cursor.state
    if replicated:
        state.properties[REPLICATED_SUBSCRIPTION_PROPERTY] = 1
    else:
        state.properties.pop(REPLICATED_SUBSCRIPTION_PROPERTY, None)
    state.version += 1  # a change to persist
    await cursor.persist()
