"""One client connection of the proxy, in process: bytes in through a recording transport,
time from a manual clock. The lookup connection's own answers, refusals of bad input, the
handshake deadline, and that nothing of a closed connection stays with the proxy."""

from __future__ import annotations

import base64
from typing import Any

from magnetar.auth.authentication import AuthenticationService
from magnetar.auth.config import AuthConfig, ProviderName
from magnetar.auth.tokens import new_secret_key
from magnetar.common.clock import ManualClock
from magnetar.common.errors import ServerError
from magnetar.protocol import (
    PROTOCOL_VERSION,
    Connect,
    Connected,
    Error,
    FrameDecoder,
    Ping,
    Pong,
    Producer,
    encode,
)
from magnetar.proxy.binary_proxy import BinaryProxy, ProxyConnection
from magnetar.proxy.config import ProxyConfig
from magnetar.proxy.discovery import BrokerDirectory
from magnetar.proxy.stats import ProxyStats


class Transport:
    """What the connection wrote, and whether it closed."""

    def __init__(self) -> None:
        self.written = b""
        self.closing = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.9", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def commands(self) -> list[object]:
        return [f.command for f in FrameDecoder(max_frame_size_bytes=1 << 20).feed(self.written)]


def _proxy(clock: ManualClock) -> BinaryProxy:
    config = ProxyConfig(connect_timeout_s=10.0)
    return BinaryProxy(
        config, BrokerDirectory(), AuthenticationService(AuthConfig()), ProxyStats(), clock
    )


def _open(proxy: BinaryProxy) -> tuple[ProxyConnection, Transport]:
    conn, transport = proxy.connection(), Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


CONNECT = Connect(client_version="t", protocol_version=PROTOCOL_VERSION)


async def test_a_lookup_connection_is_answered_by_the_proxy_itself() -> None:
    clock = ManualClock()
    proxy = _proxy(clock)
    conn, transport = _open(proxy)
    # CONNECT and PING in one read, the PING split off by the handshake reader
    data = encode(CONNECT) + encode(Ping())
    conn.data_received(data[:3])
    conn.data_received(data[3:])
    connected, pong = transport.commands()
    assert isinstance(connected, Connected) and isinstance(pong, Pong)
    assert connected.protocol_version == PROTOCOL_VERSION
    conn.data_received(encode(Producer(topic="persistent://a/b/c", producer_id=1, request_id=7)))
    refused = transport.commands()[-1]
    assert isinstance(refused, Error) and refused.request_id == 7
    assert refused.error is ServerError.NotAllowedError
    assert not transport.closing
    assert [c["remoteAddress"] for c in proxy.stats.connections_json()] == ["10.0.0.9:40000"]
    conn.connection_lost(None)
    assert proxy.open == set() and proxy.stats.connections == {}
    assert clock.timers == 0


async def test_bad_first_bytes_close_the_connection() -> None:
    proxy = _proxy(ManualClock())
    for first in (b"GET / HTTP/1.1\r\n\r\n", encode(Ping())):
        conn, transport = _open(proxy)
        conn.data_received(first)
        assert transport.closing
        answer = transport.commands()
        assert answer == [] or isinstance(answer[0], Error), answer
    assert proxy.open == set()
    assert proxy.stats.counters["pulsar_proxy_rejected_connections"] == 2


async def test_a_client_that_sends_no_connect_is_closed_at_the_deadline() -> None:
    clock = ManualClock()
    proxy = _proxy(clock)
    conn, transport = _open(proxy)
    conn.data_received(encode(CONNECT)[:5])  # part of a frame, then nothing
    clock.advance(9.9)
    assert not transport.closing
    clock.advance(0.2)
    assert transport.closing and proxy.open == set()


async def test_a_bad_token_is_refused_with_an_authentication_error() -> None:

    key = "data:;base64," + base64.b64encode(new_secret_key()).decode()
    auth = AuthConfig(
        authentication_enabled=True, providers=(ProviderName.TOKEN,), token_secret_key=key
    )
    clock = ManualClock()
    proxy = BinaryProxy(
        ProxyConfig(auth=auth), BrokerDirectory(), AuthenticationService(auth), ProxyStats(), clock
    )
    conn, transport = _open(proxy)
    conn.data_received(
        encode(Connect(client_version="t", auth_method_name="token", auth_data=b"not-a-jwt"))
    )
    (refused,) = transport.commands()
    assert isinstance(refused, Error) and refused.error is ServerError.AuthenticationError
    assert refused.message.startswith("Unable to authenticate")
    assert transport.closing and proxy.open == set()
