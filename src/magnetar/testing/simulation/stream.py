"""A byte-stream connection over a :class:`~magnetar.testing.simulation.network.SimulatedNetwork`:
what a TCP connection is to ``asyncio.Protocol`` objects, without sockets.

:func:`open_stream` joins two protocols (a client's and a server's, e.g. the broker's
:class:`~magnetar.broker.connection.ServerConnection`) with two :class:`StreamTransport` s,
one per direction, each writing onto a :class:`~magnetar.testing.simulation.network.Link`:
bytes arrive in order, delayed, held by partitions. Closing one end delivers
``connection_lost`` to the other after what was written before it (a FIN); :meth:`StreamTransport.reset`
drops what is on the way and tells both ends at once (a RST: a crash, a cut cable).
Reading can be paused (backpressure): what arrives meanwhile waits in the transport.
"""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.testing.simulation.network import Link, SimulatedNetwork


class StreamTransport(asyncio.Transport):
    """One end of a simulated connection: writes go to the peer's protocol."""

    def __init__(self, link: Link, peer_name: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._link = link
        self._loop = loop
        self._peer_name = peer_name
        self.peer: StreamTransport | None = None
        self.protocol: asyncio.Protocol | None = None
        self._closing = False
        self._lost = False
        self._paused = False
        self._waiting: list[bytes] = []

    # asyncio.Transport (what the protocols use)
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (self._peer_name, 0)
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        peer = self.peer
        assert peer is not None
        chunk = bytes(data)
        self._link.send(lambda: peer._received(chunk))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Close gracefully: the peer learns of it after the bytes written before."""
        if self._closing:
            return
        self._closing = True
        peer = self.peer
        assert peer is not None
        self._link.send(peer._peer_closed)
        self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self.reset()

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        waiting, self._waiting = self._waiting, []
        for chunk in waiting:
            self._received(chunk)

    def is_reading(self) -> bool:
        return not self._paused

    # the simulation's side
    def reset(self) -> None:
        """Reset the connection: nothing more is delivered either way; both ends lose it."""
        for end in (self, self.peer):
            assert end is not None
            end._closing = True
            end._link.cut()
            end._lose(ConnectionResetError("connection reset (simulated)"))

    def _received(self, chunk: bytes) -> None:
        if self._lost or self.protocol is None:
            return
        if self._paused:
            self._waiting.append(chunk)
            return
        self.protocol.data_received(chunk)

    def _peer_closed(self) -> None:
        self._closing = True
        self._lose(None)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._waiting.clear()
        if self.protocol is not None:
            self.protocol.connection_lost(exc)


def open_stream(
    network: SimulatedNetwork,
    client_name: str,
    client: asyncio.Protocol,
    server_name: str,
    server: asyncio.Protocol,
) -> StreamTransport:
    """Connect ``client`` to ``server`` (both told ``connection_made`` now); returns the
    client's transport (its :attr:`StreamTransport.peer` is the server's)."""
    loop = network.loop
    to_server = StreamTransport(network.link(client_name, server_name), server_name, loop)
    to_client = StreamTransport(network.link(server_name, client_name), client_name, loop)
    to_server.peer, to_client.peer = to_client, to_server
    to_server.protocol, to_client.protocol = client, server
    server.connection_made(to_client)
    client.connection_made(to_server)
    return to_server


__all__ = ["StreamTransport", "open_stream"]
