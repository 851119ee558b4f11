"""The fault proxy against a real echo server on loopback: bytes pass, a cut holds them (one
way or both) until it heals, a delay postpones them, a reset breaks the connection."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from magnetar.testing.fault_proxy import Direction, FaultProxy, LinkState

pytestmark = pytest.mark.timeout(60)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo_port: int) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo_port) as link:
        yield link


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def nothing_arrives(sock: socket.socket, within_s: float = 0.3) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b"" and False
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)


def test_bytes_pass_both_ways(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
    assert proxy.connections_accepted == 1


def test_a_cut_holds_bytes_until_it_heals(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        proxy.cut()
        sock.sendall(b"bc")
        assert nothing_arrives(sock)
        proxy.heal()
        assert recv_exactly(sock, 2) == b"bc"


@pytest.mark.parametrize("way", [Direction.TO_TARGET, Direction.FROM_TARGET])
def test_a_one_way_cut_holds_that_way_only(proxy: FaultProxy, way: Direction) -> None:
    with connect(proxy) as sock:
        proxy.cut(way)
        sock.sendall(b"xy")
        assert nothing_arrives(sock)
        if way is Direction.FROM_TARGET:
            # The request reached the echo server: its reply is what waits in the proxy.
            proxy.heal(Direction.TO_TARGET)  # no-op for this way; the reply still waits
            assert nothing_arrives(sock)
        proxy.heal(way)
        assert recv_exactly(sock, 2) == b"xy"


def test_a_connection_opened_while_cut_waits_for_the_heal(proxy: FaultProxy) -> None:
    proxy.cut()
    with connect(proxy) as sock:
        sock.sendall(b"late")
        assert nothing_arrives(sock)
        proxy.heal()
        assert recv_exactly(sock, 4) == b"late"


def test_a_delay_postpones_every_chunk(proxy: FaultProxy) -> None:
    proxy.delay(150)
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"slow")
        assert recv_exactly(sock, 4) == b"slow"
        # Delayed on the way there and back.
        assert time.monotonic() - started >= 0.29
    proxy.delay(0)
    with pytest.raises(ValueError, match=">= 0"):
        proxy.delay(-1)


def test_reset_breaks_open_connections_and_new_ones_work(proxy: FaultProxy) -> None:
    sock = connect(proxy)
    sock.sendall(b"1")
    assert recv_exactly(sock, 1) == b"1"
    proxy.reset_connections()
    with pytest.raises(OSError):
        sock.sendall(b"2")
        recv = sock.recv(1)  # a reset reads as an error or, at worst, as EOF
        if recv == b"":
            raise ConnectionResetError("EOF after reset")
    sock.close()
    with connect(proxy) as again:
        again.sendall(b"3")
        assert recv_exactly(again, 1) == b"3"


def test_stop_closes_connections_and_is_idempotent(echo_port: int) -> None:
    link = FaultProxy("127.0.0.1", echo_port).start()
    sock = connect(link)
    sock.sendall(b"0")
    assert recv_exactly(sock, 1) == b"0"
    link.stop()
    link.stop()
    sock.settimeout(5)
    with pytest.raises(OSError):
        sock.sendall(b"x")
        if sock.recv(1) == b"":
            raise ConnectionResetError("EOF after stop")
    sock.close()


def test_link_state_rules() -> None:
    state = LinkState()
    state.cut(Direction.FROM_TARGET)
    assert state.is_cut(Direction.FROM_TARGET) and not state.is_cut(Direction.TO_TARGET)
    state.cut(Direction.BOTH)
    state.heal(Direction.FROM_TARGET)
    assert state.is_cut(Direction.TO_TARGET) and not state.is_cut(Direction.FROM_TARGET)


def test_a_client_side_reset_leaves_the_target_side_open(proxy: FaultProxy) -> None:
    sock = connect(proxy)
    sock.sendall(b"1")
    assert recv_exactly(sock, 1) == b"1"
    proxy.reset_connections(client_side_only=True)
    with pytest.raises(OSError):
        sock.sendall(b"2")
        if sock.recv(1) == b"":
            raise ConnectionResetError("EOF after reset")
    sock.close()
    assert proxy.open_connections() == 0
    assert len(proxy._orphans) == 1  # the echo server's side: still open
    target = proxy._orphans[0].target
    assert not target.is_closing()
