"""The request processor of a bookie (BookKeeper's ``BookieRequestProcessor``).

:class:`RequestProcessor` takes decoded requests from the bookie's connections
(:class:`~magnetar.bookie.server.BookieConnection`) and from an in-process caller (the
:class:`~magnetar.ledger.transport.LocalBookie` seam, which :class:`~magnetar.bookie.Bookie`
offers through it), works them against ledger storage and the journal, and answers through
each caller's :class:`~magnetar.bookie_protocol.responder.Responder`.

Guarantees:

* an add is acknowledged only after its journal record is fdatasync'ed (group commit);
  adds whose journal write failed are answered INTERNAL_ERROR, never acknowledged;
* once a ledger is fenced (FENCE or RECOVERY_READ; the fence is journaled before the
  answer), every later non-recovery add to it fails with FENCED, across restarts;
* a read-only bookie (:class:`~magnetar.bookie.state.BookieState`) rejects adds with
  READ_ONLY and keeps serving reads;
* reads serve any entry stored here, including ones beyond the last-add-confirmed.

Every refusal is one error class of :mod:`magnetar.bookie_protocol.errors` (its status and
message go on the wire); everything runs on the event loop, file reads in storage threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Final

from magnetar.bookie.checkpoint import Checkpointer
from magnetar.bookie.entry_log import StoredEntry
from magnetar.bookie.journal import ADD_ENTRY, FENCE, Journal
from magnetar.bookie.ledger_storage import LedgerRecord, LedgerStorage, flatten
from magnetar.bookie.state import BookieState
from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import OpType, Status, split_bodies
from magnetar.bookie_protocol.errors import (
    BadRequest,
    BookieError,
    BookieReadOnly,
    EntryTooLarge,
    LedgerFenced,
    StatusError,
)
from magnetar.bookie_protocol.responder import Reply, Responder
from magnetar.common import crc32c

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request, Response

DurableCallback = Callable[[list[int], StatusError | None], None]
"""``done(run_ids, error)`` of an in-process caller (``magnetar.ledger.transport``'s
``DurableCallback``, which the bookie does not import)."""

AddEntries = Callable[
    [int, int, int, Sequence[int], Sequence[bytes], bool, DurableCallback, int], StatusError | None
]
"""The type of :meth:`RequestProcessor.add_entries`."""

LocalRun = tuple[int, int, int, Sequence[int], Sequence[bytes], bool, int, bool]
"""A run of adds of an in-process caller: ledger id, first entry id, last add confirmed,
checksums, payloads, recovery, run id, and whether the caller computed the checksums from
these payloads (then they are not computed again)."""

AddRuns = Callable[[Sequence[LocalRun], DurableCallback], list[StatusError | None]]
"""The type of :meth:`RequestProcessor.add_runs`."""

log = logging.getLogger("magnetar.bookie")

READ_ENTRIES_MAX: Final = 1_000
"""Most entries one READ_ENTRIES response carries, whatever the request asks."""


def _take_run(
    wanted: Sequence[StoredEntry | int],
    budget: int,
    read_file: Callable[[int], StoredEntry],
) -> list[StoredEntry]:
    """The entries of ``wanted`` in order (locations read with ``read_file``), stopping
    before the one that would take the payload past ``budget`` bytes (the first is always
    taken). A location that fails to read after the first ends the run (the caller asks
    again from there); the first one's error propagates. Runs on the loop when nothing is
    to be read from a file, else in a storage thread."""
    out: list[StoredEntry] = []
    total = 0
    for w in wanted:
        if isinstance(w, StoredEntry):
            stored = w
        else:
            try:
                stored = read_file(w)
            except (OSError, ValueError):
                if not out:
                    raise
                break
        total += len(stored.payload)
        if out and total > budget:
            break
        out.append(stored)
    return out


class RequestProcessor:
    """See the module docstring. Built by the bookie once storage is loaded and the journal
    started; requests may come until :meth:`close_connections`."""

    def __init__(
        self,
        storage: LedgerStorage,
        journal: Journal,
        executor: Executor,
        state: BookieState,
        checkpointer: Checkpointer,
        *,
        entry_size_max_bytes: int,
    ) -> None:
        self._storage = storage
        self._journal = journal
        self._executor = executor
        self._state = state
        self._checkpointer = checkpointer
        self._entry_size_max_bytes = entry_size_max_bytes
        self._connections: set[Responder] = set()
        # In-process adds appended while the journal's groups_taken does not change are in
        # the same sync: they share one on_durable callback, and each caller hears of its
        # runs in that sync with one call.
        self._local_group: dict[DurableCallback, list[int]] | None = None
        self._local_group_taken = -1

    # -- connections ----------------------------------------------------------------------

    def attach(self, conn: Responder) -> None:
        """Track a connection (or an in-process responder): :meth:`close_connections`
        closes it."""
        self._connections.add(conn)

    def connection_closed(self, conn: Responder) -> None:
        self._connections.discard(conn)

    def close_connections(self) -> None:
        """The bookie stops: close every tracked connection."""
        for conn in list(self._connections):
            conn.close()

    # -- requests (RequestHandler of BookieConnection) -------------------------------------

    def handle(
        self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]
    ) -> None:
        """Handle one request. Answers that must wait for the journal go to ``durable``
        (see :meth:`after_batch`), the others to ``conn.reply`` (now or later)."""
        op = request.op
        if op == OpType.ADD_ENTRY:
            self._add(request, payload, conn, durable)
        elif op == OpType.ADD_ENTRIES:
            self._add_run(request, payload, conn, durable)
        elif op == OpType.READ_ENTRY or op == OpType.RECOVERY_READ:
            self._read(request, conn, durable)
        elif op == OpType.READ_ENTRIES:
            self._read_entries(request, conn)
        elif op == OpType.READ_LAC:
            self._read_lac(request, conn)
        elif op == OpType.FENCE:
            self._fence(request, conn, durable)
        elif op == OpType.LEDGER_INFO:
            self._info(request, conn)
        else:
            conn.reply(_error(request, Status.BAD_REQUEST, f"unknown operation {op}"))

    def after_batch(self, conn: Responder, durable: list[Reply]) -> None:
        """Once per batch of requests (a read from a socket): ``durable`` goes out after
        the journal sync that covers it; a journal over its bound pauses ``conn`` until
        then."""
        journal = self._journal
        if durable:
            journal.on_durable(
                lambda: conn.reply_all(durable),
                lambda exc: conn.reply_all(_write_failures(durable, exc)),
            )
        if journal.over_limit:
            conn.pause_reading()
            journal.on_durable(conn.resume_reading, lambda _exc: conn.resume_reading())
        self.check_write_cache()

    def check_write_cache(self) -> None:
        """Start a checkpoint if the write buffers outgrew the cache, and look at free disk
        space if enough was written (once per batch of adds)."""
        self._checkpointer.check_write_cache()
        self._state.look_if_written_enough()

    def request(self, request: Request, payload: bytes, conn: Responder) -> None:
        """One request of an in-process caller: :meth:`handle` and :meth:`after_batch`."""
        durable: list[Reply] = []
        self.handle(request, payload, conn, durable)
        self.after_batch(conn, durable)

    # -- adds -----------------------------------------------------------------------------

    def admit_adds(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_add_confirmed: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool,
    ) -> StatusError | None:
        """Check and store a run of adds, entries ``first_entry_id``, ``+1``, ... of
        ``ledger_id`` (``checksums[i]`` belongs to ``payloads[i]``): ``None`` once all are
        in ledger storage and appended to the journal (one record each, in order), else the
        refusal of the first entry refused, and then nothing of the run is stored.

        None does not mean durable: the caller must acknowledge only from a
        ``journal.on_durable`` callback registered after this call. Raises nothing.
        """
        refusal = self._refusal(ledger_id, first_entry_id, checksums, payloads, recovery)
        if refusal is not None:
            return refusal
        self._storage.add_entries(
            ledger_id, first_entry_id, last_add_confirmed, checksums, payloads
        )
        self._journal.append_many(
            ADD_ENTRY, ledger_id, first_entry_id, last_add_confirmed, checksums, payloads
        )
        self._state.disk_trigger.written_bytes += sum(map(len, payloads))
        return None

    def _refusal(
        self,
        ledger_id: int,
        first_entry_id: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool,
        checksums_computed: bool = False,
    ) -> StatusError | None:
        """Why a run of adds is refused (of its first entry refused), or ``None``: it may be
        stored (then a spilled index of its ledger was read back). ``checksums_computed``:
        an in-process caller computed ``checksums`` from ``payloads`` (the journal's replay
        relies on every record's checksum: any other run's are checked here)."""
        if self._state.readonly:
            return BookieReadOnly(f"bookie {self._state.bookie_id} is read-only")
        if first_entry_id < 0:
            return BadRequest(f"bad entry id {first_entry_id}")
        size_max = self._entry_size_max_bytes
        crc = crc32c.crc32c
        sizes = list(map(len, payloads))
        if (
            len(checksums) != len(sizes)
            or (sizes and max(sizes) > size_max)
            or (not checksums_computed and any(map(int.__ne__, map(crc, payloads), checksums)))
        ):  # which entry is refused first, and why: record by record (C loops above)
            for checksum, payload, size in zip(checksums, payloads, sizes, strict=True):
                if size > size_max:
                    return EntryTooLarge(f"entry of {size} bytes exceeds {size_max}")
                if crc(payload) != checksum:
                    return BadRequest("payload checksum mismatch")
        rec = self._storage.ledgers.get(ledger_id)
        if rec is not None:
            if rec.fenced and not recovery:
                return LedgerFenced(f"ledger {ledger_id} is fenced")
            try:
                rec.entries.read_back()  # a spilled index: before anything is stored
            except OSError as exc:
                log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
                return BookieError(f"index of ledger {ledger_id} unreadable: {exc}")
        return None

    def add_runs(self, runs: Sequence[LocalRun], done: DurableCallback) -> list[StatusError | None]:
        """Runs of adds from an in-process caller, in order, each as :meth:`add_entries`
        would take it (its refusal at its index of the answer, else ``None``), with one
        pass through storage and the journal for all the runs taken: the runs of many
        ledgers that one loop turn produced (:meth:`magnetar.ledger.transport.LocalBookie.add_runs`).
        ``done(run_ids, ...)`` as for :meth:`add_entries`."""
        refusals = [
            self._refusal(ledger_id, first, checksums, payloads, recovery, computed)
            for ledger_id, first, _, checksums, payloads, recovery, _, computed in runs
        ]
        taken = [run[:5] for run, refusal in zip(runs, refusals, strict=True) if refusal is None]
        if not taken:
            return refusals
        if len(taken) == 1:  # one ledger's run: nothing to flatten
            ledger_id, first, lac, checksums, payloads = taken[0]
            self._storage.add_entries(ledger_id, first, lac, checksums, payloads)
            self._journal.append_many(ADD_ENTRY, ledger_id, first, lac, checksums, payloads)
            written = payloads
        else:
            records = flatten(taken)
            self._storage.add_runs(taken, records)
            self._journal.append_records(ADD_ENTRY, *records)
            written = records[4]
        self._state.disk_trigger.written_bytes += sum(map(len, written))
        run_ids = [run[6] for run, refusal in zip(runs, refusals, strict=True) if refusal is None]
        self._durable_group(done).extend(run_ids)
        return refusals

    def add_entries(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_add_confirmed: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool,
        done: DurableCallback,
        run_id: int,
    ) -> StatusError | None:
        """A run of adds from an in-process caller
        (:meth:`magnetar.ledger.transport.LocalBookie.add_entries`): :meth:`admit_adds`,
        then ``done(run_ids, ...)`` from the journal sync that covers the run, for every
        run of that caller in the sync. While the write cache is full
        (:attr:`Checkpointer.write_cache_full`) the durable answer waits for room: the
        callers' windows stop adds meanwhile, so the write buffers stay near a quarter over
        their bound."""
        refusal = self.admit_adds(
            ledger_id, first_entry_id, last_add_confirmed, checksums, payloads, recovery
        )
        if refusal is not None:
            return refusal
        self._durable_group(done).append(run_id)
        return None

    def _durable_group(self, done: DurableCallback) -> list[int]:
        """The ids of ``done``'s runs the next journal sync answers (appended to: the
        runs just journaled)."""
        journal = self._journal
        taken = journal.groups_taken
        group = self._local_group
        if group is None or self._local_group_taken != taken:
            run_ids: list[int] = []
            group = self._local_group = {done: run_ids}
            self._local_group_taken = taken
            journal.on_durable(
                partial(self._local_synced, group), partial(self._local_sync_failed, group)
            )
            self.check_write_cache()  # once per sync group is often enough
            return run_ids
        found = group.get(done)
        if found is None:
            found = group[done] = []
        return found

    def _local_synced(self, group: dict[DurableCallback, list[int]]) -> None:
        if self._local_group is group:
            self._local_group = None
        if self._checkpointer.write_cache_full:
            self._checkpointer.on_write_cache_room(partial(_acknowledge, group))
            return
        _acknowledge(group)

    def _local_sync_failed(
        self, group: dict[DurableCallback, list[int]], exc: BaseException
    ) -> None:
        """The journal write covering ``group`` failed: INTERNAL_ERROR each, as over TCP."""
        if self._local_group is group:
            self._local_group = None
        message = f"journal write failed: {exc}"
        for done, run_ids in group.items():
            done(run_ids, BookieError(message))

    def _add(self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]) -> None:
        self._admit_and_answer(request, [request.checksum], [payload], conn, durable)

    def _add_run(
        self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]
    ) -> None:
        """ADD_ENTRIES: the run whole through :meth:`admit_adds`, one answer for it."""
        sizes = request.entry_sizes
        checksums = list(request.checksums)  # kept by storage: not a view into the request
        if not sizes or len(checksums) != len(sizes) or sum(sizes) != len(payload):
            conn.reply(
                _error(
                    request,
                    Status.BAD_REQUEST,
                    f"a run of {len(sizes)} entry sizes, {len(checksums)} checksums"
                    f" and {len(payload)} payload bytes does not add up",
                )
            )
            return
        self._admit_and_answer(request, checksums, split_bodies(payload, sizes), conn, durable)

    def _admit_and_answer(
        self,
        request: Request,
        checksums: list[int],
        payloads: list[bytes],
        conn: Responder,
        durable: list[Reply],
    ) -> None:
        """An add request's entries through :meth:`admit_adds`: its refusal answered now,
        else its answer (ADD_ENTRIES: with the run's last entry id) after the journal sync."""
        refusal = self.admit_adds(
            request.ledger_id,
            request.entry_id,
            request.last_add_confirmed,
            checksums,
            payloads,
            request.recovery,
        )
        if refusal is not None:
            conn.reply(_error(request, refusal.status, str(refusal)))
            return
        response = codec.Response(
            request_id=request.request_id,
            op=request.op,
            ledger_id=request.ledger_id,
            entry_id=request.entry_id,
        )
        if request.op == OpType.ADD_ENTRIES:
            response.last_entry_id = request.entry_id + len(payloads) - 1
        durable.append((response, b""))

    # -- fences ---------------------------------------------------------------------------

    def _fence_ledger(self, ledger_id: int) -> bool:
        """Fence; returns True if this call fenced it (a FENCE record was journaled)."""
        storage = self._storage
        rec = storage.ledgers.get(ledger_id)
        if rec is not None and rec.fenced:
            return False
        storage.fence(ledger_id)
        self._journal.append(FENCE, ledger_id, -1, -1, 0, b"")
        return True

    def _fence(self, request: Request, conn: Responder, durable: list[Reply]) -> None:
        self._fence_ledger(request.ledger_id)
        rec = self._storage.ledgers[request.ledger_id]
        # Answer after the journal sync even if already fenced: the earlier fence record may
        # still be in flight.
        durable.append(
            (
                codec.Response(
                    request_id=request.request_id,
                    op=OpType.FENCE,
                    ledger_id=request.ledger_id,
                    last_add_confirmed=rec.lac,
                    fenced=True,
                    last_entry_id=rec.last_entry_id,
                ),
                b"",
            )
        )

    # -- reads ----------------------------------------------------------------------------

    def _known_ledger(self, request: Request, conn: Responder) -> LedgerRecord | None:
        """The request's ledger, or ``None`` once NO_SUCH_LEDGER has been answered."""
        rec = self._storage.ledgers.get(request.ledger_id)
        if rec is None:
            conn.reply(_error(request, Status.NO_SUCH_LEDGER, f"no ledger {request.ledger_id}"))
        return rec

    def _read_lac(self, request: Request, conn: Responder) -> None:
        rec = self._known_ledger(request, conn)
        if rec is None:
            return
        conn.reply(
            codec.Response(
                request_id=request.request_id,
                op=OpType.READ_LAC,
                ledger_id=request.ledger_id,
                last_add_confirmed=rec.lac,
                fenced=rec.fenced,
            )
        )

    def _info(self, request: Request, conn: Responder) -> None:
        rec = self._known_ledger(request, conn)
        if rec is None:
            return
        conn.reply(
            codec.Response(
                request_id=request.request_id,
                op=OpType.LEDGER_INFO,
                ledger_id=request.ledger_id,
                last_add_confirmed=rec.lac,
                fenced=rec.fenced,
                last_entry_id=rec.last_entry_id,
                entry_count=len(rec.entries),
                size_bytes=rec.size_bytes,
            )
        )

    def _read(self, request: Request, conn: Responder, durable: list[Reply]) -> None:
        storage = self._storage
        ledger_id = request.ledger_id
        recovery = request.op == OpType.RECOVERY_READ
        wait_journal = recovery and self._fence_ledger(ledger_id)
        rec = self._known_ledger(request, conn)
        if rec is None:
            return
        try:
            location = rec.entries.get(request.entry_id)
        except OSError as exc:  # a spilled index whose file cannot be read
            conn.reply(_index_unreadable(request, exc))
            return
        if location is None:
            err = _error(request, Status.NO_SUCH_ENTRY, f"no entry {ledger_id}:{request.entry_id}")
            if wait_journal:
                durable.append((err, b""))
            else:
                conn.reply(err)
            return
        stored = storage.read_buffered(location)
        if stored is not None:
            out = _entry_response(
                request, stored.last_add_confirmed, stored.checksum, rec.fenced, stored.payload
            )
            if wait_journal:
                durable.append(out)
            else:
                conn.reply(*out)
            return
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, storage.read_file, location)
        fenced = rec.fenced

        def done(f: asyncio.Future[StoredEntry]) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("read of %s:%s failed: %s", ledger_id, request.entry_id, exc)
                out: Reply = (
                    _error(request, Status.INTERNAL_ERROR, f"read failed: {exc}"),
                    b"",
                )
            else:
                s = f.result()
                out = _entry_response(request, s.last_add_confirmed, s.checksum, fenced, s.payload)
            if wait_journal:
                failed = _error(request, Status.INTERNAL_ERROR, "journal write failed")
                self._journal.on_durable(lambda: conn.reply(*out), lambda _e: conn.reply(failed))
            else:
                conn.reply(*out)

        fut.add_done_callback(done)

    def _read_entries(self, request: Request, conn: Responder) -> None:
        """READ_ENTRIES: entries ``entry_id``, ``entry_id + stride``, ... up to
        ``last_entry_id`` (at most :data:`READ_ENTRIES_MAX` of them, and no more than
        ``max_bytes`` of payload beyond the first) in one response. Entries still in a write
        buffer are taken on the loop; the rest are read from the entry logs in one
        storage-thread job. The run ends early at the first entry not stored here
        (NO_SUCH_ENTRY if that is the first one)."""
        storage = self._storage
        ledger_id = request.ledger_id
        first = request.entry_id
        last = request.last_entry_id
        ids = range(first, last + 1, max(request.stride, 1))[:READ_ENTRIES_MAX]
        rec = self._known_ledger(request, conn)
        if rec is None:
            return
        if first < 0 or not ids:
            conn.reply(_error(request, Status.BAD_REQUEST, f"no entries in {first}..{last}"))
            return
        budget = request.max_bytes
        # Each wanted entry, in order: what the write buffers still hold, or its location.
        # The buffered ones are copies: the walk ends once they alone pass the budget.
        wanted: list[StoredEntry | int] = []
        buffered_bytes = 0
        try:
            for entry_id in ids:
                location = rec.entries.get(entry_id)
                if location is None:
                    break
                stored = storage.read_buffered(location)
                if stored is None:
                    wanted.append(location)
                    continue
                wanted.append(stored)
                buffered_bytes += len(stored.payload)
                if buffered_bytes > budget:
                    break
        except OSError as exc:  # a spilled index whose file cannot be read
            if not wanted:
                conn.reply(_index_unreadable(request, exc))
                return
            log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
        if not wanted:
            conn.reply(_error(request, Status.NO_SUCH_ENTRY, f"no entry {ledger_id}:{first}"))
            return
        fenced = rec.fenced
        if all(isinstance(w, StoredEntry) for w in wanted):
            got = _take_run(wanted, budget, storage.read_file)
            conn.reply(*_entries_response(request, got, fenced))
            return
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, _take_run, wanted, budget, storage.read_file)

        def done(f: asyncio.Future[list[StoredEntry]]) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("read of %s:%s failed: %s", ledger_id, first, exc)
                conn.reply(_error(request, Status.INTERNAL_ERROR, f"read failed: {exc}"))
            else:
                conn.reply(*_entries_response(request, f.result(), fenced))

        fut.add_done_callback(done)


def _error(request: Request, status: Status, message: str) -> Response:
    return codec.Response(
        request_id=request.request_id,
        op=request.op,
        status=status,
        message=message,
        ledger_id=request.ledger_id,
        entry_id=request.entry_id,
    )


def _write_failures(durable: list[Reply], exc: BaseException) -> list[Reply]:
    """The answers to requests whose journal write failed: INTERNAL_ERROR each."""
    message = f"journal write failed: {exc}"
    return [
        (
            codec.Response(
                request_id=r.request_id,
                op=r.op,
                status=Status.INTERNAL_ERROR,
                message=message,
                ledger_id=r.ledger_id,
                entry_id=r.entry_id,
            ),
            b"",
        )
        for r, _ in durable
    ]


def _acknowledge(group: dict[DurableCallback, list[int]]) -> None:
    for done, run_ids in group.items():
        done(run_ids, None)


def _index_unreadable(request: Request, exc: OSError) -> Response:
    """The answer to a read whose ledger's spilled index cannot be read back (logged)."""
    ledger_id = request.ledger_id
    log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
    return _error(request, Status.INTERNAL_ERROR, f"index of ledger {ledger_id} unreadable")


def _entries_response(request: Request, run: list[StoredEntry], fenced: bool) -> Reply:
    response, payload = _entry_response(
        request,
        max(s.last_add_confirmed for s in run),
        0,
        fenced,
        b"".join(s.payload for s in run),
    )
    response.entry_sizes.extend(len(s.payload) for s in run)
    response.checksums.extend(s.checksum for s in run)
    return response, payload


def _entry_response(
    request: Request, lac: int, checksum: int, fenced: bool, payload: bytes
) -> Reply:
    return (
        codec.Response(
            request_id=request.request_id,
            op=request.op,
            ledger_id=request.ledger_id,
            entry_id=request.entry_id,
            last_add_confirmed=lac,
            checksum=checksum,
            fenced=fenced,
        ),
        payload,
    )
