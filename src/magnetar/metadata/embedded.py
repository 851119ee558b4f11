"""The embedded backend: a ZooKeeper-like tree kept in SQLite, for single-process deployments.

Layout: one :class:`EmbeddedDatabase` per database (a SQLite file, or a named in-memory
database) shared by every :class:`EmbeddedStore` (session) of the process that opens it, so
tasks of one process can hold ephemeral nodes, locks and elections against each other.

Threading: every SQLite call runs on the database's single worker thread, so the event loop
never waits on SQLite or on an fsync; the thread also serialises transactions, which makes
each operation (and each multi) atomic and gives every change one global order.
Notifications are published from the worker thread right after commit, in commit order, so a
writer's own notification is queued before its call returns.

Batches: the operations an event loop issues while the worker is busy with that loop's
previous batch wait in the loop's queue, in issue order, and go to the worker together as the
next batch (through ``loop.run_in_executor``, so a loop that runs executor jobs inline, the
simulation's, stays deterministic). A batch's writes share one transaction: a write that
raises rolls back alone and fails alone (the batch is run again with a savepoint per write
when one raises; see :meth:`EmbeddedDatabase._run_batch`), and one COMMIT (one fsync) stands
for all the others. No operation of a batch is answered before that COMMIT, so
a read that saw an earlier write of its batch is answered only once that write is durable,
and if the COMMIT fails every operation of the batch fails. Operations of one loop run in the
order issued (a read issued after a write sees it, as a ZooKeeper session's do).

Durability (file databases): WAL journal with ``synchronous=FULL`` by default — every commit
fsyncs the WAL before the operation returns, so an acknowledged write survives power loss,
not only a process crash. Metadata writes are rare (ledger creation and closing, cursor
ledger switches, ownership) and off the event loop, so the fsync is affordable; pass
``?synchronous=normal`` to trade power-loss durability of the last commits for speed (still
crash-safe for process kills, never corrupt).

Sessions: a session is alive from :meth:`EmbeddedDatabase.open_session` until closed or
expired; its ephemeral nodes are deleted then. Because only one process may open a file
database (an exclusive ``flock`` on ``<file>.lock``), every session found in the file at
open time belongs to a dead process: its ephemeral nodes are dropped before first use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MetadataError
from magnetar.metadata import path as paths
from magnetar.metadata.notifications import (
    NotificationStream,
    SessionStateStream,
    StreamHub,
)
from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    VALUE_SIZE_MAX_BYTES,
    CreateOp,
    GetResult,
    MetadataStoreError,
    NodeExists,
    NotFound,
    Notification,
    Op,
    OpResult,
    SessionExpired,
    SessionState,
    SetOp,
    Stat,
    ValueTooLarge,
)
from magnetar.metadata.transaction import Transaction, apply_op

log = logging.getLogger(__name__)

T = TypeVar("T")

PAGE_CACHE_KIB = 512
"""SQLite's own page cache of a file database, per connection (SQLite's default is 2 MiB).
The file's pages stay in the system's page cache, and the broker answers most reads from
its :class:`~magnetar.metadata.cache.MetadataCache`, so a larger one only held the tree
(~0.9 KB per topic) twice in memory: measured with ``benchmarks/topics.py``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    cversion INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    modified_ms INTEGER NOT NULL,
    owner INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class EmbeddedDatabase:
    """One SQLite database shared by the sessions of this process. Obtain with
    :func:`open_database`; it closes when its last session closes."""

    def __init__(self, key: str, filename: str | None, synchronous: str) -> None:
        self.key = key
        self.filename = filename
        self.hub_lock = threading.Lock()
        self.hubs: dict[int, StreamHub] = {}
        self.references = 0
        self._live_sessions: set[int] = set()
        self._lock_fd: int | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"metadata-sqlite-{key}"
        )
        self._conn: sqlite3.Connection | None = None
        self._queues: dict[asyncio.AbstractEventLoop, _LoopQueue] = {}
        """Each event loop's operations waiting for its next batch (touched only on that
        loop's thread)."""
        if filename is not None:
            self._lock_fd = os.open(filename + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                self._lock_fd = None
                self._executor.shutdown(wait=False)
                raise MetadataError(
                    f"{filename} is open in another process (it holds the lock {filename}.lock)"
                ) from None
        self._executor.submit(self._open, synchronous).result()

    # -- worker-thread side ----------------------------------------------------------------

    def _open(self, synchronous: str) -> None:
        conn = sqlite3.connect(
            self.filename or ":memory:", isolation_level=None, check_same_thread=False
        )
        if self.filename is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, 0, 0, 0, NULL)")
        conn.execute("INSERT OR IGNORE INTO counters VALUES ('session', 0)")
        # Every session recorded here belongs to a process that is gone (see module doc).
        conn.execute("DELETE FROM nodes WHERE owner IS NOT NULL")
        conn.execute("COMMIT")
        self._conn = conn

    def _run_batch(self, batch: list[_Operation[Any]]) -> list[tuple[bool, Any]]:
        """Run ``batch`` in order (see the module doc) and return each operation's outcome,
        ``(True, result)`` or ``(False, exception)``.

        First without a savepoint per write (two statements fewer each, and each statement
        is a hand-over of the GIL between this thread and the event loop's); if a write
        raises, that attempt is rolled back whole and the batch runs again with a savepoint
        per write, so the failing one rolls back alone (every body is a function of the
        database: running it again is running it once)."""
        conn = self._conn
        assert conn is not None
        try:
            try:
                outcomes, events, ended = self._attempt(conn, batch, savepoints=False)
            except _WriteFailed:
                if conn.in_transaction:  # (an error may have ended it already)
                    conn.execute("ROLLBACK")
                outcomes, events, ended = self._attempt(conn, batch, savepoints=True)
            if conn.in_transaction:
                conn.execute("COMMIT")
        except BaseException as exc:
            # Also after a failed COMMIT (a full disk: SQLITE_FULL may leave the transaction
            # open): the next BEGIN must find none.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if not isinstance(exc, Exception):
                raise
            return [(False, self._error(exc))] * len(batch)
        self._live_sessions.difference_update(ended)
        self._publish(events)
        return outcomes

    def _attempt(
        self, conn: sqlite3.Connection, batch: list[_Operation[Any]], *, savepoints: bool
    ) -> tuple[list[tuple[bool, Any]], list[Notification], list[int]]:
        """Run ``batch``'s operations in one open transaction (begun at its first write):
        their outcomes, the notifications of the writes and the sessions ended. Without
        ``savepoints`` a write that raises raises :class:`_WriteFailed` (the transaction is
        then the caller's to roll back)."""
        outcomes: list[tuple[bool, Any]] = []
        events: list[Notification] = []
        ended: list[int] = []
        for op in batch:
            if op.session_id not in self._live_sessions:
                outcomes.append((False, SessionExpired(f"session {op.session_id:#x} is not alive")))
                continue
            txn = Transaction(conn, op.session_id, op.now_ms)
            if not op.writes:  # no BEGIN: the worker is the only writer (a snapshot)
                try:
                    outcomes.append((True, op.body(txn)))
                except Exception as exc:
                    outcomes.append((False, self._error(exc)))
                continue
            if not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE")
            if not savepoints:
                try:
                    result = op.body(txn)
                except Exception as exc:
                    raise _WriteFailed from exc
            else:
                conn.execute("SAVEPOINT op")
                try:
                    result = op.body(txn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((False, self._error(exc)))
                    continue
                conn.execute("RELEASE op")
            outcomes.append((True, result))
            events.extend(txn.events)
            if op.ends_session:
                ended.append(op.session_id)
        return outcomes, events, ended

    def _error(self, exc: Exception) -> Exception:
        """What a caller sees for ``exc``: SQLite's own errors (e.g. "database or disk is
        full") as an operating error of the store."""
        if not isinstance(exc, sqlite3.Error):
            return exc
        error = MetadataStoreError(f"metadata database {self.filename or ':memory:'}: {exc}")
        error.__cause__ = exc
        return error

    def _publish(self, events: list[Notification]) -> None:
        if not events:
            return
        with self.hub_lock:
            hubs = list(self.hubs.values())
        for event in events:
            for hub in hubs:
                hub.publish(event, threadsafe=True)

    def _open_session(self) -> int:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'session'")
        (session_id,) = conn.execute("SELECT value FROM counters WHERE name = 'session'").fetchone()
        conn.execute("COMMIT")
        self._live_sessions.add(session_id)
        return int(session_id)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- loop side ---------------------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except RuntimeError as exc:
            if "shutdown" in str(exc):
                raise SessionExpired("the database is closed") from None
            raise
        except sqlite3.Error as exc:  # e.g. "database or disk is full": an operating error
            raise MetadataStoreError(
                f"metadata database {self.filename or ':memory:'}: {exc}"
            ) from exc

    # write, read and _submit hand back the operation's future itself (no coroutine of
    # their own): thousands of operations a second go through them.

    def write(
        self, session_id: int, now_ms: int, body: Callable[[Transaction], T]
    ) -> asyncio.Future[T]:
        """Run ``body`` as a write of the loop's next batch (see the module doc); await the
        returned future for its result."""
        return self._submit(_Operation(session_id, now_ms, body, writes=True))

    def read(self, session_id: int, body: Callable[[Transaction], T]) -> asyncio.Future[T]:
        """Run ``body`` (which must not change the database) in the loop's next batch;
        await the returned future for its result."""
        return self._submit(_Operation(session_id, 0, body, writes=False))

    async def open_session(self) -> int:
        return await self.call(self._open_session)

    async def end_session(self, session_id: int, now_ms: int) -> None:
        """Delete the session's ephemeral nodes and end it (a no-op if it is not alive)."""
        if session_id not in self._live_sessions:
            return
        op = _Operation(session_id, now_ms, lambda txn: txn.delete_owned(session_id), writes=True)
        op.ends_session = True
        with contextlib.suppress(SessionExpired):  # ended meanwhile by another call
            await self._submit(op)

    def _submit(self, op: _Operation[T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        op.future = future
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _LoopQueue()
        queue.waiting.append(op)
        if not queue.busy:
            self._start_batch(loop, queue)
        return future

    def _start_batch(self, loop: asyncio.AbstractEventLoop, queue: _LoopQueue) -> None:
        """Send what ``queue`` holds (up to :data:`BATCH_OPERATIONS_MAX`) to the worker."""
        batch = queue.waiting[:BATCH_OPERATIONS_MAX]
        del queue.waiting[:BATCH_OPERATIONS_MAX]
        try:
            done = loop.run_in_executor(self._executor, self._run_batch, batch)
        except RuntimeError:  # the executor is shut down
            for op in batch:
                op.settle(False, SessionExpired("the database is closed"))
            self._next_batch(loop, queue)
            return
        queue.busy = True
        done.add_done_callback(lambda f: self._batch_done(loop, queue, batch, f))

    def _batch_done(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: _LoopQueue,
        batch: list[_Operation[Any]],
        done: asyncio.Future[list[tuple[bool, Any]]],
    ) -> None:
        queue.busy = False
        if done.cancelled():
            outcomes: list[tuple[bool, Any]] = [(False, SessionExpired("batch cancelled"))] * len(
                batch
            )
        elif (exc := done.exception()) is not None:
            outcomes = [(False, exc)] * len(batch)
        else:
            outcomes = done.result()
        for op, (ok, value) in zip(batch, outcomes, strict=True):
            op.settle(ok, value)
        self._next_batch(loop, queue)

    def _next_batch(self, loop: asyncio.AbstractEventLoop, queue: _LoopQueue) -> None:
        if queue.waiting:
            self._start_batch(loop, queue)
        elif self._queues.get(loop) is queue:  # nothing waits: no entry kept per idle loop
            del self._queues[loop]

    def shutdown(self) -> None:
        """Close the connection and the worker; called when the last session is gone."""
        self._executor.submit(self._close).result()
        self._executor.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


BATCH_OPERATIONS_MAX = 512
"""Operations sent to the worker together at most (their writes share one COMMIT)."""


class _WriteFailed(Exception):
    """A write of a batch run without savepoints raised: the batch runs again with them."""


class _LoopQueue:
    """One event loop's operations waiting for its next batch."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        self.waiting: list[_Operation[Any]] = []
        self.busy = False
        """Whether a batch of this loop is with the worker."""


class _Operation(Generic[T]):
    """One read or write of a batch, and the caller's future."""

    __slots__ = ("body", "ends_session", "future", "now_ms", "session_id", "writes")

    def __init__(
        self, session_id: int, now_ms: int, body: Callable[[Transaction], T], *, writes: bool
    ) -> None:
        self.session_id = session_id
        self.now_ms = now_ms
        self.body = body
        self.writes = writes
        self.ends_session = False
        """Whether the session ends when this write commits."""
        self.future: asyncio.Future[T] | None = None

    def settle(self, ok: bool, value: Any) -> None:
        future = self.future
        if future is None or future.done():  # the caller was cancelled
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


_registry_lock = threading.Lock()
_registry: dict[str, EmbeddedDatabase] = {}


def _acquire(key: str, filename: str | None, synchronous: str) -> EmbeddedDatabase:
    with _registry_lock:
        database = _registry.get(key)
        if database is None:
            database = EmbeddedDatabase(key, filename, synchronous)
            _registry[key] = database
        database.references += 1
        return database


def _release(database: EmbeddedDatabase) -> None:
    with _registry_lock:
        database.references -= 1
        if database.references > 0:
            return
        del _registry[database.key]
    database.shutdown()


_SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")


class EmbeddedStore:
    """One session on an :class:`EmbeddedDatabase`; implements
    :class:`~magnetar.metadata.store.MetadataStore`.

    Session states: CONNECTED from open until :meth:`close` or :meth:`expire_session`, then
    LOST (an embedded session is never SUSPENDED: there is no connection to lose).
    """

    def __init__(
        self,
        database: EmbeddedDatabase,
        session_id: int,
        *,
        clock: Clock,
        value_size_max_bytes: int,
    ) -> None:
        self._database = database
        self._session_id = session_id
        self._clock = clock
        self._value_size_max_bytes = value_size_max_bytes
        self._state = SessionState.CONNECTED
        self._hub = StreamHub()
        self._released = False
        with database.hub_lock:
            database.hubs[session_id] = self._hub

    @classmethod
    async def open(
        cls,
        location: str,
        *,
        clock: Clock | None = None,
        value_size_max_bytes: int = VALUE_SIZE_MAX_BYTES,
    ) -> EmbeddedStore:
        """Open a session on ``location``: ``memory:`` (a private in-memory database),
        ``memory:<name>`` (an in-memory database shared by name within this process) or
        ``sqlite:///abs/path`` / ``sqlite://rel/path`` with optional ``?synchronous=normal``.
        Raises :class:`MetadataError` if another process holds the file."""
        key, filename, synchronous = _parse_location(location)
        loop = asyncio.get_running_loop()
        database = await loop.run_in_executor(None, _acquire, key, filename, synchronous)
        try:
            session_id = await database.open_session()
        except BaseException:
            await loop.run_in_executor(None, _release, database)
            raise
        return cls(
            database,
            session_id,
            clock=clock or SystemClock(),
            value_size_max_bytes=value_size_max_bytes,
        )

    # -- MetadataStore -------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def session_state(self) -> SessionState:
        return self._state

    def _check_alive(self) -> None:
        if self._state is SessionState.LOST:
            raise SessionExpired(f"session {self._session_id:#x} is lost")

    def _check_value(self, value: bytes) -> bytes:
        if len(value) > self._value_size_max_bytes:
            raise ValueTooLarge(f"{len(value)} bytes > {self._value_size_max_bytes}")
        return bytes(value)

    async def get(self, path: str) -> GetResult:
        paths.validate(path)
        self._check_alive()

        def body(txn: Transaction) -> GetResult:
            row = txn.row(path)
            if row is None:
                raise NotFound(path)
            return GetResult(row.value, txn.stat(path, row))

        return await self._database.read(self._session_id, body)

    async def exists(self, path: str) -> Stat | None:
        paths.validate(path)
        self._check_alive()

        def body(txn: Transaction) -> Stat | None:
            row = txn.row(path)
            return None if row is None else txn.stat(path, row)

        return await self._database.read(self._session_id, body)

    async def put(self, path: str, value: bytes, expected_version: int = ANY_VERSION) -> Stat:
        paths.validate(path)
        value = self._check_value(value)
        self._check_alive()
        if path == "/" and expected_version == MUST_NOT_EXIST:
            raise NodeExists("/ always exists")

        def body(txn: Transaction) -> Stat:
            if expected_version == MUST_NOT_EXIST or (
                expected_version == ANY_VERSION and txn.row(path) is None
            ):
                txn.create(path, value, ephemeral=False, sequential=False, parents=True)
                return txn.created_stat()
            return txn.set(path, value, expected_version)

        return await self._database.write(self._session_id, self._clock.now_ms(), body)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        paths.validate(path)
        value = self._check_value(value)
        self._check_alive()
        if path == "/" and not sequential:
            raise NodeExists("/ always exists")

        def body(txn: Transaction) -> str:
            return txn.create(path, value, ephemeral=ephemeral, sequential=sequential, parents=True)

        return await self._database.write(self._session_id, self._clock.now_ms(), body)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        paths.validate(path)
        self._check_alive()
        await self._database.write(
            self._session_id, self._clock.now_ms(), lambda txn: txn.delete(path, expected_version)
        )

    async def delete_recursive(self, path: str) -> None:
        paths.validate(path)
        self._check_alive()
        await self._database.write(
            self._session_id, self._clock.now_ms(), lambda txn: txn.delete_tree(path)
        )

    async def children(self, path: str) -> list[str]:
        paths.validate(path)
        self._check_alive()

        def body(txn: Transaction) -> list[str]:
            if txn.row(path) is None:
                raise NotFound(path)
            rows = txn.conn.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
            return sorted(paths.name(p) for (p,) in rows)

        return await self._database.read(self._session_id, body)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        for op in ops:
            paths.validate(op.path)
            if isinstance(op, CreateOp | SetOp):
                self._check_value(op.value)
        self._check_alive()
        ops = list(ops)

        def body(txn: Transaction) -> list[OpResult]:
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                try:
                    results.append(apply_op(txn, op))
                except MetadataStoreError as exc:
                    exc.op_index = index
                    raise
            return results

        return await self._database.write(self._session_id, self._clock.now_ms(), body)

    def notifications(self, prefix: str = "/") -> NotificationStream:
        stream = self._hub.open_notifications(prefix)
        if self._state is SessionState.LOST:
            stream.end()
        return stream

    def session_states(self) -> SessionStateStream:
        stream = self._hub.open_states(self._state)
        if self._state is SessionState.LOST:
            stream.end()
        return stream

    async def expire_session(self) -> None:
        """End the session as if it had timed out: ephemeral nodes are deleted, the state
        becomes LOST and every later operation raises :class:`SessionExpired`. The store
        must still be closed."""
        if self._state is SessionState.LOST:
            return
        self._state = SessionState.LOST
        await self._database.end_session(self._session_id, self._clock.now_ms())
        self._hub.publish_state(SessionState.LOST, threadsafe=False)
        self._hub.end_all(threadsafe=False)

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        if self._state is not SessionState.LOST:
            self._state = SessionState.LOST
            try:
                await self._database.end_session(self._session_id, self._clock.now_ms())
            except MetadataStoreError as exc:  # e.g. a full disk: close anyway
                log.warning(
                    "metadata: could not remove the ephemeral nodes of session %#x (%s); "
                    "the next open of the database removes them",
                    self._session_id,
                    exc,
                )
            self._hub.publish_state(SessionState.LOST, threadsafe=False)
        with self._database.hub_lock:
            self._database.hubs.pop(self._session_id, None)
        # Notifications of the session's last changes are already in the streams: the worker
        # queued them (call_soon_threadsafe) before the completion that resumed us.
        self._hub.end_all(threadsafe=False)
        await asyncio.get_running_loop().run_in_executor(None, _release, self._database)


def _parse_location(location: str) -> tuple[str, str | None, str]:
    """``(registry key, filename or None, synchronous mode)`` for an embedded location."""
    if location.startswith("memory:"):
        name = location[len("memory:") :]
        # An unnamed memory database is private to the opening store.
        key = f"memory:{name}" if name else f"memory:#{next(_anonymous)}"
        return key, None, "OFF"
    if location.startswith("sqlite://"):
        rest = location[len("sqlite://") :]
        query = ""
        if "?" in rest:
            rest, query = rest.split("?", 1)
        synchronous = "FULL"
        for pair in filter(None, query.split("&")):
            name, _, value = pair.partition("=")
            if name != "synchronous" or value.upper() not in _SYNCHRONOUS_MODES:
                raise ValueError(f"unsupported sqlite option {pair!r} in {location!r}")
            synchronous = value.upper()
        if not rest:
            raise ValueError(f"no file in {location!r}")
        filename = os.path.realpath(rest)
        return filename, filename, synchronous
    raise ValueError(f"not an embedded metadata location: {location!r}")


class _Counter:
    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def __next__(self) -> int:
        with self._lock:
            self._value += 1
            return self._value


_anonymous = _Counter()
