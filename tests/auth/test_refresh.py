"""Refreshing expiring credentials on live connections: the sans-IO state machine at
logical times, and a real standalone challenging a raw binary-protocol client."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest

from magnetar.auth.authentication import AuthenticatedRole
from magnetar.auth.refresh import REFRESH_AUTH_DATA, Challenge, Close, CredentialRefresh, Keep
from magnetar.common.errors import AuthenticationError, ServerError
from magnetar.protocol import (
    AuthChallenge,
    AuthData,
    AuthResponse,
    Connect,
    Connected,
    Error,
    FeatureFlags,
    FrameDecoder,
    Ping,
    Pong,
)
from magnetar.protocol import encode as encode_command
from magnetar.testing import StandaloneProcess

from .conftest import Secrets

ALICE_100 = AuthenticatedRole("alice", "token", 100.0)


def test_a_token_is_challenged_after_expiry_and_refreshed() -> None:
    refresh = CredentialRefresh(ALICE_100, supports_refresh=True)
    assert refresh.on_check(99.0) == Keep()
    assert refresh.on_check(100.0) == Challenge("token")
    assert refresh.on_response(AuthenticatedRole("alice", "token", 200.0)) == Keep()
    assert refresh.identity.expires_at_s == 200.0
    assert refresh.on_check(150.0) == Keep()
    assert refresh.on_check(200.0) == Challenge("token")
    assert refresh.on_check(201.0) == Close(
        "the client did not answer the authentication challenge in time"
    )


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (AuthenticatedRole("mallory", "token", 300.0), "for role 'mallory', not 'alice'"),
        (AuthenticationError("token expired"), "refreshed credentials refused: token expired"),
    ],
)
def test_a_refresh_for_another_role_or_refused_closes(
    outcome: AuthenticatedRole | Exception, reason: str
) -> None:
    refresh = CredentialRefresh(ALICE_100, supports_refresh=True)
    assert refresh.on_check(100.0) == Challenge("token")
    action = refresh.on_response(outcome)
    assert isinstance(action, Close) and reason in action.reason


def test_clients_that_cannot_refresh_are_closed_at_expiry() -> None:
    refresh = CredentialRefresh(ALICE_100, supports_refresh=False)
    assert refresh.on_check(50.0) == Keep()
    assert refresh.on_check(100.0) == Close(
        "credentials expired and the client cannot refresh them"
    )
    assert CredentialRefresh(AuthenticatedRole("bob", "basic"), True).on_check(1e12) == Keep()


# --- a real broker -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[StandaloneProcess]:
    args = secrets.args("--authentication-refresh-check-seconds", "0.5")
    with StandaloneProcess(tmp_path_factory.mktemp("refresh") / "data", *args) as started:
        yield started


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.decoder = FrameDecoder()

    def send(self, cmd: object) -> None:
        self.sock.sendall(encode_command(cmd))  # type: ignore[arg-type]

    def next_command(self, skip: tuple[type, ...] = (Ping, Pong)) -> object | None:
        """The next command (None once the broker closed), within the socket timeout."""
        while True:
            frames = []
            while not frames:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                frames = [f.command for f in self.decoder.feed(chunk)]
            for cmd in frames:
                if not isinstance(cmd, skip):
                    return cmd


def _connect(node: StandaloneProcess, token: str, refresh: bool) -> RawClient:
    client = RawClient(node.port)
    client.send(
        Connect(
            client_version="refresh-test",
            protocol_version=20,
            auth_method_name="token",
            auth_data=token.encode(),
            feature_flags=FeatureFlags(supports_auth_refresh=refresh),
        )
    )
    assert isinstance(client.next_command(), Connected)
    return client


def _respond(client: RawClient, token: str) -> None:
    data = AuthData(auth_method_name="token", auth_data=token.encode())
    client.send(AuthResponse(client_version="refresh-test", response=data, protocol_version=20))


def _soon(secrets: Secrets, role: str = "alice") -> str:
    return secrets.token(role, expires_at_s=int(time.time()) + 2)


def test_the_broker_challenges_accepts_a_refresh_and_drops_a_silent_client(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    client = _connect(node, _soon(secrets), refresh=True)
    challenge = client.next_command()
    assert isinstance(challenge, AuthChallenge) and challenge.challenge is not None
    assert challenge.challenge.auth_data == REFRESH_AUTH_DATA
    assert challenge.challenge.auth_method_name == "token"
    _respond(client, _soon(secrets))
    client.send(Ping())  # still serving this connection
    assert isinstance(client.next_command(skip=(Ping,)), Pong)
    # the refreshed token expires too: challenged again, and closed when silent
    assert isinstance(client.next_command(), AuthChallenge)
    assert client.next_command() is None


@pytest.mark.parametrize(
    ("response_of", "reason"),
    [
        (lambda s: _soon(s, "mallory"), "for role 'mallory', not 'alice'"),
        (lambda s: "garbage", "malformed token"),
    ],
)
def test_a_refresh_for_another_role_or_a_bad_token_is_answered_and_closed(
    node: StandaloneProcess,
    secrets: Secrets,
    response_of: Callable[[Secrets], str],
    reason: str,
) -> None:
    client = _connect(node, _soon(secrets), refresh=True)
    assert isinstance(client.next_command(), AuthChallenge)
    _respond(client, response_of(secrets))
    error = client.next_command()
    assert isinstance(error, Error) and error.error is ServerError.AuthenticationError
    assert reason in error.message
    assert client.next_command() is None


def test_a_client_without_refresh_support_is_closed_at_expiry(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    lasting = _connect(node, secrets.token("alice"), refresh=True)  # no exp
    client = _connect(node, _soon(secrets), refresh=False)
    assert client.next_command() is None
    # the token without exp was never challenged: its connection still answers
    lasting.send(Ping())
    assert isinstance(lasting.next_command(skip=(Ping,)), Pong)
