"""The ZooKeeper backend, through kazoo, bridged to asyncio without blocking the loop.

Bridging: every request uses kazoo's ``*_async`` API; completion callbacks (on kazoo's
threads) hand results to the loop with ``call_soon_threadsafe``. Nothing here waits on a
kazoo result from the loop thread, except :meth:`ZooKeeperStore.open`/``close``, which run
kazoo's blocking start/stop in a worker thread.

Session states map one to one from kazoo's: ``CONNECTED``, ``SUSPENDED`` (connection lost,
session maybe alive; requests queue until reconnection or fail with :class:`ConnectionLoss`
after ``2 x session timeout``; but once the process is stopping, SIGTERM or SIGINT
(:mod:`magnetar.common.shutdown`), they fail at once: a process that is leaving does not wait
for an unreachable ZooKeeper, whose session and ephemeral nodes go without it), ``LOST``
(session expired). On LOST the kazoo client is
stopped, so this store never silently continues under a fresh session: every later call
raises :class:`SessionExpired`.

Notifications: ZooKeeper 3.8 offers persistent recursive watches but kazoo 2.11 cannot
register them, so a stream's prefix is covered with ordinary one-shot watches — an
existence/data watch and a children watch on every node under the prefix, re-armed when
they fire. As with any ZooKeeper watch, changes that happen between a watch firing and its
re-arming are coalesced (two quick writes may give one MODIFIED; a node created and deleted
in between may give no event) and the relative order of a CREATED and its parent's
CHILDREN_CHANGED is not fixed. Consumers must treat a notification as "re-read this path",
which is what the cache and the recipes do.

ZooKeeper keeps a client's watches with its connection, and kazoo 2.11 does not set them
again on the next connection of the same session (the Java client's ``SetWatches``). So
after every reconnection the store walks every watched node again, setting each watch anew
and publishing what changed while it was disconnected: DELETED for a node gone, MODIFIED
for one whose data changed (its ``mzxid``), CHILDREN_CHANGED and CREATED for new children.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KzEventType
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MetadataError
from magnetar.common.shutdown import on_stop_requested, stopping
from magnetar.metadata import path as paths
from magnetar.metadata.notifications import NotificationStream, SessionStateStream, StreamHub
from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    VALUE_SIZE_MAX_BYTES,
    BadVersion,
    CheckOp,
    ConnectionLoss,
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

_log = logging.getLogger(__name__)

_RETRIES_MAX = 10
"""Bound on internal retries (put's set-or-create race, recursive delete racing creates)."""


def parse_url(url: str) -> tuple[str, str]:
    """``zk://h1:p1,h2:p2/chroot`` -> (``h1:p1,h2:p2``, ``/chroot`` or ``''``)."""
    if not url.startswith("zk://"):
        raise ValueError(f"not a ZooKeeper URL: {url!r}")
    rest = url[len("zk://") :]
    hosts, slash, chroot = rest.partition("/")
    if not hosts:
        raise ValueError(f"no ZooKeeper hosts in {url!r}")
    chroot = slash + chroot if chroot else ""
    if chroot:
        paths.validate(chroot)
    return hosts, chroot


def _stat(stat: ZnodeStat) -> Stat:
    return Stat(
        version=stat.version,
        created_ms=stat.ctime,
        modified_ms=stat.mtime,
        ephemeral_owner=stat.ephemeralOwner or None,
        children_count=stat.numChildren,
    )


def _zk_version(version: int) -> int:
    return -1 if version == ANY_VERSION else version


class ZooKeeperStore:
    """A session on a ZooKeeper ensemble; implements
    :class:`~magnetar.metadata.store.MetadataStore`. Open with :meth:`open`."""

    def __init__(
        self,
        client: KazooClient,
        hosts: str,
        chroot: str,
        *,
        clock: Clock,
        session_timeout_s: float,
        value_size_max_bytes: int,
    ) -> None:
        self._client = client
        self._hosts = hosts
        self._chroot = chroot
        self._clock = clock
        self._session_timeout_s = session_timeout_s
        self._request_timeout_s = 2 * session_timeout_s
        self._value_size_max_bytes = value_size_max_bytes
        self._loop = asyncio.get_running_loop()
        self._hub = StreamHub()
        self._state = SessionState.CONNECTED
        # Written from kazoo's thread the moment the session is lost, read by every call.
        self._lost = threading.Event()
        self._closed = False
        session_id, _password = client.client_id
        self._session_id = int(session_id)
        # Watch machinery (see module docstring); only touched on the loop thread.
        self._watch_queue: asyncio.Queue[WatchedEvent | NotificationStream | _Resync] = (
            asyncio.Queue()
        )
        self._known_children: dict[str, set[str]] = {}
        self._watched: dict[str, int] = {}
        """Every node watched, with the ``mzxid`` of its data as last seen."""
        # The connection dropped (the server forgot every watch) or a ConnectionLoss
        # interrupted watch handling: walk every watched node again once CONNECTED.
        self._resync_needed = False
        self._pump = asyncio.create_task(self._pump_watches(), name="zk-watch-pump")
        # Requests waiting on the server (loop thread only), failed at once when the
        # process stops while the server is unreachable.
        self._pending: set[asyncio.Future[Any]] = set()
        client.add_listener(self._on_kazoo_state)
        self._unregister_stop = on_stop_requested(self._on_process_stop)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        session_timeout_s: float = 10.0,
        clock: Clock | None = None,
        value_size_max_bytes: int = VALUE_SIZE_MAX_BYTES,
    ) -> ZooKeeperStore:
        """Connect (within ``session_timeout_s``) and create the chroot if missing.
        Raises :class:`MetadataError` when the ensemble cannot be reached. Cancellable: no
        thread is left waiting for the connection."""
        hosts, chroot = parse_url(url)
        if chroot:
            await _ensure_chroot(hosts, chroot, session_timeout_s)
        client = _new_client(hosts + chroot, session_timeout_s)
        await _start(client, hosts, session_timeout_s)
        return cls(
            client,
            hosts,
            chroot,
            clock=clock or SystemClock(),
            session_timeout_s=session_timeout_s,
            value_size_max_bytes=value_size_max_bytes,
        )

    # -- session ---------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def session_state(self) -> SessionState:
        return self._state

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's thread: record LOST at once so no further request goes out on a new session.
        if state == KazooState.LOST:
            self._lost.set()
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._set_state, state)

    def _set_state(self, state: str) -> None:
        if self._state is SessionState.LOST:
            return
        new = {
            KazooState.CONNECTED: SessionState.CONNECTED,
            KazooState.SUSPENDED: SessionState.SUSPENDED,
            KazooState.LOST: SessionState.LOST,
        }[state]
        if new is self._state:
            return
        self._state = new
        self._fail_pending_if_leaving()
        if new is SessionState.SUSPENDED:
            self._resync_needed = True
        if new is SessionState.CONNECTED:
            self._queue_resync_if_needed()
        self._hub.publish_state(new, threadsafe=False)
        if new is SessionState.LOST:
            self._hub.end_all(threadsafe=False)  # nothing more can happen in this session
        if new is SessionState.LOST and not self._closed:
            _log.warning("ZooKeeper session %#x lost", self._session_id)
            # Stop the client so kazoo does not quietly open a new session.
            self._loop.create_task(asyncio.to_thread(_stop_client, self._client))

    def _check_alive(self) -> None:
        if self._closed or self._lost.is_set():
            raise SessionExpired(f"session {self._session_id:#x} is lost")
        if self._leaving():
            raise self._unreachable()

    def _leaving(self) -> bool:
        """Stopping while the server is unreachable (see the module docstring)."""
        return self._state is SessionState.SUSPENDED and stopping()

    def _unreachable(self) -> ConnectionLoss:
        return ConnectionLoss(
            f"ZooKeeper {self._hosts} is unreachable and this process is stopping"
        )

    def _on_process_stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
            self._loop.call_soon_threadsafe(self._fail_pending_if_leaving)

    def _fail_pending_if_leaving(self) -> None:
        if not self._leaving():
            return
        for future in self._pending:
            if not future.done():
                future.set_exception(self._unreachable())

    def _check_value(self, value: bytes) -> bytes:
        if len(value) > self._value_size_max_bytes:
            raise ValueTooLarge(f"{len(value)} bytes > {self._value_size_max_bytes}")
        return bytes(value)

    def _translate(self, exc: BaseException) -> BaseException:
        if isinstance(exc, kz.NoNodeError):
            return NotFound(str(exc) or "no node")
        if isinstance(exc, kz.NodeExistsError):
            return NodeExists(str(exc) or "node exists")
        if isinstance(exc, kz.BadVersionError):
            return BadVersion(str(exc) or "bad version")
        if isinstance(exc, kz.NotEmptyError):
            return NotEmpty(str(exc) or "not empty")
        if isinstance(exc, kz.NoChildrenForEphemeralsError):
            return NoChildrenForEphemerals(str(exc) or "no children for ephemerals")
        if isinstance(exc, kz.BadArgumentsError):
            return InvalidPath(str(exc) or "bad arguments")
        if isinstance(exc, kz.SessionExpiredError | kz.ConnectionClosedError):
            if self._closed or self._lost.is_set():
                return SessionExpired(f"session {self._session_id:#x} is lost")
            return ConnectionLoss(str(exc) or "connection closed")
        if isinstance(exc, kz.ConnectionLoss | kz.OperationTimeoutError | kz.ConnectionDropped):
            return ConnectionLoss(str(exc) or "connection loss")
        if isinstance(exc, kz.KazooException):
            return MetadataStoreError(f"{type(exc).__name__}: {exc}")
        return exc

    async def _call(self, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one kazoo async request; typed errors; :class:`ConnectionLoss` on timeout."""
        self._check_alive()
        future: asyncio.Future[Any] = self._loop.create_future()

        def transfer(result: Any) -> None:
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(self._translate(result.exception))

        def completed(result: Any) -> None:  # kazoo's thread
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(transfer, result)

        try:
            start(*args, **kwargs).rawlink(completed)
        except kz.KazooException as exc:
            raise self._translate(exc) from exc
        self._pending.add(future)
        try:
            async with asyncio.timeout(self._request_timeout_s):
                return await future
        except TimeoutError:
            self._check_alive()
            raise ConnectionLoss(f"no reply in {self._request_timeout_s} s") from None
        finally:
            self._pending.discard(future)

    # -- MetadataStore -----------------------------------------------------------------------

    async def get(self, path: str) -> GetResult:
        paths.validate(path)
        data, stat = await self._call(self._client.get_async, path)
        return GetResult(bytes(data or b""), _stat(stat))

    async def exists(self, path: str) -> Stat | None:
        paths.validate(path)
        stat = await self._call(self._client.exists_async, path)
        return None if stat is None else _stat(stat)

    async def put(self, path: str, value: bytes, expected_version: int = ANY_VERSION) -> Stat:
        paths.validate(path)
        value = self._check_value(value)
        if path == "/" and expected_version == MUST_NOT_EXIST:
            raise NodeExists("/ always exists")
        if expected_version == MUST_NOT_EXIST:
            return await self._create_persistent(path, value)
        if expected_version != ANY_VERSION:
            return _stat(await self._call(self._client.set_async, path, value, expected_version))
        for _ in range(_RETRIES_MAX):
            try:
                return _stat(await self._call(self._client.set_async, path, value, -1))
            except NotFound:
                pass
            try:
                return await self._create_persistent(path, value)
            except NodeExists:
                continue
        raise MetadataStoreError(f"put {path}: create and set kept racing")

    async def _create_persistent(self, path: str, value: bytes) -> Stat:
        await self._ensure_parents(path)
        _created, stat = await self._call(self._client.create_async, path, value, include_data=True)
        return _stat(stat)

    async def _ensure_parents(self, path: str) -> None:
        """Create missing ancestors (persistent, empty), tolerating concurrent creators.
        Looks from the deepest ancestor up, so an existing tree costs one round trip."""
        ancestors = paths.ancestors(path)
        missing: list[str] = []
        for ancestor in reversed(ancestors):
            if await self._call(self._client.exists_async, ancestor) is not None:
                break
            missing.append(ancestor)
        for ancestor in reversed(missing):
            with contextlib.suppress(NodeExists):
                await self._call(self._client.create_async, ancestor, b"")

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        paths.validate(path)
        value = self._check_value(value)
        if path == "/" and not sequential:
            raise NodeExists("/ always exists")
        kwargs = {"ephemeral": ephemeral, "sequence": sequential}
        try:
            created: str = await self._call(self._client.create_async, path, value, **kwargs)
        except NotFound:
            await self._ensure_parents(path)
            created = await self._call(self._client.create_async, path, value, **kwargs)
        return created

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        paths.validate(path)
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        await self._call(self._client.delete_async, path, _zk_version(expected_version))

    async def delete_recursive(self, path: str) -> None:
        paths.validate(path)
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        for _ in range(_RETRIES_MAX):
            try:
                await self._delete_tree(path)
                return
            except NotEmpty:
                continue  # someone created a child meanwhile: go round again
        raise MetadataStoreError(f"delete_recursive {path}: children kept appearing")

    async def _delete_tree(self, path: str) -> None:
        try:
            kids: list[str] = await self._call(self._client.get_children_async, path)
        except NotFound:
            return
        for kid in kids:
            await self._delete_tree(paths.join(path, kid))
        with contextlib.suppress(NotFound):
            await self._call(self._client.delete_async, path, -1)

    async def children(self, path: str) -> list[str]:
        paths.validate(path)
        kids: list[str] = await self._call(self._client.get_children_async, path)
        if path == "/" and not self._chroot:
            kids = [k for k in kids if k != "zookeeper"]  # ZooKeeper's own subtree
        return sorted(kids)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        for op in ops:
            paths.validate(op.path)
            if isinstance(op, CreateOp | SetOp):
                self._check_value(op.value)
        self._check_alive()
        ops = list(ops)
        transaction = self._client.transaction()
        for op in ops:
            if isinstance(op, CheckOp):
                transaction.check(op.path, _zk_version(op.version))
            elif isinstance(op, CreateOp):
                transaction.create(
                    op.path, bytes(op.value), ephemeral=op.ephemeral, sequence=op.sequential
                )
            elif isinstance(op, SetOp):
                transaction.set_data(op.path, bytes(op.value), _zk_version(op.version))
            elif isinstance(op, DeleteOp):
                if op.path == "/":
                    raise InvalidPath("/ cannot be deleted")
                transaction.delete(op.path, _zk_version(op.version))
            else:
                raise TypeError(f"not an op: {op!r}")
        if not ops:
            return []
        results: list[Any] = await self._call(transaction.commit_async)
        failure = next(
            (
                (index, r)
                for index, r in enumerate(results)
                if isinstance(r, Exception)
                and not isinstance(r, kz.RolledBackError | kz.RuntimeInconsistency)
            ),
            None,
        )
        if failure is not None:
            index, exc = failure
            error = self._translate(exc)
            if isinstance(error, MetadataStoreError):
                error.op_index = index
            raise error
        out: list[OpResult] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, CreateOp):
                out.append(OpResult(str(result)))
            elif isinstance(op, SetOp):
                out.append(OpResult(op.path, _stat(result)))
            else:
                out.append(OpResult(op.path))
        return out

    # -- notifications -------------------------------------------------------------------------

    def notifications(self, prefix: str = "/") -> NotificationStream:
        stream = self._hub.open_notifications(prefix)
        if self._closed or self._lost.is_set():
            stream.end()
            stream.mark_ready()
        else:
            stream.mark_ready_later()
            self._watch_queue.put_nowait(stream)
        return stream

    def session_states(self) -> SessionStateStream:
        stream = self._hub.open_states(self._state)
        if self._closed:
            stream.end()
        return stream

    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's thread
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._watch_queue.put_nowait, event)

    def _wanted(self, path: str) -> bool:
        return any(paths.is_under(path, s.prefix) for s in self._hub.notification_streams)

    def _publish(self, type_: EventType, path: str) -> None:
        self._hub.publish(Notification(type_, path), threadsafe=False)

    async def _pump_watches(self) -> None:
        """Serially handle watch events and new streams (one task, so no races on state)."""
        while True:
            item = await self._watch_queue.get()
            try:
                if isinstance(item, NotificationStream):
                    try:
                        await self._arm(item.prefix, announce=False)
                    finally:
                        item.mark_ready()
                elif isinstance(item, _Resync):
                    await self._resync()
                else:
                    await self._handle_watch(item)
            except ConnectionLoss as exc:
                # The server forgets the watches with the connection: everything is walked
                # again on reconnection.
                _log.debug("watch handling interrupted by %r", exc)
                self._resync_needed = True
                self._queue_resync_if_needed()
            except SessionExpired as exc:  # a lost session ends every stream
                _log.debug("watch handling stopped by %r", exc)
            except MetadataStoreError:
                _log.exception("unexpected error while handling ZooKeeper watch %r", item)

    def _queue_resync_if_needed(self) -> None:
        if self._resync_needed and self._state is SessionState.CONNECTED:
            self._resync_needed = False
            self._watch_queue.put_nowait(_Resync())

    async def _resync(self) -> None:
        """Set every watch again and publish what changed unseen: DELETED for a watched node
        that is gone (and for a stream's root that is absent, which a stream armed during
        the interruption may never have been told), MODIFIED for one whose data changed,
        CHILDREN_CHANGED for one whose children changed and CREATED for a node not yet
        watched."""
        for path in sorted(self._watched):  # a parent before its children
            if path not in self._watched:  # reported with a deleted ancestor
                continue
            stat = await self._call(self._client.exists_async, path, watch=self._on_watch)
            if stat is None:
                gone = [p for p in self._watched if paths.is_under(p, path)]
                self._forget(path)
                for deleted in sorted(gone, reverse=True):  # children first, as ZooKeeper
                    if self._wanted(deleted):
                        self._publish(EventType.DELETED, deleted)
                continue
            if stat.mzxid != self._watched[path] and self._wanted(path):
                self._publish(EventType.MODIFIED, path)
            self._watched[path] = stat.mzxid
            known = self._known_children.get(path, set())
            await self._arm_children(path, announce=True)
            if self._known_children.get(path, set()) != known and self._wanted(path):
                self._publish(EventType.CHILDREN_CHANGED, path)
        for prefix in sorted({s.prefix for s in self._hub.notification_streams}):
            if prefix in self._watched:
                continue
            await self._arm(prefix, announce=True)
            if prefix not in self._watched:
                self._publish(EventType.DELETED, prefix)

    async def _arm(self, path: str, *, announce: bool) -> None:
        """Watch ``path`` (existence/data) and, if it exists, its children, recursively.
        With ``announce``, publish CREATED for every node found (they are new)."""
        stat = await self._call(self._client.exists_async, path, watch=self._on_watch)
        if stat is None:
            self._forget(path)
            return
        if announce and path not in self._watched:
            self._publish(EventType.CREATED, path)
        self._watched[path] = stat.mzxid
        await self._arm_children(path, announce=announce)

    async def _arm_children(self, path: str, *, announce: bool) -> None:
        try:
            kids = await self._call(self._client.get_children_async, path, watch=self._on_watch)
        except NotFound:
            return
        known = self._known_children.get(path, set())
        self._known_children[path] = set(kids)
        for kid in kids:
            child = paths.join(path, kid)
            if kid not in known or child not in self._watched:
                await self._arm(child, announce=announce)

    def _forget(self, path: str) -> None:
        for watched in [p for p in self._watched if paths.is_under(p, path)]:
            self._watched.pop(watched, None)
            self._known_children.pop(watched, None)

    async def _handle_watch(self, event: WatchedEvent) -> None:
        path = event.path
        if path is None:  # kazoo's "session ended" wake-up for every watcher
            return
        wanted = self._wanted(path)
        if event.type == KzEventType.CREATED:
            if not wanted:
                return
            if path not in self._watched:
                self._publish(EventType.CREATED, path)
            await self._arm(path, announce=True)
        elif event.type == KzEventType.CHANGED:
            if not wanted:
                self._forget(path)
                return
            self._publish(EventType.MODIFIED, path)
            stat = await self._call(self._client.exists_async, path, watch=self._on_watch)
            if stat is None and path in self._watched:  # deleted before we could re-arm
                self._forget(path)
                self._publish(EventType.DELETED, path)
            elif stat is not None and path in self._watched:
                self._watched[path] = stat.mzxid
        elif event.type == KzEventType.DELETED:
            if path in self._watched:
                self._forget(path)
                if wanted:
                    self._publish(EventType.DELETED, path)
            if wanted and any(s.prefix == path for s in self._hub.notification_streams):
                # A stream's root: watch for it to come back (its parent is not watched).
                await self._arm(path, announce=True)
        elif event.type == KzEventType.CHILD:
            if not wanted:
                self._forget(path)
                return
            self._publish(EventType.CHILDREN_CHANGED, path)
            await self._arm_children(path, announce=True)

    # -- ending ----------------------------------------------------------------------------------

    async def expire_session(self) -> None:
        """Make the server expire this session (for tests and drills): a second client
        attaches to the session with its id and password and closes it, which is how
        ZooKeeper's own tests force expiry. Returns once this store has seen LOST."""
        self._check_alive()
        session_id, password = self._client.client_id
        intruder = _new_client(
            self._hosts + self._chroot, self._session_timeout_s, client_id=(session_id, password)
        )
        try:
            await asyncio.to_thread(intruder.start, self._session_timeout_s)
        finally:
            await asyncio.to_thread(_stop_client, intruder)
        states = self.session_states()
        try:
            async with asyncio.timeout(self._session_timeout_s * 3):
                async for state in states:
                    if state is SessionState.LOST:
                        return
        finally:
            states.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unregister_stop()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        # Stopping closes the session on the server, which deletes its ephemeral nodes.
        await asyncio.to_thread(_stop_client, self._client)
        if self._state is not SessionState.LOST:
            self._state = SessionState.LOST
            self._hub.publish_state(SessionState.LOST, threadsafe=False)
        self._hub.end_all(threadsafe=False)


class _Resync:
    """Watch-queue item: walk every watched node again (see ``_resync``)."""


def _new_client(
    hosts: str, session_timeout_s: float, client_id: tuple[int, bytes] | None = None
) -> KazooClient:
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        client_id=client_id,
        # Reconnect forever while the session may live; LOST ends it (we stop the client).
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
        logger=logging.getLogger("kazoo.client"),
    )


async def _start(client: KazooClient, hosts: str, timeout_s: float) -> None:
    """Start ``client`` and wait until it is connected, at most ``timeout_s``, without a
    thread blocked on it (kazoo's own ``start`` blocks one): a cancelled wait returns at
    once. On timeout or cancellation the client is stopped. Raises
    :class:`MetadataError` on timeout."""
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[None] = loop.create_future()

    def on_connected() -> None:
        if not connected.done():
            connected.set_result(None)

    def listener(state: str) -> bool:  # kazoo's thread; True removes the listener
        if state != KazooState.CONNECTED:
            return False
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(on_connected)
        return True

    client.add_listener(listener)
    try:
        client.start_async()
        async with asyncio.timeout(timeout_s):
            await connected
    except asyncio.CancelledError:
        client.remove_listener(listener)
        # Not awaited, nor on the loop's executor (which the end of asyncio.run waits
        # for): kazoo's stop waits out a connection attempt in progress, up to the session
        # timeout against a server that accepted the connection but does not answer.
        threading.Thread(target=_stop_client, args=(client,), daemon=True).start()
        raise
    except BaseException as exc:
        client.remove_listener(listener)
        await asyncio.to_thread(_stop_client, client)
        if isinstance(exc, TimeoutError):
            raise MetadataError(
                f"cannot connect to ZooKeeper {hosts}: Connection time-out"
            ) from None
        raise


def _stop_client(client: KazooClient) -> None:
    with contextlib.suppress(Exception):
        client.stop()
    with contextlib.suppress(Exception):
        client.close()


async def _ensure_chroot(hosts: str, chroot: str, session_timeout_s: float) -> None:
    client = _new_client(hosts, session_timeout_s)
    await _start(client, hosts, session_timeout_s)
    try:
        await asyncio.to_thread(client.ensure_path, chroot)
    except Exception as exc:
        raise MetadataError(f"cannot connect to ZooKeeper {hosts}: {exc}") from exc
    finally:
        await asyncio.to_thread(_stop_client, client)
