"""A bookie: the storage node that ledgers are replicated to.

:class:`Bookie` owns one data directory (journal, entry logs, index, cookie) and serves the
bookie protocol on one TCP port. Life cycle: ``await Bookie.start()`` binds the port, checks
the cookie, loads the index, replays the journal (logging ``replayed N entries from
journal``), writes a checkpoint, registers ``/ledgers/available/<bookie-id>`` (ephemeral)
and starts serving; ``await stop()`` reverses it. The bookie id is ``host:port``.

Guarantees:

* an add is acknowledged only after its journal record is fdatasync'ed (group commit);
* once a ledger is fenced (FENCE or RECOVERY_READ; the fence is journaled before the
  answer), every later non-recovery add to it fails with FENCED, across restarts;
* reads serve any entry stored here, including ones beyond the last-add-confirmed;
* a bookie whose free disk falls below ``disk_free_min_bytes``, or whose journal write or
  checkpoint failed (``ENOSPC``, ``EIO``: :attr:`Bookie.storage_fault`), turns read-only: it
  re-registers under ``/ledgers/available/readonly/<id>``, rejects adds with READ_ONLY and
  keeps serving reads. Adds whose journal write failed are answered INTERNAL_ERROR, never
  acknowledged. Free space is looked at every ``disk_check_interval_ms`` and after every
  ``disk_check_every_bytes`` written (:mod:`magnetar.bookie.disk_check`), so a fast writer
  meets the threshold before the disk is full. Every ``disk_check_interval_ms`` a read-only
  bookie retries a checkpoint; once one succeeds and free space is above the threshold it
  turns writable again by itself;
* ledgers whose metadata node ``/ledgers/L<id>`` is gone are garbage-collected: forgotten by
  the index, and their entry logs removed (no live entry left) or compacted (little left).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final

import crc32c

from magnetar.bookie.codec import OpType, Request, Response, Status
from magnetar.bookie.disk_check import (
    WrittenBytesTrigger,
    default_check_every_bytes,
    free_bytes,
)
from magnetar.bookie.entry_log import StoredEntry
from magnetar.bookie.errors import CookieMismatch
from magnetar.bookie.journal import (
    ADD_ENTRY,
    FENCE,
    Journal,
    JournalPosition,
    ReplayStats,
    replay,
    unlink_all,
)
from magnetar.bookie.ledger_storage import CheckpointJob, LedgerStorage
from magnetar.bookie.server import BookieConnection, Reply, Responder
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.metadata.store import MetadataStore, NodeExists, NotFound
from magnetar.protocol.frame import DEFAULT_MAX_MESSAGE_SIZE_BYTES, FRAME_PADDING_BYTES

log = logging.getLogger("magnetar.bookie")

AVAILABLE_PATH: Final = "/ledgers/available"
READONLY_PATH: Final = "/ledgers/available/readonly"
COOKIES_PATH: Final = "/ledgers/cookies"
LEDGERS_PATH: Final = "/ledgers"
LEDGER_NODE_RE: Final = re.compile(r"^L(\d+)$")

ENTRY_SIZE_MAX_BYTES: Final = DEFAULT_MAX_MESSAGE_SIZE_BYTES + FRAME_PADDING_BYTES
"""Largest entry a bookie stores by default: a message of the broker's default max size plus
the frame padding Pulsar allows for its metadata (BookKeeper's ``nettyMaxFrameSizeBytes`` as
Pulsar configures it, 5 MiB + 10 KiB). A chunk of a chunked message is that large."""

# Statuses as plain ints for the add path (protobuf enum attribute access runs Python code).
_OK: Final = int(Status.OK)
_READ_ONLY: Final = int(Status.READ_ONLY)
_INTERNAL_ERROR: Final = int(Status.INTERNAL_ERROR)
_TOO_LARGE: Final = int(Status.TOO_LARGE)
_BAD_REQUEST: Final = int(Status.BAD_REQUEST)
_FENCED: Final = int(Status.FENCED)


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


@dataclass(slots=True)
class BookieConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 3181
    advertised_host: str | None = None
    entry_size_max_bytes: int = ENTRY_SIZE_MAX_BYTES
    journal_file_size_max_bytes: int = 256 * 1024 * 1024
    journal_group_bytes_max: int = 4 * 1024 * 1024
    journal_group_wait_ms: float = 1.0
    """Pacing: a journal sync starts no sooner than this after the previous one (0: back to
    back). 1 ms caps syncs at ~1000/s: fewer thread hand-offs and fdatasyncs per entry."""
    journal_pending_bytes_max: int = 64 * 1024 * 1024
    entry_log_size_max_bytes: int = 512 * 1024 * 1024
    write_cache_max_bytes: int = 64 * 1024 * 1024
    """A checkpoint starts when the entry-log write buffers exceed this. Past a quarter more
    than this (adds go on while a checkpoint writes), acknowledgements through the in-process
    transport wait for the checkpoint in flight (BookKeeper throttles adds when its write
    cache is full): the callers' windows then hold further adds back."""
    checkpoint_interval_ms: int = 1_000
    """How often the entry-log buffers and the index are written and synced. Often, so each
    checkpoint is small: with journal and entry logs on one disk, a checkpoint's flush holds
    up the journal's syncs behind it (5 s worth at 20k entries/s took 100-400 ms to sync and
    doubled the p99 of publish latency; 1 s worth takes 20-40 ms)."""
    gc_interval_ms: int = 60_000
    index_spill_interval_ms: int = 5_000
    """How often the bookie looks for idle ledgers whose index can leave memory (0: never;
    see :mod:`magnetar.bookie.entry_index`)."""
    index_spill_idle_scans: int = 2
    """A ledger neither read nor written for this many looks in a row (10-15 s with the
    default interval) has its index moved to a spill file; the next use reads it back."""
    compaction_live_fraction_max: float = 0.5
    disk_free_min_bytes: int = 1024 * 1024 * 1024
    disk_check_interval_ms: int = 5_000
    disk_check_every_bytes: int | None = None
    """Also look at free space after this many bytes of entries written (None: a quarter of
    ``disk_free_min_bytes``; 0: only every ``disk_check_interval_ms``)."""
    storage_threads: int = 4
    journal_skip_invalid_records: bool = False
    """Start even if journal replay finds a damaged record followed by valid ones
    (BookKeeper's ``skipReplayJournalInvalidRecord``): the damaged bytes are skipped and
    logged. Off: the bookie refuses to start (:class:`~magnetar.bookie.errors.JournalCorrupt`)."""
    extra: dict[str, str] = field(default_factory=dict)


class Bookie:
    """One storage node. Call :meth:`start` once, then :meth:`stop`.

    ``metadata`` may be ``None`` for a bookie used without a cluster (unit tests): then no
    registration, no cookie in the store, and no garbage collection.
    """

    def __init__(
        self, config: BookieConfig, metadata: MetadataStore | None, *, clock: Clock | None = None
    ) -> None:
        self.config = config
        self._metadata = metadata
        self._clock = clock or SystemClock()
        self._data_dir = Path(config.data_dir)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._storage_executor = ThreadPoolExecutor(
            config.storage_threads, thread_name_prefix="storage"
        )
        self.storage: LedgerStorage | None = None
        self.journal: Journal | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._checkpoint_lock = asyncio.Lock()
        self._checkpoint_wanted = asyncio.Event()
        self._write_cache_waiters: list[Callable[[], None]] = []
        """Called when a checkpoint attempt ends (see :meth:`on_write_cache_room`)."""
        self._checkpoint_io: asyncio.Future[None] | None = None
        self._connections: set[Responder] = set()
        self.readonly = False
        self._forced_readonly = False
        self._registered_readonly: bool | None = None
        """How the bookie is registered now (None: not yet, or a re-registration failed)."""
        self.storage_fault: str | None = None
        """Why storage cannot be written (a failed journal write or checkpoint), or None."""
        self._background: set[asyncio.Task[None]] = set()
        self.bookie_id = ""
        self.port = 0
        self.replayed_entries = 0
        self.replay_stats = ReplayStats()
        self.gc_runs = 0
        self._stopped = False
        every_bytes = config.disk_check_every_bytes
        self._disk_trigger = WrittenBytesTrigger(
            default_check_every_bytes(config.disk_free_min_bytes)
            if every_bytes is None
            else every_bytes
        )

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._server = await loop.create_server(
            lambda: self._new_connection(), cfg.host, cfg.port, start_serving=False
        )
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        self.bookie_id = f"{cfg.advertised_host or cfg.host}:{self.port}"
        await self._check_cookie()
        self.storage = LedgerStorage(
            self._data_dir, log_size_max_bytes=cfg.entry_log_size_max_bytes
        )
        self.storage.entry_logger.on_released = partial(self._write_cache_synced, loop)
        start_pos = await loop.run_in_executor(self._storage_executor, self.storage.load)
        journal_dir = self._data_dir / "journal"
        journal_dir.mkdir(exist_ok=True)
        self.replayed_entries = await loop.run_in_executor(
            self._storage_executor, self._replay, journal_dir, start_pos
        )
        log.info(
            "bookie %s: replayed %d entries from journal (from %s:%s)",
            self.bookie_id,
            self.replayed_entries,
            start_pos.file_id,
            start_pos.offset,
        )
        self.journal = Journal(
            journal_dir,
            clock=self._clock,
            file_size_max_bytes=cfg.journal_file_size_max_bytes,
            group_bytes_max=cfg.journal_group_bytes_max,
            group_wait_ms=cfg.journal_group_wait_ms,
            pending_bytes_max=cfg.journal_pending_bytes_max,
            on_write_failure=self._journal_write_failed,
        )
        self.journal.start()
        # Everything replayed is now in ledger storage: checkpoint it so the old journal
        # files can go.
        await self.checkpoint()
        self._update_readonly_from_disk()
        await self._register()
        await self._server.start_serving()
        self._tasks = [
            loop.create_task(self._checkpoint_loop(), name="bookie-checkpoint"),
            loop.create_task(self._disk_loop(), name="bookie-disk"),
        ]
        if self._metadata is not None:
            self._tasks.append(loop.create_task(self._gc_loop(), name="bookie-gc"))
        if self.config.index_spill_interval_ms > 0:
            self._tasks.append(loop.create_task(self._spill_loop(), name="bookie-index-spill"))
        log.info("bookie %s serving (data dir %s)", self.bookie_id, self._data_dir)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for t in list(self._background):
            t.cancel()
        self._release_write_cache_waiters()
        if self.journal is not None:
            await self.journal.close()
            if self.storage is not None:
                try:
                    await self.checkpoint()
                except OSError as exc:  # the journal keeps what it could not write
                    log.error("bookie %s: last checkpoint failed: %s", self.bookie_id, exc)
        if self._metadata is not None:
            for path in (f"{AVAILABLE_PATH}/{self.bookie_id}", f"{READONLY_PATH}/{self.bookie_id}"):
                with contextlib.suppress(Exception):
                    await self._metadata.delete(path)
        if self.storage is not None:
            self.storage.close()
        self._storage_executor.shutdown(wait=True)

    def _new_connection(self) -> BookieConnection:
        conn = BookieConnection(self, self.config.entry_size_max_bytes + 64 * 1024)
        self._connections.add(conn)
        return conn

    def connection_closed(self, conn: Responder) -> None:
        self._connections.discard(conn)

    # -- cookie and registration -------------------------------------------------------------

    async def _check_cookie(self) -> None:
        """A cookie ties this data dir to this bookie id, both on disk and in the store."""
        path = self._data_dir / "cookie"
        local: dict[str, str] | None = None
        if path.exists():
            local = json.loads(path.read_text())
            if local.get("bookie_id") != self.bookie_id:
                raise CookieMismatch(
                    f"data dir {self._data_dir} belongs to bookie {local.get('bookie_id')}, "
                    f"not {self.bookie_id}"
                )
        remote: dict[str, str] | None = None
        node = f"{COOKIES_PATH}/{self.bookie_id}"
        if self._metadata is not None:
            try:
                remote = json.loads((await self._metadata.get(node)).value)
            except NotFound:
                remote = None
        if local is not None and remote is not None and local != remote:
            raise CookieMismatch(
                f"cookie of {self.bookie_id} in the metadata store names data dir instance "
                f"{remote.get('instance_id')}, but {self._data_dir} is {local.get('instance_id')}"
            )
        if local is None and remote is not None:
            raise CookieMismatch(
                f"bookie {self.bookie_id} is registered with another data dir "
                f"(instance {remote.get('instance_id')}); {self._data_dir} has no cookie"
            )
        if local is None:
            local = {"bookie_id": self.bookie_id, "instance_id": uuid.uuid4().hex}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(local))
            tmp.replace(path)
        if remote is None and self._metadata is not None:
            with contextlib.suppress(NodeExists):
                await self._metadata.put(node, json.dumps(local).encode(), -1)

    async def _register(self) -> None:
        if self._metadata is None:
            return
        readonly = self.readonly
        info = json.dumps({"bookie_id": self.bookie_id, "readonly": readonly}).encode()
        want = f"{READONLY_PATH if self.readonly else AVAILABLE_PATH}/{self.bookie_id}"
        other = f"{AVAILABLE_PATH if self.readonly else READONLY_PATH}/{self.bookie_id}"
        with contextlib.suppress(NotFound):
            await self._metadata.delete(other)
        try:
            await self._metadata.create(want, info, ephemeral=True)
        except NodeExists:
            # A previous session of ours may still hold it until it expires: replace it.
            with contextlib.suppress(NotFound):
                await self._metadata.delete(want)
            await self._metadata.create(want, info, ephemeral=True)
        self._registered_readonly = readonly

    # -- read-only mode -------------------------------------------------------------------

    def _update_readonly_from_disk(self) -> bool:
        self._disk_trigger.looked()
        free = free_bytes(self._data_dir)
        low = free < self.config.disk_free_min_bytes
        want = self._forced_readonly or low or self.storage_fault is not None
        changed = want != self.readonly
        if changed:
            if self.storage_fault is not None:
                why = self.storage_fault
            elif low:
                why = f"free disk {free} bytes, threshold {self.config.disk_free_min_bytes}"
            elif self._forced_readonly:
                why = "forced"
            else:
                why = f"free disk {free} bytes, storage works again"
            log.warning(
                "bookie %s turns %s (%s)",
                self.bookie_id,
                "read-only" if want else "writable",
                why,
            )
        self.readonly = want
        return changed

    def write_problem(self) -> str | None:
        """Why this bookie takes no adds now (one line), or None when it is writable."""
        if not self.readonly:
            return None
        if self.storage_fault is not None:
            return f"bookie {self.bookie_id} is read-only: {self.storage_fault}"
        if self._forced_readonly:
            return f"bookie {self.bookie_id} is read-only (set by an operator)"
        return (
            f"bookie {self.bookie_id} is read-only: free disk below "
            f"{self.config.disk_free_min_bytes} bytes"
        )

    async def set_readonly(self, readonly: bool) -> None:
        """Force read-only mode on or off (operators, tests); disk checks still apply."""
        self._forced_readonly = readonly
        if self._update_readonly_from_disk():
            await self._register()

    def _storage_failed(self, reason: str) -> None:
        """A journal write or checkpoint failed: stop taking adds until storage works."""
        if self.storage_fault is None:
            self.storage_fault = reason
        if self._update_readonly_from_disk():
            self._reregister_soon()

    def _check_disk_if_written_enough(self) -> None:
        """Look at free space if enough was written since the last look (called once per
        batch of adds, not per add)."""
        if self._disk_trigger.due and self._update_readonly_from_disk():
            self._reregister_soon()

    def _reregister_soon(self) -> None:
        if self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self._reregister())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _journal_write_failed(self, exc: BaseException) -> None:
        self._storage_failed(f"journal write failed: {exc}")

    async def _reregister(self) -> None:
        if self._metadata is None:
            return
        try:
            await self._register()
        except MagnetarError as exc:
            self._registered_readonly = None
            log.warning("bookie %s: re-registration failed (retried): %s", self.bookie_id, exc)
        except Exception:
            self._registered_readonly = None
            log.exception("re-registration failed")

    async def _retry_storage(self) -> None:
        """A read-only bookie with a storage fault: try a checkpoint (it writes everything
        the failed ones did not); if it works and the disk has room, clear the fault."""
        try:
            await self.checkpoint()
        except OSError as exc:
            log.warning("bookie %s: storage still failing: %s", self.bookie_id, exc)
            return
        if free_bytes(self._data_dir) >= self.config.disk_free_min_bytes:
            log.warning("bookie %s: storage works again (%s)", self.bookie_id, self.storage_fault)
            self.storage_fault = None

    async def _disk_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.disk_check_interval_ms / 1000)
            if self.storage_fault is not None:
                await self._retry_storage()
            # Also retry a re-registration that failed (the metadata store may share the
            # full disk).
            if self._update_readonly_from_disk() or self._registered_readonly != self.readonly:
                await self._reregister()

    # -- journal replay ------------------------------------------------------------------

    def _replay(self, journal_dir: Path, start: JournalPosition) -> int:
        """Worker thread, before serving: re-apply journaled records to ledger storage.
        Raises :class:`~magnetar.bookie.errors.JournalCorrupt` (see :func:`replay`)."""
        assert self.storage is not None
        n = 0
        stats = self.replay_stats
        for rec in replay(
            journal_dir, start, skip_invalid=self.config.journal_skip_invalid_records, stats=stats
        ):
            if rec.type == ADD_ENTRY:
                self.storage.add_entry(
                    rec.ledger_id, rec.entry_id, rec.last_add_confirmed, rec.checksum, rec.payload
                )
                n += 1
            elif rec.type == FENCE:
                self.storage.fence(rec.ledger_id)
        if stats.corrupt_spans:
            log.error(
                "bookie %s: journal replay skipped %d damaged spans (%d bytes)",
                self.bookie_id,
                stats.corrupt_spans,
                stats.corrupt_bytes,
            )
        return n

    # -- requests (event loop; called by BookieConnection or an in-process transport) -----

    @property
    def serving(self) -> bool:
        """Started and not stopped: requests may be handed to :meth:`handle`/:meth:`admit_add`."""
        return self.journal is not None and not self._stopped

    def attach(self, conn: Responder) -> None:
        """Track an in-process responder like a connection: :meth:`stop` closes it."""
        self._connections.add(conn)

    def handle(
        self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]
    ) -> None:
        op = request.op
        if op == OpType.ADD_ENTRY:
            self._add(request, payload, conn, durable)
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
            conn.reply(self._error(request, Status.BAD_REQUEST, f"unknown operation {op}"))

    def after_batch(self, conn: Responder, durable: list[Reply]) -> None:
        journal = self.journal
        assert journal is not None
        if durable:
            journal.on_durable(
                lambda: conn.reply_all(durable),
                lambda exc: conn.reply_all(self._write_failures(durable, exc)),
            )
        if journal.over_limit:
            conn.pause_reading()
            journal.on_durable(conn.resume_reading, lambda _exc: conn.resume_reading())
        storage = self.storage
        assert storage is not None
        if storage.entry_logger.buffered_bytes > self.config.write_cache_max_bytes:
            self._checkpoint_wanted.set()
        self._check_disk_if_written_enough()

    @staticmethod
    def _write_failures(durable: list[Reply], exc: BaseException) -> list[Reply]:
        """The answers to requests whose journal write failed: INTERNAL_ERROR each."""
        message = f"journal write failed: {exc}"
        return [
            (
                Response(
                    request_id=r.request_id,
                    op=r.op,
                    status=_INTERNAL_ERROR,  # type: ignore[arg-type]
                    message=message,
                    ledger_id=r.ledger_id,
                    entry_id=r.entry_id,
                ),
                b"",
            )
            for r, _ in durable
        ]

    @staticmethod
    def _error(request: Request, status: int, message: str) -> Response:
        return Response(
            request_id=request.request_id,
            op=request.op,
            status=status,  # type: ignore[arg-type]
            message=message,
            ledger_id=request.ledger_id,
            entry_id=request.entry_id,
        )

    def admit_add(
        self,
        ledger_id: int,
        entry_id: int,
        last_add_confirmed: int,
        checksum: int,
        payload: bytes,
        recovery: bool,
    ) -> tuple[int, str]:
        """:meth:`admit_adds` for one entry."""
        return self.admit_adds(
            ledger_id, entry_id, last_add_confirmed, (checksum,), (payload,), recovery
        )

    def admit_adds(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_add_confirmed: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool,
    ) -> tuple[int, str]:
        """Check and store a run of adds, entries ``first_entry_id``, ``+1``, ... of
        ``ledger_id`` (``checksums[i]`` belongs to ``payloads[i]``): ``(_OK, "")`` once
        all are in ledger storage and appended to the journal (one record each, in
        order), else the error status and message of the first entry refused, and then
        nothing of the run is stored.

        OK does not mean durable: the caller must acknowledge only from a
        ``journal.on_durable`` callback registered after this call. Raises nothing.
        """
        storage = self.storage
        journal = self.journal
        assert storage is not None and journal is not None
        if self.readonly:
            return _READ_ONLY, f"bookie {self.bookie_id} is read-only"
        if first_entry_id < 0:
            return _BAD_REQUEST, f"bad entry id {first_entry_id}"
        size_max = self.config.entry_size_max_bytes
        crc = crc32c.crc32c
        sizes = list(map(len, payloads))
        if (
            len(checksums) != len(sizes)
            or (sizes and max(sizes) > size_max)
            or any(map(int.__ne__, map(crc, payloads), checksums))
        ):  # which entry is refused first, and why: record by record (C loops above)
            for checksum, payload, size in zip(checksums, payloads, sizes, strict=True):
                if size > size_max:
                    return _TOO_LARGE, f"entry of {size} bytes exceeds {size_max}"
                if crc(payload) != checksum:
                    return _BAD_REQUEST, "payload checksum mismatch"
        written_bytes = sum(sizes)
        rec = storage.ledgers.get(ledger_id)
        if rec is not None:
            if rec.fenced and not recovery:
                return _FENCED, f"ledger {ledger_id} is fenced"
            try:
                rec.entries.read_back()  # a spilled index: before anything is stored
            except OSError as exc:
                log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
                return _INTERNAL_ERROR, f"index of ledger {ledger_id} unreadable: {exc}"
        storage.add_entries(ledger_id, first_entry_id, last_add_confirmed, checksums, payloads)
        journal.append_many(
            ADD_ENTRY, ledger_id, first_entry_id, last_add_confirmed, checksums, payloads
        )
        self._disk_trigger.written_bytes += written_bytes
        return _OK, ""

    @property
    def write_cache_full(self) -> bool:
        """The write buffers hold a quarter more than ``write_cache_max_bytes`` not yet synced
        to the entry logs: a checkpoint is writing and the adds since have filled another
        quarter of the cache."""
        storage = self.storage
        return storage is not None and (
            storage.entry_logger.buffered_bytes > self.write_cache_full_bytes
        )

    @property
    def write_cache_full_bytes(self) -> int:
        """Past this many bytes in the write buffers, :attr:`write_cache_full`."""
        return self.config.write_cache_max_bytes * 5 // 4

    def on_write_cache_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) when the write cache is no longer full (the checkpoint
        writing has synced enough), when the next checkpoint attempt ends, whatever its
        outcome, at the latest after ``checkpoint_interval_ms`` (a bookie that cannot
        checkpoint, say read-only after a fault, holds nobody up longer), or when the bookie
        stops."""
        self._write_cache_waiters.append(callback)
        self._checkpoint_wanted.set()

    def _write_cache_synced(self, loop: asyncio.AbstractEventLoop) -> None:
        """Writing thread, after each sync piece of a checkpoint: wake the loop only if adds
        wait for room (a waiter added just after this look is let go when the checkpoint
        ends, as before)."""
        if self._write_cache_waiters:
            with contextlib.suppress(RuntimeError):  # the loop closed: the bookie stopped
                loop.call_soon_threadsafe(self._write_cache_released)

    def _write_cache_released(self) -> None:
        """A checkpoint dropped synced payloads from the write buffers."""
        if self._write_cache_waiters and not self.write_cache_full:
            self._release_write_cache_waiters()

    def _release_write_cache_waiters(self) -> None:
        waiters, self._write_cache_waiters = self._write_cache_waiters, []
        for callback in waiters:
            callback()

    def check_write_cache(self) -> None:
        """Start a checkpoint if the entry-log write buffers outgrew the cache, and look at
        free disk space if enough was written (call after adds that did not come through
        :meth:`after_batch`)."""
        storage = self.storage
        if storage is not None and (
            storage.entry_logger.buffered_bytes > self.config.write_cache_max_bytes
        ):
            self._checkpoint_wanted.set()
        self._check_disk_if_written_enough()

    def _add(self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]) -> None:
        status, message = self.admit_add(
            request.ledger_id,
            request.entry_id,
            request.last_add_confirmed,
            request.checksum,
            payload,
            request.recovery,
        )
        if status != _OK:
            conn.reply(self._error(request, status, message))
            return
        durable.append(
            (
                Response(
                    request_id=request.request_id,
                    op=OpType.ADD_ENTRY,
                    ledger_id=request.ledger_id,
                    entry_id=request.entry_id,
                ),
                b"",
            )
        )

    def _fence_ledger(self, ledger_id: int) -> bool:
        """Fence; returns True if this call fenced it (a FENCE record was journaled)."""
        storage = self.storage
        journal = self.journal
        assert storage is not None and journal is not None
        rec = storage.ledgers.get(ledger_id)
        if rec is not None and rec.fenced:
            return False
        storage.fence(ledger_id)
        journal.append(FENCE, ledger_id, -1, -1, 0, b"")
        return True

    def _fence(self, request: Request, conn: Responder, durable: list[Reply]) -> None:
        storage = self.storage
        assert storage is not None
        self._fence_ledger(request.ledger_id)
        rec = storage.ledgers[request.ledger_id]
        # Answer after the journal sync even if already fenced: the earlier fence record may
        # still be in flight.
        durable.append(
            (
                Response(
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

    def _read_lac(self, request: Request, conn: Responder) -> None:
        storage = self.storage
        assert storage is not None
        rec = storage.ledgers.get(request.ledger_id)
        if rec is None:
            conn.reply(
                self._error(request, Status.NO_SUCH_LEDGER, f"no ledger {request.ledger_id}")
            )
            return
        conn.reply(
            Response(
                request_id=request.request_id,
                op=OpType.READ_LAC,
                ledger_id=request.ledger_id,
                last_add_confirmed=rec.lac,
                fenced=rec.fenced,
            )
        )

    def _info(self, request: Request, conn: Responder) -> None:
        storage = self.storage
        assert storage is not None
        rec = storage.ledgers.get(request.ledger_id)
        if rec is None:
            conn.reply(
                self._error(request, Status.NO_SUCH_LEDGER, f"no ledger {request.ledger_id}")
            )
            return
        conn.reply(
            Response(
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
        storage = self.storage
        assert storage is not None
        ledger_id = request.ledger_id
        recovery = request.op == OpType.RECOVERY_READ
        wait_journal = recovery and self._fence_ledger(ledger_id)
        rec = storage.ledgers.get(ledger_id)
        if rec is None:
            conn.reply(self._error(request, Status.NO_SUCH_LEDGER, f"no ledger {ledger_id}"))
            return
        try:
            location = rec.entries.get(request.entry_id)
        except OSError as exc:  # a spilled index whose file cannot be read
            conn.reply(self._index_unreadable(request, exc))
            return
        if location is None:
            err = self._error(
                request, Status.NO_SUCH_ENTRY, f"no entry {ledger_id}:{request.entry_id}"
            )
            if wait_journal:
                durable.append((err, b""))
            else:
                conn.reply(err)
            return
        stored = storage.read_buffered(location)
        if stored is not None:
            out = self._entry_response(
                request, stored.last_add_confirmed, stored.checksum, rec.fenced, stored.payload
            )
            if wait_journal:
                durable.append(out)
            else:
                conn.reply(*out)
            return
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._storage_executor, storage.read_file, location)
        fenced = rec.fenced

        def done(f: asyncio.Future[StoredEntry]) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("read of %s:%s failed: %s", ledger_id, request.entry_id, exc)
                out: Reply = (
                    self._error(request, Status.INTERNAL_ERROR, f"read failed: {exc}"),
                    b"",
                )
            else:
                s = f.result()
                out = self._entry_response(
                    request, s.last_add_confirmed, s.checksum, fenced, s.payload
                )
            if wait_journal:
                assert self.journal is not None
                failed = self._error(request, Status.INTERNAL_ERROR, "journal write failed")
                self.journal.on_durable(lambda: conn.reply(*out), lambda _e: conn.reply(failed))
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
        storage = self.storage
        assert storage is not None
        ledger_id = request.ledger_id
        first = request.entry_id
        last = request.last_entry_id
        ids = range(first, last + 1, max(request.stride, 1))[:READ_ENTRIES_MAX]
        rec = storage.ledgers.get(ledger_id)
        if rec is None:
            conn.reply(self._error(request, Status.NO_SUCH_LEDGER, f"no ledger {ledger_id}"))
            return
        if first < 0 or not ids:
            conn.reply(self._error(request, Status.BAD_REQUEST, f"no entries in {first}..{last}"))
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
                conn.reply(self._index_unreadable(request, exc))
                return
            log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
        if not wanted:
            conn.reply(self._error(request, Status.NO_SUCH_ENTRY, f"no entry {ledger_id}:{first}"))
            return
        fenced = rec.fenced
        if all(isinstance(w, StoredEntry) for w in wanted):
            got = _take_run(wanted, budget, storage.read_file)
            conn.reply(*self._entries_response(request, got, fenced))
            return
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(
            self._storage_executor, _take_run, wanted, budget, storage.read_file
        )

        def done(f: asyncio.Future[list[StoredEntry]]) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("read of %s:%s failed: %s", ledger_id, first, exc)
                conn.reply(self._error(request, Status.INTERNAL_ERROR, f"read failed: {exc}"))
            else:
                conn.reply(*self._entries_response(request, f.result(), fenced))

        fut.add_done_callback(done)

    @staticmethod
    def _index_unreadable(request: Request, exc: OSError) -> Response:
        """The answer to a read whose ledger's spilled index cannot be read back (logged)."""
        ledger_id = request.ledger_id
        log.error("index of ledger %d cannot be read back: %s", ledger_id, exc)
        return Bookie._error(
            request, Status.INTERNAL_ERROR, f"index of ledger {ledger_id} unreadable"
        )

    @staticmethod
    def _entries_response(request: Request, run: list[StoredEntry], fenced: bool) -> Reply:
        response, payload = Bookie._entry_response(
            request,
            max(s.last_add_confirmed for s in run),
            0,
            fenced,
            b"".join(s.payload for s in run),
        )
        response.entry_sizes.extend(len(s.payload) for s in run)
        response.checksums.extend(s.checksum for s in run)
        return response, payload

    @staticmethod
    def _entry_response(
        request: Request, lac: int, checksum: int, fenced: bool, payload: bytes
    ) -> Reply:
        return (
            Response(
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

    # -- checkpoints ----------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Persist ledger storage up to the journal's current end, then drop older journal
        files. One at a time."""
        storage = self.storage
        journal = self.journal
        assert storage is not None and journal is not None
        async with self._checkpoint_lock:
            if self._checkpoint_io is not None:  # a cancelled checkpoint's I/O still runs
                await asyncio.wait([self._checkpoint_io])
                self._checkpoint_io = None
            job: CheckpointJob = storage.begin_checkpoint(journal.position)
            loop = asyncio.get_running_loop()
            io = loop.run_in_executor(self._storage_executor, storage.run_checkpoint_io, job)
            try:
                await asyncio.shield(io)
            except asyncio.CancelledError:
                # The I/O runs on in its thread: settle the job when it ends (the next
                # checkpoint waits for that before it starts).
                self._checkpoint_io = io
                io.add_done_callback(partial(_settle_checkpoint, storage, job))
                raise
            except BaseException:
                # Nothing of this checkpoint counts: the journal keeps every record it
                # covered, and the next checkpoint writes them again.
                storage.abort_checkpoint(job)
                raise
            freed = storage.finish_checkpoint(job)
            if freed:
                log.info("bookie %s: removed entry logs, %d bytes freed", self.bookie_id, freed)
            detached = journal.detach_before(job.journal_position)
            if detached:
                await loop.run_in_executor(self._storage_executor, unlink_all, detached)

    async def _checkpoint_loop(self) -> None:
        interval_s = self.config.checkpoint_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            # Whichever comes first: the interval (on the injected clock) or a full cache.
            sleeper = loop.create_task(self._clock.sleep(interval_s))
            wanted = loop.create_task(self._checkpoint_wanted.wait())
            try:
                await asyncio.wait({sleeper, wanted}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                wanted.cancel()
            self._checkpoint_wanted.clear()
            if self.storage_fault is not None:
                self._release_write_cache_waiters()
                continue  # the disk loop retries (one attempt, one log line, per interval)
            try:
                await self.checkpoint()
            except OSError as exc:  # an operating error (ENOSPC, EIO): one line, read-only
                log.error("bookie %s: checkpoint failed: %s", self.bookie_id, exc)
                self._storage_failed(f"checkpoint failed: {exc}")
            except Exception:
                log.exception("checkpoint failed")
            finally:
                self._release_write_cache_waiters()

    # -- garbage collection ----------------------------------------------------------------

    async def collect_garbage(self) -> int:
        """Forget ledgers deleted from the metadata store, then remove or compact entry logs
        with little live data. Returns the number of entry-log bytes freed."""
        storage = self.storage
        assert storage is not None and self._metadata is not None
        # Snapshot local ledgers BEFORE listing the store: a ledger created after the
        # listing cannot be in the snapshot, so it is never mistaken for a deleted one.
        local = list(storage.ledgers)
        try:
            names = await self._metadata.children(LEDGERS_PATH)
        except NotFound:
            names = []
        alive = set()
        for name in names:
            m = LEDGER_NODE_RE.match(name)
            if m:
                alive.add(int(m.group(1)))
        deleted = [lg for lg in local if lg not in alive]
        if deleted:
            storage.delete_ledgers(deleted)
            log.info(
                "bookie %s: garbage-collected %d deleted ledgers", self.bookie_id, len(deleted)
            )
        loop = asyncio.get_running_loop()
        active = storage.entry_logger.active_log_id
        total = storage.log_total_bytes.get(active, 0)
        if (
            total
            and storage.log_live_bytes.get(active, 0) / total
            < self.config.compaction_live_fraction_max
        ):
            # Mostly garbage already: close it so it can be compacted or removed below.
            storage.entry_logger.roll()
        # Compaction reads settled logs from their files: flush the write buffers first.
        await self.checkpoint()
        logger = storage.entry_logger
        cache_bytes = self.config.write_cache_max_bytes
        for log_id in storage.sparse_logs(self.config.compaction_live_fraction_max):
            moved = 0
            for ledger_id, entry_ids, locations in storage.live_locations(log_id):
                for entry_id, loc in zip(entry_ids, locations, strict=True):
                    stored = await loop.run_in_executor(
                        self._storage_executor, storage.read_file, loc
                    )
                    storage.relocate(ledger_id, entry_id, loc, stored)
                    moved += 1
                    if logger.buffered_bytes > cache_bytes:
                        # The moved entries wait in the write buffers like adds do: written
                        # out a cache at a time, not a sparse log's whole live data (up to
                        # half a log) held in memory until the end of the collection.
                        await self.checkpoint()
            log.info(
                "bookie %s: compacted entry log %d (%d live entries moved)",
                self.bookie_id,
                log_id,
                moved,
            )
            storage.schedule_removal([log_id])
        dead = storage.dead_logs()
        storage.schedule_removal(dead)
        before = sum(storage.log_total_bytes.values())
        await self.checkpoint()
        self.gc_runs += 1
        return max(0, before - sum(storage.log_total_bytes.values()))

    async def spill_idle_indexes(self) -> int:
        """One look for idle ledgers: the indexes of those idle long enough leave memory
        (written to spill files in a storage thread). Returns how many left."""
        storage = self.storage
        assert storage is not None
        candidates = storage.spill_candidates(self.config.index_spill_idle_scans)
        if not candidates:
            return 0
        loop = asyncio.get_running_loop()
        written = await loop.run_in_executor(
            self._storage_executor, storage.write_spills, candidates
        )
        return storage.finish_spills(written)

    async def _spill_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.index_spill_interval_ms / 1000)
            try:
                await self.spill_idle_indexes()
            except Exception:
                log.exception("spilling idle ledger indexes failed")

    async def _gc_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.gc_interval_ms / 1000)
            try:
                await self.collect_garbage()
            except OSError as exc:  # its checkpoint failed (ENOSPC, EIO): one line, read-only
                log.error("bookie %s: garbage collection failed: %s", self.bookie_id, exc)
                self._storage_failed(f"checkpoint failed: {exc}")
            except Exception:
                log.exception("garbage collection failed")


def _settle_checkpoint(
    storage: LedgerStorage, job: CheckpointJob, io: asyncio.Future[None]
) -> None:
    """The end of a checkpoint whose waiter was cancelled: keep it or give it back."""
    if io.cancelled() or io.exception() is not None:
        storage.abort_checkpoint(job)
    else:
        storage.finish_checkpoint(job)
