"""A seeded simulation of the data path: real managed ledger, ledger client and bookie
request code on simulated time, network and disks (FoundationDB's way).

One run (:class:`DataPathSimulation`) depends only on its seed:

* five :class:`~.bookie.SimulatedBookie` s; the topic's quorums E/Qw/Qa drawn per seed;
* brokers owning the topic one term after another: each opens the
  :class:`~magnetar.managed_ledger.managed_ledger.ManagedLedger` through its own
  :class:`~magnetar.ledger.client.LedgerClient` (which fences the previous owner's ledger)
  and its own view of the metadata store (an
  :class:`~magnetar.testing.simulation.metadata.UnreliableStore`);
* producers and a consumer (a durable cursor, individual and cumulative acks), drawn per
  seed: either calling the managed ledger directly, or Pulsar clients
  (:mod:`.pulsar_client`) speaking the binary protocol to the owner's real
  :class:`~magnetar.broker.service.BrokerService` (deduplication on) over simulated
  connections, reconnecting to the newest owner; an owner that lost the topic goes on
  trying (a zombie) until it finds itself fenced;
* faults drawn during the chaos phase: bookie crashes (the unsynced journal tail may be lost)
  and restarts, a power loss of every bookie at once, one- or two-way partitions between a
  broker and a bookie and their healing, connection resets, full disks (the bookie turns
  read-only) freed again, slow disks, ownership moving to a new broker, a broker's metadata
  store unreachable (and back), a broker's session expired (the topic moves); through the
  brokers, client connections reset and clients partitioned from the owner;
* then calm: partitions healed, bookies restarted, disks freed; a last broker takes the
  topic over and reads the whole log back.

Invariants, checked after every step (every few milliseconds of simulated time and after
every fault) and at the end:

* a writer's last-add-confirmed never decreases;
* a cursor's mark-delete position never decreases, and a new owner's starts at or after
  every mark-delete an earlier owner had persisted;
* when an owner has taken the topic over, its log holds every entry acknowledged so far;
* at the end, every acknowledged entry is read back at its position with its payload, and
  each ledger holds one writer's entries, ledgers in term order (no writes of a fenced
  owner after a newer owner's);
* through the brokers: every receipted message is stored exactly once, each producer's in
  sequence order; receipts come in send order; no MESSAGE at or before a mark-delete that
  was persisted before its broker took the topic over.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.common.errors import MagnetarError, ServiceNotReady
from magnetar.common.names import TopicName
from magnetar.ledger.client import LedgerClient, LedgerClientConfig
from magnetar.ledger.placement import PlacementPolicy
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect
from magnetar.protocol.entry import Entry
from magnetar.testing.simulation import LoopClock, SimulatedLoop, SimulatedNetwork
from magnetar.testing.simulation.metadata import UnreliableStore

from .bookie import SimulatedBookie
from .pulsar_client import Broker, SimClient, SimConsumer, SimProducer
from .transport import ClientEnd, connector

TOPIC = "public/default/persistent/simulated"
TOPIC_NAME = "persistent://public/default/simulated"
"""The topic whose managed ledger is :data:`TOPIC`, as clients name it."""
PRODUCERS = 2
CURSOR = "sub"
BOOKIES = 5
QUORUMS = ((3, 2, 2), (3, 3, 2), (2, 2, 2), (3, 2, 1), (4, 3, 2))
"""E/Qw/Qa, one drawn per seed."""
REQUEST_TIMEOUT_MS = 1_000
TERMS_MAX = 4
"""Owners during chaos (the last broker of the calm phase comes on top)."""
CHECK_INTERVAL_S = 0.005
DISK_CAPACITY_BYTES = 256 * 1024

_databases = itertools.count()
_TMP_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
"""Bookie directories in memory where there is a tmpfs: the simulation creates and removes
a few per run, and directory operations on the disk cost milliseconds each."""


class InvariantBroken(AssertionError):
    """An invariant of the data path does not hold."""


@dataclass
class Owner:
    """One broker's term as the topic's owner."""

    term: int
    name: str
    store: UnreliableStore
    client: LedgerClient
    ml: ManagedLedger | None = None
    cursor: ManagedCursor | None = None
    fenced: bool = False
    seq: int = 0
    in_flight: int = 0
    mark_delete: Position | None = None
    lac_of: dict[int, int] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    service: BrokerService | None = None
    """The broker's protocol layer, when clients reach the topic through it."""
    persisted_before: Position = field(default_factory=lambda: Position(-1, -1))
    """The highest mark-delete persisted before this owner took the topic over."""

    @property
    def serving(self) -> bool:
        """Whether the owner still has the topic open (not found fenced)."""
        if self.service is not None:
            return self.service.loaded_topic(TopicName.parse(TOPIC_NAME)) is not None
        return self.ml is not None and not self.fenced


class SimulatedOwnership:
    """What a broker's :class:`~magnetar.broker.ownership.ClusterOwnership` tells its
    service, decided by the simulation: the broker serves the topic while it is the newest
    owner and its metadata session lives (a broker whose session expired serves nothing).
    Without it a broker would serve every topic (a standalone) and take the topic back
    from its successor as soon as a client came back to it."""

    def __init__(self, sim: DataPathSimulation, owner: Owner) -> None:
        self._sim = sim
        self._owner = owner

    def serves(self, name: TopicName) -> bool:
        owner = self._owner
        return self._sim.owners[-1] is owner and not owner.store.expired

    async def serving_soon(self, name: TopicName, timeout_ms: int) -> bool:
        return self.serves(name)

    def require_session(self) -> None:
        if self._owner.store.expired:
            raise ServiceNotReady("this broker lost its metadata session (simulated)")

    def bundle_of(self, name: TopicName) -> str:
        return "simulated-bundle"


class DataPathSimulation:
    """See the module docstring. Deliberate bugs the invariants must catch: ``sync_lies``,
    every bookie's disk acknowledges syncs before the data is durable; ``ignore_fences``,
    every bookie takes adds to fenced ledgers; ``no_deduplication``, the brokers store the
    producers' resends again."""

    def __init__(
        self,
        seed: int,
        *,
        chaos_s: float = 0.12,
        fault_interval_s_max: float = 0.03,
        produce_rate_hz: float = 100.0,
        sync_lies: bool = False,
        ignore_fences: bool = False,
        no_deduplication: bool = False,
        broker_share: float = 0.5,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.chaos_s = chaos_s
        self.fault_interval_s_max = fault_interval_s_max
        self.produce_rate_hz = produce_rate_hz
        self.sync_lies = sync_lies
        self.ignore_fences = ignore_fences
        self.no_deduplication = no_deduplication
        self.quorums = self.rng.choice(QUORUMS)
        self.through_broker = self.rng.random() < broker_share
        """Whether producers and consumers are clients of the brokers' binary protocol
        (else they call the managed ledger directly)."""
        self.loop = SimulatedLoop()
        self.clock = LoopClock(self.loop)
        self.network = SimulatedNetwork(self.loop, self.rng)
        self.url = f"memory:datapath-{seed}-{next(_databases)}"
        self.bookies: dict[str, SimulatedBookie] = {}
        self.owners: list[Owner] = []
        self.ends: list[ClientEnd] = []
        self.acked: dict[bytes, Position] = {}
        """Every acknowledged append: payload → position."""
        self.persisted_mark_delete = Position(-1, -1)
        self.persisted_by = ""
        """The highest mark-delete any owner had persisted."""
        self.clients: list[SimClient] = []
        self.receipted: set[tuple[str, int]] = set()
        """Through the broker: every (producer name, sequence id) with a SEND_RECEIPT."""
        self.faults: list[str] = []
        self.broken: list[str] = []
        self.steps = 0
        self.read_back = 0
        self._stores: list[MetadataStore] = []
        self._dir = Path(tempfile.mkdtemp(prefix="magnetar-sim-", dir=_TMP_ROOT))

    @property
    def now_s(self) -> float:
        return self.loop.time()

    # -- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Run the whole simulation; raises :class:`InvariantBroken` (an ``AssertionError``)
        naming what broke."""
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self._shut_down()

    def _shut_down(self) -> None:
        loop = self.loop
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        for store in self._stores:
            loop.run_until_complete(store.close())
        loop.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _connect_store(self) -> MetadataStore:
        store = await connect(self.url, clock=self.clock)
        self._stores.append(store)
        return store

    async def _main(self) -> None:
        store = await self._connect_store()
        # Brokers keep every ledger (as the managed ledgers opened directly do), so the end
        # can read every receipted message back; the default retention trims consumed ones.
        retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        await store.put(
            "/admin/policies/public/default",
            json.dumps({"retention_policies": retention}).encode(),
        )
        for i in range(BOOKIES):
            bookie_id = f"bookie-{i}:3181"
            bookie = SimulatedBookie(
                bookie_id,
                self._dir,
                store,
                self.loop,
                self.rng,
                disk_capacity_bytes=DISK_CAPACITY_BYTES,
                sync_lies=self.sync_lies,
                ignores_fences=self.ignore_fences,
            )
            self.bookies[bookie_id] = bookie
            bookie.start()
        await asyncio.sleep(0.01)  # registrations
        checker = asyncio.create_task(self._check_often())
        await self._take_over()
        while self.now_s < self.chaos_s:
            await asyncio.sleep(self.rng.uniform(0.002, self.fault_interval_s_max))
            await self._fault()
            self._check()
        await self._calm()
        checker.cancel()
        await self._final_check()

    async def _check_often(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            self._check()

    # -- owners ---------------------------------------------------------------------------

    async def _take_over(self, *, work: bool = True) -> Owner | None:
        """A new broker opens the topic (fencing the previous owner) and, with ``work``,
        produces and consumes; ``None`` if the open failed (storage unavailable): the topic
        stays with nobody until the next try."""
        term = len(self.owners) + 1
        name = f"broker-{term}"
        # One metadata session for every broker: the managed ledger's fencing goes through
        # versioned writes, not sessions (and each session costs a database thread). Each
        # broker's view of it can lose its connection or its session on its own.
        store = UnreliableStore(self._stores[0], self.rng)
        client = LedgerClient(
            store,
            clock=self.clock,
            rng=random.Random(self.rng.random()),
            # One rack: a rack-aware policy would retry every placement in vain.
            config=LedgerClientConfig(
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                placement=PlacementPolicy(rack_aware=False),
            ),
            connect=self._connector(name),
        )
        owner = Owner(term, name, store, client)
        self.owners.append(owner)
        persisted_before = owner.persisted_before = self.persisted_mark_delete
        acked_before = dict(self.acked)
        if work and self.through_broker:
            return await self._take_over_as_broker(owner, acked_before)
        e, qw, qa = self.quorums
        try:
            owner.ml = await ManagedLedger.open(
                TOPIC,
                storage=LedgerClientStorage(
                    client, ensemble_size=e, write_quorum=qw, ack_quorum=qa
                ),
                store=store,
                config=self._ml_config(),
                clock=self.clock,
            )
            owner.cursor = await owner.ml.open_cursor(CURSOR, earliest=True)
        except MagnetarError as exc:
            self.faults.append(f"{self.now_s:.3f} {name} open failed: {type(exc).__name__}")
            owner.fenced = True
            return None
        self.faults.append(f"{self.now_s:.3f} {name} owns the topic")
        self._check_takeover(owner, acked_before, persisted_before)
        if not work:
            return owner
        owner.tasks = [
            asyncio.create_task(self._produce(owner)),
            asyncio.create_task(self._consume(owner)),
        ]
        return owner

    def _ml_config(self) -> ManagedLedgerConfig:
        return ManagedLedgerConfig(
            ledger_entries_max=self.rng.randint(5, 60),
            retention_time_ms=-1,
            retention_size_bytes=-1,
            maintenance_interval_ms=200,
            cursor_persist_interval_ms=100,
        )

    async def _take_over_as_broker(
        self, owner: Owner, acked_before: dict[bytes, Position]
    ) -> Owner | None:
        """The broker ``owner`` starts (protocol layer on, no sockets) and loads the topic,
        fencing the previous owner; the clients find it at their next lookup."""
        e, qw, qa = self.quorums
        service = BrokerService(
            BrokerConfig(
                cluster_name="simulated",
                deduplication_enabled=not self.no_deduplication,
                ensemble_size=e,
                write_quorum=qw,
                ack_quorum=qa,
            ),
            owner.store,
            LedgerClientStorage(owner.client, ensemble_size=e, write_quorum=qw, ack_quorum=qa),
            clock=self.clock,
            ml_config=self._ml_config(),
            ownership=SimulatedOwnership(self, owner),  # type: ignore[arg-type]
        )
        try:
            await service.start(listen=False)
            topic = await service.get_topic(TopicName.parse(TOPIC_NAME))
            owner.ml = topic.ml
            owner.cursor = await topic.ml.open_cursor(CURSOR, earliest=True)
        except MagnetarError as exc:
            self.faults.append(f"{self.now_s:.3f} {owner.name} open failed: {type(exc).__name__}")
            owner.fenced = True
            return None
        owner.service = service
        self.faults.append(f"{self.now_s:.3f} {owner.name} owns the topic")
        self._check_takeover(owner, acked_before, owner.persisted_before)
        if not self.clients:
            self._start_clients()
        return owner

    def _current_broker(self) -> Broker | None:
        """A lookup: the newest broker that took the topic over."""
        for owner in reversed(self.owners):
            if owner.service is not None:
                return Broker(owner.name, owner.term, owner.service)
        return None

    def _start_clients(self) -> None:
        rng = self.rng
        for i in range(PRODUCERS):
            producer = SimProducer(
                f"producer-{i}",
                TOPIC_NAME,
                self.network,
                random.Random(rng.random()),
                self._current_broker,
                self.produce_rate_hz / PRODUCERS,
                self._receipted,
            )
            self.clients.append(producer)
        consumer = SimConsumer(
            "consumer-0",
            TOPIC_NAME,
            CURSOR,
            self.network,
            random.Random(rng.random()),
            self._current_broker,
            self._delivered,
        )
        self.clients.append(consumer)
        for client in self.clients:
            task = asyncio.create_task(client.run())  # type: ignore[attr-defined]
            self.owners[-1].tasks.append(task)

    def _receipted(self, producer: SimProducer, seq: int, pos: Position | None) -> None:
        self.receipted.add((producer.name, seq))
        if pos is not None:
            self.acked[producer.payload(seq)] = pos

    def _delivered(self, consumer: SimConsumer, broker: Broker, pos: Position) -> None:
        owner = self.owners[broker.term - 1]
        if pos <= owner.persisted_before:
            self._fail_later(
                f"{consumer.name} got {pos} from {broker.name}, at or before the mark-delete "
                f"{owner.persisted_before} persisted before it took the topic over"
            )

    def _fail_later(self, message: str) -> None:
        """A broken invariant seen in a callback of the network: raised at the next check."""
        self.broken.append(message)

    def _connector(self, name: str):  # type: ignore[no-untyped-def]
        connect_ = connector(name, self.bookies, self.network, REQUEST_TIMEOUT_MS)

        async def connect_and_track(bookie_id: str) -> ClientEnd:
            end = await connect_(bookie_id)
            assert isinstance(end, ClientEnd)
            self.ends.append(end)
            return end

        return connect_and_track

    async def _produce(self, owner: Owner) -> None:
        ml = owner.ml
        assert ml is not None
        rng = self.rng
        while not owner.fenced:
            await asyncio.sleep(rng.expovariate(self.produce_rate_hz))
            if owner.in_flight >= 16:
                continue
            owner.seq += 1
            payload = f"{owner.term}:{owner.seq}".encode()
            owner.in_flight += 1
            ml.add_entry_nowait(payload).add_done_callback(
                lambda fut, p=payload: self._added(owner, p, fut)  # type: ignore[misc]
            )

    def _added(self, owner: Owner, payload: bytes, fut: asyncio.Future[Position]) -> None:
        owner.in_flight -= 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self.acked[payload] = fut.result()
        elif isinstance(exc, ManagedLedgerFenced):
            owner.fenced = True

    async def _consume(self, owner: Owner) -> None:
        cursor = owner.cursor
        assert cursor is not None
        rng = self.rng
        while not owner.fenced:
            await asyncio.sleep(rng.uniform(0.005, 0.05))
            try:
                entries = await cursor.read_entries(rng.randint(1, 10))
            except ManagedLedgerFenced:
                owner.fenced = True
                return
            except MagnetarError:
                continue
            if not entries:
                continue
            if rng.random() < 0.3:
                cursor.ack_cumulative(entries[-1].position)
            else:
                for entry in entries:
                    if rng.random() < 0.8:
                        cursor.ack(entry.position)

    # -- faults ---------------------------------------------------------------------------

    async def _fault(self) -> None:
        rng = self.rng
        bookies = list(self.bookies.values())
        up = [b for b in bookies if b.up]
        down = [b for b in bookies if not b.up]
        live_owners = [o for o in self.owners if o.serving]
        if self.clients and rng.random() < 0.15:
            self._client_fault()
            return
        kind = rng.choices(
            [
                "crash",
                "restart",
                "power-loss",
                "partition",
                "heal",
                "reset",
                "fill",
                "free",
                "slow",
                "take-over",
                "metadata-loss",
                "metadata-back",
                "session-expired",
            ],
            weights=[4, 6, 0.3, 4, 3, 3, 1.5, 2, 1.5, 1.5, 2.5, 2, 1],
        )[0]
        what = kind
        if kind == "crash" and up:
            bookie = rng.choice(up)
            bookie.crash()
            what = f"crash {bookie.bookie_id}"
        elif kind == "restart" and down:
            bookie = rng.choice(down)
            bookie.start()
            what = f"restart {bookie.bookie_id} ({bookie.replayed_entries} replayed)"
        elif kind == "power-loss" and up:
            for bookie in up:
                bookie.crash()
            what = "power loss of every bookie"
        elif kind == "partition" and self.owners:
            owner = rng.choice(self.owners)
            bookie = rng.choice(bookies)
            directions = rng.choice(["to", "from", "both"])
            if directions in ("to", "both"):
                self.network.partition(owner.name, bookie.bookie_id)
            if directions in ("from", "both"):
                self.network.partition(bookie.bookie_id, owner.name)
            what = f"partition {owner.name} {directions} {bookie.bookie_id}"
        elif kind == "heal" and self.network.partitions:
            src, dst = rng.choice(self.network.partitions)
            self.network.heal(src, dst)
            what = f"heal {src} -> {dst}"
        elif kind == "reset":
            open_ends = [e for e in self.ends if not e.closed]
            if open_ends:
                end = rng.choice(open_ends)
                end.reset()
                what = f"reset a connection to {end.bookie_id}"
        elif kind == "fill" and up:
            bookie = rng.choice(up)
            bookie.disk.fill()
            what = f"disk of {bookie.bookie_id} full"
        elif kind == "free":
            filled = [b for b in bookies if b.disk.filled]
            if filled:
                bookie = rng.choice(filled)
                bookie.disk.free()
                what = f"disk of {bookie.bookie_id} freed"
        elif kind == "slow":
            bookie = rng.choice(bookies)
            bookie.slow = not bookie.slow
            what = f"disk of {bookie.bookie_id} {'slow' if bookie.slow else 'fast again'}"
        elif kind == "metadata-loss" and live_owners:
            owner = rng.choice(live_owners)
            owner.store.unreachable = True
            what = f"metadata store unreachable from {owner.name}"
        elif kind == "metadata-back":
            cut_off = [o for o in self.owners if o.store.unreachable]
            if not cut_off:
                return
            owner = rng.choice(cut_off)
            owner.store.unreachable = False
            what = f"metadata store reachable again from {owner.name}"
        elif kind == "session-expired" and live_owners and len(self.owners) < TERMS_MAX:
            # the owner's session is lost: its bundle goes to another broker, which fences it
            owner = rng.choice(live_owners)
            owner.store.expire()
            self.faults.append(f"{self.now_s:.3f} session of {owner.name} expired")
            await self._take_over()
            return
        elif kind == "take-over" and len(self.owners) < TERMS_MAX:
            del live_owners
            self.faults.append(f"{self.now_s:.3f} take-over")
            await self._take_over()
            return
        else:
            return
        self.faults.append(f"{self.now_s:.3f} {what}")

    def _client_fault(self) -> None:
        """A client's connection reset, or a client partitioned from the current owner."""
        rng = self.rng
        client = rng.choice(self.clients)
        broker = self._current_broker()
        if rng.random() < 0.5 or broker is None:
            if client.reset():
                self.faults.append(f"{self.now_s:.3f} reset the connection of {client.name}")
            return
        directions = rng.choice(["to", "from", "both"])
        if directions in ("to", "both"):
            self.network.partition(client.name, broker.name)
        if directions in ("from", "both"):
            self.network.partition(broker.name, client.name)
        self.faults.append(f"{self.now_s:.3f} partition {client.name} {directions} {broker.name}")

    async def _calm(self) -> None:
        """Heal everything, then a last broker takes the topic over (retrying until it can)."""
        for client in self.clients:
            client.stopped = True
            client.drop()
        self.network.heal_all()
        for owner in self.owners:
            owner.store.unreachable = False
        for bookie in self.bookies.values():
            bookie.slow = False
            bookie.disk.free()
            if bookie.up:
                bookie.state.look_at_disk()
            else:
                bookie.start()
        self.faults.append(f"{self.now_s:.3f} calm")
        await asyncio.sleep(0.05)  # registrations
        for _ in range(5):
            owner = await self._take_over(work=False)
            if owner is not None:
                return
            await asyncio.sleep(1.0)
        raise InvariantBroken("no broker could take the topic over once every fault healed")

    # -- invariants -----------------------------------------------------------------------

    def _fail(self, message: str) -> None:
        recent = "\n  ".join(self.faults[-12:])
        e, qw, qa = self.quorums
        raise InvariantBroken(f"{message} (E/Qw/Qa {e}/{qw}/{qa})\n  last faults:\n  {recent}")

    def _check(self) -> None:
        self.steps += 1
        if self.broken:
            self._fail(self.broken[0])
        for client in self.clients:
            if isinstance(client, SimProducer) and client.violations:
                self._fail(client.violations[0])
        for owner in self.owners:
            ml = owner.ml
            if ml is None:
                continue
            writer = ml.writer
            if writer is not None and hasattr(writer, "last_add_confirmed"):
                lac = writer.last_add_confirmed
                seen = owner.lac_of.get(writer.ledger_id, -1)
                if lac < seen:
                    self._fail(
                        f"{owner.name}: LAC of ledger {writer.ledger_id} went from {seen} to {lac}"
                    )
                owner.lac_of[writer.ledger_id] = lac
            cursor = owner.cursor
            if cursor is None:
                continue
            md = cursor.mark_delete_position
            if owner.mark_delete is not None and md < owner.mark_delete:
                self._fail(f"{owner.name}: mark-delete went from {owner.mark_delete} to {md}")
            owner.mark_delete = md
            persisted = cursor.persisted_mark_delete
            if persisted is not None and persisted > self.persisted_mark_delete:
                self.persisted_mark_delete = persisted
                self.persisted_by = owner.name

    def _check_takeover(
        self, owner: Owner, acked_before: dict[bytes, Position], persisted_before: Position
    ) -> None:
        ml = owner.ml
        assert ml is not None and owner.cursor is not None
        for payload, pos in sorted(acked_before.items(), key=lambda kv: kv[1]):
            segment = ml.ledgers.get(pos.ledger_id)
            if segment is None or pos.entry_id >= segment.entries:
                self._fail(
                    f"{owner.name} took over without acknowledged entry {pos} "
                    f"({payload.decode()}): ledger {pos.ledger_id} "
                    f"{'missing' if segment is None else f'has {segment.entries} entries'}"
                )
        md = owner.cursor.mark_delete_position
        if md < persisted_before:
            self._fail(
                f"{owner.name} took over with mark-delete {md}, before the persisted "
                f"{persisted_before}"
            )

    async def _final_check(self) -> None:
        owner = self.owners[-1]
        ml = owner.ml
        assert ml is not None and owner.cursor is not None
        self._check()
        md = owner.cursor.mark_delete_position
        if md < self.persisted_mark_delete:
            self._fail(
                f"{owner.name}'s mark-delete {md} is before {self.persisted_mark_delete}, "
                f"persisted by {self.persisted_by}"
            )
        stored: dict[Position, bytes] = {}
        last_term = 0
        for segment in ml.ledgers:
            if segment.entries == 0:
                continue
            handle = await owner.client.open(segment.ledger_id)
            try:
                entries = await handle.read(0, segment.entries - 1)
            except MagnetarError:  # some lost: read the others one by one
                entries = []
                for entry_id in range(segment.entries):
                    with contextlib.suppress(MagnetarError):
                        entries.extend(await handle.read(entry_id))
            terms = set()
            for entry in entries:
                term, data = self._stored(bytes(entry.data))
                stored[Position(segment.ledger_id, entry.entry_id)] = data
                terms.add(term)
            if len(terms) > 1:
                self._fail(f"ledger {segment.ledger_id} holds entries of terms {sorted(terms)}")
            term = max(terms, default=last_term)
            if term < last_term:
                self._fail(f"ledger {segment.ledger_id} of term {term} follows term {last_term}")
            last_term = term
        self.read_back = len(stored)
        if self.through_broker:
            self._check_deduplicated(stored)
        for payload, pos in sorted(self.acked.items(), key=lambda kv: kv[1]):
            got = stored.get(pos)
            if got != payload:
                self._fail(
                    f"acknowledged entry {pos} ({payload.decode()}) reads back as "
                    f"{got.decode() if got is not None else 'nothing'}"
                )

    def _stored(self, data: bytes) -> tuple[int, bytes]:
        """An entry's writer's term and its payload. Through the broker an entry is a
        message (metadata, then payload) whose partition key is the term of the broker it
        was sent to; else the payload is ``term:seq``."""
        if not self.through_broker:
            return int(data.split(b":")[0]), data
        entry = Entry(data)
        return int(entry.metadata.partition_key or 0), bytes(entry.payload)

    def _check_deduplicated(self, stored: dict[Position, bytes]) -> None:
        """Every receipted message stored once, each producer's in sequence order."""
        last_seq: dict[str, int] = {}
        seen: dict[tuple[str, int], Position] = {}
        for pos, payload in stored.items():  # in log order
            name, seq_text = payload.decode().split(":")
            seq = int(seq_text)
            key = (name, seq)
            if key in seen:
                self._fail(f"{name}'s message {seq} stored twice: at {seen[key]} and {pos}")
            seen[key] = pos
            if seq <= last_seq.get(name, -1):
                self._fail(f"{name}'s message {seq} at {pos} follows its message {last_seq[name]}")
            last_seq[name] = seq
        for key in sorted(self.receipted - seen.keys()):
            self._fail(f"{key[0]}'s message {key[1]} was receipted but is not stored")

    def fingerprint(self) -> str:
        """The run's outcome, to compare runs of one seed."""
        acked = ",".join(f"{p.decode()}@{pos}" for p, pos in sorted(self.acked.items()))
        receipted = sorted(self.receipted)
        return f"{self.quorums} {self.steps} {self.now_s:.6f} {self.faults} {acked} {receipted}"


__all__ = ["DataPathSimulation", "InvariantBroken"]
