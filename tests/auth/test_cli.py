"""``magnetar tokens`` and the admin permission commands, as a user runs them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from magnetar.cli.main import cli
from magnetar.testing import StandaloneProcess

from .conftest import PASSWORD, SUPER_USER, Secrets


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_tokens_round_trip_and_one_line_errors(tmp_path: Path) -> None:
    key = f"file://{tmp_path}/secret.key"
    assert run("tokens", "create-secret-key", "-o", str(tmp_path / "secret.key"))[0] == 0
    assert len((tmp_path / "secret.key").read_bytes()) == 32
    code, token, _ = run("tokens", "create", "-sk", key, "-s", "app-1", "-exp", "1h")
    assert code == 0
    token = token.strip()
    code, out, _ = run("tokens", "show", "-i", token)
    header, _, claims = out.partition("---\n")
    assert json.loads(header)["alg"] == "HS256" and json.loads(claims)["sub"] == "app-1"
    assert run("tokens", "validate", "-sk", key, "-i", token)[0] == 0
    assert run("tokens", "create-secret-key", "-o", str(tmp_path / "other.key"))[0] == 0
    code, _, err = run("tokens", "validate", "-sk", f"file://{tmp_path}/other.key", "-i", token)
    assert code == 1 and err == "Error: token signature does not verify\n"
    code, _, err = run("tokens", "create", "-sk", f"file://{tmp_path}/missing", "-s", "x")
    assert code == 1 and "cannot read key file" in err and "Traceback" not in err
    private, public = tmp_path / "p.key", tmp_path / "p.pub"
    assert run("tokens", "create-key-pair", "--output-private-key", str(private),
               "--output-public-key", str(public), "-a", "ES256")[0] == 0  # fmt: skip
    code, token, _ = run("tokens", "create", "-pk", f"file://{private}", "-s", "svc")
    assert run("tokens", "validate", "-pk", f"file://{public}", "-i", token.strip())[0] == 0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("cli") / "data", *secrets.args()) as started:
        yield started


def test_admin_grant_list_and_revoke(node: StandaloneProcess, secrets: Secrets) -> None:
    admin = ("admin", "--admin-url", node.http_url, "--auth-token", secrets.token(SUPER_USER))
    ns, topic = "public/default", "persistent://public/default/cli-perms"
    assert run(*admin, "namespaces", "grant-permission", ns, "--role", "app",
               "--actions", "produce,consume")[0] == 0  # fmt: skip
    assert run(*admin, "topics", "grant-permission", topic, "--role", "audit",
               "--actions", "consume")[0] == 0  # fmt: skip
    code, out, _ = run(*admin, "--output", "json", "topics", "permissions", topic)
    assert code == 0 and json.loads(out) == {"app": ["consume", "produce"], "audit": ["consume"]}
    assert run(*admin, "namespaces", "revoke-permission", ns, "--role", "app")[0] == 0
    code, out, _ = run(*admin, "--output", "json", "namespaces", "permissions", ns)
    assert code == 0 and "app" not in json.loads(out)
    code, _, err = run(*admin, "namespaces", "grant-permission", ns, "--role", "x",
                       "--actions", "write")  # fmt: skip
    assert code == 2 and "--actions" in err
    # a role that is not a tenant admin is refused, in one line
    code, _, err = run("admin", "--admin-url", node.http_url, "--auth-token",
                       secrets.token("app"), "namespaces", "permissions", ns)  # fmt: skip
    assert code == 1
    assert err.startswith("Error: Client with role 'app' is not authorized") and "(HTTP 403)" in err


def test_auth_plugin_and_params_for_admin_client_perf_and_client_conf(
    node: StandaloneProcess, secrets: Secrets, tmp_path: Path
) -> None:
    root = secrets.token(SUPER_USER)
    basic = json.dumps({"userId": "alice", "password": PASSWORD})
    url = ("--admin-url", node.http_url)
    assert run("admin", *url, "--auth-plugin", "token", "--auth-params", f"token:{root}",
               "namespaces", "grant-permission", "public/default", "--role", "alice",
               "--actions", "produce")[0] == 0  # fmt: skip
    # basic credentials reach REST as alice (not a tenant admin: one 403 line naming her)
    code, _, err = run("admin", *url, "--auth-plugin", "basic", "--auth-params", basic,
                       "namespaces", "permissions", "public/default")  # fmt: skip
    assert code == 1 and "role 'alice' is not authorized" in err
    # client.conf with Pulsar's class name and JSON parameters
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"webServiceUrl={node.http_url}\nbrokerServiceUrl={node.url}\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationBasic\n"
        f"authParams={basic}\n"
    )
    code, out, err = run(
        "--config", str(conf), "client", "produce", "cli-auth", "-m", "x", "-n", "2"
    )
    assert code == 0, err
    assert "2 messages successfully produced" in out
    code, _, err = run("--config", str(conf), "client", "consume", "cli-auth", "-s", "s", "-n", "1")
    assert code == 1 and "role 'alice' is not authorized to consume" in err
    # a token file for perf
    (tmp_path / "root.token").write_text(root + "\n")
    code, out, err = run("perf", "produce", "--service-url", node.url, "--auth-plugin", "token",
                         "--auth-params", f"file://{tmp_path}/root.token", "-m", "5",
                         "cli-auth-perf")  # fmt: skip
    assert code == 0, err
    assert "5 records produced" in out
    code, _, err = run("admin", *url, "--auth-plugin", "kerberos", "tenants", "list")
    assert code == 2 and "unknown plugin 'kerberos'" in err


def test_admin_rate_commands(node: StandaloneProcess, secrets: Secrets) -> None:
    admin = ("admin", "--admin-url", node.http_url, "--auth-token", secrets.token(SUPER_USER))
    ns, topic = "public/default", "persistent://public/default/rated"
    assert run(*admin, "namespaces", "set-dispatch-rate", ns, "-md", "100", "-dt", "2")[0] == 0
    code, out, _ = run(*admin, "--output", "json", "namespaces", "get-dispatch-rate", ns)
    assert code == 0 and json.loads(out) == {
        "dispatchThrottlingRateInMsg": 100,
        "dispatchThrottlingRateInByte": -1,
        "ratePeriodInSecond": 2,
        "relativeToPublishRate": False,
    }
    assert run(*admin, "topics", "set-dispatch-rate", topic, "-md", "5", "-rp")[0] == 0
    code, out, _ = run(*admin, "--output", "json", "topics", "get-dispatch-rate", topic)
    assert code == 0 and json.loads(out)["relativeToPublishRate"] is True
    assert run(*admin, "topics", "set-subscription-dispatch-rate", topic, "-bd", "1000")[0] == 0
    code, out, _ = run(
        *admin, "--output", "json", "topics", "get-subscription-dispatch-rate", topic
    )
    assert code == 0 and json.loads(out)["dispatchThrottlingRateInByte"] == 1000
    assert run(*admin, "topics", "set-publish-rate", topic, "-m", "10")[0] == 0
    code, out, _ = run(*admin, "--output", "json", "topics", "get-publish-rate", topic)
    assert json.loads(out) == {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}
    for group, target in (("namespaces", ns), ("topics", topic)):
        for kind in (
            "publish-rate",
            "dispatch-rate",
            "subscription-dispatch-rate",
            "subscribe-rate",
        ):
            assert run(*admin, group, f"remove-{kind}", target)[0] == 0
            assert run(*admin, group, f"get-{kind}", target)[:2] == (0, "")
    assert run(*admin, "namespaces", "set-subscribe-rate", ns, "-sr", "5")[0] == 0
    code, out, _ = run(*admin, "--output", "json", "namespaces", "get-subscribe-rate", ns)
    assert json.loads(out) == {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 30}
    code, _, err = run(*admin, "namespaces", "set-dispatch-rate", "nope/ns", "-md", "1")
    assert code == 1 and err == "Error: Namespace does not exist (HTTP 404)\n"
