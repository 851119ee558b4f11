"""The compactor over real in-process bookies: a broker service's topics are written
through ``Topic.publish`` (entries as producers store them), compacted, and read back
through the compacted view as a read-compacted subscription does."""

from __future__ import annotations

import pytest

from magnetar.broker.compactor import (
    COMPACTION_SUBSCRIPTION,
    CompactionInProgress,
    read_compacted_of,
)
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.common.errors import NotAllowed, TopicNotFound
from magnetar.common.names import TopicName
from magnetar.managed_ledger.compaction import CompactedCursorReader
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.protocol import CompressionType, Subscribe, SubType
from magnetar.testing import wait_until_async

from .conftest import Cluster
from .messages import Msg, batch_entry, open_entry, single_entry

TOPIC = "persistent://public/default/table"


async def publish(topic: Topic, data: bytes) -> None:
    messages = len(open_entry(data))
    await topic.publish(data, messages)


async def produce_updates(topic: Topic, rounds: int, keys: list[str], tag: str) -> dict[str, bytes]:
    """``rounds`` updates of every key, alternating batches (LZ4) and single messages;
    returns the latest value of each key."""
    latest: dict[str, bytes] = {}
    for r in range(rounds):
        if r % 2:
            batch = [Msg(k, f"{tag}{r}-{k}".encode()) for k in keys]
            await publish(topic, batch_entry(batch, CompressionType.LZ4))
        else:
            for k in keys:
                await publish(topic, single_entry(Msg(k, f"{tag}{r}-{k}".encode())))
        for k in keys:
            latest[k] = f"{tag}{r}-{k}".encode()
    return latest


async def read_compacted(service: BrokerService, topic: Topic, name: str) -> list[Msg]:
    """Everything a reader from the earliest message with read_compacted receives."""
    cursor = await topic.ml.open_cursor(name, durable=False, earliest=True)
    reader = CompactedCursorReader(cursor, topic.ml.ledgers)
    out: list[Msg] = []
    while True:
        entries = await reader.read_entries(lambda: service.compactor.view(topic), 7, lambda: True)
        if not entries:
            break
        for e in entries:
            out.extend(open_entry(e.data))
    await topic.ml.delete_cursor(name)
    return out


def as_table(msgs: list[Msg]) -> dict[str | None, bytes]:
    table: dict[str | None, bytes] = {}
    for m in msgs:
        assert m.key not in table, f"key {m.key} delivered twice"
        table[m.key] = m.value
    return table


async def test_compacted_view_then_live_tail(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = await service.get_topic(TopicName.parse(TOPIC))
    keys = ["a", "b", "c", "d"]
    latest = await produce_updates(topic, 9, keys, "v")
    await publish(topic, single_entry(Msg("c", b"")))  # tombstone
    await publish(topic, batch_entry([Msg("d", b"x", null_value=True), Msg("a", b"final")]))
    del latest["c"], latest["d"]
    latest["a"] = b"final"
    assert service.compactor.compaction_status(TOPIC) == {"status": "NOT_RUN", "lastError": ""}

    result = await service.compactor.compact(topic)

    assert service.compactor.compaction_status(TOPIC) == {"status": "SUCCESS", "lastError": ""}
    assert result.horizon == topic.ml.last_confirmed
    assert result.keys == 2
    assert 0 < result.entries_written < result.entries_read
    compacted = await read_compacted(service, topic, "r1")
    assert as_table(compacted) == latest
    # messages produced after compaction follow the compacted view
    await publish(topic, single_entry(Msg("b", b"after-1")))
    await publish(topic, single_entry(Msg("e", b"after-2")))
    after = await read_compacted(service, topic, "r2")
    assert after[: len(compacted)] == compacted
    assert after[len(compacted) :] == [Msg("b", b"after-1"), Msg("e", b"after-2")]
    # the compaction cursor holds the horizon
    cursor = topic.ml.cursors[COMPACTION_SUBSCRIPTION]
    assert cursor.mark_delete_position == result.horizon


async def test_recompaction_replaces_ledger_and_survives_restart(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = await service.get_topic(TopicName.parse(TOPIC))
    latest = await produce_updates(topic, 4, ["a", "b", "c"], "one")
    first = await service.compactor.compact(topic)
    latest.update(await produce_updates(topic, 3, ["c", "d"], "two"))
    await publish(topic, single_entry(Msg("a", b"")))
    del latest["a"]
    second = await service.compactor.compact(topic)
    assert second.ledger_id != first.ledger_id
    assert not await cluster.ledger_exists(first.ledger_id)
    assert await cluster.ledger_exists(second.ledger_id)
    assert as_table(await read_compacted(service, topic, "r")) == latest
    # nothing new: compaction is a no-op that keeps the view
    again = await service.compactor.compact(topic)
    assert again.ledger_id == second.ledger_id

    await service.close()
    restarted = await cluster.broker()
    topic = await restarted.get_topic(TopicName.parse(TOPIC))
    view = await restarted.compactor.view(topic)
    assert view is not None and view.ledger_id == second.ledger_id
    assert view.horizon == second.horizon
    assert restarted.compactor.compaction_status(TOPIC)["status"] == "NOT_RUN"
    assert as_table(await read_compacted(restarted, topic, "r")) == latest


async def test_view_outlives_trimmed_ledgers(cluster: Cluster) -> None:
    # small ledgers, retention 0: once compacted, the compacted ledgers are trimmed
    service = await cluster.broker(ManagedLedgerConfig(ledger_entries_max=5))
    topic = await service.get_topic(TopicName.parse(TOPIC))
    latest = await produce_updates(topic, 8, ["a", "b", "c"], "v")
    ledgers_before = topic.ml.ledger_ids()
    assert len(ledgers_before) > 3
    await service.compactor.compact(topic)
    await publish(topic, single_entry(Msg("z", b"tail")))  # rolls past the horizon's ledger
    trimmed = await topic.ml.trim()
    assert trimmed, "the compacted ledgers should have been trimmed"
    assert topic.ml.ledgers.first_position[0] > ledgers_before[-2]
    got = await read_compacted(service, topic, "r")
    assert as_table(got[:-1]) == latest
    assert got[-1] == Msg("z", b"tail")


async def test_trigger_status_and_in_progress(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = await service.get_topic(TopicName.parse(TOPIC))
    await produce_updates(topic, 30, [f"k{i}" for i in range(20)], "v")
    await service.compactor.trigger_compaction(TOPIC)
    assert service.compactor.compaction_status(TOPIC)["status"] == "RUNNING"
    with pytest.raises(CompactionInProgress):
        await service.compactor.trigger_compaction(TOPIC)

    def done() -> bool:
        return service.compactor.compaction_status(TOPIC)["status"] == "SUCCESS"

    await wait_until_async(done, timeout_s=60)
    with pytest.raises(TopicNotFound):
        await service.compactor.trigger_compaction("persistent://public/default/missing")


def test_read_compacted_only_for_exclusive_and_failover() -> None:
    def cmd(sub_type: SubType, read_compacted: bool | None) -> Subscribe:
        return Subscribe(
            topic=TOPIC,
            subscription="s",
            sub_type=sub_type,
            consumer_id=1,
            request_id=1,
            read_compacted=read_compacted,
        )

    assert read_compacted_of(cmd(SubType.Exclusive, True))
    assert read_compacted_of(cmd(SubType.Failover, True))
    assert not read_compacted_of(cmd(SubType.Shared, None))
    with pytest.raises(NotAllowed):
        read_compacted_of(cmd(SubType.Shared, True))
    with pytest.raises(NotAllowed):
        read_compacted_of(cmd(SubType.Key_Shared, True))
