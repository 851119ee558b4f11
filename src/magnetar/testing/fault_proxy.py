"""A fault-injecting TCP proxy: one network link between two processes, under a test's control.

Put it between a process and what that process connects to (a broker's ``--metadata-url
zk://127.0.0.1:<proxy port>`` toward ZooKeeper, a client's service URL toward a broker),
then break the link from the test::

    with FaultProxy("127.0.0.1", zk_port) as link:
        broker = BrokerProcess(f"zk://127.0.0.1:{link.port}", ...)
        link.cut()                     # both directions: nothing passes, connections stay open
        link.heal()                    # what was held back is delivered, in order
        link.cut(Direction.TO_TARGET)  # asymmetric: replies still flow, requests do not
        link.delay(200)                # every chunk arrives 200 ms after it was read
        link.reset_connections()       # RST every open connection (both sides see a reset)
        link.reset_connections(client_side_only=True)  # the target's side stays open, silent

What a cut models is a partition of a network that keeps TCP connections up: bytes sent
across it are neither delivered nor lost, and arrive once it heals (TCP retransmits), unless
an endpoint gave up on the connection meanwhile; a connection opened while the link is cut
is accepted, and its bytes wait like any other. A process learns of the partition the way it
would on a real network: by its own timeouts. Order within a direction is always kept.

The proxy runs its own asyncio loop in a daemon thread, so synchronous and asynchronous
tests drive it alike; every control method is thread-safe and returns at once, and
:meth:`wait_idle` lets a test wait until everything readable has been forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

CHUNK_BYTES_MAX = 65_536
START_TIMEOUT_S = 10.0


class Direction(enum.Enum):
    """Which way bytes flow: from the connecting process to the target, back, or both."""

    TO_TARGET = "to_target"
    FROM_TARGET = "from_target"
    BOTH = "both"

    def covers(self, one_way: Direction) -> bool:
        return self is Direction.BOTH or self is one_way


@dataclass(slots=True)
class LinkState:
    """What the link currently does to bytes, per direction (sans-IO: the rules alone).

    A direction that is cut holds its bytes; an open one delivers each chunk ``delay_ms``
    after it was read."""

    cut_to_target: bool = False
    cut_from_target: bool = False
    delay_ms: int = 0

    def cut(self, direction: Direction) -> None:
        if direction.covers(Direction.TO_TARGET):
            self.cut_to_target = True
        if direction.covers(Direction.FROM_TARGET):
            self.cut_from_target = True

    def heal(self, direction: Direction) -> None:
        if direction.covers(Direction.TO_TARGET):
            self.cut_to_target = False
        if direction.covers(Direction.FROM_TARGET):
            self.cut_from_target = False

    def is_cut(self, one_way: Direction) -> bool:
        return self.cut_to_target if one_way is Direction.TO_TARGET else self.cut_from_target


@dataclass(eq=False)
class _Connection:
    """One proxied connection: the accepted side and the side toward the target."""

    client: asyncio.StreamWriter
    target: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self, *, client_side_only: bool = False) -> None:
        """RST both sides, or only the connecting process's (the target's stays open and
        hears nothing more, until :meth:`reset` again)."""
        for writer in (self.client,) if client_side_only else (self.client, self.target):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                # Linger 0: close() sends RST instead of FIN, as a middlebox reset would.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """Forwards every connection made to ``127.0.0.1:<port>`` to ``target_host:target_port``
    and applies the link's current faults (see the module docstring).

    :meth:`start` binds (``listen_port`` 0: a free port, read from :attr:`port`) and raises
    :class:`OSError` if it cannot; :meth:`stop` closes the listener and every connection and
    is idempotent. A failure to reach the target closes the accepted connection (as a
    refused connection would end it)."""

    def __init__(
        self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:  # fmt: skip
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = listen_port
        self.state = LinkState()
        self.connections_accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"fault-proxy->{target_port}")  # fmt: skip
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._orphans: list[_Connection] = []
        self._changed: asyncio.Condition | None = None
        self._in_flight = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(START_TIMEOUT_S)
        return self

    async def _serve(self) -> None:
        self._changed = asyncio.Condition()
        self._server = await asyncio.start_server(self._accept, self.listen_host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for conn in [*self._connections, *self._orphans]:
                conn.reset()
            self._connections.clear()
            self._orphans.clear()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(START_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """``host:port`` to give the process instead of the target's."""
        return f"{self.listen_host}:{self.port}"

    # ------------------------------------------------------------ faults

    def cut(self, direction: Direction = Direction.BOTH) -> None:
        """Hold every byte crossing the link in ``direction`` until :meth:`heal`."""
        self._control(lambda: self.state.cut(direction))

    def heal(self, direction: Direction = Direction.BOTH) -> None:
        """Let bytes flow again in ``direction``; held bytes go first, in order."""
        self._control(lambda: self.state.heal(direction))

    def delay(self, ms: int) -> None:
        """Deliver each chunk read from now on ``ms`` after it was read (0: no delay)."""
        if ms < 0:
            raise ValueError("delay must be >= 0 ms")

        def set_delay() -> None:
            self.state.delay_ms = ms

        self._control(set_delay)

    def reset_connections(self, *, client_side_only: bool = False) -> None:
        """Reset (RST) every open connection; new connections are accepted as before.

        ``client_side_only``: only the connecting processes see the reset; the target keeps
        its side open and hears nothing more on it (a middlebox that lost its state), so it
        learns of the loss only by its own keep-alive. :meth:`stop` closes those sides."""

        def reset() -> None:
            for conn in list(self._connections):
                conn.reset(client_side_only=client_side_only)
                if client_side_only:
                    self._orphans.append(conn)
            self._connections.clear()

        self._control(reset)

    def open_connections(self) -> int:
        return len(self._connections)

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Return once no chunk read is waiting to be written (raises TimeoutError)."""
        deadline = time.monotonic() + timeout_s

        async def idle() -> None:
            assert self._changed is not None
            async with self._changed:
                await self._changed.wait_for(lambda: self._in_flight == 0)

        fut = asyncio.run_coroutine_threadsafe(idle(), self._loop)
        fut.result(max(0.0, deadline - time.monotonic()))

    def _control(self, change: object) -> None:
        async def apply() -> None:
            assert callable(change) and self._changed is not None
            change()
            async with self._changed:
                self._changed.notify_all()

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(START_TIMEOUT_S)

    # ------------------------------------------------------------ forwarding

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target)
        except OSError:
            c_writer.transport.abort()
            return
        conn = _Connection(c_writer, t_writer)
        self._connections.add(conn)
        conn.tasks = [
            asyncio.ensure_future(self._pump(c_reader, t_writer, Direction.TO_TARGET, conn)),
            asyncio.ensure_future(self._pump(t_reader, c_writer, Direction.FROM_TARGET, conn)),
        ]
        done = asyncio.gather(*conn.tasks, return_exceptions=True)
        done.add_done_callback(lambda _: self._closed(conn))

    def _closed(self, conn: _Connection) -> None:
        """Both directions ended (EOF forwarded both ways, or a reset): close the pair (but
        not the target's side of an orphan: it stays open and silent)."""
        orphan = any(conn is o for o in self._orphans)
        for writer in (conn.client,) if orphan else (conn.client, conn.target):
            writer.close()
        self._connections.discard(conn)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: Direction,
        conn: _Connection,
    ) -> None:  # fmt: skip
        """Read chunks and write each once the link lets it through; EOF is forwarded the
        same way (held while cut). Ends both sides when either end of the pair breaks."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await reader.read(CHUNK_BYTES_MAX)
                due_s = loop.time() + self.state.delay_ms / 1000
                self._in_flight += 1
                try:
                    if due_s > loop.time():
                        await asyncio.sleep(due_s - loop.time())
                    async with self._changed:
                        await self._changed.wait_for(lambda: not self.state.is_cut(way))
                    if not data:
                        if writer.can_write_eof():
                            writer.write_eof()
                        return
                    writer.write(data)
                    await writer.drain()
                finally:
                    self._in_flight -= 1
                    async with self._changed:
                        self._changed.notify_all()
        except (ConnectionError, OSError):
            conn.reset()
            self._connections.discard(conn)
