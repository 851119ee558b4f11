"""Prometheus ``/metrics`` (parsed with prometheus_client's parser; rates move while the
official client produces), the OpenAPI document, the lookup REST used by the official
client with an ``http://`` service URL, and robustness against bad requests."""

from __future__ import annotations

import logging
import socket

import pulsar
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import Http

_client_log = logging.getLogger("pulsar-client")


def _scrape(http: Http) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    answer = http.get("/metrics")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _topic_value(
    metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], metric: str, topic: str
) -> float:
    for labels, value in metrics.get(metric, {}).items():
        if ("topic", topic) in labels and not any(k == "subscription" for k, _ in labels):
            return value
    raise AssertionError(f"{metric} has no sample for {topic}")


def test_metrics_move_while_producing(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    consumer = client.subscribe(full, "sub")
    producer = client.create_producer(full, batching_enabled=False)
    payload = b"x" * 100

    def produced_and_seen() -> bool:
        for _ in range(20):
            producer.send(payload)
        metrics = _scrape(http)
        return (
            _topic_value(metrics, "pulsar_rate_in", full) > 0
            and _topic_value(metrics, "pulsar_rate_out", full) > 0
        )

    wait_until(produced_and_seen, timeout_s=20)
    metrics = _scrape(http)
    assert _topic_value(metrics, "pulsar_throughput_in", full) > 0
    assert _topic_value(metrics, "pulsar_in_messages_total", full) >= 20
    assert _topic_value(metrics, "pulsar_producers_count", full) == 1
    assert _topic_value(metrics, "pulsar_consumers_count", full) == 1
    assert _topic_value(metrics, "pulsar_storage_size", full) > 0
    assert _topic_value(metrics, "pulsar_msg_backlog", full) > 0  # nothing acknowledged yet
    assert _topic_value(metrics, "pulsar_storage_write_latency_count", full) >= 20
    sub_backlog = [
        v
        for labels, v in metrics["pulsar_subscription_back_log"].items()
        if ("topic", full) in labels and ("subscription", "sub") in labels
    ]
    assert sub_backlog and sub_backlog[0] > 0
    assert metrics["magnetar_publish_latency_ms_count"][()] >= 20
    assert metrics["magnetar_publish_latency_ms_bucket"][(("le", "+Inf"),)] >= 20
    assert metrics["pulsar_active_connections"][()] >= 1
    # Pulsar's broker-level families: sums over this broker's topics, labelled by cluster
    broker = {
        k: next(iter(v.items())) for k, v in metrics.items() if k.startswith("pulsar_broker_")
    }
    assert all(labels == (("cluster", "standalone"),) for labels, _ in broker.values()), broker
    assert broker["pulsar_broker_topics_count"][1] >= 1
    assert broker["pulsar_broker_producers_count"][1] >= 1
    assert broker["pulsar_broker_consumers_count"][1] >= 1
    assert broker["pulsar_broker_rate_in"][1] > 0
    assert broker["pulsar_broker_msg_backlog"][1] >= _topic_value(
        metrics, "pulsar_msg_backlog", full
    )
    assert broker["pulsar_broker_storage_size"][1] >= _topic_value(
        metrics, "pulsar_storage_size", full
    )
    assert metrics["bookie_journal_sync_latency_seconds_count"][()] > 0
    assert "process_resident_memory_bytes" in metrics
    # acknowledging everything drains the backlog gauge
    while True:
        try:
            consumer.acknowledge(consumer.receive(200))
        except pulsar.Timeout:
            break
    wait_until(lambda: _topic_value(_scrape(http), "pulsar_msg_backlog", full) == 0, timeout_s=15)
    producer.close()
    consumer.close()


def test_openapi_document(http: Http) -> None:
    doc = http.ok("GET", "/openapi.json")
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path in (
        "/admin/v2/tenants/{tenant}",
        "/admin/v2/namespaces/{tenant}/{namespace}/retention",
        "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats",
        "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/position/{n}",
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
        "/metrics",
    ):
        assert path in paths, path
    # one operation id per operation (a shared one made FastAPI warn on every fetch)
    ids = [op["operationId"] for methods in paths.values() for op in methods.values()]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    strategy = paths["/admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy"]
    assert {"put", "post"} <= set(strategy)
    # no page that loads its assets from a CDN (blank offline): the document is the API's docs
    assert http.get("/docs").status == 404


def test_http_service_url_lookup_with_official_client(
    standalone: StandaloneProcess, http: Http, name: str
) -> None:
    lookup = http.ok("GET", f"/lookup/v2/topic/persistent/public/default/{name}")
    assert lookup["brokerUrl"] == standalone.url and lookup["brokerUrlTls"] == standalone.url
    assert http.get("/lookup/v2/topic/persistent/bad%20t/default/x").status == 400
    client = pulsar.Client(standalone.http_url, operation_timeout_seconds=15, logger=_client_log)
    try:
        full = f"persistent://public/default/{name}"
        http.ok("PUT", f"/admin/v2/persistent/public/default/{name}-parts/partitions", 3)
        assert len(client.get_topic_partitions(f"{full}-parts")) == 3
        consumer = client.subscribe(full, "s")
        producer = client.create_producer(full)
        producer.send(b"over http lookup")
        assert consumer.receive(10_000).data() == b"over http lookup"
    finally:
        client.close()


def test_bad_requests_keep_the_process_running(standalone: StandaloneProcess, http: Http) -> None:
    cases = [
        ("PUT", "/admin/v2/tenants/x%00y", b"{}"),
        ("PUT", "/admin/v2/persistent/public/default/t/partitions", b"\xff\xfe"),
        ("POST", "/admin/v2/namespaces/public/default/messageTTL", b"[[[["),
        ("GET", "/admin/v2/persistent/public/default/t/messageid/9999999999999999999999", None),
        ("DELETE", "/admin/v2/clusters/standalone", None),
        ("PATCH", "/admin/v2/tenants", None),
    ]
    for method, path, raw in cases:
        answer = http.call(method, path, raw=raw)
        assert 400 <= answer.status < 500, (method, path, answer.status, answer.body)
        assert isinstance(answer.json()["reason"], str)
    # raw garbage on the socket
    with socket.create_connection(("127.0.0.1", standalone.http_port), timeout=10) as sock:
        sock.sendall(b"\x00\x01 NOT HTTP\r\n\r\n")
        sock.recv(1024)
    assert http.get("/admin/v2/brokers/health").status == 200
    assert standalone.proc is not None and standalone.proc.poll() is None
