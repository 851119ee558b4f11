"""The replicator of one topic to one remote cluster: the asyncio shell around
:class:`~magnetar.replication.replicator.ReplicatorCore` (Pulsar's ``PersistentReplicator``).

* Reads the topic's managed ledger through the durable cursor ``pulsar.repl.<remote>``
  (created by :meth:`PersistentReplicator.open_cursor` at the end of the log: messages
  written before the topic replicated to ``remote`` are not sent), so the replication
  backlog is that cursor's backlog and retention keeps what it has not passed.
* Sends through a ``magnetar.client`` producer named ``pulsar.repl.<local>--><remote>`` on
  the remote cluster (looked up through the remote's ``brokerServiceUrl`` in this cluster's
  registry, :mod:`magnetar.replication.cluster_registry`), each entry as stored with
  ``replicated_from = <local>`` added to its metadata (keys, properties, event time kept),
  under the replicator's producer name and a sequence id derived from its position
  (:func:`forwarded_metadata` says why).
* Schemas go before their messages (Pulsar's PIP-88): an entry written with a schema
  version is sent only once that schema, read from this cluster's registry, is registered
  on the remote topic (GET_OR_CREATE_SCHEMA), and it carries the remote's version of it
  (the two registries number their versions independently). A version this cluster no
  longer holds is sent as it is.
* Moves the cursor only over entries the remote receipted or the rules skipped.
* A failure (remote unreachable for 5 s, producer refused, a schema refused, a send
  failing) closes the producer and client without waiting for what is in flight, rewinds the cursor to its mark-delete position
  and tries again after a backoff (100 ms doubling to 30 s, back to 100 ms only once the
  remote receipted an entry); :meth:`PersistentReplicator.stop` ends it.
* :attr:`PersistentReplicator.connected` is what stats report: the remote's producer
  connected and the remote answering (no receipt owed for :data:`STALLED_AFTER_S`; idle,
  the connection's keep-alive closes it within :data:`STALLED_AFTER_S`).
* :meth:`PersistentReplicator.stop` returns without waiting for the remote (a paused remote
  must not hold the topic's unload).
* The replication delay (:meth:`PersistentReplicator.delay_s`) runs from the publish time
  of the oldest entry not receipted: the oldest in flight while connected, else the one
  read when the last attempt started or failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.stats import RateMeter
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ProtocolError
from magnetar.common.names import TopicName
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.managed_ledger import Entry as StoredEntry
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.entry import Entry, decode_metadata, encode_metadata
from magnetar.protocol.markers import REPLICATED_SUBSCRIPTION_MARKERS
from magnetar.protocol.metadata import MessageMetadata
from magnetar.replication.cluster_registry import ClusterNotRegistered, remote_cluster
from magnetar.replication.replicator import LOCAL_ONLY, Forward, ReplicatorCore, should_forward
from magnetar.schema import version_number
from magnetar.schema.registry import StoredSchema, schema_id

if TYPE_CHECKING:
    from magnetar.client.backoff import Backoff
    from magnetar.client.producer import Producer

log = logging.getLogger(__name__)

CURSOR_PREFIX = "pulsar.repl."
READ_ENTRIES_MAX = 100
OPERATION_TIMEOUT_S = 5.0
"""How long one attempt waits for the remote (lookup, producer creation) before backing
off: short, so a down remote is retried and the replication delay re-read often."""


STALLED_AFTER_S = OPERATION_TIMEOUT_S
"""A remote that owes a receipt this long counts as not connected in stats."""
KEEP_ALIVE_INTERVAL_S = STALLED_AFTER_S / 2
"""The replicator's connection is closed when nothing arrived from the remote over one
interval after a PING: an idle replicator, owing no receipt, notices a paused remote within
two intervals, as soon as a busy one does (the client default, 30 s, would leave a paused
remote's connection open for a minute)."""


def cursor_name(remote: str) -> str:
    """The durable cursor of the replicator to ``remote`` (Pulsar's name)."""
    return f"{CURSOR_PREFIX}{remote}"


def producer_name(local: str, remote: str) -> str:
    """The replicator's producer name on the remote cluster (Pulsar's name)."""
    return f"{CURSOR_PREFIX}{local}-->{remote}"


def parse_entry(data: bytes) -> tuple[MessageMetadata, bytes, int]:
    """``(metadata, payload, messages)`` of a stored entry. Raises ProtocolError if
    malformed."""
    entry = Entry(data)
    return decode_metadata(entry.metadata_bytes), bytes(entry.payload), entry.metadata.num_messages


class SchemaSource(Protocol):
    """Where the replicator reads the schema versions of the local topic (the broker's
    :class:`~magnetar.schema.registry.SchemaRegistry`)."""

    async def get(self, topic: TopicName, version: int | None = None) -> StoredSchema | None: ...


def forwarded_metadata(
    original: MessageMetadata,
    local: str,
    remote: str,
    sequence_id: int,
    schema_version: bytes | None = None,
) -> bytes:
    """The metadata sent for an entry: ``replicated_from = local``, and the replicator's
    producer name and the entry's ``sequence_id`` (from its source position) in place of
    the original ones, because the remote's deduplication rebuilds its state after a crash
    from its stored entries' metadata: with the original ones there, a restarted remote
    would take entries sent again as new. Everything else as stored (keys, properties,
    event and publish time, batch, compression), and the schema version: the remote's
    ``schema_version`` when given, else the original."""
    return encode_metadata(
        dataclasses.replace(
            original,
            schema_version=schema_version or original.schema_version,
            replicated_from=local,
            producer_name=producer_name(local, remote),
            sequence_id=sequence_id,
            highest_sequence_id=sequence_id,
        )
    )


class ReplicatorStats:
    """What one replicator records: messages and bytes receipted by the remote, and its
    connection (since when, to which URL)."""

    def __init__(self, clock: Clock) -> None:
        self.msg_out = RateMeter(clock)
        self.connected_since_ms: int | None = None
        self.remote_url = ""
        self.stalled_publish_ms: int | None = None
        """While not connected: publish time of the oldest entry not replicated (read when
        a connection attempt starts; None: none, or not known)."""


class PersistentReplicator:
    """Replicates ``topic`` (its managed ledger ``ml``) from ``local`` to ``remote``.
    :meth:`open_cursor` (awaited), then :meth:`start`; :meth:`stop` to end."""

    def __init__(
        self,
        *,
        topic: str,
        ml: ManagedLedger,
        local: str,
        remote: str,
        store: MetadataStore,
        clock: Clock,
        schemas: SchemaSource | None = None,
        authentication: Any = None,
        in_flight_max: int = 1000,
    ) -> None:
        self.topic = topic
        self.ml = ml
        self.local = local
        self.remote = remote
        self._store = store
        self.clock = clock
        self._schemas = schemas
        self._authentication = authentication
        self.in_flight_max = in_flight_max
        self._cursor: ManagedCursor | None = None
        self._task: asyncio.Task[None] | None = None
        self._session: _Session | None = None
        self.stats = ReplicatorStats(clock)

    async def open_cursor(self) -> ManagedCursor:
        """The replicator's durable cursor, created at the end of the log if missing."""
        if self._cursor is None:
            self._cursor = await self.ml.open_cursor(cursor_name(self.remote))
        return self._cursor

    @property
    def backlog_messages(self) -> int:
        """Messages not yet replicated (the cursor's backlog; 0 before it opened)."""
        return 0 if self._cursor is None else self._cursor.backlog_messages

    @property
    def connected(self) -> bool:
        """Whether the producer on the remote cluster is connected now (the client notices
        a lost connection at once and reconnects on its own) and the remote answers: not
        when it has owed a receipt for :data:`STALLED_AFTER_S` (a paused or hung remote
        keeps its TCP connections open)."""
        session = self._session
        if session is None or not session.producer.is_connected():
            return False
        since = session.unanswered_since_ms
        return since is None or self.clock.now_ms() - since < STALLED_AFTER_S * 1000

    def delay_s(self) -> int:
        """Seconds since the oldest message not yet replicated was published (0: none)."""
        if self.backlog_messages == 0:
            return 0
        session = self._session
        oldest = (
            session.core.oldest_publish_ms if session is not None else self.stats.stalled_publish_ms
        )
        return 0 if not oldest else max(0, self.clock.now_ms() - oldest) // 1000

    async def _peek_oldest(self, cursor: ManagedCursor) -> None:
        """Note the publish time of the first entry the remote has not receipted."""
        position = cursor.state.first_unacked()
        try:
            data = await self.ml.read_range(*position, position.entry_id, read_ahead=False)
            self.stats.stalled_publish_ms = Entry(data[0]).metadata.publish_time if data else None
        except (MagnetarError, IndexError):
            self.stats.stalled_publish_ms = None

    def start(self) -> None:
        assert self._task is None, "started twice"
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replicator-{self.topic}-{self.remote}"
        )

    async def stop(self) -> None:
        """Stop sending (what is in flight may still be stored by the remote: the
        deduplication there refuses it when the next owner sends it again)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        # imported here: the client costs the broker's start-up ~90 ms, most never replicate
        from magnetar.client.backoff import Backoff

        backoff = Backoff(100, 30_000)
        while True:
            try:
                await self._replicate(backoff)
            except asyncio.CancelledError:
                raise
            except (MagnetarError, ClusterNotRegistered, OSError) as exc:
                log.warning("replicator %s -> %s: %s (retrying)", self.topic, self.remote, exc)
            if self._cursor is not None:
                await self._peek_oldest(self._cursor)
            await self.clock.sleep(backoff.next_ms() / 1000)

    async def _replicate(self, backoff: Backoff) -> None:
        """One connection's life: returns or raises when it ends."""
        from magnetar.client import Client
        from magnetar.client.producer import Producer

        cursor = await self.open_cursor()
        cursor.rewind()  # from the first entry the remote has not receipted
        await self._peek_oldest(cursor)
        cluster = await remote_cluster(self._store, self.remote)
        client = Client(
            cluster.broker_service_url,
            authentication=self._authentication,
            operation_timeout_seconds=OPERATION_TIMEOUT_S,
            keep_alive_interval_seconds=KEEP_ALIVE_INTERVAL_S,
        )
        try:
            created = await client.create_producer(
                self.topic,
                producer_name=producer_name(self.local, self.remote),
                batching_enabled=False,
                max_pending_messages=self.in_flight_max * 2,
            )
            assert isinstance(created, Producer), "replicating one partition at a time"
            self.stats.remote_url = cluster.broker_service_url
            self.stats.connected_since_ms = self.clock.now_ms()
            await self._forward(cursor, created, backoff)
        finally:
            # not flushed: what is in flight is sent again from the cursor (by this
            # replicator or the topic's next owner), and a paused remote would hold a stop,
            # and with it the topic's unload, for the send timeout
            with contextlib.suppress(MagnetarError, OSError):
                await client.close(flush=False)

    async def _forward(self, cursor: ManagedCursor, producer: Producer, backoff: Backoff) -> None:
        """Send what the cursor reads until a send fails (raises MagnetarError). The
        backoff starts again from its shortest only once the remote receipted something:
        a remote that takes the producer but refuses what follows (a schema, a send) is
        retried ever more slowly, not ten times a second."""
        session = self._session = _Session(self, cursor, producer)
        try:
            await self._forward_session(session, cursor)
        finally:
            if session.receipts:
                backoff.reset()
            oldest = session.core.oldest_publish_ms
            self._session = None
            if oldest is not None:
                self.stats.stalled_publish_ms = oldest

    async def _forward_session(self, session: _Session, cursor: ManagedCursor) -> None:
        while True:
            if not session.core.can_read:
                session.room.clear()
                await session.until_failed(asyncio.ensure_future(session.room.wait()))
            session.check()
            reading = asyncio.ensure_future(
                cursor.read_entries_or_wait(min(READ_ENTRIES_MAX, self.in_flight_max))
            )
            await session.until_failed(reading)
            session.check()
            for stored in reading.result():
                version = session.unregistered_schema(stored)
                if version is not None:
                    await session.register_schema(version)
                session.send(stored)

    async def remote_schema_version(self, producer: Producer, version: bytes) -> bytes | None:
        """Register the local schema ``version`` on the remote topic through ``producer``:
        the remote's version of it (None: this cluster does not hold that version, or no
        registry was given). Raises the remote's errors (MagnetarError)."""
        number = version_number(version)
        if self._schemas is None or number is None:
            return None
        name = TopicName.parse(self.topic)
        stored = await self._schemas.get(name, number)
        if stored is None or stored.definition is None:
            log.warning("replicator %s: schema version %d not found, sent as it is",
                        self.topic, number)  # fmt: skip
            return None
        return await producer.register_schema(stored.definition.to_wire(schema_id(name)))


class _Session:
    """One connection's sending: the core, the producer, the first failed send."""

    def __init__(
        self, replicator: PersistentReplicator, cursor: ManagedCursor, producer: Producer
    ) -> None:
        self.replicator = replicator
        self.cursor = cursor
        self.producer = producer
        self.core = ReplicatorCore(replicator.remote, replicator.in_flight_max)
        self.room = asyncio.Event()
        """Set when a receipt makes room for more entries in flight."""
        self.sent = 0
        self.receipts = 0
        """Entries sent and receipted in this connection."""
        self.unanswered_since_ms: int | None = None
        """Since when the remote has owed a receipt: the first send not answered, or the
        last receipt while more are owed (None: nothing owed)."""
        self.schema_versions: dict[bytes, bytes | None] = {}
        """Local schema version -> the remote's (None: sent as it is), for this connection."""
        self.failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    def check(self) -> None:
        """Raises MagnetarError once a send failed."""
        if self.failed.done():
            raise MagnetarError(f"send failed: {self.failed.result()}")

    async def until_failed(self, waiting: asyncio.Future[Any]) -> None:
        """Wait for ``waiting``, cancelled if a send fails first."""
        try:
            await asyncio.wait({waiting, self.failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting

    def unregistered_schema(self, stored: StoredEntry) -> bytes | None:
        """The schema version of ``stored`` when it is not yet registered on the remote in
        this connection (None: no schema, or registered)."""
        try:
            version = Entry(stored.data).metadata.schema_version
            if version is None or version in self.schema_versions:
                return None
            original = parse_entry(stored.data)[0]
        except ProtocolError:
            return None  # send() keeps it home
        replicator = self.replicator
        forwarded = should_forward(
            replicator.remote,
            original.replicated_from,
            original.replicate_to,
            marker=original.marker_type is not None,
        )
        return version if forwarded else None

    async def register_schema(self, version: bytes) -> None:
        """Register the local schema ``version`` on the remote before any entry using it is
        sent (raises MagnetarError: the connection's attempt ends and is retried)."""
        remote = await self.replicator.remote_schema_version(self.producer, version)
        self.schema_versions[version] = remote

    def _moved(self, position: Position | None) -> None:
        if position is not None:
            self.cursor.ack_cumulative(position)

    def send(self, stored: StoredEntry) -> None:
        try:
            original, payload, count = parse_entry(stored.data)
        except ProtocolError as exc:  # kept, never sent: a replica is no place to fix it
            log.error("replicator %s: entry %s unreadable, not replicated: %s",
                      self.replicator.topic, stored.position, exc)  # fmt: skip
            self.core.on_entry(stored.position, None, (LOCAL_ONLY,))
            self._moved(self.core.advance())
            return
        forward = self.core.on_entry(
            stored.position,
            original.replicated_from,
            original.replicate_to,
            # replicated subscriptions' markers travel (by replicate_to); others stay
            marker=original.marker_type not in (None, *REPLICATED_SUBSCRIPTION_MARKERS),
            publish_ms=original.publish_time,
        )
        if forward is None:
            self._moved(self.core.advance())
            return
        replicator = self.replicator
        remote_version = (
            None
            if original.schema_version is None
            else self.schema_versions.get(original.schema_version)
        )
        metadata = forwarded_metadata(
            original, replicator.local, replicator.remote, forward.sequence_id, remote_version
        )
        sent = self.producer.send_entry(
            metadata, payload, sequence_id=forward.sequence_id, num_messages=count
        )
        self.sent += 1
        if self.unanswered_since_ms is None:
            self.unanswered_since_ms = replicator.clock.now_ms()
        sent.add_done_callback(lambda fut: self._receipted(fut, forward, len(payload), count))

    def _receipted(
        self, fut: asyncio.Future[Any], forward: Forward, size_bytes: int, messages: int
    ) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            if not self.failed.done():
                self.failed.set_result(exc)
            return
        self.receipts += 1
        owed = self.sent > self.receipts
        self.unanswered_since_ms = self.replicator.clock.now_ms() if owed else None
        self.replicator.stats.msg_out.record(messages, size_bytes)
        self._moved(self.core.on_receipt(forward.sequence_id))
        self.room.set()
