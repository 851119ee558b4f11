"""The embedded backend: a ZooKeeper-like tree kept in SQLite, for single-process deployments.

Layout: one :class:`EmbeddedDatabase` per database (a SQLite file, or a named in-memory
database) shared by every :class:`EmbeddedStore` (session) of the process that opens it, so
tasks of one process can hold ephemeral nodes, locks and elections against each other.

Threading: every SQLite call runs on the database's single worker thread, so the event loop
never waits on SQLite or on an fsync; the thread also serialises transactions, which makes
each operation (and each multi) atomic and gives every change one global order.
Notifications are published from the worker thread right after commit, in commit order, so a
writer's own notification is queued before its call returns.

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
import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
    BadVersion,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    GetResult,
    InvalidPath,
    MetadataStoreError,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
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

log = logging.getLogger(__name__)

T = TypeVar("T")

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

_COLUMNS = "value, version, created_ms, modified_ms, owner"


@dataclass
class _Row:
    value: bytes
    version: int
    created_ms: int
    modified_ms: int
    owner: int | None


@dataclass
class _Txn:
    """One write transaction on the worker thread: typed checks, changes, and the events
    to publish if it commits."""

    conn: sqlite3.Connection
    session_id: int
    now_ms: int
    events: list[Notification] = field(default_factory=list)

    def row(self, path: str) -> _Row | None:
        found = self.conn.execute(
            f"SELECT {_COLUMNS} FROM nodes WHERE path = ?", (path,)
        ).fetchone()
        return None if found is None else _Row(*found)

    def stat(self, path: str, row: _Row) -> Stat:
        (count,) = self.conn.execute(
            "SELECT count(*) FROM nodes WHERE parent = ?", (path,)
        ).fetchone()
        return Stat(row.version, row.created_ms, row.modified_ms, row.owner, count)

    def create(self, path: str, value: bytes, *, ephemeral: bool, sequential: bool) -> str:
        if path == "/" and not sequential:
            raise NodeExists("/ always exists")
        parent = paths.parent(path) if path != "/" else "/"
        parent_row = self.conn.execute(
            "SELECT owner, cversion FROM nodes WHERE path = ?", (parent,)
        ).fetchone()
        if parent_row is None:
            raise NotFound(f"parent of {path} does not exist")
        owner, cversion = parent_row
        if owner is not None:
            raise NoChildrenForEphemerals(f"{parent} is ephemeral")
        if sequential:
            path = f"{path}{cversion:0{paths.SEQUENCE_DIGITS}d}"
        if self.conn.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone():
            raise NodeExists(path)
        self.conn.execute(
            "INSERT INTO nodes (path, parent, value, version, cversion, created_ms, modified_ms,"
            " owner) VALUES (?, ?, ?, 0, 0, ?, ?, ?)",
            (path, parent, value, self.now_ms, self.now_ms, self.session_id if ephemeral else None),
        )
        self.conn.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent,))
        self.events.append(Notification(EventType.CREATED, path))
        self.events.append(Notification(EventType.CHILDREN_CHANGED, parent))
        return path

    def ensure_parents(self, path: str) -> None:
        for ancestor in paths.ancestors(path):
            if self.conn.execute("SELECT 1 FROM nodes WHERE path = ?", (ancestor,)).fetchone():
                continue
            self.create(ancestor, b"", ephemeral=False, sequential=False)

    def set(self, path: str, value: bytes, version: int) -> Stat:
        row = self.row(path)
        if row is None:
            raise NotFound(path)
        if version != ANY_VERSION and version != row.version:
            raise BadVersion(f"{path}: expected version {version}, found {row.version}")
        self.conn.execute(
            "UPDATE nodes SET value = ?, version = version + 1, modified_ms = ? WHERE path = ?",
            (value, self.now_ms, path),
        )
        self.events.append(Notification(EventType.MODIFIED, path))
        row.version += 1
        row.modified_ms = self.now_ms
        return self.stat(path, row)

    def check(self, path: str, version: int) -> None:
        row = self.row(path)
        if row is None:
            raise NotFound(path)
        if version != ANY_VERSION and version != row.version:
            raise BadVersion(f"{path}: expected version {version}, found {row.version}")

    def delete(self, path: str, version: int) -> None:
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        row = self.row(path)
        if row is None:
            raise NotFound(path)
        if version != ANY_VERSION and version != row.version:
            raise BadVersion(f"{path}: expected version {version}, found {row.version}")
        if self.conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
            raise NotEmpty(path)
        self._remove(path)

    def _remove(self, path: str) -> None:
        parent = paths.parent(path)
        self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self.conn.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent,))
        self.events.append(Notification(EventType.DELETED, path))
        self.events.append(Notification(EventType.CHILDREN_CHANGED, parent))

    def delete_tree(self, path: str) -> None:
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        # '0' is the character after '/', so this range is exactly the descendants.
        rows = self.conn.execute(
            "SELECT path FROM nodes WHERE path = ? OR (path > ? AND path < ?)",
            (path, path + "/", path + "0"),
        ).fetchall()
        for (victim,) in sorted(rows, key=lambda r: (-r[0].count("/"), r[0])):
            self._remove(victim)

    def delete_owned(self, owner: int) -> None:
        rows = self.conn.execute("SELECT path FROM nodes WHERE owner = ?", (owner,)).fetchall()
        for (victim,) in sorted(rows):
            self._remove(victim)


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
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, 0, 0, 0, NULL)")
        conn.execute("INSERT OR IGNORE INTO counters VALUES ('session', 0)")
        # Every session recorded here belongs to a process that is gone (see module doc).
        conn.execute("DELETE FROM nodes WHERE owner IS NOT NULL")
        conn.execute("COMMIT")
        self._conn = conn

    def _write(self, session_id: int, now_ms: int, body: Callable[[_Txn], T]) -> T:
        conn = self._conn
        assert conn is not None
        if session_id not in self._live_sessions:
            raise SessionExpired(f"session {session_id:#x} is not alive")
        txn = _Txn(conn, session_id, now_ms)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(txn)
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT (a full disk: SQLITE_FULL may leave the transaction
            # open): the next BEGIN must find none.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._publish(txn.events)
        return result

    def _read(self, session_id: int, body: Callable[[_Txn], T]) -> T:
        conn = self._conn
        assert conn is not None
        if session_id not in self._live_sessions:
            raise SessionExpired(f"session {session_id:#x} is not alive")
        # A read-only snapshot: the worker thread is the only writer, so no BEGIN is needed.
        return body(_Txn(conn, session_id, 0))

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

    def _end_session(self, session_id: int, now_ms: int) -> None:
        if session_id not in self._live_sessions:
            return
        self._write(session_id, now_ms, lambda txn: txn.delete_owned(session_id))
        self._live_sessions.discard(session_id)

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

    async def write(self, session_id: int, now_ms: int, body: Callable[[_Txn], T]) -> T:
        return await self.call(self._write, session_id, now_ms, body)

    async def read(self, session_id: int, body: Callable[[_Txn], T]) -> T:
        return await self.call(self._read, session_id, body)

    async def open_session(self) -> int:
        return await self.call(self._open_session)

    async def end_session(self, session_id: int, now_ms: int) -> None:
        await self.call(self._end_session, session_id, now_ms)

    def shutdown(self) -> None:
        """Close the connection and the worker; called when the last session is gone."""
        self._executor.submit(self._close).result()
        self._executor.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


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

        def body(txn: _Txn) -> GetResult:
            row = txn.row(path)
            if row is None:
                raise NotFound(path)
            return GetResult(row.value, txn.stat(path, row))

        return await self._database.read(self._session_id, body)

    async def exists(self, path: str) -> Stat | None:
        paths.validate(path)
        self._check_alive()

        def body(txn: _Txn) -> Stat | None:
            row = txn.row(path)
            return None if row is None else txn.stat(path, row)

        return await self._database.read(self._session_id, body)

    async def put(self, path: str, value: bytes, expected_version: int = ANY_VERSION) -> Stat:
        paths.validate(path)
        value = self._check_value(value)
        self._check_alive()
        if path == "/" and expected_version == MUST_NOT_EXIST:
            raise NodeExists("/ always exists")

        def body(txn: _Txn) -> Stat:
            if expected_version == MUST_NOT_EXIST or (
                expected_version == ANY_VERSION and txn.row(path) is None
            ):
                txn.ensure_parents(path)
                txn.create(path, value, ephemeral=False, sequential=False)
                row = txn.row(path)
                assert row is not None
                return txn.stat(path, row)
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

        def body(txn: _Txn) -> str:
            txn.ensure_parents(path)
            return txn.create(path, value, ephemeral=ephemeral, sequential=sequential)

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

        def body(txn: _Txn) -> list[str]:
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

        def body(txn: _Txn) -> list[OpResult]:
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                try:
                    results.append(_apply(txn, op))
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


def _apply(txn: _Txn, op: Op) -> OpResult:
    if isinstance(op, CheckOp):
        txn.check(op.path, op.version)
        return OpResult(op.path)
    if isinstance(op, CreateOp):
        return OpResult(
            txn.create(op.path, op.value, ephemeral=op.ephemeral, sequential=op.sequential)
        )
    if isinstance(op, SetOp):
        return OpResult(op.path, txn.set(op.path, op.value, op.version))
    if isinstance(op, DeleteOp):
        txn.delete(op.path, op.version)
        return OpResult(op.path)
    raise TypeError(f"not an op: {op!r}")


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
