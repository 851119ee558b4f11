"""A bookie on simulated time and a simulated disk, with the real bookie's request code.

:class:`SimulatedBookie` serves requests with the bookie's own
:class:`~magnetar.bookie.request_processor.RequestProcessor` over the bookie's own
:class:`~magnetar.bookie.ledger_storage.LedgerStorage` (entries in its write buffers: the
simulation never checkpoints, so the journal is the only durable copy). Its journal
(:class:`SimulatedJournal`) writes the real journal record format to a
:class:`~magnetar.testing.simulation.SimulatedDisk` with group commit, and a restart replays
what the disk kept with the real :func:`~magnetar.bookie.journal.replay`, as a bookie
restarted after a crash does.

What stands in for the real parts, and why: the real journal writes from a writer process and
the real bookie serves a TCP port and looks at free space with ``statvfs``; none of that can
run on a simulated clock. :class:`SimulatedState` plays :class:`~magnetar.bookie.state.BookieState`
(read-only while the disk is full or a journal write failed, registered under
``/ledgers/available`` or ``…/readonly``) and :class:`_NoCheckpoints` the checkpointer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from magnetar.bookie.journal import ADD_ENTRY, FENCE, JournalPosition, encode_record, replay
from magnetar.bookie.journal_writer import journal_path
from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie.request_processor import RequestProcessor
from magnetar.bookie_protocol.codec import Request
from magnetar.bookie_protocol.layout import AVAILABLE_PATH, READONLY_PATH
from magnetar.metadata import MetadataStore, NotFound
from magnetar.testing.simulation import SimulatedDisk

DISK_CHECK_INTERVAL_S = 0.5
WRITE_BACK_INTERVAL_S = 0.3
"""How often a lying disk's cache reaches the platter."""


class SimulatedJournal:
    """What the request processor asks of :class:`~magnetar.bookie.journal.Journal`: records
    appended in order, callbacks run once a sync covers everything appended before them,
    one sync at a time (group commit), a failed write fails the callbacks it carried."""

    def __init__(
        self,
        disk: SimulatedDisk,
        loop: asyncio.AbstractEventLoop,
        sync_latency_s: Callable[[], float],
        on_write_failure: Callable[[BaseException], None],
    ) -> None:
        self._disk = disk
        self._loop = loop
        self._sync_latency_s = sync_latency_s
        self._on_write_failure = on_write_failure
        self._pending: list[bytes] = []
        self._callbacks: list[
            tuple[Callable[[], None], Callable[[BaseException], None] | None]
        ] = []
        self._busy = False
        self.groups_taken = 0
        self.over_limit = False
        self.alive = True

    def append(
        self, type_: int, ledger_id: int, entry_id: int, lac: int, checksum: int, payload: bytes
    ) -> None:
        self.append_many(type_, ledger_id, entry_id, lac, (checksum,), (payload,))

    def append_many(
        self,
        type_: int,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> None:
        for i, (checksum, payload) in enumerate(zip(checksums, payloads, strict=True)):
            header = encode_record(
                self._disk.file_id,
                type_,
                ledger_id,
                first_entry_id + i,
                lac,
                checksum,
                len(payload),
            )
            self._pending.append(header + payload)
        self._kick()

    def on_durable(
        self,
        callback: Callable[[], None],
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._callbacks.append((callback, on_failure))
        self._kick()

    def _kick(self) -> None:
        if not self._busy and (self._pending or self._callbacks):
            self._busy = True
            self._loop.call_soon(self._take)

    def _take(self) -> None:
        """The flusher takes everything pending: one write, one sync."""
        if not self.alive:
            return
        self.groups_taken += 1
        data = b"".join(self._pending)
        callbacks = self._callbacks
        self._pending, self._callbacks = [], []
        try:
            self._disk.write(data)
        except OSError as exc:
            self._busy = False
            self._on_write_failure(exc)
            for _, on_failure in callbacks:
                if on_failure is not None:
                    on_failure(exc)
            self._kick()
            return
        self._loop.call_later(self._sync_latency_s(), self._synced, callbacks)

    def _synced(
        self, callbacks: list[tuple[Callable[[], None], Callable[[BaseException], None] | None]]
    ) -> None:
        if not self.alive:
            return  # crashed while syncing: nobody hears of it
        self._disk.sync()
        self._busy = False
        for callback, _ in callbacks:
            callback()
        self._kick()


class _WrittenBytes:
    written_bytes = 0


class SimulatedState:
    """Read-only mode of a simulated bookie (see the module docstring)."""

    def __init__(self, bookie: SimulatedBookie) -> None:
        self._bookie = bookie
        self.bookie_id = bookie.bookie_id
        self.disk_trigger = _WrittenBytes()
        self.storage_fault: str | None = None

    @property
    def readonly(self) -> bool:
        return self._bookie.disk.full or self.storage_fault is not None

    def look_if_written_enough(self) -> None:
        self.look_at_disk()

    def look_at_disk(self) -> None:
        """The disk monitor's look: a storage fault clears once the disk has room."""
        if self.storage_fault is not None and not self._bookie.disk.full:
            self.storage_fault = None
        self._bookie.registration_changed()

    def journal_write_failed(self, exc: BaseException) -> None:
        self.storage_fault = f"journal write failed: {exc}"
        self._bookie.registration_changed()


class _NoCheckpoints:
    """The checkpointer's part in adds: the write cache never fills (never checkpointed)."""

    write_cache_full = False

    def check_write_cache(self) -> None:
        """Nothing to check."""


class SimulatedBookie:
    """One bookie: up (serving) or crashed, on its own simulated disk (see the module
    docstring). ``attach``/``detach``/``request``/``add_entries`` are what a connection's
    bookie end calls."""

    def __init__(
        self,
        bookie_id: str,
        data_dir: Path,
        store: MetadataStore,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        *,
        disk_capacity_bytes: int,
        sync_lies: bool = False,
        ignores_fences: bool = False,
    ) -> None:
        self.bookie_id = bookie_id
        self._data_dir = data_dir
        self._store = store
        self._loop = loop
        self._rng = rng
        self.disk = SimulatedDisk(disk_capacity_bytes, sync_lies=sync_lies)
        self.ignores_fences = ignores_fences
        """A deliberate bug for the tests: every add is let through as a recovery add, so
        a fenced ledger still takes the old writer's entries."""
        self.slow = False
        """A slow disk: syncs take 50-400 ms instead of 0.2-2 ms."""
        self.up = False
        self.incarnation = 0
        self.replayed_entries = 0
        self.crashes = 0
        self._journal: SimulatedJournal | None = None
        self.processor: RequestProcessor | None = None
        self.storage: LedgerStorage | None = None
        self.state = SimulatedState(self)
        self._ends: list[object] = []
        """Connection ends attached to this incarnation, in attach order."""
        self._registered: str | None = None
        self._registering = False
        self._timers: list[asyncio.TimerHandle] = []

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start (or restart after a crash): replay what the disk kept, then serve."""
        assert not self.up
        self.incarnation += 1
        directory = self._data_dir / f"{self.bookie_id.replace(':', '_')}-{self.incarnation}"
        journal_dir = directory / "journal"
        journal_dir.mkdir(parents=True)
        for file_id, content in enumerate(self.disk.files(), start=1):
            Path(journal_path(str(journal_dir), file_id)).write_bytes(content)
        storage = LedgerStorage(directory)
        replayed = 0
        for rec in replay(journal_dir, JournalPosition(0, 0)):
            if rec.type == ADD_ENTRY:
                storage.add_entry(
                    rec.ledger_id, rec.entry_id, rec.last_add_confirmed, rec.checksum, rec.payload
                )
                replayed += 1
            elif rec.type == FENCE:
                storage.fence(rec.ledger_id)
        self.replayed_entries = replayed
        self.disk.new_file()  # as the journal: never append to a file whose tail may be torn
        self.storage = storage
        self.state = SimulatedState(self)
        journal = SimulatedJournal(
            self.disk, self._loop, self._sync_latency_s, self.state.journal_write_failed
        )
        self._journal = journal
        self.processor = RequestProcessor(
            storage,
            journal,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]  (the simulated loop runs executor jobs inline)
            self.state,  # type: ignore[arg-type]
            _NoCheckpoints(),  # type: ignore[arg-type]
            entry_size_max_bytes=5 * 1024 * 1024,
        )
        self.up = True
        self._ends = []
        self._timers = [
            self._loop.call_later(DISK_CHECK_INTERVAL_S, self._disk_check, self.incarnation),
            self._loop.call_later(WRITE_BACK_INTERVAL_S, self._write_back, self.incarnation),
        ]
        self.registration_changed()

    def crash(self) -> None:
        """Power loss: nothing more is answered, the unsynced journal tail may be lost, the
        registration goes (its session ends), connections are reset."""
        assert self.up
        self.up = False
        self.crashes += 1
        assert self._journal is not None
        self._journal.alive = False
        for timer in self._timers:
            timer.cancel()
        self.disk.crash(self._rng)
        ends, self._ends = self._ends, []
        for end in ends:
            end.bookie_died()  # type: ignore[attr-defined]
        shutil.rmtree(self._data_dir / f"{self.bookie_id.replace(':', '_')}-{self.incarnation}")
        self.processor = None
        self.storage = None
        self._registered = None
        self._loop.create_task(self._unregister())

    def _sync_latency_s(self) -> float:
        if self.slow:
            return self._rng.uniform(0.05, 0.4)
        return self._rng.uniform(0.0002, 0.002)

    def _disk_check(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.up:
            return
        self.state.look_at_disk()
        self._timers.append(
            self._loop.call_later(DISK_CHECK_INTERVAL_S, self._disk_check, incarnation)
        )

    def _write_back(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.up:
            return
        self.disk.write_back()
        self._timers.append(
            self._loop.call_later(WRITE_BACK_INTERVAL_S, self._write_back, incarnation)
        )

    # -- registration ---------------------------------------------------------------------

    def registration_changed(self) -> None:
        """Register in the current mode (in the background, as the real bookie does)."""
        if self.up and not self._registering:
            want = READONLY_PATH if self.state.readonly else AVAILABLE_PATH
            if want != self._registered:
                self._registering = True
                self._loop.create_task(self._register())

    async def _register(self) -> None:
        try:
            while self.up:
                readonly = self.state.readonly
                want = READONLY_PATH if readonly else AVAILABLE_PATH
                if want == self._registered:
                    return
                await self._remove_registrations()
                body = json.dumps({"bookie_id": self.bookie_id, "readonly": readonly}).encode()
                await self._store.create(f"{want}/{self.bookie_id}", body)
                self._registered = want
        finally:
            self._registering = False

    async def _remove_registrations(self) -> None:
        for path in (AVAILABLE_PATH, READONLY_PATH):
            with contextlib.suppress(NotFound):
                await self._store.delete(f"{path}/{self.bookie_id}")

    async def _unregister(self) -> None:
        if not self.up:
            await self._remove_registrations()

    # -- what a connection's bookie end calls ---------------------------------------------

    def attach(self, end: object) -> None:
        self._ends.append(end)

    def detach(self, end: object) -> None:
        with contextlib.suppress(ValueError):
            self._ends.remove(end)

    def serves(self, end: object) -> bool:
        return self.up and end in self._ends

    def request(self, request: Request, payload: bytes, end: object) -> None:
        assert self.processor is not None
        self.processor.request(request, payload, end)  # type: ignore[arg-type]


__all__ = ["SimulatedBookie", "SimulatedJournal", "SimulatedState"]
