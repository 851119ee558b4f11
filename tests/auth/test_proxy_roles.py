"""Proxy roles (Pulsar's ``proxyRoles``): a connection authenticated as a proxy role acts
for CONNECT's ``original_principal``, and both roles must be authorized; a proxy role
without an original principal, an original principal that is a proxy role, and any other
role naming an original principal are refused at CONNECT (Error AuthorizationError
"Invalid roles: ...", then closed). A real standalone, raw binary-protocol sockets."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable

import pytest

from magnetar.auth.authorization import original_principal_refusal
from magnetar.protocol import (
    Connect,
    Connected,
    Error,
    FrameDecoder,
    Producer,
    ProducerSuccess,
)
from magnetar.protocol import encode as encode_command
from magnetar.testing import StandaloneProcess

from .conftest import SUPER_USER, Secrets, http

PROXIES = frozenset({"proxy", "bare-proxy"})


@pytest.mark.parametrize(
    ("role", "original", "refused"),
    [
        ("proxy", "app", None),
        ("proxy", None, "must be provided"),
        ("proxy", "  ", "must be provided"),
        ("proxy", "bare-proxy", "cannot be a proxy role"),
        ("app", None, None),
        ("app", "root", "without a valid proxy role"),
        ("app", "app", "without a valid proxy role"),
        (None, "app", "without a valid proxy role"),
    ],
)
def test_which_role_may_name_an_original_principal(
    role: str | None, original: str | None, refused: str | None
) -> None:
    reason = original_principal_refusal(role, original, PROXIES)
    assert (reason is None) if refused is None else (reason is not None and refused in reason)


def _exchange(port: int, token: str, original: str | None, topic: str) -> list[object]:
    """CONNECT as ``token``'s role for ``original``, then PRODUCER on ``topic``: what the
    broker answered until it closed or answered both."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        connect = Connect(client_version="proxy-test", protocol_version=20,
                          auth_method_name="token", auth_data=token.encode(),
                          original_principal=original)  # fmt: skip
        producer = Producer(topic=topic, producer_id=1, request_id=1)
        sock.sendall(encode_command(connect) + encode_command(producer))
        decoder, commands = FrameDecoder(), []
        deadline = time.monotonic() + 10
        while len(commands) < 2 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            commands += [f.command for f in decoder.feed(chunk)]
        return commands


def test_a_proxy_acts_for_its_client_and_both_must_be_authorized(
    standalone_factory: Callable[..., StandaloneProcess], secrets: Secrets
) -> None:
    node = standalone_factory(*secrets.args("--proxy-roles", ",".join(sorted(PROXIES))))
    root = secrets.token(SUPER_USER)
    base = f"{node.http_url}/admin/v2/namespaces/public/default/permissions"
    for role in ("app", "proxy"):
        assert http("POST", f"{base}/{role}", root, body=["produce"])[0] == 204
    topic = f"persistent://public/default/proxied-{uuid.uuid4().hex[:8]}"

    def answer(role: str, original: str | None) -> list[object]:
        return _exchange(node.port, secrets.token(role), original, topic)

    # both granted: served
    got = answer("proxy", "app")
    assert isinstance(got[0], Connected) and isinstance(got[1], ProducerSuccess), got
    # the client is not granted, or the proxy is not: refused, the connection stays open
    for role, original in (("proxy", "stranger"), ("bare-proxy", "app")):
        got = answer(role, original)
        assert isinstance(got[0], Connected), got
        assert isinstance(got[1], Error) and got[1].error.name == "AuthorizationError", got
    # a super user behind a proxy that holds the grant: served
    got = answer("proxy", SUPER_USER)
    assert isinstance(got[1], ProducerSuccess), got
    # illegal combinations: refused at CONNECT, then closed
    for role, original, reason in (
        ("proxy", None, "originalPrincipal must be provided"),
        ("proxy", "bare-proxy", "originalPrincipal cannot be a proxy role"),
        ("app", SUPER_USER, "without a valid proxy role"),
    ):
        got = answer(role, original)
        assert len(got) == 1 and isinstance(got[0], Error), (role, original, got)
        assert got[0].error.name == "AuthorizationError"
        assert got[0].message.startswith("Invalid roles: ") and reason in got[0].message
    assert node.proc is not None and node.proc.poll() is None
