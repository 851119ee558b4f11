"""``magnetar local-cluster`` with token authentication and authorization on: the security
options reach every broker, the cluster signs its own key and super-user token, an
unauthenticated client is refused, a token client produces and consumes, and the admin CLI
works with the token through the ``client.conf`` the cluster writes, for the Functions
Worker's paths too (a broker forwards them to the worker, under the same checks)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.auth.server_options import SERVER_AUTH_OPTIONS, ServerAuthError
from magnetar.auth.tokens import TokenVerifier
from magnetar.cli.local_cluster_cmd import broker_args
from magnetar.common.errors import ServerError
from magnetar.local_cluster_security import ClusterTokens, forwarded_args, plan_security
from magnetar.protocol import Connected, Error
from magnetar.testing import wait_until
from tests.auth.conftest import connect_raw

from .command import FREE_PORTS, LocalClusterCommand

pytestmark = pytest.mark.timeout(300)

SECURED = ("--authentication-enabled", "--authentication-providers", "token",
           "--authorization-enabled")  # fmt: skip


def defaults(**changed: Any) -> dict[str, Any]:
    values = {spec.key: spec.default for spec in SERVER_AUTH_OPTIONS}
    values.update(changed)
    return values


def test_only_options_that_differ_from_their_defaults_are_passed_on() -> None:
    assert forwarded_args(defaults()) == ()
    assert forwarded_args(
        defaults(authentication_enabled=True, anonymous_user_role="anon", token_auth_claim="role")
    ) == (
        "--authentication-enabled", "--anonymous-user-role", "anon",
        "--token-auth-claim", "role",
    )  # fmt: skip


def test_connection_limits_are_passed_on_only_when_given() -> None:
    assert broker_args(defaults(), None, None) == ()
    assert broker_args(defaults(), 100, None) == ("--broker-max-connections", "100")
    assert broker_args(defaults(authorization_enabled=True), 0, 5) == (
        "--authorization-enabled", "--broker-max-connections", "0",
        "--broker-max-connections-per-ip", "5",
    )  # fmt: skip


def test_token_authentication_without_a_key_makes_the_cluster_sign_its_own(
    tmp_path: Path,
) -> None:
    settings, tokens = plan_security(
        defaults(authentication_enabled=True, authentication_providers="token")
    )
    assert tokens == ClusterTokens(super_user="admin", broker_client=True)
    assert settings["super_user_roles"] == "admin"
    tokens.ensure(tmp_path)
    for path in (ClusterTokens.key_file(tmp_path), ClusterTokens.token_file(tmp_path)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    verifier = TokenVerifier.from_setting(
        secret_key=ClusterTokens.key_file(tmp_path).as_uri(), public_key=None
    )
    token = ClusterTokens.token_file(tmp_path).read_text()
    assert verifier.verify(token, now_s=0)[0] == "admin"
    key = ClusterTokens.key_file(tmp_path).read_bytes()
    tokens.ensure(tmp_path)  # a restart keeps the key: tokens made with it stay valid
    assert ClusterTokens.key_file(tmp_path).read_bytes() == key


def test_named_super_user_and_broker_client_credentials_are_kept() -> None:
    settings, tokens = plan_security(
        defaults(
            authentication_enabled=True, authentication_providers="token",
            super_user_roles="ops,admin", broker_client_auth_plugin="token",
            broker_client_auth_params="token:abc",
        )
    )  # fmt: skip
    assert tokens == ClusterTokens(super_user="ops", broker_client=False)
    assert settings["super_user_roles"] == "ops,admin"


def test_settings_that_cannot_work_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ServerAuthError, match="htpasswd"):
        plan_security(defaults(authentication_enabled=True, authentication_providers="basic"))
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--data-dir",
         str(tmp_path / "c"), "--authentication-enabled", "--authentication-providers", "nope"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "nope" in out.stderr, out.stderr
    assert not (tmp_path / "c").exists()


def test_a_secured_local_cluster_refuses_anonymous_clients_and_serves_the_super_user(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    data_dir = tmp_path / "secured"
    cmd = LocalClusterCommand(
        data_dir, "--brokers", "2", "--bookies", "1", "--ensemble-size", "1",
        "--write-quorum", "1", "--ack-quorum", "1", *FREE_PORTS, *SECURED,
    )  # fmt: skip
    commands.append(cmd)
    service_url = cmd.wait_ready().group(1)
    token_file = ClusterTokens.token_file(data_dir.resolve())
    assert f"super user 'admin': token in {token_file}" in cmd.text()
    token = token_file.read_text()

    # every broker refuses a client without credentials, and takes the token
    for host_port in service_url.removeprefix("pulsar://").split(","):
        port = int(host_port.rsplit(":", 1)[1])
        refused = connect_raw(port, None, None)
        assert len(refused) == 1 and isinstance(refused[0], Error), refused
        assert refused[0].error is ServerError.AuthenticationError
        assert isinstance(connect_raw(port, "token", token.encode())[-1], Connected)

    client = pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=30,
    )
    try:
        topic = "persistent://public/default/secured-local-cluster"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"m-{i}".encode())
        got = [consumer.receive(timeout_millis=30_000).data().decode() for _ in range(20)]
        assert got == [f"m-{i}" for i in range(20)]
    finally:
        client.close()

    # the admin CLI with the client.conf the cluster wrote (the first broker's URL: the
    # CLI's multi-host admin URL is another change), and refused without it
    first_admin = cmd.wait_ready().group(2).split(",")[0]
    conf = data_dir.resolve() / "client.conf"
    admin = [sys.executable, "-m", "magnetar.cli.main"]
    ok = subprocess.run(
        [*admin, "--config", str(conf), "admin", "--admin-url", first_admin, "tenants", "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0 and "public" in ok.stdout.split(), ok.stderr
    refused_cli = subprocess.run(
        [*admin, "admin", "--admin-url", first_admin, "tenants", "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused_cli.returncode != 0 and "401" in refused_cli.stderr, refused_cli.stderr

    # the Functions Worker's REST through a broker: the worker joined with the super
    # user's token, the broker checks the caller and forwards its token
    worker_log = data_dir / "functions-worker.log"
    wait_until(lambda: "joined" in worker_log.read_text(), timeout_s=60,
               what="the Functions Worker to join")  # fmt: skip
    functions = [first_admin, "functions-worker", "get-cluster-leader"]
    leader = subprocess.run(
        [*admin, "--config", str(conf), "admin", "--admin-url", *functions],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert leader.returncode == 0 and "functions-worker" in leader.stdout, leader.stderr
    listed = subprocess.run(
        [*admin, "--config", str(conf), "admin", "--admin-url", first_admin, "--output", "json",
         "functions", "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr
    for anonymous in (functions, [cmd.functions_worker_url(), "functions", "list"]):
        refused_cli = subprocess.run(
            [*admin, "admin", "--admin-url", *anonymous],  # type: ignore[list-item]
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused_cli.returncode != 0 and "401" in refused_cli.stderr, refused_cli.stderr
    assert cmd.interrupt() == 0
