"""A local cluster's Functions Worker behind its brokers: a broker answers the worker's REST
paths by forwarding them; with the worker down it answers 503 naming the worker, and the
worker started again (on its port, from ``ports.json``) is served again; a path under
``/admin/v3`` of no worker kind is not forwarded, nor a body over the size limit (413)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.admin.function_worker_forward import BODY_BYTES_MAX
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until

WORKER_TIMEOUT_S = 60.0


def _get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=1, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            functions_worker=True, functions_worker_port=0, functions_runtime="thread",
        )
    )  # fmt: skip
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_broker_forwards_the_worker_paths_and_names_a_worker_that_is_down(
    cluster: LocalCluster,
) -> None:
    cluster.wait_functions_worker(WORKER_TIMEOUT_S)
    worker = cluster.functions_worker
    assert worker is not None and cluster.functions_worker_url is not None
    leader = f"{cluster.admin_url}/admin/v2/worker/cluster/leader"
    status, body = _get(leader)
    assert (
        status == 200
        and body == _get(cluster.functions_worker_url + "/admin/v2/worker/cluster/leader")[1]
    )
    assert _get(f"{cluster.admin_url}/admin/v3/functions/public/default") == (200, [])
    assert _get(f"{cluster.admin_url}/admin/v3/nothing/public/default")[0] == 404
    too_large = urllib.request.Request(
        f"{cluster.admin_url}/admin/v3/functions/public/default/too-large",
        data=b"x" * (BODY_BYTES_MAX + 1), method="POST",
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(too_large, timeout=30)
    assert refused.value.code == 413 and b"larger than" in refused.value.read()

    worker.kill()
    status, body = _get(leader)
    assert status == 503 and cluster.functions_worker_url in str(body), body

    worker.start(WORKER_TIMEOUT_S)  # the same port: the brokers' forwarding finds it again
    wait_until(lambda: _get(leader)[0] == 200, WORKER_TIMEOUT_S, 0.2, "the worker served again")
