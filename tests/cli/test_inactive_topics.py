"""Inactive topics deleted by a real standalone (``--broker-delete-inactive-topics-*``,
checked every second) and pulsar-admin's ``set-|get-|remove-inactive-topic-policies``.

A topic that must stay is checked against a control topic that must go and was set up after
it: once the control is gone, the kept topic has been inactive at least as long."""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import Cli

DELETED_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Pulsar's defaults for inactive topics, with a check every second."""
    with StandaloneProcess(
        tmp_path_factory.mktemp("standalone") / "data",
        "--no-functions-worker",
        "--broker-delete-inactive-topics-enabled",
        "--broker-delete-inactive-topics-frequency-seconds",
        "1",
        "--broker-delete-inactive-topics-max-inactive-duration-seconds",
        "1",
    ) as node:
        yield node


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _topics(node: StandaloneProcess, ns: str) -> list[str]:
    with urllib.request.urlopen(f"{node.http_url}/admin/v2/persistent/{ns}", timeout=10) as r:
        names: list[str] = json.load(r)
    return names


def _exists(node: StandaloneProcess, topic: str) -> bool:
    ns = topic.removeprefix("persistent://").rsplit("/", 1)[0]
    return topic in _topics(node, ns)


def _wait_deleted(node: StandaloneProcess, topic: str) -> None:
    wait_until(lambda: not _exists(node, topic), DELETED_TIMEOUT_S, what=f"{topic} to be deleted")


def _namespace(cli: Cli, *policy: str) -> str:
    """A new namespace whose topics are kept until its policy says otherwise."""
    ns = f"public/inactive-{uuid.uuid4().hex[:8]}"
    _ok(cli.admin("namespaces", "create", ns))
    _ok(cli.admin("namespaces", "set-inactive-topic-policies", ns, *policy))
    return ns


KEEP = ("-d", "-t", "1", "-m", "delete_when_no_subscriptions")


def test_a_topic_without_subscriptions_or_clients_is_deleted(cli: Cli) -> None:
    topic = f"persistent://public/default/idle-{uuid.uuid4().hex[:8]}"
    _ok(cli.admin("topics", "create", topic))
    _wait_deleted(cli.node, topic)


def test_a_subscription_keeps_its_topic_when_deleting_without_subscriptions(cli: Cli) -> None:
    ns = _namespace(cli, *KEEP)
    subscribed, control = f"persistent://{ns}/subscribed", f"persistent://{ns}/control"
    _ok(cli.admin("topics", "create", subscribed))
    _ok(cli.admin("topics", "create-subscription", subscribed, "-s", "sub"))
    _ok(cli.admin("topics", "create", control))
    assert _exists(cli.node, subscribed) and _exists(cli.node, control)  # kept while -d

    delete = ("-e", "-t", "1s", "-m", "delete_when_no_subscriptions")
    _ok(cli.admin("namespaces", "set-inactive-topic-policies", ns, *delete))
    _wait_deleted(cli.node, control)
    assert _exists(cli.node, subscribed)


def test_caught_up_mode_waits_for_the_backlog_to_be_acknowledged(cli: Cli) -> None:
    ns = _namespace(cli, *KEEP)
    backlog, control = f"persistent://{ns}/backlog", f"persistent://{ns}/caught-up"
    _ok(cli.admin("topics", "create", backlog))
    _ok(cli.admin("topics", "create-subscription", backlog, "-s", "sub"))
    _ok(cli.client("produce", backlog, "-m", "unread"))
    _ok(cli.admin("topics", "create", control))
    _ok(cli.admin("topics", "create-subscription", control, "-s", "sub"))

    delete = ("-e", "-t", "1", "-m", "delete_when_subscriptions_caught_up")
    _ok(cli.admin("namespaces", "set-inactive-topic-policies", ns, *delete))
    _wait_deleted(cli.node, control)
    assert _exists(cli.node, backlog)

    out = _ok(cli.client("consume", backlog, "-s", "sub", "-n", "1", "-p", "earliest"))
    assert "unread" in out
    _wait_deleted(cli.node, backlog)


def test_policies_keep_or_delete_against_the_broker_default(cli: Cli) -> None:
    ns = _namespace(cli, *KEEP)
    kept, overridden = f"persistent://{ns}/kept", f"persistent://{ns}/overridden"
    _ok(cli.admin("topics", "create", kept))
    _ok(cli.admin("topics", "create", overridden))
    control = f"persistent://public/default/control-{uuid.uuid4().hex[:8]}"
    _ok(cli.admin("topics", "create", control))  # the broker's default: deleted
    _wait_deleted(cli.node, control)
    assert _exists(cli.node, kept) and _exists(cli.node, overridden)

    # a topic's own policy replaces its namespace's
    delete = ("-e", "-t", "1", "-m", "delete_when_no_subscriptions")
    _ok(cli.admin("topics", "set-inactive-topic-policies", overridden, *delete))
    _wait_deleted(cli.node, overridden)
    assert _exists(cli.node, kept)


def _json(cli: Cli, *args: str) -> Any:
    return json.loads(_ok(cli.admin("--output", "json", *args)))


def test_the_broker_settings_in_the_runtime_config(cli: Cli) -> None:
    config = _json(cli, "brokers", "get-runtime-config")
    assert config["brokerDeleteInactiveTopicsEnabled"] == "true"
    assert config["brokerDeleteInactiveTopicsFrequencySeconds"] == "1"
    assert config["brokerDeleteInactiveTopicsMode"] == "delete_when_no_subscriptions"
    assert config["brokerDeleteInactiveTopicsMaxInactiveDurationSeconds"] == "1"


def test_set_get_remove(cli: Cli) -> None:
    ns = _namespace(cli, "-d", "-t", "2h", "-m", "delete_when_subscriptions_caught_up")
    n = "namespaces"
    assert _json(cli, n, "get-inactive-topic-policies", ns) == {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 7200,
        "deleteWhileInactive": False,
    }
    topic = f"persistent://{ns}/t"
    _ok(cli.admin("topics", "create", topic))
    _ok(cli.admin("topics", "create-subscription", topic, "-s", "sub"))  # kept by the broker
    t = "topics"
    assert _ok(cli.admin(t, "get-inactive-topic-policies", topic)).strip() == ""
    # applied: the namespace's
    assert (
        _json(cli, t, "get-inactive-topic-policies", topic, "--applied")["deleteWhileInactive"]
        is False
    )
    _ok(cli.admin(t, "set-inactive-topic-policies", topic, "-d", "-t", "5m", "-m",
                  "delete_when_no_subscriptions"))  # fmt: skip
    assert _json(cli, t, "get-inactive-topic-policies", topic)["maxInactiveDurationSeconds"] == 300
    _ok(cli.admin(t, "remove-inactive-topic-policies", topic))
    assert _ok(cli.admin(t, "get-inactive-topic-policies", topic)).strip() == ""

    _ok(cli.admin(n, "remove-inactive-topic-policies", ns))
    assert _ok(cli.admin(n, "get-inactive-topic-policies", ns)).strip() == ""
    applied = _json(cli, t, "get-inactive-topic-policies", topic, "--applied")
    assert applied == {  # the broker's flags
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 1,
        "deleteWhileInactive": True,
    }

    # one line, no traceback: neither or both of -e / -d
    neither = cli.admin(n, "set-inactive-topic-policies", ns, "-t", "1h", "-m",
                        "delete_when_no_subscriptions")  # fmt: skip
    assert neither.returncode == 2 and "Traceback" not in neither.stderr
    assert "--enable-delete-while-inactive" in neither.stderr
