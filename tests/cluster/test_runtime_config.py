"""``admin brokers get-runtime-config`` (``GET /admin/v2/brokers/configuration/runtime``)
on a real ``magnetar broker`` process: the broker's effective settings under Pulsar's
``broker.conf`` keys, values as strings, the ports it bound, and no secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig

pytestmark = pytest.mark.timeout(120)


def test_get_runtime_config_answers_the_effective_settings(tmp_path: Path) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=1, bookies=1, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, ensemble_size=1, write_quorum=1, ack_quorum=1,
            session_timeout_s=3.0,
        )
    )  # fmt: skip
    try:
        cluster.start()
        admin_url = cluster.admin_url
        done = subprocess.run(
            [
                sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", admin_url,
                "--output", "json", "brokers", "get-runtime-config",
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        config = json.loads(done.stdout)
        assert all(isinstance(v, str) for v in config.values())
        service_port = cluster.broker_service_url(0).rsplit(":", 1)[1]
        http_port = admin_url.rsplit(":", 1)[1]
        assert config["brokerServicePort"] == service_port  # bound, not the configured 0
        assert config["webServicePort"] == http_port
        assert config["brokerId"] == f"127.0.0.1:{http_port}"
        assert config["metadataStoreUrl"] == cluster.metadata_url
        assert config["metadataStoreSessionTimeoutMillis"] == "3000"
        assert config["managedLedgerDefaultEnsembleSize"] == "1"
        assert config["managedLedgerDefaultAckQuorum"] == "1"
        assert config["clusterName"] == "standalone"
        assert config["brokerDeduplicationEnabled"] == "false"
        assert config["maxMessageSize"] == str(5 * 1024 * 1024)
        assert config["keepAliveIntervalSeconds"] == "30"
        assert config["allowAutoTopicCreationType"] == "non-partitioned"
        assert config["authenticationEnabled"] == "false"
        assert config["lookupOwnerWaitMs"] == "10000"  # Magnetar's own, camel case
        assert not any("secret" in k.lower() or "Key" in k[-3:] for k in config), config
    finally:
        cluster.stop()
