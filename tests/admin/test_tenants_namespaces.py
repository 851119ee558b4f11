"""Clusters, tenants, namespaces and namespace policies over REST (paths, bodies and
status codes as Pulsar's, reference §8.1)."""

from __future__ import annotations

import pulsar
import pytest

from .conftest import Http


def test_clusters(http: Http, name: str) -> None:
    assert "standalone" in http.ok("GET", "/admin/v2/clusters")  # other tests add clusters
    data = http.ok("GET", "/admin/v2/clusters/standalone")
    assert data["brokerServiceUrl"].startswith("pulsar://")
    assert data["serviceUrl"].startswith("http://")
    assert http.put("/admin/v2/clusters/standalone", {}).status == 409
    assert http.get(f"/admin/v2/clusters/{name}").status == 404
    assert http.post(f"/admin/v2/clusters/{name}", {"serviceUrl": "http://x:1"}).status == 404
    cluster = {"serviceUrl": "http://other:8080", "brokerServiceUrl": "pulsar://other:6650"}
    assert http.put(f"/admin/v2/clusters/{name}", cluster).status == 204
    assert http.put(f"/admin/v2/clusters/{name}", cluster).status == 409
    assert http.ok("GET", f"/admin/v2/clusters/{name}")["serviceUrl"] == "http://other:8080"
    assert http.post(f"/admin/v2/clusters/{name}", {"serviceUrl": "http://o2:1"}).status == 204
    assert http.ok("GET", f"/admin/v2/clusters/{name}")["serviceUrl"] == "http://o2:1"
    assert name in http.ok("GET", "/admin/v2/clusters")
    bad = http.put(f"/admin/v2/clusters/{name}x", raw=b"{not json")
    assert bad.status == 400 and "JSON" in bad.reason


def test_tenant_lifecycle_and_errors(http: Http, name: str) -> None:
    info = {"adminRoles": ["admin"], "allowedClusters": ["standalone"]}
    assert http.get(f"/admin/v2/tenants/{name}").status == 404
    assert http.put(f"/admin/v2/tenants/{name}", info).status == 204
    assert http.put(f"/admin/v2/tenants/{name}", info).status == 409
    assert name in http.ok("GET", "/admin/v2/tenants")
    assert http.ok("GET", f"/admin/v2/tenants/{name}") == info
    updated = {"adminRoles": ["a", "b"], "allowedClusters": ["standalone"]}
    assert http.post(f"/admin/v2/tenants/{name}", updated).status == 204
    assert http.ok("GET", f"/admin/v2/tenants/{name}") == updated
    assert http.post(f"/admin/v2/tenants/{name}-missing", updated).status == 404
    # bad input
    assert http.put("/admin/v2/tenants/bad%20name", info).status == 400
    assert http.put(f"/admin/v2/tenants/{name}b", {"adminRoles": "x"}).status == 400
    assert http.put(f"/admin/v2/tenants/{name}b", raw=b"[1,").status == 400
    unknown = http.put(f"/admin/v2/tenants/{name}c", {"allowedClusters": ["nowhere"]})
    assert unknown.status == 412
    # not empty -> 412; empty -> 204; missing -> 404
    assert http.put(f"/admin/v2/namespaces/{name}/ns").status == 204
    assert http.delete(f"/admin/v2/tenants/{name}").status == 412
    assert http.delete(f"/admin/v2/namespaces/{name}/ns").status == 204
    assert http.delete(f"/admin/v2/tenants/{name}").status == 204
    assert http.delete(f"/admin/v2/tenants/{name}").status == 404
    assert name not in http.ok("GET", "/admin/v2/tenants")


def test_namespace_lifecycle_topics_and_errors(
    http: Http, client: pulsar.Client, name: str
) -> None:
    assert http.get(f"/admin/v2/namespaces/{name}").status == 404  # no such tenant
    assert http.put(f"/admin/v2/namespaces/{name}/ns").status == 404
    http.ok("PUT", f"/admin/v2/tenants/{name}", {"allowedClusters": ["standalone"]})
    assert http.put(f"/admin/v2/namespaces/{name}/ns").status == 204
    assert http.put(f"/admin/v2/namespaces/{name}/ns").status == 409
    assert http.put(f"/admin/v2/namespaces/{name}/b%20d").status == 400
    assert (
        http.put(f"/admin/v2/namespaces/{name}/ns2", {"message_ttl_in_seconds": 30}).status == 204
    )
    assert http.ok("GET", f"/admin/v2/namespaces/{name}") == [f"{name}/ns", f"{name}/ns2"]
    policies = http.ok("GET", f"/admin/v2/namespaces/{name}/ns2")
    assert policies["message_ttl_in_seconds"] == 30
    assert policies["replication_clusters"] == ["standalone"]
    for key in ("auth_policies", "backlog_quota_map", "retention_policies", "bundles"):
        assert key in policies
    assert http.get(f"/admin/v2/namespaces/{name}/missing").status == 404

    topic = f"persistent://{name}/ns/a"
    client.create_producer(topic).close()
    http.ok("PUT", f"/admin/v2/persistent/{name}/ns/p/partitions", 2)
    for mode, expected in (
        (
            "PERSISTENT",
            [
                topic,
                f"persistent://{name}/ns/p-partition-0",
                f"persistent://{name}/ns/p-partition-1",
            ],
        ),
        ("NON_PERSISTENT", []),
        (
            "ALL",
            [
                topic,
                f"persistent://{name}/ns/p-partition-0",
                f"persistent://{name}/ns/p-partition-1",
            ],
        ),
    ):
        got = http.ok("GET", f"/admin/v2/namespaces/{name}/ns/topics?mode={mode}")
        assert sorted(got) == sorted(expected), mode
    assert http.get(f"/admin/v2/namespaces/{name}/ns/topics?mode=BOGUS").status == 400

    not_empty = http.delete(f"/admin/v2/namespaces/{name}/ns")
    assert not_empty.status == 412 and "non empty" in not_empty.reason
    assert http.delete(f"/admin/v2/namespaces/{name}/ns?force=true").status == 204
    assert http.get(f"/admin/v2/namespaces/{name}/ns").status == 404
    assert http.ok("GET", f"/admin/v2/namespaces/{name}") == [f"{name}/ns2"]


POLICIES: list[tuple[str, object, object]] = [
    # endpoint, value to set, value expected back
    ("deduplication", True, True),
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
     {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}),
    ("messageTTL", 120, 120),
    ("persistence",
     {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
      "managedLedgerMaxMarkDeleteRate": 0.0},
     {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
      "managedLedgerMaxMarkDeleteRate": 0.0}),
    ("maxProducersPerTopic", 5, 5),
    ("maxConsumersPerTopic", 6, 6),
    ("maxConsumersPerSubscription", 7, 7),
    ("maxUnackedMessagesPerConsumer", 8, 8),
    ("maxUnackedMessagesPerSubscription", 9, 9),
    ("autoTopicCreation",
     {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
     {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}),
]  # fmt: skip


@pytest.fixture
def namespace(http: Http, name: str) -> str:
    http.ok("PUT", f"/admin/v2/tenants/{name}", {"allowedClusters": ["standalone"]})
    http.ok("PUT", f"/admin/v2/namespaces/{name}/ns")
    return f"{name}/ns"


@pytest.mark.parametrize(("endpoint", "value", "expected"), POLICIES, ids=[p[0] for p in POLICIES])
def test_policy_set_get_remove(
    http: Http, namespace: str, endpoint: str, value: object, expected: object
) -> None:
    path = f"/admin/v2/namespaces/{namespace}/{endpoint}"
    assert http.get(path).status == 204  # unset: Pulsar's null answer
    assert http.post(path, value).status == 204
    assert http.ok("GET", path) == expected
    assert http.delete(path).status == 204
    assert http.get(path).status == 204
    assert http.post(path, raw=b"{oops").status == 400
    assert http.post(f"/admin/v2/namespaces/{namespace}x/{endpoint}", value).status == 404


def test_policy_bad_values(http: Http, namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}"
    assert http.post(f"{base}/messageTTL", -1).status == 412
    assert http.post(f"{base}/messageTTL", "abc").status == 400
    assert http.post(f"{base}/maxProducersPerTopic", -3).status == 412
    assert http.post(f"{base}/deduplication", 5).status == 400
    assert http.post(f"{base}/retention", [1]).status == 400
    bad_quorum = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}
    assert http.post(f"{base}/persistence", bad_quorum).status == 412  # as Pulsar
    assert (
        http.post(
            f"{base}/autoTopicCreation",
            {"allowAutoTopicCreation": True, "topicType": "partitioned"},
        ).status
        == 400
    )
    assert http.post(f"{base}/messageTTL").status == 400  # no body


def test_schema_compatibility_strategy(http: Http, namespace: str) -> None:
    path = f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy"
    assert http.ok("GET", path) == "UNDEFINED"
    assert http.put(path, "FORWARD").status == 204
    assert http.ok("GET", path) == "FORWARD"
    assert (
        http.ok("GET", f"/admin/v2/namespaces/{namespace}")["schema_compatibility_strategy"]
        == "FORWARD"
    )
    assert http.put(path, "SIDEWAYS").status == 400
    assert http.delete(path).status == 204
    assert http.ok("GET", path) == "UNDEFINED"


def test_backlog_quotas(http: Http, namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}"
    assert http.ok("GET", f"{base}/backlogQuotaMap") == {}
    quota = {"limitSize": 1048576, "limitTime": -1, "policy": "producer_exception"}
    assert http.post(f"{base}/backlogQuota", quota).status == 204
    age = {"limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert http.post(f"{base}/backlogQuota?backlogQuotaType=message_age", age).status == 204
    got = http.ok("GET", f"{base}/backlogQuotaMap")
    assert set(got) == {"destination_storage", "message_age"}
    assert got["destination_storage"]["limitSize"] == 1048576
    assert got["destination_storage"]["policy"] == "producer_exception"
    assert got["message_age"]["limitTime"] == 60
    assert http.post(f"{base}/backlogQuota?backlogQuotaType=bogus", quota).status == 400
    assert http.post(f"{base}/backlogQuota", {"policy": "nonsense"}).status == 400
    assert http.delete(f"{base}/backlogQuota?backlogQuotaType=message_age").status == 204
    assert set(http.ok("GET", f"{base}/backlogQuotaMap")) == {"destination_storage"}
    assert http.delete(f"{base}/backlogQuota").status == 204
    assert http.ok("GET", f"{base}/backlogQuotaMap") == {}


def test_a_standalone_does_not_split_bundles(http: Http, namespace: str) -> None:
    split = f"/admin/v2/namespaces/{namespace}/0x00000000_0xffffffff/split"
    refused = http.put(split)
    assert refused.status == 412 and "cluster mode" in refused.reason
    assert http.put(split + "?splitAlgorithmName=nope").status == 412
    assert http.put(f"/admin/v2/namespaces/{namespace}/0x0_zz/split").status == 404
