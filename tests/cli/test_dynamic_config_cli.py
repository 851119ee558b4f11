"""``admin brokers update-|list-|get-all-|delete-dynamic-config`` against a real standalone: a
broker default changed at run time is in force at once (the applied policy of a topic, the
producer limit of a loaded topic) and removing it restores the configured value."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pulsar
import pytest

from magnetar.broker.dynamic_config import DynamicConfigError, checked_value, overridden
from magnetar.broker.policies import BrokerDefaults
from magnetar.testing import wait_until

from .conftest import Cli


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _json(cli: Cli, *args: str) -> Any:
    return json.loads(_ok(cli.admin("--output", "json", *args)))


def _second_producer_refused(client: pulsar.Client, topic: str) -> bool:
    try:
        client.create_producer(topic, send_timeout_millis=5000).close()
    except pulsar.PulsarException:
        return True
    return False


def test_dynamic_config_changes_the_defaults_without_a_restart(cli: Cli, topic: str) -> None:
    b = "brokers"
    names = _json(cli, b, "list-dynamic-config")
    assert "maxProducersPerTopic" in names and "ttlDurationDefaultInSeconds" in names
    assert _json(cli, b, "get-all-dynamic-config") == {}
    _ok(cli.admin("topics", "create", topic))
    before = _json(cli, "topics", "get-message-ttl", topic, "--applied")

    _ok(cli.admin(b, "update-dynamic-config", "--config", "ttlDurationDefaultInSeconds",
                  "--value", "120"))  # fmt: skip
    assert _json(cli, b, "get-all-dynamic-config") == {"ttlDurationDefaultInSeconds": "120"}
    assert _json(cli, "topics", "get-message-ttl", topic, "--applied") == 120
    _ok(cli.admin(b, "delete-dynamic-config", "--config", "ttlDurationDefaultInSeconds"))
    assert _json(cli, "topics", "get-message-ttl", topic, "--applied") == before

    client = pulsar.Client(cli.node.url, operation_timeout_seconds=10)
    try:
        first = client.create_producer(topic)
        _ok(cli.admin(b, "update-dynamic-config", "--config", "maxProducersPerTopic",
                      "--value", "1"))  # fmt: skip
        wait_until(lambda: _second_producer_refused(client, topic), 30,
                   what="the loaded topic takes the new producer limit")  # fmt: skip
        _ok(cli.admin(b, "delete-dynamic-config", "--config", "maxProducersPerTopic"))
        wait_until(lambda: not _second_producer_refused(client, topic), 30,
                   what="the configured limit again")  # fmt: skip
        first.close()
    finally:
        client.close()

    unknown = cli.admin(b, "update-dynamic-config", "--config", "brokerServicePort", "--value", "1")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        "Error: brokerServicePort is not a dynamic configuration (HTTP 412)"
    )
    bad = cli.admin(b, "update-dynamic-config", "--config", "maxProducersPerTopic", "--value", "x")
    assert bad.returncode == 1 and "(HTTP 412)" in bad.stderr
    unset = cli.admin(b, "delete-dynamic-config", "--config", "maxProducersPerTopic")
    assert unset.returncode == 1 and "(HTTP 404)" in unset.stderr


@pytest.mark.parametrize(
    ("name", "text", "ok"),
    [("maxProducersPerTopic", "3", True), ("maxProducersPerTopic", "-1", False),
     ("brokerDeduplicationEnabled", "TRUE", True), ("brokerDeduplicationEnabled", "1", False),
     ("nope", "1", False)],
)  # fmt: skip
def test_checked_value(name: str, text: str, ok: bool) -> None:
    if ok:
        assert checked_value(name, text) == text
    else:
        with pytest.raises(DynamicConfigError):
            checked_value(name, text)


def test_overridden_skips_what_it_cannot_apply() -> None:
    base = BrokerDefaults(max_producers_per_topic=5)
    got = overridden(
        base, {"maxProducersPerTopic": "2", "nope": "1", "ttlDurationDefaultInSeconds": "x"}
    )
    assert got == BrokerDefaults(max_producers_per_topic=2)
    assert overridden(base, {}) == base
