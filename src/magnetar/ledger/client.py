"""The ledger client: create, open (with recovery), and delete replicated ledgers.

Usage (the managed ledger's view)::

    client = LedgerClient(store)                       # store: a MetadataStore
    handle = await client.create(ensemble_size=3, write_quorum=2, ack_quorum=2)
    entry_id = await handle.add(b"...")                # ids 0, 1, 2, ... in call order
    entries = await handle.read(0, handle.last_add_confirmed)
    await handle.close()
    reader = await client.open(handle.ledger_id)       # recovery=True by default
    await client.delete(handle.ledger_id)
    await client.close()

Ledger ids come from sequential nodes under ``/ledgers/idgen`` (unique cluster-wide; each
node deleted with the next id's creation or at ``close``);
metadata lives at ``/ledgers/L<id:010d>`` (see :mod:`magnetar.ledger.metadata`).

``open(ledger_id, recovery=True)`` on a ledger that is not CLOSED runs BookKeeper's
recovery: mark the metadata IN_RECOVERY (CAS), fence the ledger on the bookies of its last
ensemble (needs answers from at least ``E - Qa + 1`` of them, so every ack quorum the old
writer could still complete includes a fenced bookie), start from the highest
last-add-confirmed they report, read entries forward with recovery reads, re-write each one
found to its write set (recovery adds pass the fence), stop at the first entry that at least
``Qw - Qa + 1`` bookies of its write set do not have, and close the ledger there (CAS). The
old writer's next add or ensemble change then fails with ``LedgerFenced``, and every reader
sees the same last entry. ``recovery=False`` opens without fencing (reads up to the LAC the
bookies report).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import ENTRY_SIZE_MAX_BYTES, OpType, Status
from magnetar.bookie_protocol.layout import READONLY_PATH
from magnetar.common import crc32c
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import PersistenceError
from magnetar.ledger import placement, racks
from magnetar.ledger.bookie_client import BookiePool, Connect
from magnetar.ledger.errors import (
    BookieUnavailable,
    LedgerRecoveryError,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
)
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.local_transport import LocalBookieTransport
from magnetar.ledger.metadata import (
    AVAILABLE_PATH,
    IDGEN_PATH,
    READONLY_NAME,
    LedgerMetadata,
    LedgerState,
    ledger_path,
)
from magnetar.ledger.placement import PlacementPolicy
from magnetar.ledger.transport import AddRun, LocalBookie
from magnetar.metadata.cache import MetadataCache
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NotFound,
    Op,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LedgerClientConfig:
    entry_size_max_bytes: int = ENTRY_SIZE_MAX_BYTES
    """Larger adds fail at once with :class:`EntryTooLarge` (nothing sent, no entry id
    used). Pulsar sets it to the broker's ``maxMessageSize`` plus the 10 KiB frame padding."""
    request_timeout_ms: int = 10_000
    """A bookie that does not answer an add within this is replaced."""
    speculative_read_timeout_ms: int = 1_000
    """A read also goes to the next replica when the first is slower than this."""
    read_concurrency_max: int = 1_000
    """Most entries one read asks for at once (requests in flight, or one run's length)."""
    read_run_bytes_max: int = 1024 * 1024
    """Payload bytes one READ_ENTRIES response may carry beyond its first entry."""
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    """How ensembles spread over racks and regions, and (region-aware) which acks make an
    entry durable (:mod:`magnetar.ledger.placement`)."""


class LedgerClient:
    """Owns its bookie connections; the metadata store stays the caller's.

    ``local_bookies``: bookies started on this event loop (the standalone's, passed in by
    whoever composed the process: :class:`~magnetar.ledger.transport.LocalBookie`); requests
    to them are direct calls (:class:`~magnetar.ledger.local_transport.LocalBookieTransport`)
    instead of TCP, with the same durability and error contract. Raises
    :class:`BookieUnavailable` if one of them is not serving. ``connect`` opens transports
    to the other bookies instead of TCP connections (a simulated network,
    :class:`~magnetar.ledger.bookie_client.Connect`)."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        config: LedgerClientConfig | None = None,
        local_bookies: Sequence[LocalBookie] = (),
        connect: Connect | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.config = config or LedgerClientConfig()
        self._rng = rng or random.Random()
        self.pool = BookiePool(
            self.clock, request_timeout_ms=self.config.request_timeout_ms, connect=connect
        )
        self.loop = asyncio.get_running_loop()
        self._spent_ids: list[str] = []
        """Id nodes (:meth:`_new_ledger_id`) whose ids are taken, to be deleted."""
        self._registrations: asyncio.Task[_Registrations | None] | None = None
        """Watched caches of the bookies' registrations and racks, started by the first
        :meth:`create` (see :meth:`_cached_registrations`)."""
        for bookie in local_bookies:
            self.pool.add_local(
                LocalBookieTransport(bookie, self.clock, self.config.request_timeout_ms)
            )

    async def close(self) -> None:
        spent, self._spent_ids = self._spent_ids, []
        if spent:
            with contextlib.suppress(MetadataStoreError):
                await self.store.multi([DeleteOp(path) for path in spent])
        registrations, self._registrations = self._registrations, None
        if registrations is not None:
            registrations.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                got = await registrations
                if got is not None:
                    await got.close()
        await self.pool.close()

    # -- bookies ---------------------------------------------------------------------------

    async def available_bookies(self) -> list[str]:
        """Writable bookies registered now."""
        try:
            names = await self.store.children(AVAILABLE_PATH)
        except NotFound:
            return []
        return [n for n in names if n != READONLY_NAME]

    async def choose_ensemble(
        self,
        ensemble: Sequence[str | None],
        write_quorum: int,
        exclude: Collection[str] = (),
        *,
        ledger_id: int | None = None,
        cached: bool = False,
    ) -> tuple[list[str], dict[str, str]]:
        """``ensemble`` with its ``None`` positions filled by available bookies not in
        ``exclude``, placed by :attr:`LedgerClientConfig.placement`
        (:func:`magnetar.ledger.placement.place`), and the rack of every bookie of it.
        A degraded placement (write sets over fewer regions or racks than the policy wants)
        is logged, or refused when the policy enforces its minimums. Raises
        :class:`NotEnoughBookies`.

        ``cached``: the registrations and racks come from watched caches (as fresh as the
        store's last notification; a cache with too few bookies is confirmed by fresh
        reads), else from fresh reads (an ensemble change after a failure)."""
        open_positions = sum(b is None for b in ensemble)
        registrations = await self._cached_registrations() if cached else None
        available = None if registrations is None else await registrations.writable()
        if available is None or len(available) - len(exclude) < open_positions:
            # not cached, or too few in the cache: a bookie registered a moment ago may
            # not have reached it yet (its notification still on the way)
            available, registrations = await self.available_bookies(), None
        candidates = [b for b in available if b not in exclude]
        if len(candidates) < open_positions:
            raise NotEnoughBookies(
                f"need {open_positions} bookies, {len(candidates)} available "
                f"(excluding {sorted(exclude)})"
            )
        policy = self.config.placement
        placed = [*candidates, *(b for b in ensemble if b is not None)]
        rack_of = await (self.bookie_racks if registrations is None else registrations.racks)(
            placed
        )
        chosen, short = placement.placed(
            policy, candidates, ensemble, write_quorum, rack_of, self._rng
        )
        # Without any rack configured every placement is "one rack": nothing to warn about.
        if short.degraded and (rack_of or policy.region_aware):
            log.warning(
                "ledger %s: degraded placement %s: %s",
                "(new)" if ledger_id is None else ledger_id,
                chosen,
                short.describe(),
            )
        return chosen, {b: rack_of.get(b, racks.DEFAULT_RACK) for b in chosen}

    async def bookie_racks(self, bookies: Iterable[str]) -> dict[str, str]:
        """Bookie id → rack for ``bookies`` that have one (:func:`bookie_racks`)."""
        return await bookie_racks(self.store, bookies)

    async def _cached_registrations(self) -> _Registrations | None:
        """The watched caches (None if they could not be started: fresh reads then)."""
        if self._registrations is None:
            self._registrations = self.loop.create_task(_Registrations.start(self.store))
        return await asyncio.shield(self._registrations)

    # -- create / delete ---------------------------------------------------------------------

    async def create(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        properties: dict[str, str] | None = None,
    ) -> LedgerHandle:
        """A new OPEN ledger on ``ensemble_size`` available bookies. Raises ``ValueError``
        unless E >= Qw >= Qa >= 1, :class:`NotEnoughBookies`."""
        if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
            raise ValueError("need ensemble_size >= write_quorum >= ack_quorum >= 1")
        ensemble, rack_of = await self.choose_ensemble(
            [None] * ensemble_size, write_quorum, cached=True
        )
        ledger_id = await self._new_ledger_id()
        md = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            ensembles=_first_ensemble(tuple(ensemble)),
            created_ms=self.clock.now_ms(),
            properties=dict(properties or {}),
        )
        stat = await self.store.put(ledger_path(ledger_id), md.to_bytes(), MUST_NOT_EXIST)
        for b in ensemble:
            # An unreachable one is found out (and replaced) by the first add.
            with contextlib.suppress(BookieUnavailable):
                await self.pool.get(b)
        return LedgerHandle(self, md, stat.version, writable=True, racks=rack_of)

    async def _new_ledger_id(self) -> int:
        """A cluster-wide unique id: the number of a new sequential node under
        :data:`IDGEN_PATH`. The nodes of the ids allocated before are deleted in the same
        transaction (one metadata write per id, not a create and a delete), the last ones
        at :meth:`close`."""
        spent, self._spent_ids = self._spent_ids, []
        ops: list[Op] = [CreateOp(f"{IDGEN_PATH}/ID-", b"", sequential=True)]
        ops += [DeleteOp(path) for path in spent]
        try:
            path = (await self.store.multi(ops))[0].path
        except NotFound:
            # no id node yet in this store (a create makes the parents, a multi does not),
            # or a spent one deleted meanwhile (by whom does not matter)
            path = await self._new_id_node(spent)
        except BaseException:
            self._spent_ids += spent
            raise
        self._spent_ids.append(path)
        return int(path.rsplit("-", 1)[1])

    async def _new_id_node(self, spent: list[str]) -> str:
        try:
            path = await self.store.create(f"{IDGEN_PATH}/ID-", b"", sequential=True)
        except BaseException:
            self._spent_ids += spent
            raise
        for old in spent:
            with contextlib.suppress(NotFound):
                await self.store.delete(old)
        return path

    async def delete(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space at their next garbage
        collection. Raises :class:`NoSuchLedger`."""
        try:
            await self.store.delete(ledger_path(ledger_id))
        except NotFound:
            raise NoSuchLedger(f"no ledger {ledger_id}") from None

    async def list_ledgers(self) -> list[int]:
        try:
            names = await self.store.children("/ledgers")
        except NotFound:
            return []
        return sorted(int(n[1:]) for n in names if n.startswith("L") and n[1:].isdigit())

    async def get_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        try:
            got = await self.store.get(ledger_path(ledger_id))
        except NotFound:
            raise NoSuchLedger(f"no ledger {ledger_id}") from None
        return LedgerMetadata.from_bytes(got.value), got.stat.version

    # -- open / recovery ---------------------------------------------------------------------

    async def open(self, ledger_id: int, *, recovery: bool = True) -> LedgerHandle:
        """A read-only handle. With ``recovery`` (default), a ledger not yet CLOSED is
        recovered and closed first (see the module docstring). Raises
        :class:`NoSuchLedger`, :class:`LedgerRecoveryError`."""
        md, version = await self.get_metadata(ledger_id)
        if md.state == LedgerState.CLOSED:
            return LedgerHandle(self, md, version, writable=False)
        if not recovery:
            handle = LedgerHandle(self, md, version, writable=False)
            await handle.refresh_last_add_confirmed()
            return handle
        return await self._recover(ledger_id)

    async def _recover(self, ledger_id: int) -> LedgerHandle:
        md, version = await self.get_metadata(ledger_id)
        while md.state == LedgerState.OPEN:
            try:
                stat = await self.store.put(
                    ledger_path(ledger_id),
                    replace(md, state=LedgerState.IN_RECOVERY).to_bytes(),
                    version,
                )
                md, version = replace(md, state=LedgerState.IN_RECOVERY), stat.version
            except BadVersion:
                md, version = await self.get_metadata(ledger_id)
        if md.state == LedgerState.CLOSED:
            return LedgerHandle(self, md, version, writable=False)

        ensemble = md.current_ensemble
        fragment_first = md.ensembles[-1][0]
        lac = await self._fence(ledger_id, md, ensemble)
        lac = max(lac, fragment_first - 1)
        # A handle that reads through recovery reads; its LAC grows as entries are found.
        handle = LedgerHandle(self, md, version, writable=False, last_add_confirmed=lac)
        entry_id = lac + 1
        length_tail = 0
        while True:
            found = await self._recovery_read(handle, md, entry_id)
            if found is None:
                break
            await self._recovery_write(md, entry_id, found, entry_id - 1)
            length_tail += len(found)
            entry_id += 1
        last = entry_id - 1
        log.info("ledger %d recovered: last entry %d", ledger_id, last)
        while True:
            closed = replace(md, state=LedgerState.CLOSED, last_entry_id=last, length=-1)
            try:
                stat = await self.store.put(ledger_path(ledger_id), closed.to_bytes(), version)
                return LedgerHandle(self, closed, stat.version, writable=False)
            except BadVersion:
                md, version = await self.get_metadata(ledger_id)
                if md.state == LedgerState.CLOSED:
                    return LedgerHandle(self, md, version, writable=False)

    async def _fence(self, ledger_id: int, md: LedgerMetadata, ensemble: tuple[str, ...]) -> int:
        async def fence_one(bookie_id: str) -> int | None:
            try:
                resp, _ = await self.pool.call(
                    bookie_id, codec.Request(op=OpType.FENCE, ledger_id=ledger_id)
                )
            except BookieUnavailable:
                return None
            return resp.last_add_confirmed if resp.status == Status.OK else None

        results = await asyncio.gather(*(fence_one(b) for b in ensemble))
        ok = [r for r in results if r is not None]
        if len(ok) < md.ensemble_size - md.ack_quorum + 1:
            raise LedgerRecoveryError(
                f"ledger {ledger_id}: fenced on {len(ok)} of {len(ensemble)} bookies, need "
                f"{md.ensemble_size - md.ack_quorum + 1}"
            )
        return max(ok)

    async def _recovery_read(
        self, handle: LedgerHandle, md: LedgerMetadata, entry_id: int
    ) -> bytes | None:
        """The entry if any replica has it; ``None`` if enough replicas lack it that it
        cannot have been acknowledged."""
        ensemble = md.ensemble_for(entry_id)
        replicas = [ensemble[i] for i in md.write_set(entry_id)]

        async def read_one(bookie_id: str) -> tuple[str, bytes | None]:
            try:
                resp, payload = await self.pool.call(
                    bookie_id,
                    codec.Request(
                        op=OpType.RECOVERY_READ, ledger_id=md.ledger_id, entry_id=entry_id
                    ),
                )
            except BookieUnavailable:
                return "error", None
            if resp.status == Status.OK:
                if crc32c.crc32c(payload) == resp.checksum:
                    return "ok", payload
                return "error", None
            if resp.status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER):
                return "missing", None
            return "error", None

        results = await asyncio.gather(*(read_one(b) for b in replicas))
        for kind, payload in results:
            if kind == "ok":
                return payload
        missing = sum(1 for kind, _ in results if kind == "missing")
        if missing >= md.write_quorum - md.ack_quorum + 1:
            return None
        raise LedgerRecoveryError(
            f"ledger {md.ledger_id}: cannot decide whether entry {entry_id} exists "
            f"({missing} replicas lack it, others unreachable)"
        )

    async def _recovery_write(
        self, md: LedgerMetadata, entry_id: int, payload: bytes, lac: int
    ) -> None:
        """Re-replicate a recovered entry to its whole write set (recovery adds pass the
        fence); at least an ack quorum must take it."""

        ensemble = md.ensemble_for(entry_id)
        replicas = [ensemble[i] for i in md.write_set(entry_id)]

        async def write_one(bookie_id: str) -> bool:
            try:
                client = await self.pool.get(bookie_id)
            except BookieUnavailable:
                return False
            req = AddRun(
                self.pool.next_request_id(),
                md.ledger_id,
                entry_id,
                lac,
                [crc32c.crc32c(payload)],
                [payload],
                recovery=True,
                checksums_computed=True,
            )
            fut: asyncio.Future[bool] = self.loop.create_future()

            def done(error: PersistenceError | None) -> None:
                if not fut.done():
                    fut.set_result(error is None)

            client.add(req, done)
            return await fut

        oks = await asyncio.gather(*(write_one(b) for b in replicas))
        if sum(oks) < md.ack_quorum:
            raise LedgerRecoveryError(
                f"ledger {md.ledger_id}: recovered entry {entry_id} reached only {sum(oks)} bookies"
            )


class _Registrations:
    """Watched caches of the writable bookies' registrations and of the rack placement: a
    new ledger's ensemble is chosen without reading the store (BookKeeper's client watches
    the registrations likewise)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._bookies = MetadataCache(store, AVAILABLE_PATH)
        self._racks = MetadataCache(store, racks.RACKS_PATH)
        self._labels: dict[bytes, str | None] = {}
        """A registration's value -> the rack it names (decoded once, not per ledger)."""
        self._placement: tuple[bytes, dict[str, str]] = (b"", {})
        """The rack placement's value last decoded and its bookie -> rack."""

    @classmethod
    async def start(cls, store: MetadataStore) -> _Registrations | None:
        view = cls(store)
        try:
            await view._bookies.start()
            await view._racks.start()
        except MetadataStoreError as exc:
            log.warning("bookie registrations not watched (%s): read at each ledger", exc)
            await view.close()
            return None
        return view

    async def close(self) -> None:
        await self._bookies.close()
        await self._racks.close()

    async def writable(self) -> list[str]:
        names = await self._bookies.children(AVAILABLE_PATH)
        return [] if names is None else [n for n in names if n != READONLY_NAME]

    async def racks(self, bookies: Iterable[str]) -> dict[str, str]:
        """As :func:`bookie_racks` (the registrations of writable bookies, from the cache)."""
        got = await self._racks.get(racks.RACKS_PATH)
        labels: dict[str, str] = {}
        for b in set(bookies):
            registration = await self._bookies.get(f"{AVAILABLE_PATH}/{b}")
            if registration is None:
                labels.update(await bookie_racks(self._store, [b]))
                continue
            value = registration.value
            if value not in self._labels:
                if len(self._labels) >= REGISTRATIONS_DECODED_MAX:
                    self._labels.clear()
                self._labels[value] = racks.registered_rack(value)
            if (rack := self._labels[value]) is not None:
                labels[b] = rack
        value = b"" if got is None else got.value
        if self._placement[0] != value:
            self._placement = (value, _configured_racks(value))
        return {**labels, **self._placement[1]}


REGISTRATIONS_DECODED_MAX = 1024

_FIRST_ENSEMBLES_MAX = 256
_first_ensembles: dict[tuple[str, ...], tuple[tuple[int, tuple[str, ...]], ...]] = {}


def _first_ensemble(ensemble: tuple[str, ...]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """A new ledger's ensembles (``ensemble`` from entry 0), one immutable tuple for the
    ledgers created on the same bookies (a few tuples per ledger otherwise; bounded)."""
    found = _first_ensembles.get(ensemble)
    if found is None:
        if len(_first_ensembles) >= _FIRST_ENSEMBLES_MAX:
            _first_ensembles.clear()
        found = _first_ensembles[ensemble] = ((0, ensemble),)
    return found


"""Bookie registrations' racks kept decoded at most (more: the table starts again)."""


def _configured_racks(value: bytes) -> dict[str, str]:
    """The stored rack placement's bookie → rack (a malformed one is logged, ignored)."""
    try:
        return racks.racks_of(racks.parse_configuration(value))
    except racks.InvalidRackConfiguration as exc:
        log.warning("ignoring the rack placement: %s", exc)
        return {}


async def bookie_racks(store: MetadataStore, bookies: Iterable[str]) -> dict[str, str]:
    """Bookie id → rack for ``bookies`` that have one: the stored rack placement
    (admin-set) first, else the label in the bookie's registration. A placement that
    cannot be read is logged and ignored (placement then uses the labels only)."""
    try:
        value = (await store.get(racks.RACKS_PATH)).value
    except NotFound:
        value = b""
    configured = _configured_racks(value)
    unlabelled = sorted(set(bookies) - set(configured))
    labels = await asyncio.gather(*(_registered_rack(store, b) for b in unlabelled))
    found = {b: rack for b, rack in zip(unlabelled, labels, strict=True) if rack is not None}
    return {**found, **configured}


async def _registered_rack(store: MetadataStore, bookie_id: str) -> str | None:
    for path in (f"{AVAILABLE_PATH}/{bookie_id}", f"{READONLY_PATH}/{bookie_id}"):
        try:
            return racks.registered_rack((await store.get(path)).value)
        except NotFound:
            continue
    return None


__all__ = ["LedgerClient", "LedgerClientConfig", "NoSuchEntry", "bookie_racks"]
