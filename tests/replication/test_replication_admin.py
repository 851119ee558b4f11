"""Clusters and replication policies through REST and ``magnetar admin``, against real
standalones (each cluster keeps its own registry in its own metadata store)."""

from __future__ import annotations

import json
import uuid

import pulsar

from .conftest import Pair, admin, call, ok


def test_clusters_create_get_update_delete_with_the_cli(pair: Pair) -> None:
    east = pair.east
    name = f"c{uuid.uuid4().hex[:8]}"
    created = admin(
        east, "clusters", "create", name,
        "--url", "http://other:8080", "--broker-url", "pulsar://other:6650",
        "--url-secure", "https://other:8443", "--broker-url-secure", "pulsar+ssl://other:6651",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    got = json.loads(admin(east, "clusters", "get", name, "--output", "json").stdout)
    assert got["serviceUrl"] == "http://other:8080"
    assert got["serviceUrlTls"] == "https://other:8443"
    assert got["brokerServiceUrl"] == "pulsar://other:6650"
    assert got["brokerServiceUrlTls"] == "pulsar+ssl://other:6651"
    assert got["peerClusterNames"] == []
    assert name in json.loads(admin(east, "clusters", "list", "--output", "json").stdout)

    again = admin(east, "clusters", "create", name, "--url", "http://x:1")
    assert again.returncode != 0 and "Traceback" not in again.stderr

    peers = admin(east, "clusters", "update-peer-clusters", name, "--peer-clusters", "west")
    assert peers.returncode == 0, peers.stderr
    updated = admin(east, "clusters", "update", name, "--broker-url", "pulsar://moved:6650")
    assert updated.returncode == 0, updated.stderr
    got = ok(east.http_url, "GET", f"/admin/v2/clusters/{name}")
    assert got["brokerServiceUrl"] == "pulsar://moved:6650"
    assert got["serviceUrl"] == "http://other:8080"  # kept
    assert got["peerClusterNames"] == ["west"]  # kept
    assert ok(east.http_url, "GET", f"/admin/v2/clusters/{name}/peers") == ["west"]

    deleted = admin(east, "clusters", "delete", name)
    assert deleted.returncode == 0, deleted.stderr
    assert call(east.http_url, "GET", f"/admin/v2/clusters/{name}").status == 404
    assert call(east.http_url, "DELETE", "/admin/v2/clusters/east").status == 412
    # the other cluster's registry is its own
    assert call(pair.west.http_url, "GET", "/admin/v2/clusters/west").status == 200
    assert "east" in ok(pair.west.http_url, "GET", "/admin/v2/clusters")


def test_namespace_clusters_checked_against_registry_and_tenant(pair: Pair) -> None:
    east = pair.east.http_url
    tenant = f"t{uuid.uuid4().hex[:8]}"
    ok(east, "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["east"]})
    ok(east, "PUT", f"/admin/v2/namespaces/{tenant}/ns")
    path = f"/admin/v2/namespaces/{tenant}/ns/replication"
    assert ok(east, "GET", path) == ["east"]

    refused = call(east, "POST", path, ["east", "west"])  # west not allowed for the tenant
    assert refused.status == 403, refused.body
    assert "allowed clusters" in refused.json()["reason"]
    unknown = call(east, "POST", path, ["east", "nowhere"])
    assert unknown.status == 403 and "Invalid cluster id" in unknown.json()["reason"]
    assert call(east, "POST", path, "east").status == 400

    ok(east, "POST", f"/admin/v2/tenants/{tenant}", {
        "adminRoles": [], "allowedClusters": ["east", "west"]
    })  # fmt: skip
    cli = admin(pair.east, "namespaces", "set-clusters", f"{tenant}/ns", "--clusters", "west,east")
    assert cli.returncode == 0, cli.stderr
    shown = admin(pair.east, "namespaces", "get-clusters", f"{tenant}/ns", "--output", "json")
    assert json.loads(shown.stdout) == ["east", "west"]
    bad = admin(pair.east, "namespaces", "set-clusters", f"{tenant}/ns", "--clusters", "nowhere")
    assert bad.returncode != 0 and "Invalid cluster id" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_topic_replication_clusters(pair: Pair) -> None:
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/policy-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(pair.east.url, operation_timeout_seconds=15)
    try:
        client.create_producer(topic).close()  # the topic exists
    finally:
        client.close()
    assert admin(pair.east, "topics", "get-replication-clusters", topic).stdout.strip() == ""
    applied = admin(
        pair.east, "topics", "get-replication-clusters", topic, "--applied", "--output", "json"
    )
    assert json.loads(applied.stdout) == ["east", "west"]
    done = admin(pair.east, "topics", "set-replication-clusters", topic, "--clusters", "east")
    assert done.returncode == 0, done.stderr
    own = admin(pair.east, "topics", "get-replication-clusters", topic, "--output", "json")
    assert json.loads(own.stdout) == ["east"]
    rest_path = topic.replace("persistent://", "/admin/v2/persistent/") + "/replication"
    assert ok(pair.east.http_url, "GET", rest_path) == ["east"]
    removed = admin(pair.east, "topics", "remove-replication-clusters", topic)
    assert removed.returncode == 0, removed.stderr
    assert call(pair.east.http_url, "GET", rest_path).status == 204
