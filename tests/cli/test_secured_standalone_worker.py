"""A standalone with authentication and authorization on gives its own Functions Worker
credentials (it holds the token key: a token for a super user role), or refuses to start in
one line naming the options; it never says ready with a worker that cannot connect."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.auth.config import AuthConfig, ProviderName
from magnetar.auth.htpasswd import apr1_hash
from magnetar.auth.server_options import (
    WORKER_ROLE,
    ServerAuthError,
    own_client_credentials,
)
from magnetar.auth.tokens import create_token, new_secret_key, unverified_claims
from magnetar.testing import StandaloneProcess, wait_until

pytestmark = pytest.mark.timeout(180)

ROOT = "root"
WORKER_TIMEOUT_S = 60.0
ECHO = b"def echo(input):\n    return input + '!'\n"


SECRET_KEY = base64.b64encode(new_secret_key()).decode()


def _auth(**changes: Any) -> AuthConfig:
    settings: dict[str, Any] = {
        "authentication_enabled": True,
        "providers": (ProviderName.TOKEN,),
        "token_secret_key": SECRET_KEY,
        "authorization_enabled": True,
        "super_user_roles": frozenset({ROOT, "zeta"}),
        **changes,
    }
    return AuthConfig(**settings)


def test_the_worker_gets_a_token_for_the_first_super_user_role() -> None:
    credentials = own_client_credentials(_auth(), NO_CREDENTIALS)
    assert credentials.token is not None
    assert unverified_claims(credentials.token) == {"sub": ROOT}


def test_given_credentials_and_open_brokers_are_kept() -> None:
    given = ClientCredentials(token="given")
    assert own_client_credentials(_auth(), given) is given
    assert own_client_credentials(AuthConfig(), NO_CREDENTIALS) is NO_CREDENTIALS
    anonymous_root = _auth(anonymous_user_role=ROOT)
    assert own_client_credentials(anonymous_root, NO_CREDENTIALS) is NO_CREDENTIALS


def test_without_authorization_any_role_will_do() -> None:
    auth = _auth(authorization_enabled=False, super_user_roles=frozenset())
    token = own_client_credentials(auth, NO_CREDENTIALS).token
    assert token is not None and unverified_claims(token) == {"sub": WORKER_ROLE}


@pytest.mark.parametrize(
    ("changes", "hint"),
    [
        ({"token_secret_key": None, "token_public_key": "cHVibGlj"}, "--token-secret-key"),
        ({"providers": (ProviderName.BASIC,), "basic_auth_conf": "x"}, "--token-secret-key"),
        ({"super_user_roles": frozenset()}, "--super-user-roles"),
    ],
)
def test_no_way_to_credentials_names_the_options(changes: dict[str, Any], hint: str) -> None:
    with pytest.raises(ServerAuthError) as raised:
        own_client_credentials(_auth(**changes), NO_CREDENTIALS)
    message = str(raised.value)
    assert "--broker-client-auth-plugin" in message and "--no-functions-worker" in message
    assert hint in message


def _get(url: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def _admin(node: StandaloneProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
         "--auth-plugin", "token", "--auth-params", f"token:{token}", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _secured(key_file: Path, *extra: str) -> tuple[str, ...]:
    return (
        "--authentication-enabled",
        "--authentication-providers", "token",
        "--token-secret-key", f"file://{key_file}",
        "--authorization-enabled",
        "--super-user-roles", ROOT,
        *extra,
    )  # fmt: skip


def test_a_secured_standalone_runs_a_function_with_its_own_worker(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(new_secret_key())
    root = create_token(ROOT, secret_key=key_file.read_bytes())
    node = standalone_factory(*_secured(key_file))
    leader = f"{node.http_url}/admin/v2/worker/cluster/leader"

    def leads() -> bool:
        status, body = _get(leader, root)
        return status == 200 and body["workerId"] == "standalone"

    wait_until(leads, WORKER_TIMEOUT_S, what="the standalone's worker joined and leads")
    package = tmp_path / "echo.py"
    package.write_bytes(ECHO)
    done = _admin(
        node, root, "functions", "create", "--tenant", "public", "--namespace", "default",
        "--name", "echo", "--py", str(package), "--classname", "echo.echo",
        "--inputs", "echo-in", "--output", "echo-out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def running() -> bool:
        status = _get(f"{node.http_url}/admin/v3/functions/public/default/echo/status", root)
        return status[0] == 200 and status[1]["numRunning"] == 1

    wait_until(running, WORKER_TIMEOUT_S, what="the function's instance runs")
    client = pulsar.Client(node.url, authentication=pulsar.AuthenticationToken(root))
    try:
        consumer = client.subscribe("echo-out", "check")
        client.create_producer("echo-in").send(b"hello")
        assert consumer.receive(30_000).data() == b"hello!"
    finally:
        client.close()
    assert "could not" not in node.log_tail(200)


def test_a_secured_standalone_without_a_way_to_credentials_refuses_to_start(
    tmp_path: Path,
) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"{ROOT}:{apr1_hash(b'secret', 'Xy12Ab34')}\n")
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "standalone",
         "--data-dir", str(tmp_path / "data"), "--port", "0", "--http-port", "0",
         "--authentication-enabled", "--authentication-providers", "basic",
         "--basic-auth-conf", str(htpasswd),
         "--authorization-enabled", "--super-user-roles", ROOT],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--broker-client-auth-plugin" in lines[0], done.stderr
    assert "--no-functions-worker" in lines[0]
    assert "ready" not in done.stdout
    assert not (tmp_path / "data").exists()
