"""A ledger handle: the writer's (and reader's) view of one ledger.

Writing (handles from ``LedgerClient.create``):

* :meth:`LedgerHandle.add` / :meth:`add_nowait` assign the next entry id at once, so ids
  follow call order; the entry goes to its write set of ``Qw`` bookies (round-robin over the
  ensemble) and completes once ``Qa`` of them acknowledged it *and* every earlier entry has
  completed: completions (and :attr:`last_add_confirmed`) advance strictly in entry order.
  Each add carries the current last-add-confirmed (piggybacked), which is how readers and
  recovery learn it.
* :meth:`add_run` (the managed ledger's path; the others are runs of one) gives a run of
  entries consecutive ids; unless the ledger is striped (E > Qw: then per entry) the run
  goes to each bookie of its write set as one request, is acknowledged as a whole and
  completes with one call once ``Qa`` bookies stored all of it.
* With a region-aware placement policy an entry also needs acks from bookies in at least
  ``min(min_regions_for_durability, regions of its write set)`` regions
  (:func:`magnetar.ledger.placement.durable`): acks from one region do not confirm an entry
  whose write set spans two.
* When a bookie fails (connection lost, timeout, read-only, error), the handle replaces it:
  it picks another available bookie (by the client's placement policy, never one that
  already failed on this handle while others are available), writes new ledger metadata
  (CAS) with a fragment starting at ``last_add_confirmed + 1``, and re-sends the pending
  runs that bookie owed. Once it failed, its acks no longer count (those already received
  for pending entries are forgotten): the new fragment places those entries elsewhere. New adds wait (queued, in order) while the metadata is written. No
  gap, no reordering. When no replacement can be placed (too few bookies, or a policy that
  enforces its minimums), every pending and later add fails with :class:`NotEnoughBookies`.
* If any bookie answers FENCED, or the metadata CAS shows the ledger in recovery, the handle
  is fenced: every pending and later add fails with :class:`LedgerFenced`.
* :meth:`close` waits for pending adds, then marks the ledger CLOSED at the last confirmed
  entry.

Reading (any handle): :meth:`read` returns entries ``first..last`` (inclusive) up to the
last confirmed entry, from the replicas of their write sets: see
:mod:`~magnetar.ledger.replica_read`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING

from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import OpType, Status
from magnetar.common import crc32c
from magnetar.common.errors import MagnetarError, PersistenceError
from magnetar.ledger.errors import (
    BookieError,
    BookieUnavailable,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    NoSuchEntry,
    NotEnoughBookies,
)
from magnetar.ledger.metadata import LedgerMetadata, LedgerState, ledger_path
from magnetar.ledger.placement import (
    PlacementUnmet,
    durable,
    ensemble_regions,
    shared_write_sets,
)
from magnetar.ledger.replica_read import Entry, read_chunk, read_from_replicas
from magnetar.ledger.transport import AddCallback, AddRun
from magnetar.metadata.store import BadVersion

if TYPE_CHECKING:
    from magnetar.ledger.client import LedgerClient

log = logging.getLogger(__name__)


AddDone = Callable[[int, BaseException | None], None]
"""An add's completion: ``(entry_id, None)`` once stored by an ack quorum, or
``(-1, error)``."""

RunDone = Callable[[int, int, int, BaseException | None], None]
"""A run's completion, in pieces: ``(offset, count, first_entry_id, None)`` once the
entries ``offset`` … ``offset + count - 1`` of the run are stored by an ack quorum as
``first_entry_id`` …, or ``(offset, count, -1, error)`` when they failed. Each entry of the
run is in exactly one piece. Stored pieces come in entry order (and in the order of every
other run's); a failed piece may come before earlier pieces complete."""


class _PendingRun:
    """Consecutive entries written and acknowledged together (one write set)."""

    __slots__ = (
        "acked",
        "callback",
        "checksums",
        "count",
        "entry_id",
        "finished",
        "offset",
        "payloads",
        "request",
        "sent",
        "size",
    )

    def __init__(
        self,
        entry_id: int,
        offset: int,
        payloads: Sequence[bytes],
        checksums: list[int],
        size: int,
        callback: RunDone,
    ) -> None:
        self.entry_id = entry_id
        """The first entry's id."""
        self.offset = offset
        """Where the run starts in the caller's run (see :data:`RunDone`)."""
        self.count = len(payloads)
        self.payloads = payloads
        self.checksums = checksums
        self.size = size
        self.callback = callback
        self.finished = False
        self.acked: set[int] = set()
        self.sent = False
        self.request: AddRun | None = None

    def finish(self, entry_id: int, error: BaseException | None) -> None:
        """Report the outcome once (later calls are ignored)."""
        if not self.finished:
            self.finished = True
            self.callback(self.offset, self.count, entry_id, error)


def _future_callback(fut: asyncio.Future[int]) -> AddDone:
    def done(entry_id: int, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(entry_id)

    return done


def _one_entry(
    callback: AddDone, _offset: int, _count: int, entry_id: int, error: BaseException | None
) -> None:
    callback(entry_id, error)


_NONE_FAILED: frozenset[str] = frozenset()
"""Shared by the handles no bookie failed on (each empty frozenset is a 216 B object)."""
_NO_RACKS: Mapping[str, str] = MappingProxyType({})


_NO_PENDING: dict[int, _PendingRun] = {}
"""The pending adds of every handle that has written nothing (never added to)."""


class LedgerHandle:
    """See the module docstring. Create through :class:`~magnetar.ledger.LedgerClient`."""

    __slots__ = (
        "_changing",
        "_client",
        "_closing",
        "_drained",
        "_ensemble",
        "_entry_size_max_bytes",
        "_error",
        "_failed",
        "_failed_before",
        "_lac",
        "_length",
        "_next_entry_id",
        "_pending",
        "_qa",
        "_racks",
        "_regions",
        "_regions_needed",
        "_striped",
        "_version",
        "_write_sets",
        "ledger_id",
        "metadata",
        "writable",
    )

    def __init__(
        self,
        client: LedgerClient,
        metadata: LedgerMetadata,
        version: int,
        *,
        writable: bool,
        last_add_confirmed: int | None = None,
        racks: Mapping[str, str] | None = None,
    ) -> None:
        """``racks``: the rack of the ensemble's bookies (when placed by the client; else
        unknown, which only matters to a writer with a region-aware policy)."""
        self._client = client
        self.metadata = metadata
        self._version = version
        self.writable = writable
        self.ledger_id = metadata.ledger_id
        if metadata.state == LedgerState.CLOSED:
            self._lac = metadata.last_entry_id
        else:
            self._lac = last_add_confirmed if last_add_confirmed is not None else -1
        self._next_entry_id = self._lac + 1
        self._length = max(metadata.length, 0)
        self._pending: dict[int, _PendingRun] = _NO_PENDING
        """Runs written and not yet completed, by their first entry id."""
        self._ensemble: Sequence[str] = metadata.current_ensemble
        self._failed: dict[int, str] | None = None  # ensemble index -> failed bookie id
        self._failed_before: frozenset[str] = _NONE_FAILED
        """Bookies that failed on this handle: not picked again while others are available
        (a killed bookie stays registered until its session expires)."""
        self._racks: Mapping[str, str] = _NO_RACKS if racks is None else racks
        """Not changed in place (replaced when an ensemble change adds bookies): the caller's
        mapping is held as it is."""
        self._changing: asyncio.Task[None] | None = None
        self._error: MagnetarError | None = None
        self._closing = False
        self._drained: asyncio.Future[None] | None = None
        """What :meth:`close` waits on while adds are pending (created only then)."""
        cfg = client.config
        self._qa = metadata.ack_quorum
        self._entry_size_max_bytes = cfg.entry_size_max_bytes
        e, qw = metadata.ensemble_size, metadata.write_quorum
        # Ensemble indexes each entry goes to, by entry_id % E (round-robin striping).
        self._write_sets = shared_write_sets(e, qw)
        # Striped (E > Qw): consecutive entries go to different bookies, so runs are
        # split back into entries.
        self._striped = e != qw
        self._regions: tuple[str, ...] = ()
        self._regions_needed: tuple[int, ...] = ()
        self._place_regions()

    def _place_regions(self) -> None:
        """The region of each ensemble position and, per write set, how many regions its
        acks must come from (see :func:`magnetar.ledger.placement.durable`)."""
        self._regions, self._regions_needed = ensemble_regions(
            self._client.config.placement, self._ensemble, self.metadata.write_quorum, self._racks
        )

    def _durable(self, run: _PendingRun) -> bool:
        """Enough acks (and, region-aware, from enough regions) to confirm ``run``."""
        needed = self._regions_needed[run.entry_id % self.metadata.ensemble_size]
        return durable(run.acked, self._qa, needed, self._regions)

    # -- state ---------------------------------------------------------------------------

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id such that it and every entry before it are acknowledged by
        an ack quorum (for a closed ledger: its last entry)."""
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def is_closed(self) -> bool:
        return self.metadata.state == LedgerState.CLOSED

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    # -- adding --------------------------------------------------------------------------

    async def add(self, data: bytes) -> int:
        """Append ``data``; returns its entry id once an ack quorum stored it."""
        return await self.add_nowait(data)

    def add_nowait(self, data: bytes) -> asyncio.Future[int]:
        """Like :meth:`add` without a coroutine per entry (the hot path for batchers):
        returns a future for the entry id. Completions happen in entry order."""
        fut: asyncio.Future[int] = self._client.loop.create_future()
        self.add_with_callback(data, _future_callback(fut))
        return fut

    def add_with_callback(self, data: bytes, callback: AddDone) -> None:
        """Like :meth:`add_nowait` without a future: ``callback(entry_id, None)`` runs once
        the entry is stored by an ack quorum (called directly, in entry order, from the
        completion that confirmed it), ``callback(-1, error)`` on failure. Never called
        before this method returns (an immediate refusal goes through ``call_soon``)."""
        self.add_run((data,), partial(_one_entry, callback))

    def add_run(self, datas: Sequence[bytes], callback: RunDone) -> None:
        """Append ``datas`` as consecutive entries (ids follow call order, dense) and report
        them to ``callback`` in pieces (see :data:`RunDone`): unless the ledger is striped,
        a run goes to each bookie of its write set as one request and completes with one
        call. An entry larger than ``entry_size_max_bytes`` fails alone, before it takes an
        entry id (the others go on). ``callback`` is never called before this method
        returns. The handle keeps ``datas``' items (``bytes``, never mutated)."""
        loop = self._client.loop
        n = len(datas)
        if not n:
            return
        error: MagnetarError | None = None
        if not self.writable or self._closing or self.metadata.state != LedgerState.OPEN:
            error = LedgerClosed(f"ledger {self.ledger_id} is not open for writing")
        elif self._error is not None:
            error = self._error
        if error is not None:
            loop.call_soon(callback, 0, n, -1, error)
            return
        size_max = self._entry_size_max_bytes
        if not self._striped and max(map(len, datas)) <= size_max:
            self._start_run(datas, 0, callback)
            return
        start = 0
        for i, data in enumerate(datas):
            if len(data) > size_max:
                if start < i:
                    self._start_run(datas[start:i], start, callback)
                too_large = EntryTooLarge(f"entry of {len(data)} bytes exceeds {size_max}")
                loop.call_soon(callback, i, 1, -1, too_large)
                start = i + 1
            elif self._striped:
                self._start_run(datas[i : i + 1], i, callback)
                start = i + 1
        if start < n:
            self._start_run(datas[start:], start, callback)

    def _start_run(self, payloads: Sequence[bytes], offset: int, callback: RunDone) -> None:
        entry_id = self._next_entry_id
        self._next_entry_id = entry_id + len(payloads)
        checksums = list(map(crc32c.crc32c, payloads))
        run = _PendingRun(entry_id, offset, payloads, checksums, sum(map(len, payloads)), callback)
        if self._pending is _NO_PENDING:
            self._pending = {}
        self._pending[entry_id] = run
        if self._changing is None:
            self._send_run(run)

    def _send_run(self, run: _PendingRun, only_index: int | None = None) -> None:
        pool = self._client.pool
        request = run.request
        if request is None or only_index is None:
            request = run.request = AddRun(
                pool.next_request_ids(run.count),
                self.ledger_id,
                run.entry_id,
                self._lac,
                run.checksums,
                run.payloads,
                checksums_computed=True,  # by _start_run, from these payloads
            )
            run.sent = True
        indexes = (
            (only_index,)
            if only_index is not None
            else self._write_sets[run.entry_id % self.metadata.ensemble_size]
        )
        for idx in indexes:
            bookie_id = self._ensemble[idx]
            client = pool.cached(bookie_id)
            cb = self._add_callback(run, idx, bookie_id)
            if client is None:
                # Not connected (yet, or any more): connect in the background.
                self._client.loop.create_task(self._send_when_connected(bookie_id, request, cb))
            else:
                client.add(request, cb)

    async def _send_when_connected(self, bookie_id: str, request: AddRun, cb: AddCallback) -> None:
        try:
            client = await self._client.pool.get(bookie_id)
        except BookieUnavailable as exc:
            cb(exc)
            return
        client.add(request, cb)

    def _add_callback(self, pending: _PendingRun, idx: int, bookie_id: str) -> AddCallback:
        def on_response(reason: PersistenceError | None) -> None:
            if self._ensemble[idx] != bookie_id or pending.finished:
                return  # replaced bookie or already failed/completed entry
            if reason is None:
                failed = self._failed
                if failed is not None and failed.get(idx) == bookie_id:
                    # Being replaced: its acks do not count in the new fragment (see
                    # _change_ensemble); the entry is re-sent to the replacement.
                    return
                pending.acked.add(idx)
                if pending.entry_id == self._lac + 1 and self._durable(pending):
                    self._complete_in_order()
                return
            if isinstance(reason, LedgerFenced):
                self._fail(LedgerFenced(f"ledger {self.ledger_id} was fenced (by {bookie_id})"))
                return
            if isinstance(reason, EntryTooLarge):
                # Another ensemble would refuse it too (bookies share the limit), and its
                # entry id is taken: this ledger can go no further. Not EntryTooLarge
                # itself, which promises an untouched ledger (the client-side check).
                self._fail(
                    BookieError(
                        f"ledger {self.ledger_id}: bookie {bookie_id} refused entry "
                        f"{pending.entry_id}: {reason}"
                    )
                )
                return
            self._bookie_failed(idx, bookie_id, reason)

        return on_response

    def _complete_in_order(self) -> None:
        pending = self._pending
        while True:
            first = self._lac + 1
            p = pending.get(first)
            if p is None or not self._durable(p):
                break
            del pending[first]
            # state first: the callback runs inline and may add or read at once
            self._lac = first + p.count - 1
            self._length += p.size
            if not p.finished:  # p.finish(first, None), inline
                p.finished = True
                p.callback(p.offset, p.count, first, None)
        if not pending:
            self._wake_drained()

    def _fail(self, error: MagnetarError) -> None:
        """The handle can no longer write: fail every pending add."""
        if self._error is None:
            self._error = error
        pending, self._pending = self._pending, _NO_PENDING
        for p in pending.values():
            p.finish(-1, error)
        self._wake_drained()

    def _wake_drained(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- ensemble changes -------------------------------------------------------------------

    def _bookie_failed(self, idx: int, bookie_id: str, reason: BaseException) -> None:
        failed = self._failed
        if self._error is not None or (failed is not None and failed.get(idx) == bookie_id):
            return
        log.warning(
            "ledger %d: bookie %s failed (%s); replacing it", self.ledger_id, bookie_id, reason
        )
        if failed is None:
            failed = self._failed = {}
        failed[idx] = bookie_id
        if self._changing is None:
            self._changing = self._client.loop.create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed and self._error is None:
                failed = dict(self._failed)
                self._failed_before = self._failed_before.union(failed.values())
                try:
                    new_ensemble = await self._replacement(failed)
                    first = self._lac + 1  # after the wait: entries confirmed meanwhile stay
                    # From ``first`` on the replaced positions' acks do not count (the new
                    # fragment puts other bookies there): forget those already received, so
                    # no entry completes on them while the metadata is written.
                    for p in self._pending.values():
                        p.acked.difference_update(failed)
                    await self._write_ensemble(first, tuple(new_ensemble))
                except NotEnoughBookies as exc:
                    log.warning("ledger %d: no replacement bookie: %s", self.ledger_id, exc)
                    self._fail(exc)
                    return
                except MagnetarError as exc:
                    # The metadata store failed (connection or session lost): the pending
                    # adds are answered with the error, never left waiting (the caller
                    # rolls over to a new ledger; a reader's recovery closes this one).
                    log.warning("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
                    self._fail(exc)
                    return
                if self._error is not None:
                    return
                replacements = [new_ensemble[idx] for idx in sorted(failed)]
                for new in replacements:
                    with contextlib.suppress(BookieUnavailable):
                        await self._client.pool.get(new)
                log.info(
                    "ledger %d: ensemble from entry %d is now %s",
                    self.ledger_id,
                    first,
                    new_ensemble,
                )
                self._ensemble = new_ensemble
                self._place_regions()
                now_failed = self._failed
                assert now_failed is not None  # (set before this task started)
                for idx in failed:
                    if now_failed.get(idx) == failed[idx]:
                        del now_failed[idx]
                # Re-send what the replaced bookies owed, then everything held back.
                e = self.metadata.ensemble_size
                qw = self.metadata.write_quorum
                for entry_id in sorted(self._pending):
                    p = self._pending[entry_id]
                    if not p.sent:
                        continue
                    ws = [(entry_id + i) % e for i in range(qw)]
                    for idx in failed:
                        if idx in ws:
                            p.acked.discard(idx)
                            self._send_run(p, only_index=idx)
            if self._error is None:
                for entry_id in sorted(self._pending):
                    p = self._pending[entry_id]
                    if not p.sent:
                        self._send_run(p)
        finally:
            self._changing = None
        if self._failed and self._error is None:
            self._changing = self._client.loop.create_task(self._change_ensemble())

    async def _replacement(self, failed: Mapping[int, str]) -> list[str]:
        """The ensemble with the ``failed`` positions replaced, avoiding bookies that failed
        on this handle unless too few others are available. Raises
        :class:`NotEnoughBookies` (:class:`PlacementUnmet` when the policy's minimums
        cannot be met)."""
        partial = [None if i in failed else b for i, b in enumerate(self._ensemble)]
        qw = self.metadata.write_quorum
        exclude = set(self._ensemble) | set(failed.values())
        try:
            new_ensemble, racks = await self._client.choose_ensemble(
                partial, qw, exclude | self._failed_before, ledger_id=self.ledger_id
            )
        except PlacementUnmet:
            raise
        except NotEnoughBookies:
            if not self._failed_before - exclude:
                raise
            new_ensemble, racks = await self._client.choose_ensemble(
                partial, qw, exclude, ledger_id=self.ledger_id
            )
        self._racks = {**self._racks, **racks}
        return new_ensemble

    async def _write_ensemble(self, first: int, ensemble: tuple[str, ...]) -> None:
        store = self._client.store
        md = self.metadata
        version = self._version
        while True:
            new_md = md.with_ensemble(first, ensemble)
            try:
                stat = await store.put(ledger_path(self.ledger_id), new_md.to_bytes(), version)
            except BadVersion:
                got = await store.get(ledger_path(self.ledger_id))
                md = LedgerMetadata.from_bytes(got.value)
                version = got.stat.version
                if md.state != LedgerState.OPEN:
                    self._fail(LedgerFenced(f"ledger {self.ledger_id} is {md.state.value}"))
                    return
                continue
            self.metadata = new_md
            self._version = stat.version
            return

    # -- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        """Wait for pending adds, then mark the ledger CLOSED at :attr:`last_add_confirmed`.

        Raises :class:`LedgerFenced` if a recovery closed it at a different entry first.
        Idempotent for read-only handles (nothing to do)."""
        if not self.writable or self.metadata.state == LedgerState.CLOSED:
            return
        self._closing = True
        while self._pending:  # wait until no add is pending (one future for every waiter)
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self._changing is not None:
            with contextlib.suppress(Exception):
                await self._changing
        store = self._client.store
        md = self.metadata
        version = self._version
        while True:
            closed = replace(
                md, state=LedgerState.CLOSED, last_entry_id=self._lac, length=self._length
            )
            try:
                stat = await store.put(ledger_path(self.ledger_id), closed.to_bytes(), version)
            except BadVersion:
                got = await store.get(ledger_path(self.ledger_id))
                md = LedgerMetadata.from_bytes(got.value)
                version = got.stat.version
                if md.state == LedgerState.OPEN:
                    continue
                self.metadata = md
                self.writable = False
                if md.state == LedgerState.CLOSED and md.last_entry_id == self._lac:
                    return
                raise LedgerFenced(
                    f"ledger {self.ledger_id} was {md.state.value} by recovery at entry "
                    f"{md.last_entry_id}, this writer confirmed {self._lac}"
                ) from None
            self.metadata = closed
            self._version = stat.version
            self.writable = False
            if self._error is not None and isinstance(self._error, LedgerFenced):
                raise self._error
            return

    # -- reading -------------------------------------------------------------------------

    async def read(self, first: int, last: int | None = None) -> list[Entry]:
        """Entries ``first..last`` inclusive (``last`` defaults to ``first``), in order.

        Raises :class:`NoSuchEntry` if the range is empty or goes beyond
        :attr:`last_add_confirmed`, :class:`BookieUnavailable` if no replica of some entry
        answered."""
        last = first if last is None else last
        if first < 0 or last < first or last > self._lac:
            raise NoSuchEntry(
                f"ledger {self.ledger_id}: entries {first}..{last} not readable "
                f"(last confirmed {self._lac})"
            )
        window = self._client.config.read_concurrency_max
        out: list[Entry] = []
        start = first
        while start <= last:
            stop = min(last, start + window - 1, self.metadata.fragment_last(start))
            out.extend(await read_chunk(self._client, self, start, stop))
            start = first + len(out)
        return out

    async def read_entry(self, entry_id: int, *, recovery: bool = False) -> Entry:
        payload, _ = await read_from_replicas(
            self._client, self, entry_id, OpType.RECOVERY_READ if recovery else OpType.READ_ENTRY
        )
        return Entry(self.ledger_id, entry_id, payload)

    async def refresh_last_add_confirmed(self) -> int:
        """For a reader of a ledger still open: ask the current ensemble for the LAC."""
        if self.metadata.state == LedgerState.CLOSED:
            return self._lac
        best = self._lac
        for bookie_id in self.metadata.current_ensemble:
            try:
                resp, _ = await self._client.pool.call(
                    bookie_id, codec.Request(op=OpType.READ_LAC, ledger_id=self.ledger_id)
                )
            except BookieUnavailable:
                continue
            if resp.status == Status.OK:
                best = max(best, resp.last_add_confirmed)
        self._lac = best
        return best
