"""The proxy's sans-IO parts: the first frame read whole, the CONNECT sent to brokers, the
addresses a client may be forwarded to."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.common.errors import FrameTooLarge, ProtocolError
from magnetar.protocol import PROTOCOL_VERSION, Connect, FeatureFlags, Ping, encode
from magnetar.proxy.discovery import BrokerDirectory, BrokerEndpoint, static_endpoints
from magnetar.proxy.handshake import (
    FirstFrame,
    ProxyCredentials,
    broker_connect,
    target_address,
)

CONNECT = Connect(
    client_version="c", auth_method_name="token", auth_data=b"jwt", protocol_version=19,
    proxy_to_broker_url="b:6650", feature_flags=FeatureFlags(supports_auth_refresh=True),
)  # fmt: skip


def test_the_first_frame_is_read_whole_in_any_chunks_and_what_follows_is_kept() -> None:
    stream = encode(CONNECT) + encode(Ping()) + b"\x00\x01"
    for size in (1, 3, 7, len(stream)):
        reader, done = FirstFrame(), None
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        for i, chunk in enumerate(chunks):
            done = reader.feed(chunk)
            if done is not None:
                rest = done.rest + b"".join(chunks[i + 1 :])
                break
        assert done is not None and done.command == CONNECT
        assert done.frame == encode(CONNECT)
        assert rest == encode(Ping()) + b"\x00\x01"


def test_garbage_is_not_a_first_frame() -> None:
    with pytest.raises(FrameTooLarge):
        FirstFrame().feed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(ProtocolError):
        FirstFrame().feed(b"\x00\x00\x00\x08\x00\x00\x00\x04\xff\xff\xff\xff")


def test_the_broker_connect_names_the_client_but_carries_the_proxy_credentials() -> None:
    sent = broker_connect(
        client_version="proxy",
        credentials=ProxyCredentials("token", b"proxy-jwt"),
        original_principal="alice",
        original_auth=("token", b"jwt"),
        client=CONNECT,
    )
    assert (sent.auth_method_name, sent.auth_data) == ("token", b"proxy-jwt")
    assert sent.original_principal == "alice"
    assert (sent.original_auth_method, sent.original_auth_data) == ("token", "jwt")
    assert sent.protocol_version == 19 and sent.proxy_to_broker_url is None
    assert sent.feature_flags == FeatureFlags(supports_auth_refresh=False)
    lookup = broker_connect(
        client_version="proxy", credentials=ProxyCredentials(), original_principal=None,
        original_auth=None,
    )  # fmt: skip
    assert lookup.protocol_version == PROTOCOL_VERSION
    assert lookup.original_principal is lookup.original_auth_data is None


def test_target_addresses() -> None:
    assert target_address("b:6650") == ("b", 6650)
    assert target_address("pulsar://10.0.0.1:6651/") == ("10.0.0.1", 6651)
    for bad in ("b", "b:x", ":6650", "b:0"):
        with pytest.raises(ValueError):
            target_address(bad)


def test_static_endpoints_pair_by_position() -> None:
    assert static_endpoints("pulsar://a:1,b:2", "http://a:8,b:9") == [
        BrokerEndpoint("pulsar://a:1", "http://a:8"),
        BrokerEndpoint("pulsar://b:2", "http://b:9"),
    ]
    assert static_endpoints("pulsar://lb:6650", None) == [BrokerEndpoint("pulsar://lb:6650")]
    with pytest.raises(ValueError):
        static_endpoints("http://a:1", None)


def test_clients_are_forwarded_to_known_brokers_and_allowed_ports_only() -> None:
    directory = BrokerDirectory(
        static=static_endpoints("pulsar://a:7000", "http://a:8080"),
        allowed_target_ports=frozenset({6650}),
    )

    def allows(url: str) -> bool:
        return asyncio.run(directory.allows(url))

    assert allows("a:7000") and allows("anywhere:6650")
    assert not allows("b:7001")
    directory.remember_owner("pulsar://b:7001")  # a lookup answered with it
    assert allows("b:7001")
    with pytest.raises(ValueError):
        allows("no-port")
