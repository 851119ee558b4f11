"""Topic-level service logic not covered end to end: WaitForExclusive producers against
``max_producers_per_topic``, the stored topic epoch, and the periodic purge of inactive
producers from the dedup state (with the injected clock), on an in-process broker."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable
from pathlib import Path

import pytest

from magnetar.broker.deduplication import DeduplicationState
from magnetar.broker.policies import PolicyStore
from magnetar.broker.topic import DEDUP_ROOT, TOPIC_EPOCH_ROOT
from magnetar.common.clock import ManualClock
from magnetar.common.errors import ServerError
from magnetar.common.names import TopicName
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata.store import NotFound
from magnetar.protocol import (
    CloseProducer,
    Error,
    MessageMetadata,
    ProducerAccessMode,
    ProducerSuccess,
    SendReceipt,
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
)

HOUR_S = 3600.0


# --- max producers and the wait queue ---------------------------------------------------------


async def test_queued_producers_do_not_count_toward_max_producers(tmp_path: Path) -> None:
    # Java checks max producers when PRODUCER arrives (ServerCnx, isProducersExceeded) against
    # USER_CREATED_PRODUCER_COUNTER, which internalAddProducer increments only once a
    # WaitForExclusive producer is promoted: the holder counts, queued ones do not. The
    # queue has its own bound (producer_access.DEFAULT_WAITING_PRODUCERS_MAX).
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        name = TopicName.parse(topic)
        policies = PolicyStore(broker.store)
        await policies.update_topic(name, lambda p: p.with_(maxProducerPerTopic=2))
        raw = await AsyncRawClient.open(broker.port)
        wait = ProducerAccessMode.WaitForExclusive
        held = await raw.request(producer_cmd(raw, topic, 1, producer_access_mode=wait))
        assert isinstance(held, ProducerSuccess) and held.producer_ready
        loaded = broker.loaded_topic(name)
        assert loaded is not None
        await wait_until_async(
            lambda: loaded.policies.max_producers_per_topic == 2, timeout_s=TIMEOUT_S
        )
        standby = [producer_cmd(raw, topic, pid, producer_access_mode=wait) for pid in (2, 3, 4)]
        for cmd in standby:  # three queued with a limit of two
            queued = await raw.request(cmd)
            assert isinstance(queued, ProducerSuccess) and not queued.producer_ready
        assert len(loaded.access.waiting) == 3
        # the limit counts connected producers: at 1, the holder alone reaches it
        await policies.update_topic(name, lambda p: p.with_(maxProducerPerTopic=1))
        await wait_until_async(
            lambda: loaded.policies.max_producers_per_topic == 1, timeout_s=TIMEOUT_S
        )
        busy = await raw.request(producer_cmd(raw, topic, 5, producer_access_mode=wait))
        assert isinstance(busy, Error) and busy.error is ServerError.ProducerBusy
        assert busy.message == "Topic reached max producers limit"
        # the holder leaves: the first standby takes over (second PRODUCER_SUCCESS, same id)
        await raw.request(CloseProducer(producer_id=1, request_id=raw.next_id()))
        ready = await raw.answer(standby[0].request_id)
        assert isinstance(ready, ProducerSuccess) and ready.producer_ready
        assert ready.topic_epoch == 1
        assert len(loaded.producers) == 1 and len(loaded.access.waiting) == 2
        await raw.close()


# --- topic epoch --------------------------------------------------------------------------------


async def test_topic_epoch_is_stored_and_restored_on_reopen(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        name = TopicName.parse(topic)
        old = await AsyncRawClient.open(broker.port)
        new = await AsyncRawClient.open(broker.port)
        first = await old.request(
            producer_cmd(old, topic, 1, producer_access_mode=ProducerAccessMode.Exclusive)
        )
        assert isinstance(first, ProducerSuccess) and first.topic_epoch == 0
        fencing = ProducerAccessMode.ExclusiveWithFencing
        taken = await new.request(producer_cmd(new, topic, 1, producer_access_mode=fencing))
        assert isinstance(taken, ProducerSuccess) and taken.topic_epoch == 1
        loaded = broker.loaded_topic(name)
        assert loaded is not None
        # stored before PRODUCER_SUCCESS went out
        got = await broker.store.get(f"{TOPIC_EPOCH_ROOT}/{loaded.ml.name}")
        assert json.loads(got.value) == {"topic_epoch": 1}
        # unload (what a restart or an ownership move does) and open again
        await broker.unload_topic(name)
        reopened = await broker.get_topic(name)
        assert reopened is not loaded and reopened.access.topic_epoch == 1
        stale = await old.request(
            producer_cmd(
                old, topic, 2, producer_access_mode=ProducerAccessMode.Exclusive, topic_epoch=0
            )
        )
        assert isinstance(stale, Error) and stale.error is ServerError.ProducerFenced
        for raw in (old, new):
            await raw.close()


# --- dedup: periodic purge of inactive producers --------------------------------------------


def _send(raw: AsyncRawClient, producer_id: int, name: str, seq: int) -> None:
    md = MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    raw.writer.write(b"".join(encode_send(producer_id, seq, md, b"m")))


async def test_inactive_producers_are_purged_by_the_topic_tick(tmp_path: Path) -> None:
    # §6.4: "Java purges producers inactive for 6 h". The topic's snapshot tick (injected
    # clock) purges them even when nothing new is written, and the stored snapshot follows.
    clock = ManualClock()
    async with running_broker(
        tmp_path, clock=clock, deduplication_enabled=True, dedup_snapshot_interval_ms=1000
    ) as broker:
        topic = new_topic()
        raw = await AsyncRawClient.open(broker.port)
        for pid, name in ((1, "gone"), (2, "stays")):
            created = await raw.request(producer_cmd(raw, topic, pid, producer_name=name))
            assert isinstance(created, ProducerSuccess)
            _send(raw, pid, name, 5)
            receipt = await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
            assert receipt.command.message_id.entry_id >= 0  # type: ignore[attr-defined]
        closed = await raw.request(CloseProducer(producer_id=1, request_id=raw.next_id()))
        assert isinstance(closed, Success)
        loaded = broker.loaded_topic(TopicName.parse(topic))
        assert loaded is not None and loaded.dedup is not None
        dedup: DeduplicationState = loaded.dedup
        assert dedup.producer_count == 2 and dedup.inactive_producer_count == 1

        async def stored_names_after_a_tick() -> set[str]:
            # one more second per poll: the loop sleeps on the manual clock
            clock.advance(1.0)
            try:
                got = await broker.store.get(f"{DEDUP_ROOT}/{loaded.ml.name}")
            except NotFound:
                return set()
            return set(json.loads(json.loads(got.value)["snapshot"])["persisted"])

        await wait_until_async(
            lambda: _eq(stored_names_after_a_tick(), {"gone", "stays"}), timeout_s=TIMEOUT_S
        )
        assert dedup.producer_count == 2  # seconds later: nobody purged yet
        clock.advance(6 * HOUR_S)
        # purged by the tick although nothing new was written; the snapshot follows
        await wait_until_async(
            lambda: _eq(stored_names_after_a_tick(), {"stays"}), timeout_s=TIMEOUT_S
        )
        assert dedup.producer_count == 1 and dedup.inactive_producer_count == 0
        assert dedup.last_sequence_id("gone") == -1 and dedup.last_sequence_id("stays") == 5
        # a producer coming back under the purged name starts afresh
        again = await raw.request(producer_cmd(raw, topic, 3, producer_name="gone"))
        assert isinstance(again, ProducerSuccess) and again.last_sequence_id == -1
        await raw.close()


async def _eq(got: Awaitable[set[str]], expected: set[str]) -> bool:
    return await got == expected


async def test_switching_deduplication_on_while_sends_are_stored_answers_every_send(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # SENDs taken while deduplication was off may be stored after the topic switched it on:
    # each is still receipted (none recorded), and nothing raises in the storage callbacks
    async with running_broker(tmp_path) as broker:
        topic = new_topic()
        name = TopicName.parse(topic)
        raw = await AsyncRawClient.open(broker.port)
        created = await raw.request(producer_cmd(raw, topic, 1, producer_name="p"))
        assert isinstance(created, ProducerSuccess)
        loaded = broker.loaded_topic(name)
        assert loaded is not None and loaded.dedup is None
        policies = PolicyStore(broker.store)
        switched = asyncio.ensure_future(
            policies.update_topic(name, lambda p: p.with_(deduplicationEnabled=True))
        )
        seq = 0
        async with asyncio.timeout(TIMEOUT_S):
            while loaded.dedup is None:  # bursts in flight throughout the switch
                for _ in range(50):
                    _send(raw, 1, "p", seq)
                    seq += 1
                await asyncio.sleep(0.001)
        await switched
        answered = set()
        while len(answered) < seq:
            frame = await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
            answered.add(frame.command.sequence_id)  # type: ignore[attr-defined]
        assert answered == set(range(seq))
        assert "raised" not in caplog.text


def test_purge_is_bounded_per_call_and_oldest_first() -> None:
    clock = ManualClock()
    state = DeduplicationState(clock, producer_inactivity_timeout_ms=1000)
    for i in range(25):
        state.replay_entry(f"p{i:02}", i)  # restored/replayed names count as inactive
        clock.advance(0.01)
    state.producer_added("p03")  # reconnected: never purged while connected
    clock.advance(2)
    assert state.purge_inactive(max_names=10) == [f"p{i:02}" for i in range(11) if i != 3]
    assert state.inactive_producer_count == 14
    assert state.purge_inactive(max_names=10)[0] == "p11"
    assert state.purge_inactive(max_names=10) == [f"p{i:02}" for i in range(21, 25)]
    assert state.producer_count == 1 and state.last_sequence_id("p03") == 3


def test_purge_waits_for_the_oldest_not_yet_expired() -> None:
    clock = ManualClock()
    state = DeduplicationState(clock, producer_inactivity_timeout_ms=1000)
    for name in ("a", "b"):
        state.check(name, 1)
        state.record_persisted(name, 1)
    state.producer_removed("a")
    clock.advance(0.6)
    state.producer_removed("b")
    state.producer_removed("never-sent")  # not tracked: nothing to forget
    assert state.inactive_producer_count == 2
    clock.advance(0.5)
    assert state.purge_inactive() == ["a"]
    state.producer_added("b")
    state.producer_removed("b")  # inactive again: its clock restarts
    clock.advance(0.9)
    assert state.purge_inactive() == []
    clock.advance(0.2)
    assert state.purge_inactive() == ["b"]


def test_snapshot_keeps_connected_then_most_recently_inactive() -> None:
    clock = ManualClock()
    state = DeduplicationState(clock, max_producers_in_snapshot=3)
    for name in ("a", "z", "b", "c", "d"):
        state.check(name, 1)
        state.record_persisted(name, 1)
    for name in ("b", "c", "d"):  # d went inactive last
        clock.advance(1)
        state.producer_removed(name)
    restored = DeduplicationState(clock)
    restored.restore(state.snapshot())
    kept = {n for n in "abcdz" if restored.last_sequence_id(n) == 1}
    assert kept == {"a", "z", "d"}


# --- ledger storage per quorums ----------------------------------------------------------------


async def test_topics_share_a_ledger_storage_per_quorums_and_a_change_gives_a_topic_its_own(
    tmp_path: Path,
) -> None:
    """Topics with the same quorums create their ledgers through one storage object; a
    topic whose persistence policy changes gets the storage of its new quorums, and the
    others keep theirs (the shared one is never changed in place)."""
    async with running_broker(tmp_path) as service:
        a = await service.get_topic(TopicName.parse(new_topic()))
        b = await service.get_topic(TopicName.parse(new_topic()))
        shared = a.ml.storage
        assert b.ml.storage is shared
        a.apply_policies(dataclasses.replace(a.policies, ensemble_size=2, write_quorum=2))
        assert isinstance(a.ml.storage, LedgerClientStorage)
        assert (a.ml.storage.ensemble_size, a.ml.storage.write_quorum) == (2, 2)
        assert b.ml.storage is shared
        assert isinstance(shared, LedgerClientStorage)
        assert (shared.ensemble_size, shared.write_quorum) == (1, 1)
