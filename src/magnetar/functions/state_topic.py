"""The asyncio shell of :mod:`magnetar.functions.state_store`: reads a function's state topic
into a :class:`StateStore` and publishes the store's writes.

    topic = StateTopic(client, "persistent://public/default/__state__wc", store)
    await topic.open()          # reads the compacted topic to its end
    await topic.catch_up()      # applies what other instances wrote since (one round trip)
    await topic.publish(store.take_writes())   # one batch: stored all or nothing

From outside the instances (the REST state routes): :func:`query_state` reads the topic into a
fresh store and answers one key; :func:`put_state` publishes one value record.
"""

from __future__ import annotations

from magnetar.client import Client, MessageId, Producer, Reader
from magnetar.functions.state_store import (
    STATE_WRITES_PER_MESSAGE_MAX,
    StateEntry,
    StateRecord,
    StateStore,
)

OUTSIDE_WRITER_ID = -1
"""The store id of a reader or writer outside the instances: it writes values only (Pulsar
refuses counters in ``putstate``), never a counter register."""
STATE_BATCH_BYTES_MAX = 5 * 1024 * 1024
"""The batch of one message's state writes (keys, values and JSON around them) stays under
the broker's frame limit with :data:`STATE_WRITES_PER_MESSAGE_MAX` full values."""


class StateTopic:
    """Owns a reader (compacted view, from the earliest record) and a producer on the state
    topic. Errors are the client's (a broker that refuses, a timeout) and propagate."""

    def __init__(self, client: Client, topic: str, store: StateStore) -> None:
        self._client = client
        self._topic = topic
        self._store = store
        self._reader: Reader | None = None
        self._producer: Producer | None = None

    @property
    def topic(self) -> str:
        return self._topic

    async def open(self, *, read: bool = True, write: bool = True) -> None:
        """With ``read``, read the topic to its end (and :meth:`catch_up` later); with
        ``write``, make the producer :meth:`publish` needs."""
        if read:
            self._reader = await self._client.create_reader(
                self._topic, MessageId.earliest, is_read_compacted=True
            )
        if write:
            await self._open_producer()
        if read:
            await self.catch_up()

    async def _open_producer(self) -> None:
        producer = await self._client.create_producer(
            self._topic,
            batching_enabled=True,
            batching_max_messages=STATE_WRITES_PER_MESSAGE_MAX,
            batching_max_allowed_size_in_bytes=STATE_BATCH_BYTES_MAX,
            # Only flush() closes a batch: one message's writes must be one entry.
            batching_max_publish_delay_ms=3_600_000,
        )
        assert isinstance(producer, Producer)  # the state topic is never partitioned
        self._producer = producer

    async def catch_up(self) -> int:
        """Apply every record written so far (by any instance). Returns how many."""
        reader = self._reader
        assert reader is not None, "open() first"
        applied = 0
        while await reader.has_message_available():
            msg = await reader.read_next()
            self._store.apply(msg.partition_key(), msg.data())
            applied += 1
        return applied

    async def publish(self, records: list[StateRecord]) -> None:
        """Publish ``records`` as one batch and wait until the broker stored it."""
        if not records:
            return
        producer = self._producer
        assert producer is not None, "open() first"
        futures = [producer.send_async(r.payload, partition_key=r.key) for r in records]
        await producer.flush()
        for fut in futures:
            await fut

    async def close(self) -> None:
        for handle in (self._reader, self._producer):
            if handle is not None:
                await handle.close()
        self._reader = self._producer = None


async def query_state(client: Client, topic: str, key: str) -> StateEntry | None:
    """What ``key`` holds in state topic ``topic``, read to its end now (None: nothing)."""
    store = StateStore(OUTSIDE_WRITER_ID)
    state = StateTopic(client, topic, store)
    try:
        await state.open(write=False)
        return store.lookup(key)
    finally:
        await state.close()


async def put_state(client: Client, topic: str, key: str, value: bytes) -> None:
    """Store ``value`` under ``key`` in state topic ``topic`` (last writer wins, as for an
    instance's ``put_state``). Raises :class:`StateError` for a key or value too large."""
    store = StateStore(OUTSIDE_WRITER_ID)
    store.put_state(key, value)
    state = StateTopic(client, topic, store)
    try:
        await state.open(read=False)
        await state.publish(store.take_writes())
    finally:
        await state.close()
