"""The broker's internal clients authenticate (Pulsar's ``brokerClientAuthenticationPlugin``
/ ``brokerClientAuthenticationParameters``): the Functions Worker inside ``magnetar
standalone`` and its instances connect with ``--broker-client-auth-plugin/-params``, so the
worker starts with authentication on and no anonymous role. Real standalone processes, the
official client and ``magnetar admin`` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import SUPER_USER, Secrets, http

WORKER_TIMEOUT_S = 60.0


def _admin(node: StandaloneProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
            "--auth-plugin", "token", "--auth-params", f"token:{token}", *args,
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("runtime", ["thread", "process"])
def test_worker_starts_and_runs_functions_with_broker_client_credentials(
    runtime: str,
    standalone_factory: Callable[..., StandaloneProcess],
    secrets: Secrets,
    tmp_path: Path,
) -> None:
    root = secrets.token(SUPER_USER)
    worker_token = tmp_path / "worker.token"
    worker_token.write_text(secrets.token("fn-worker"))
    node = standalone_factory(
        *secrets.args(
            "--super-user-roles", f"{SUPER_USER},fn-worker",
            "--broker-client-auth-plugin",
            "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "--broker-client-auth-params", f"file://{worker_token}",
            "--functions-runtime", runtime,
        )
    )  # fmt: skip
    leader = f"{node.http_url}/admin/v2/worker/cluster/leader"
    wait_until(
        lambda: http("GET", leader, root)[0] == 200, WORKER_TIMEOUT_S, what="the worker leads"
    )
    grants = f"{node.http_url}/admin/v2/namespaces/public/default/permissions/dev"
    assert http("POST", grants, root, body=["functions"])[0] == 204
    dev = secrets.token("dev")
    package = tmp_path / "shout.py"
    package.write_bytes(b"def shout(input):\n    return input.upper() + '!'\n")
    done = _admin(
        node, dev, "functions", "create", "--tenant", "public", "--namespace", "default",
        "--name", "shout", "--py", str(package), "--classname", "shout.shout",
        "--inputs", "shout-in", "--output", "shout-out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Created shout successfully"

    def running() -> bool:
        status = _admin(node, dev, "--output", "json", "functions", "status", "--name", "shout")
        return status.returncode == 0 and json.loads(status.stdout)["numRunning"] == 1

    wait_until(running, WORKER_TIMEOUT_S, what="the instance runs")

    client = pulsar.Client(node.url, authentication=pulsar.AuthenticationToken(root))
    try:
        consumer = client.subscribe("shout-out", "check")
        producer = client.create_producer("shout-in")
        producer.send(b"hello")
        assert consumer.receive(30_000).data() == b"HELLO!"
    finally:
        client.close()
    # a role without the functions permission is still refused
    done = _admin(node, secrets.token("stranger"), "functions", "list")
    assert done.returncode == 1 and "HTTP 403" in done.stderr
    assert node.proc is not None and node.proc.poll() is None


def test_unusable_broker_client_auth_is_one_line_and_exit_2(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    for args, expected in (
        (("--broker-client-auth-plugin", "kerberos"), "unknown plugin 'kerberos'"),
        (("--broker-client-auth-params", "token:x"), "needs --broker-client-auth-plugin"),
        (("--broker-client-auth-plugin", "tls", "--broker-client-auth-params",
          "tlsCertFile:/c,tlsKeyFile:/k"), "tls is not supported"),
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "standalone",
             "--data-dir", str(tmp_path / "data"), *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr and "Traceback" not in done.stderr
