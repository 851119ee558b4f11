"""``magnetar local-cluster --cluster-name``: two local clusters side by side on one machine
(their own data directories and ports), each under its own name (``standalone`` by
default), as two clusters that
replicate with each other need (tests/replication/test_local_cluster_replication.py)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from .command import FREE_PORTS, LocalClusterCommand

SMALL = ("--brokers", "1", "--bookies", "1", "--ensemble-size", "1", "--write-quorum", "1",
         "--ack-quorum", "1")  # fmt: skip


def _get(admin: str, path: str) -> object:
    with urllib.request.urlopen(admin.split(",")[0] + path, timeout=30) as resp:
        return json.loads(resp.read())


def test_two_local_clusters_run_side_by_side_under_their_names(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    """``west`` named, the other under the default name ``standalone``."""
    commands.append(LocalClusterCommand(tmp_path / "default", *SMALL, *FREE_PORTS))
    commands.append(
        LocalClusterCommand(tmp_path / "west", "--cluster-name", "west", *SMALL, *FREE_PORTS)
    )
    admins = {}
    for name, cmd in zip(("standalone", "west"), commands, strict=True):
        admins[name] = cmd.wait_ready().group(2)
    assert admins["standalone"] != admins["west"]
    for name, admin in admins.items():
        assert _get(admin, "/admin/v2/clusters") == [name]
        assert _get(admin, "/admin/v2/tenants/public")["allowedClusters"] == [name]  # type: ignore[index]
