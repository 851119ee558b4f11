"""The proxy's handshakes, sans-IO: bytes and commands in, commands and bytes out.

A proxied connection parses exactly one frame in each direction (the client's CONNECT, the
broker's CONNECTED) and then only copies bytes. :class:`FirstFrame` reads that one frame
whole and hands back, untouched, whatever arrived after it in the same reads: those bytes
belong to the piped stream and must reach the other side exactly as sent.

::

    client ── CONNECT(proxy_to_broker_url=b:6650, token of alice) ──▶ proxy
    proxy  ── CONNECT(token of the proxy, original_principal=alice) ──▶ broker b:6650
    proxy  ◀── CONNECTED ── broker;   client ◀── the same CONNECTED frame ── proxy
    then bytes both ways, unparsed, until either side closes
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from magnetar.common.errors import FrameTooLarge, ProtocolError
from magnetar.protocol import (
    PROTOCOL_VERSION,
    AuthData,
    Command,
    Connect,
    FeatureFlags,
    FrameDecoder,
)

HANDSHAKE_FRAME_BYTES_MAX = 64 * 1024
"""Largest first frame (CONNECT or CONNECTED) accepted: credentials included, they are a
few KiB at most; a larger size is garbage (an HTTP request's ``GET `` reads as 1.2 GB)."""
_SIZE_PREFIX_BYTES = 4


@dataclass(frozen=True, slots=True)
class Handshake:
    """The first frame of a stream: its command, its bytes as received, and the bytes that
    followed it (the start of the rest of the stream)."""

    command: Command
    frame: bytes
    rest: bytes


class FirstFrame:
    """Accumulates the first frame of a stream; holds at most
    :data:`HANDSHAKE_FRAME_BYTES_MAX` plus one read's worth of following bytes."""

    def __init__(self, frame_bytes_max: int = HANDSHAKE_FRAME_BYTES_MAX) -> None:
        self._max = frame_bytes_max
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Handshake | None:
        """The handshake once the frame is complete, else None (feed more). Raises
        :class:`~magnetar.common.errors.ProtocolError` (FrameTooLarge for a size above the
        bound) for bytes that are not a Pulsar frame."""
        self._buffer += data
        if len(self._buffer) < _SIZE_PREFIX_BYTES:
            return None
        size = _SIZE_PREFIX_BYTES + int.from_bytes(self._buffer[:_SIZE_PREFIX_BYTES], "big")
        if size > self._max:
            self._buffer.clear()
            raise FrameTooLarge(
                f"first frame announces {size} bytes, more than {self._max}: not a Pulsar client"
            )
        if len(self._buffer) < size:
            return None
        frame, rest = bytes(self._buffer[:size]), bytes(self._buffer[size:])
        self._buffer.clear()
        frames = FrameDecoder(max_frame_size_bytes=self._max).feed(frame)
        if len(frames) != 1:  # pragma: no cover - one complete frame decodes to one
            raise ProtocolError("first frame did not decode to one command")
        return Handshake(frames[0].command, frame, rest)


def target_address(proxy_to_broker_url: str) -> tuple[str, int]:
    """``(host, port)`` of CONNECT's ``proxy_to_broker_url`` (``host:port``, as the C++ and
    Java clients send it, or a ``pulsar://host:port`` URL). Raises ValueError."""
    text = proxy_to_broker_url.strip()
    for scheme in ("pulsar://", "pulsar+ssl://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    text = text.rstrip("/")
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"proxy_to_broker_url {proxy_to_broker_url!r} is not host:port")
    return host.strip("[]"), int(port_text)


def host_port(url: str) -> str:
    """``host:port`` of a ``pulsar://``/``http://`` URL (or of ``host:port`` itself)."""
    host, port = target_address(url.split("://", 1)[-1])
    return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class ProxyCredentials:
    """What the proxy presents to brokers (``brokerClientAuthenticationPlugin``)."""

    method: str | None = None
    data: bytes | None = None


def client_auth(client: Connect) -> tuple[str | None, bytes | None]:
    """The method and data of the credentials a client's CONNECT carries (the legacy
    ``auth_method`` enum read as its name)."""
    method = client.auth_method_name
    if method is None and client.auth_method is not None:
        method = client.auth_method.name.removeprefix("AuthMethod").lower()
    return method, client.auth_data


def broker_connect(
    *,
    client_version: str,
    credentials: ProxyCredentials,
    original_principal: str | None,
    original_auth: tuple[str | None, bytes | None] | None,
    client: Connect | None = None,
) -> Connect:
    """The CONNECT the proxy sends a broker, acting for one client: the proxy's own
    credentials, the client's role as ``original_principal`` (None while the proxy does
    not authenticate) and, when given, the client's credentials as ``original_auth_data``/
    ``original_auth_method`` (Pulsar's ``forwardAuthorizationCredentials``).

    For a piped connection ``client`` is the client's CONNECT: its protocol version and
    features go on, but not credential refresh: a broker's AUTH_CHALLENGE on a piped
    connection would reach the client, whose answer is not the proxy's role. A lookup
    connection (``client`` None) speaks this proxy's protocol version."""
    flags = FeatureFlags() if client is None else (client.feature_flags or FeatureFlags())
    method, data = original_auth or (None, None)
    return Connect(
        client_version=client_version,
        auth_method_name=credentials.method,
        auth_data=credentials.data,
        protocol_version=PROTOCOL_VERSION
        if client is None
        else min(client.protocol_version, PROTOCOL_VERSION),
        original_principal=original_principal,
        original_auth_data=(data or b"").decode("utf-8", "replace") if original_auth else None,
        original_auth_method=method if original_auth else None,
        feature_flags=replace(flags, supports_auth_refresh=False),
    )


def auth_response_data(credentials: ProxyCredentials) -> AuthData:
    """The proxy's answer to a broker's AUTH_CHALLENGE."""
    return AuthData(
        auth_method_name=credentials.method or "none", auth_data=credentials.data or b""
    )
