"""pulsar-admin's policy commands against a real standalone: topic-level policies
(``admin topics set-|get-|remove-<policy>``, with ``--applied``) and the namespace policies
``persistence``, ``auto-topic-creation``, ``max-producers-per-topic``,
``max-consumers-per-topic``."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

from .conftest import Cli


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _json(cli: Cli, *args: str) -> Any:
    out = _ok(cli.admin("--output", "json", *args))
    return json.loads(out)


def test_topic_level_policies(cli: Cli, topic: str) -> None:
    _ok(cli.admin("topics", "create", topic))
    t = "topics"

    _ok(cli.admin(t, "set-retention", topic, "-s", "200M", "-t", "2h"))
    assert _json(cli, t, "get-retention", topic) == {
        "retentionTimeInMinutes": 120,
        "retentionSizeInMB": 200,
    }
    _ok(cli.admin(t, "remove-retention", topic))
    assert _ok(cli.admin(t, "get-retention", topic)).strip() == ""
    applied = _json(cli, t, "get-retention", topic, "--applied")  # the broker's default
    assert set(applied) == {"retentionTimeInMinutes", "retentionSizeInMB"}

    _ok(cli.admin(t, "set-message-ttl", topic, "-t", "10m"))
    assert _json(cli, t, "get-message-ttl", topic) == 600
    _ok(cli.admin(t, "remove-message-ttl", topic))
    assert _ok(cli.admin(t, "get-message-ttl", topic)).strip() == ""

    _ok(cli.admin(t, "set-backlog-quota", topic, "-l", "10M", "-p", "producer_exception"))
    quota = _json(cli, t, "get-backlog-quotas", topic)["destination_storage"]
    assert quota["limitSize"] == 10 << 20 and quota["policy"] == "producer_exception"
    _ok(cli.admin(t, "remove-backlog-quota", topic))
    assert _json(cli, t, "get-backlog-quotas", topic) == {}
    assert "destination_storage" in _json(cli, t, "get-backlog-quotas", topic, "-ap")

    for policy, flag in (("max-producers", "-p"), ("max-consumers", "-c")):
        _ok(cli.admin(t, f"set-{policy}", topic, flag, "3"))
        assert _json(cli, t, f"get-{policy}", topic) == 3
        _ok(cli.admin(t, f"remove-{policy}", topic))
        assert _ok(cli.admin(t, f"get-{policy}", topic)).strip() == ""
    _ok(cli.admin(t, "set-max-unacked-messages-per-consumer", topic, "-m", "7"))
    assert _json(cli, t, "get-max-unacked-messages-per-consumer", topic) == 7

    _ok(cli.admin(t, "set-persistence", topic, "-e", "1", "-w", "1", "-a", "1"))
    persistence = _json(cli, t, "get-persistence", topic)
    assert persistence["bookkeeperEnsemble"] == 1 and persistence["bookkeeperAckQuorum"] == 1
    _ok(cli.admin(t, "set-deduplication", topic, "--enable"))
    assert _json(cli, t, "get-deduplication", topic) is True

    # the server's reason in one line: an unknown topic, a refused value
    ghost = cli.admin(t, "set-max-producers", f"ghost-{uuid.uuid4().hex[:6]}", "-p", "1")
    assert ghost.returncode == 1 and "(HTTP 404)" in ghost.stderr
    bad = cli.admin(t, "set-persistence", topic, "-e", "1", "-w", "2", "-a", "1")
    assert bad.returncode == 1 and "(HTTP 412)" in bad.stderr


def test_namespace_policies(cli: Cli) -> None:
    tenant = f"pol-{uuid.uuid4().hex[:6]}"
    ns = f"{tenant}/p"
    _ok(cli.admin("tenants", "create", tenant))
    _ok(cli.admin("namespaces", "create", ns))
    n = "namespaces"

    _ok(cli.admin(n, "set-persistence", ns, "-e", "1", "-w", "1", "-a", "1", "-r", "5"))
    assert _json(cli, n, "get-persistence", ns)["managedLedgerMaxMarkDeleteRate"] == 5.0
    _ok(cli.admin(n, "remove-persistence", ns))
    assert _ok(cli.admin(n, "get-persistence", ns)).strip() == ""

    _ok(cli.admin(n, "set-auto-topic-creation", ns, "-e", "-t", "partitioned", "-n", "2"))
    assert _json(cli, n, "get-auto-topic-creation", ns) == {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 2,
    }
    _ok(cli.admin(n, "remove-auto-topic-creation", ns))
    assert _ok(cli.admin(n, "get-auto-topic-creation", ns)).strip() == ""

    _ok(cli.admin(n, "set-max-producers-per-topic", ns, "-p", "4"))
    assert _json(cli, n, "get-max-producers-per-topic", ns) == 4
    _ok(cli.admin(n, "set-max-consumers-per-topic", ns, "-c", "5"))
    assert _json(cli, n, "get-max-consumers-per-topic", ns) == 5
    policies = _json(cli, n, "policies", ns)
    assert policies["max_producers_per_topic"] == 4
    assert policies["max_consumers_per_topic"] == 5
    _ok(cli.admin(n, "remove-max-consumers-per-topic", ns))
    assert _ok(cli.admin(n, "get-max-consumers-per-topic", ns)).strip() == ""

    _ok(cli.admin(n, "delete", ns))
    _ok(cli.admin("tenants", "delete", tenant))
