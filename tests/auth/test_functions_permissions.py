"""The namespace actions ``functions``, ``sources`` and ``sinks`` on the Functions Worker's
REST (``/admin/v3/functions|sources|sinks/{tenant}/{namespace}``), with authorization on, as
Pulsar checks them: a super user or tenant admin, or a role granted the matching action on
the namespace itself; nothing else. A real standalone with its Functions Worker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from magnetar.auth.authorization import AuthAction, Authorizer, AuthPolicies
from magnetar.testing import StandaloneProcess

from .conftest import SUPER_USER, Secrets, http


def test_namespace_actions_need_the_action_granted_on_the_namespace() -> None:
    authorizer = Authorizer(True, frozenset({"root"}))
    policies = AuthPolicies.from_json(
        {
            "namespace_auth": {"dev": ["functions"], "app": ["produce", "consume"]},
            "destination_auth": {"persistent://t/ns/x": {"topic-dev": ["functions"]}},
        }
    )
    allowed = {
        (role, action)
        for role in ("root", "admin", "dev", "app", "topic-dev", "nobody")
        for action in AuthAction
        if authorizer.allows_namespace_action(role, action, ["admin"], policies)
    }
    assert allowed == {("root", a) for a in AuthAction} | {("admin", a) for a in AuthAction} | {
        ("dev", AuthAction.FUNCTIONS),
        ("app", AuthAction.PRODUCE),
        ("app", AuthAction.CONSUME),
    }
    assert not authorizer.allows_namespace_action(None, AuthAction.FUNCTIONS, [], policies)


@pytest.mark.parametrize("kinds", ["functions", "sources", "sinks"])
def test_worker_rest_checks_the_namespace_action(
    kinds: str, standalone_factory: Callable[..., StandaloneProcess], secrets: Secrets
) -> None:
    # The worker inside the standalone is given no credentials here
    # (--broker-client-auth-plugin, test_broker_client_auth.py): it gets the anonymous role,
    # a super user here.
    node = standalone_factory(
        *secrets.args("--anonymous-user-role", "worker", "--super-user-roles", "root,worker")
    )
    root = secrets.token(SUPER_USER)
    base = f"{node.http_url}/admin/v2/namespaces/public/default/permissions"
    granted = {"functions": "dev-f", "sources": "dev-so", "sinks": "dev-si"}
    for action, role in granted.items():
        assert http("POST", f"{base}/{role}", root, body=[action])[0] == 204
    assert http("POST", f"{base}/app", root, body=["produce", "consume"])[0] == 204
    listing = f"{node.http_url}/admin/v3/{kinds}/public/default"
    assert http("GET", listing, root) == (200, [])
    for role in ("dev-f", "dev-so", "dev-si", "app", "stranger"):
        status, answer = http("GET", listing, secrets.token(role))
        if role == granted[kinds]:
            assert (status, answer) == (200, [])
        else:
            assert status == 403, (role, status)
            assert f"or {kinds} on public/default" in answer["reason"]
    # another namespace: the grant does not reach it
    other = f"{node.http_url}/admin/v3/{kinds}/public/functions"
    assert http("GET", other, secrets.token(granted[kinds]))[0] == 403
    # revoked: refused at the next request
    assert http("DELETE", f"{base}/{granted[kinds]}", root)[0] == 204
    assert http("GET", listing, secrets.token(granted[kinds]))[0] == 403
    assert node.proc is not None and node.proc.poll() is None
