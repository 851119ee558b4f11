"""``magnetar admin`` as a subprocess against a real standalone's admin REST API."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from typing import Any

from .conftest import Cli


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _json(cli: Cli, *args: str) -> Any:
    return json.loads(_ok(cli.admin("--output", "json", *args)))


def test_tenant_and_namespace_lifecycle_and_policies(cli: Cli) -> None:
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    ns = f"{tenant}/orders"
    assert _ok(cli.admin("tenants", "create", tenant)).strip() == f"Tenant {tenant} created"
    assert tenant in _ok(cli.admin("tenants", "list")).splitlines()
    assert _json(cli, "tenants", "get", tenant)["allowedClusters"] == _json(cli, "clusters", "list")
    assert _json(cli, "namespaces", "create", ns)["ok"] is True
    assert _json(cli, "namespaces", "list", tenant) == [ns]

    _ok(cli.admin("namespaces", "set-retention", ns, "--size", "100M", "--time", "3h"))
    assert _json(cli, "namespaces", "get-retention", ns) == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 100,
    }
    _ok(cli.admin("namespaces", "set-message-ttl", ns, "-ttl", "1h"))
    assert _json(cli, "namespaces", "get-message-ttl", ns) == 3600
    _ok(cli.admin("namespaces", "set-deduplication", ns, "--enable"))
    assert _ok(cli.admin("namespaces", "get-deduplication", ns)).strip() == "true"
    _ok(cli.admin("namespaces", "set-backlog-quota", ns, "-l", "1G", "-p", "producer_exception"))
    quota = _json(cli, "namespaces", "get-backlog-quotas", ns)["destination_storage"]
    assert quota["limitSize"] == 1 << 30 and quota["policy"] == "producer_exception"
    policies = json.loads(_ok(cli.admin("namespaces", "policies", ns)))  # text: indented JSON
    assert policies["message_ttl_in_seconds"] == 3600
    assert policies["deduplicationEnabled"] is True

    # deleting a non-empty tenant fails with the server's reason, exit 1
    busy = cli.admin("tenants", "delete", tenant)
    assert busy.returncode == 1 and busy.stderr.startswith("Error: ") and "HTTP 4" in busy.stderr
    _ok(cli.admin("namespaces", "delete", ns))
    _ok(cli.admin("tenants", "delete", tenant))
    gone = cli.admin("tenants", "get", tenant)
    assert gone.returncode == 1 and "(HTTP 404)" in gone.stderr
    again = cli.admin("tenants", "create", "public")
    assert again.returncode == 1 and "(HTTP 409)" in again.stderr


def test_topics_partitions_subscriptions_and_peek(cli: Cli, topic: str) -> None:
    _ok(cli.admin("topics", "create-partitioned-topic", f"{topic}-p", "-p", "3"))
    assert _json(cli, "topics", "get-partitioned-topic-metadata", f"{topic}-p") == {"partitions": 3}
    _ok(cli.admin("topics", "update-partitioned-topic", f"{topic}-p", "-p", "4"))
    assert _json(cli, "topics", "get-partitioned-topic-metadata", f"{topic}-p") == {"partitions": 4}
    stats = _json(cli, "topics", "partitioned-stats", f"{topic}-p", "--per-partition")
    assert stats["metadata"]["partitions"] == 4
    full = f"persistent://public/default/{topic}-p"
    assert full in _json(cli, "topics", "list-partitioned-topics", "public/default")

    _ok(cli.admin("topics", "create", topic))
    _ok(cli.admin("topics", "create-subscription", topic, "-s", "audit", "-m", "earliest"))
    assert _json(cli, "topics", "subscriptions", topic) == ["audit"]
    _ok(cli.client("produce", topic, "-m", "m0,m1", "-k", "K", "-p", "a=b"))  # one batch
    _ok(cli.client("produce", topic, "-m", "m2", "--disable-batching"))

    peeked = _json(cli, "topics", "peek-messages", topic, "-s", "audit", "-n", "3")
    assert [p["payload"] for p in peeked] == ["m0", "m1", "m2"]
    assert peeked[0]["key"] == "K" and peeked[0]["properties"] == {"a": "b"}
    text = _ok(cli.admin("topics", "peek-messages", topic, "-s", "audit", "-n", "10"))
    assert text.count("Message ID: ") == 3 and "Properties: a=b" in text

    sub = _json(cli, "topics", "stats", topic)["subscriptions"]["audit"]
    assert sub["msgBacklog"] == 3
    _ok(cli.admin("topics", "clear-backlog", topic, "-s", "audit"))
    assert _json(cli, "topics", "stats", topic)["subscriptions"]["audit"]["msgBacklog"] == 0
    _ok(cli.admin("topics", "reset-cursor", topic, "-s", "audit", "-m", "earliest"))
    assert _json(cli, "topics", "stats", topic)["subscriptions"]["audit"]["msgBacklog"] == 3

    internal = _json(cli, "topics", "stats-internal", topic)
    assert "audit" in internal["cursors"] and internal["numberOfEntries"] == 2
    last = _json(cli, "topics", "last-message-id", topic)
    assert last["entryId"] == internal["numberOfEntries"] - 1

    _ok(cli.admin("topics", "unsubscribe", topic, "-s", "audit"))
    assert _json(cli, "topics", "subscriptions", topic) == []
    terminated = _json(cli, "topics", "terminate", topic)
    assert terminated["lastMessageId"]["entryId"] == last["entryId"]
    _ok(cli.admin("topics", "delete", topic))
    assert f"persistent://public/default/{topic}" not in _json(
        cli, "topics", "list", "public/default"
    )


def test_compaction_via_cli(cli: Cli, topic: str) -> None:
    _ok(cli.client("produce", topic, "-m", "v1,v2", "-k", "same"))
    _ok(cli.admin("topics", "compact", topic))
    status = _json(cli, "topics", "compaction-status", topic, "--wait-complete", "--timeout", "60")
    assert status["status"] == "SUCCESS"


def test_stats_of_unknown_topic_fails_with_the_reason(cli: Cli, topic: str) -> None:
    result = cli.admin("topics", "stats", topic)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"Error: Topic persistent://public/default/{topic} not found (HTTP 404)"
    )


def test_unreachable_admin_url_is_one_clear_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", f"http://127.0.0.1:{port}", "tenants", "list"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: cannot reach the admin service at http://127.0.0.1:{port}: Connection refused"
    ]


def test_admin_url_from_environment_and_healthcheck(cli: Cli) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "brokers", "healthcheck"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "MAGNETAR_ADMIN_URL": cli.node.http_url},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert _json(cli, "brokers", "healthcheck")["healthy"] is True


def test_bad_arguments_exit_2(cli: Cli) -> None:
    bad_name = cli.admin("topics", "stats", "a/b/c/d")
    assert bad_name.returncode == 2 and "Invalid short topic name 'a/b/c/d'" in bad_name.stderr
    bad_size = cli.admin(
        "namespaces", "set-retention", "public/default", "--size", "lots", "--time", "1h"
    )
    assert bad_size.returncode == 2 and "invalid size 'lots'" in bad_size.stderr
    bad_ns = cli.admin("namespaces", "policies", "justone")
    assert bad_ns.returncode == 2 and "expected the form <tenant>/<namespace>" in bad_ns.stderr
    missing = cli.admin("topics", "create-partitioned-topic", "x")
    assert missing.returncode == 2 and "Missing option '--partitions'" in missing.stderr
    unknown = cli.admin("topics", "frobnicate")
    assert unknown.returncode == 2 and "No such command 'frobnicate'" in unknown.stderr


def test_bookies_list_and_rack_placement(cli: Cli) -> None:
    """Pulsar's ``/admin/v2/bookies/all`` and ``racks-info`` shapes: the standalone's one
    bookie, no rack placement configured, an unknown bookie's rack is one clear line."""
    listed = _json(cli, "bookies", "list-bookies")
    assert len(listed["bookies"]) == 1
    (bookie,) = listed["bookies"]
    assert bookie["bookieId"].startswith("127.0.0.1:")
    assert _json(cli, "bookies", "racks-placement") == {}
    missing = cli.admin("bookies", "get-bookie-rack", "--bookie", bookie["bookieId"])
    assert missing.returncode != 0
    assert "Bookie rack placement configuration not found" in missing.stderr
    assert "Traceback" not in missing.stderr
