"""The web console with authentication and authorization on (a real ``magnetar standalone``,
and a ``magnetar local-cluster`` signing its own tokens): it asks for a token when the API
answers 401, and each role sees only the namespaces it may see, on every broker; the cluster
view is a super user's."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local_cluster.command import FREE_PORTS, LocalClusterCommand
from selenium import webdriver
from selenium.webdriver.common.by import By

from magnetar.auth.tokens import create_token, new_secret_key
from magnetar.local_cluster_security import ClusterTokens
from magnetar.testing import StandaloneProcess, wait_until

from .conftest import Console


def _call(http_url: str, token: str, method: str, path: str, body: Any) -> None:
    request = urllib.request.Request(http_url + path, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=15) as answer:
        assert answer.status in (200, 204)


def _sign_in(console: Console, token: str) -> None:
    console.find("#login[open]")
    field = console.driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    console.click("#login-submit")


def _namespaces(console: Console) -> list[str]:
    console.find("#namespaces")
    got: list[str] = console.driver.execute_script(
        "return [...document.querySelectorAll('#namespaces tr[data-namespace]')]"
        ".map(r => r.dataset.namespace)"
    )
    return sorted(got)


def test_each_role_sees_only_its_namespaces(
    console_on: Callable[..., tuple[Console, StandaloneProcess]], tmp_path: Path
) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(new_secret_key())

    def token(role: str) -> str:
        return create_token(role, secret_key=key.read_bytes())

    worker_token = tmp_path / "worker.token"
    worker_token.write_text(token("worker"))
    console, node = console_on(
        "--authentication-enabled",
        "--authentication-providers", "token",
        "--token-secret-key", f"file://{key}",
        "--authorization-enabled",
        "--super-user-roles", "root,worker",
        # the standalone's Functions Worker calls in as "worker"
        "--broker-client-auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "--broker-client-auth-params", f"file://{worker_token}",
    )  # fmt: skip
    root = token("root")
    for tenant, admin in (("ta", "alice"), ("tb", "bob")):
        info = {"adminRoles": [admin], "allowedClusters": ["standalone"]}
        _call(node.http_url, root, "PUT", f"/admin/v2/tenants/{tenant}", info)
        _call(node.http_url, root, "PUT", f"/admin/v2/namespaces/{tenant}/ns", {})
    _call(node.http_url, root, "POST", "/admin/v2/namespaces/tb/ns/permissions/carol", ["consume"])

    console.open("#/")
    _sign_in(console, token("alice"))
    assert _namespaces(console) == ["ta/ns"]
    assert console.text("#whoami") == "role: alice"
    assert not console.driver.find_element(By.ID, "nav-cluster").is_displayed()
    console.screenshot("namespaces-tenant-admin")

    console.click("#sign-out")
    _sign_in(console, token("carol"))
    assert _namespaces(console) == ["tb/ns"]
    assert console.text('tr[data-namespace="tb/ns"] .tag') == "produce/consume"

    console.click("#sign-out")
    _sign_in(console, token("root"))
    assert "public/default" in _namespaces(console)
    console.go("#/cluster")
    assert console.text("#controller") == "standalone"
    # the only errors: the 401s that asked for a token
    assert all(" 401 " in e["message"] for e in console.errors())
    assert console.foreign_requests() == []


def test_on_a_secured_local_cluster_a_role_sees_only_its_namespaces_on_every_broker(
    chromium: webdriver.Chrome, screenshots: Path, tmp_path: Path
) -> None:
    """``local-cluster`` with token authentication and authorization on (the cluster signs
    its own key and the super user's token): a tenant's admin signed in on either broker's
    console lists only that tenant's namespace; the super user sees the cluster view."""
    data_dir = tmp_path / "cluster"
    cmd = LocalClusterCommand(
        data_dir,
        *("--brokers", "2", "--bookies", "1", "--no-functions-worker"),
        *("--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1"),
        *("--authentication-enabled", "--authentication-providers", "token"),
        "--authorization-enabled",
        *FREE_PORTS,
    )
    try:
        ready = cmd.wait_ready()
        admin_urls = [u if "://" in u else f"http://{u}" for u in ready.group(2).split(",")]
        key = ClusterTokens.key_file(data_dir).read_bytes()
        root = ClusterTokens.token_file(data_dir).read_text().strip()
        for tenant, admin in (("ta", "alice"), ("tb", "bob")):
            info = {"adminRoles": [admin], "allowedClusters": ["standalone"]}
            _call(admin_urls[0], root, "PUT", f"/admin/v2/tenants/{tenant}", info)
            _call(admin_urls[0], root, "PUT", f"/admin/v2/namespaces/{tenant}/ns", {})
        for url in admin_urls:
            console = Console(chromium, url, screenshots)
            console.open("#/")
            _sign_in(console, create_token("alice", secret_key=key))
            assert _namespaces(console) == ["ta/ns"]
            assert not console.driver.find_element(By.ID, "nav-cluster").is_displayed()
            console.click("#sign-out")
        console.screenshot("namespaces-tenant-admin-local-cluster")
        _sign_in(console, root)
        assert {"public/default", "ta/ns", "tb/ns"} <= set(_namespaces(console))
        console.go("#/cluster")
        wait_until(
            lambda: len(chromium.find_elements("css selector", "#brokers tbody tr")) == 2,
            20, 0.2, "both brokers listed to the super user",
        )  # fmt: skip
        assert all(" 401 " in e["message"] for e in console.errors())
        assert console.foreign_requests() == []
    finally:
        chromium.get("about:blank")  # no page left refreshing against a stopped cluster
        cmd.stop_everything()
