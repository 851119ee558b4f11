"""Fixtures for the security tests: a secret key, tokens, an htpasswd file, certificates,
and ``magnetar standalone`` processes with authentication and authorization on (real
subprocesses on free ports, killed at teardown)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from magnetar.auth.htpasswd import apr1_hash
from magnetar.auth.tokens import create_token, new_secret_key
from magnetar.protocol import Connect, Connected, FrameDecoder
from magnetar.protocol import encode as encode_command

SUPER_USER = "root"
PASSWORD = "correct horse"


@dataclass(frozen=True)
class Secrets:
    key_file: Path
    htpasswd: Path

    def token(self, role: str, expires_at_s: int | None = None) -> str:
        return create_token(role, secret_key=self.key_file.read_bytes(), expires_at_s=expires_at_s)

    def args(self, *extra: str) -> tuple[str, ...]:
        """standalone options: token and basic providers, authorization, super user root."""
        return (
            "--authentication-enabled",
            "--authentication-providers", "token,basic,tls",
            "--token-secret-key", f"file://{self.key_file}",
            "--basic-auth-conf", str(self.htpasswd),
            "--authorization-enabled",
            "--super-user-roles", SUPER_USER,
            *extra,
        )  # fmt: skip


@pytest.fixture(scope="session")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    d = tmp_path_factory.mktemp("secrets")
    (d / "secret.key").write_bytes(new_secret_key())
    (d / ".htpasswd").write_text(f"alice:{apr1_hash(PASSWORD.encode(), 'Xy12Ab34')}\n")
    return Secrets(d / "secret.key", d / ".htpasswd")


def http(
    method: str, url: str, token: str | None = None, body: Any = None, header: str | None = None
) -> tuple[int, Any]:
    """(status, decoded JSON body or None) of one REST request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            if "json" not in response.headers.get("Content-Type", ""):
                return response.status, raw
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tls.certs import make_pki  # tests/tls: the TLS tests' certificate maker

    return make_pki(tmp_path_factory.mktemp("pki"))


def connect_raw(port: int, method: str | None, data: bytes | None) -> list[object]:
    """CONNECT with the given credentials; the commands the broker sent until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            encode_command(
                Connect(
                    client_version="auth-test",
                    protocol_version=20,
                    auth_method_name=method,
                    auth_data=data,
                )
            )
        )
        decoder, commands = FrameDecoder(), []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                return commands
            commands += [f.command for f in decoder.feed(chunk)]
            if any(isinstance(c, Connected) for c in commands):
                return commands
        raise AssertionError(f"the broker neither answered nor closed: {commands}")
