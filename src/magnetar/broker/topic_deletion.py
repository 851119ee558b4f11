"""Deleting a topic and everything stored for it: what ``admin topics delete`` and the
inactive-topic check (:mod:`magnetar.broker.inactive_topics`) both do."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from magnetar.broker.policies import PolicyStore
from magnetar.broker.topic import DEDUP_ROOT, TOPIC_EPOCH_ROOT, Topic
from magnetar.managed_ledger.metadata_layout import ledger_path
from magnetar.metadata.store import NotFound

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


async def delete_topic_storage(service: BrokerService, topic: Topic) -> None:
    """Unload ``topic`` (a non-partitioned topic or one partition; its clients are told to
    go) and delete its ledgers, cursors, dedup snapshot, epoch, topic policies and schema
    (not a partition's: that is its partitioned topic's). The caller decides whether the
    topic may go (connected clients, subscriptions)."""
    name = topic.name
    await service.unload_topic(name)
    ml = topic.ml
    for cursor in list(ml.cursors):
        with contextlib.suppress(Exception):
            await ml.delete_cursor(cursor)
    for ledger_id in ml.ledger_ids():
        await service.storage.delete_ledger(ledger_id)
    with contextlib.suppress(NotFound):
        await service.store.delete_recursive(ledger_path(ml.name))
    for state_root in (DEDUP_ROOT, TOPIC_EPOCH_ROOT):
        with contextlib.suppress(NotFound):
            await service.store.delete(f"{state_root}/{ml.name}")
    await PolicyStore(service.store, on_written=service.policies.written).delete_topic(name)
    if not name.is_partition:  # partitions share their partitioned topic's schema
        await service.schemas.registry.delete(name, force=True)
