"""Three standalones in a full mesh (Pulsar's recipe: every cluster registers every other):
1,000 messages produced in each cluster to one replicated topic; each cluster's consumer
receives all 3,000, each once, in per-producer order (the loop guard: nothing is relayed)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneProcess

from .conftest import Pair, ok, register

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
MESSAGES = 1000


@pytest.fixture
def north(tmp_path: Path) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path / "north", "--cluster-name", "north", "--no-functions-worker"
    ) as node:
        yield node


def test_three_clusters_in_a_full_mesh(pair: Pair, north: StandaloneProcess) -> None:
    nodes = {"east": pair.east, "west": pair.west, "north": north}
    for name, node in nodes.items():
        for other_name, other in nodes.items():
            if other_name != name:
                register(node, other_name, other)
    ns = f"t{uuid.uuid4().hex[:8]}/mesh"
    tenant = ns.split("/")[0]
    for node in nodes.values():
        ok(node.http_url, "PUT", f"/admin/v2/tenants/{tenant}", {
            "adminRoles": [], "allowedClusters": sorted(nodes)
        })  # fmt: skip
        ok(node.http_url, "PUT", f"/admin/v2/namespaces/{ns}")
        ok(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
        ok(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/replication", sorted(nodes))
    topic = f"persistent://{ns}/mesh"
    clients = {name: pulsar.Client(n.url, operation_timeout_seconds=15, logger=_log)
               for name, n in nodes.items()}  # fmt: skip
    try:
        consumers = {
            name: c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            for name, c in clients.items()
        }
        for name, client in clients.items():
            producer = client.create_producer(topic, producer_name=f"p-{name}")
            for i in range(MESSAGES):
                producer.send_async(f"{name}-{i}".encode(), None)
            producer.flush()
        for name, consumer in consumers.items():
            got: dict[str, list[int]] = {origin: [] for origin in nodes}
            for _ in range(MESSAGES * len(nodes)):
                msg = consumer.receive(timeout_millis=30_000)
                consumer.acknowledge(msg)
                origin, index = msg.data().decode().rsplit("-", 1)
                got[origin].append(int(index))
            for origin, indexes in got.items():
                assert indexes == list(range(MESSAGES)), (name, origin)
            with pytest.raises(pulsar.Timeout):
                consumer.receive(timeout_millis=1500)
    finally:
        for client in clients.values():
            client.close()
