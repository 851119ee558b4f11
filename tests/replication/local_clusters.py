"""Helpers for replication tests over ``magnetar local-cluster``\\ s (ZooKeeper, brokers and
bookies as processes, :class:`magnetar.local_cluster.LocalCluster`): start one under a
cluster name on free ports, register clusters with each other, find a topic's owner."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing.wait import wait_until

from .conftest import call, ok

SESSION_TIMEOUT_S = 4.0
"""A SIGKILLed broker's bundles move after about this long."""


def local_cluster(data_dir: Path, name: str, *, brokers: int = 2, bookies: int = 3) -> LocalCluster:
    """A started local cluster named ``name`` on free ports (the caller stops it)."""
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=data_dir, cluster_name=name, brokers=brokers, bookies=bookies,
            zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=SESSION_TIMEOUT_S,
        )
    )  # fmt: skip
    cluster.start()
    return cluster


def admin_url(cluster: LocalCluster) -> str:
    """The HTTP URL of a running broker of ``cluster``."""
    for index, broker in enumerate(cluster.brokers):
        if broker.is_running():
            return cluster.broker_admin_url(index)
    raise AssertionError("no broker of the cluster is running")


def register(admin: str, name: str, service_url: str, web_service_url: str) -> None:
    """Register cluster ``name`` in the metadata store behind ``admin`` (or update it)."""
    body = {"serviceUrl": web_service_url, "brokerServiceUrl": service_url}
    if call(admin, "PUT", f"/admin/v2/clusters/{name}", body).status == 409:
        ok(admin, "POST", f"/admin/v2/clusters/{name}", body)


def replicated_namespace(admins: dict[str, str]) -> str:
    """A new tenant/namespace in every cluster of ``admins`` (name -> admin URL), with
    deduplication on, replicated to all of them."""
    ns = f"t{uuid.uuid4().hex[:8]}/geo"
    tenant = ns.split("/")[0]
    for admin in admins.values():
        ok(admin, "PUT", f"/admin/v2/tenants/{tenant}", {
            "adminRoles": [], "allowedClusters": sorted(admins)
        })  # fmt: skip
        ok(admin, "PUT", f"/admin/v2/namespaces/{ns}")
        ok(admin, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
        ok(admin, "POST", f"/admin/v2/namespaces/{ns}/replication", sorted(admins))
    return ns


def unload_namespace(cluster: LocalCluster, ns: str) -> None:
    """Unload every bundle of ``ns`` (the controller moves them): sent to each running
    broker in turn, since the others redirect to the controller (307, which urllib does not
    follow for a PUT)."""
    answers = []
    for index, broker in enumerate(cluster.brokers):
        if broker.is_running():
            answer = call(
                cluster.broker_admin_url(index), "PUT", f"/admin/v2/namespaces/{ns}/unload"
            )
            if 200 <= answer.status < 300:
                return
            answers.append((answer.status, answer.body))
    raise AssertionError(f"no broker unloaded {ns}: {answers}")


def unload_namespace_to(cluster: LocalCluster, ns: str, topic: str, to: int, fallback: int) -> None:
    """Unload every bundle of ``ns`` so that broker ``to`` takes ``topic``'s: a namespace
    isolation policy names it primary (``fallback`` secondary, so a dead ``to`` does not
    leave the bundles unowned) until ``to`` owns the topic, then is removed (a policy rules
    assignments only: removing it moves nothing)."""
    path = f"/admin/v2/clusters/{cluster.config.cluster_name}/namespaceIsolationPolicies/pin"

    def broker_id(index: int) -> str:
        return re.escape(cluster.broker_admin_url(index).split("://", 1)[1])

    ok(admin_url(cluster), "POST", path, {
        "namespaces": [re.escape(ns)],
        "primary": [broker_id(to)],
        "secondary": [broker_id(fallback)],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "80"},
        },
    })  # fmt: skip
    try:
        unload_namespace(cluster, ns)
        wait_until(
            lambda: owner_index(cluster, topic) == to,
            timeout_s=30,
            what=f"broker {to} owns {topic}",
        )
    finally:
        ok(admin_url(cluster), "DELETE", path)


def owner_index(cluster: LocalCluster, topic: str) -> int:
    """The index of the broker of ``cluster`` that owns ``topic`` (looked up; the lookup
    assigns the bundle when nobody owns it)."""
    path = "/lookup/v2/topic/" + topic.replace("://", "/")
    answer: dict[str, Any] = ok(admin_url(cluster), "GET", path)
    for index, broker in enumerate(cluster.brokers):
        if broker.is_running() and cluster.broker_service_url(index) == answer["brokerUrl"]:
            return index
    raise AssertionError(f"owner {answer['brokerUrl']} is not a running broker")


def replication_stats(admin: str, topic: str, remote: str) -> dict[str, Any]:
    """``replication[remote]`` of ``topic``'s stats behind ``admin`` ({} when absent)."""
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    answer = call(admin, "GET", path)
    if answer.status != 200:
        return {}
    stats: dict[str, Any] = answer.json().get("replication", {}).get(remote, {})
    return stats
