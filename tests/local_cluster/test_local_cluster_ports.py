"""The local cluster's port choice: every process gets a port of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar import local_cluster
from magnetar.local_cluster import LocalCluster, LocalClusterConfig


def test_free_ports_named_twice_are_not_given_to_two_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``free_port`` closes its probe socket, so it can name the same port again: seen in
    the suite as a broker's HTTP server failing on ZooKeeper's port ("address already in
    use") at start-up."""
    named: Iterator[int] = iter(
        [40311, 40311, 40312, 40311, 40313, 40314, 40312, 40315, 40316, 40317]
    )
    monkeypatch.setattr(local_cluster, "free_port", lambda: next(named))
    config = LocalClusterConfig(
        data_dir=tmp_path, brokers=2, bookies=2, zookeeper_port=0, broker_port=0, http_port=0,
        bookie_port=0,
    )  # fmt: skip
    ports = LocalCluster(config)._ports()
    every = [port for key in ("zookeeper", "bookies", "brokers", "http") for port in ports[key]]
    assert len(every) == 7 and len(set(every)) == 7
    assert ports["zookeeper"] == [40311]
