"""The web console with authentication and authorization on (a real ``magnetar standalone``):
it asks for a token when the API answers 401, and each role sees only the namespaces it
may see; the cluster view is a super user's."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

from magnetar.auth.tokens import create_token, new_secret_key
from magnetar.testing import StandaloneProcess

from .conftest import Console


def _call(node: StandaloneProcess, token: str, method: str, path: str, body: Any) -> None:
    request = urllib.request.Request(
        node.http_url + path, data=json.dumps(body).encode(), method=method
    )
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
        _call(node, root, "PUT", f"/admin/v2/tenants/{tenant}", info)
        _call(node, root, "PUT", f"/admin/v2/namespaces/{tenant}/ns", {})
    _call(node, root, "POST", "/admin/v2/namespaces/tb/ns/permissions/carol", ["consume"])

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
