"""No orphans: ZooKeeper, the bookies and the brokers of ``magnetar local-cluster`` end when
the command is SIGKILLed; a second cluster over a data directory in use is refused in one
line; a broker or bookie whose ZooKeeper is unreachable stops within seconds on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until

from .command import FREE_PORTS, LocalClusterCommand, alive

pytestmark = pytest.mark.timeout(300)

SMALL = ("--brokers", "2", "--bookies", "1", "--ensemble-size", "1", "--write-quorum", "1",
         "--ack-quorum", "1")  # fmt: skip
GONE_TIMEOUT_S = 30.0
"""A child whose parent died stops cleanly, or exits hard after the lifeline's 10 s grace."""
SIGTERM_STOP_S = 5.0
"""How soon a broker or bookie must exit on SIGTERM when ZooKeeper is unreachable."""


def _pgrep(pattern: str) -> set[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return {int(pid) for pid in out.split()}


def test_a_killed_local_cluster_takes_its_processes_with_it_and_its_directory_stays_locked(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    data_dir = tmp_path / "cluster"
    first = LocalClusterCommand(data_dir, *SMALL, *FREE_PORTS)
    commands.append(first)
    first.wait_ready()
    pids = first.child_pids()
    assert set(pids) == {"zookeeper", "bookie-0", "broker-0", "broker-1", "functions-worker"}
    java = _pgrep(str(data_dir.resolve() / "zookeeper" / "conf"))
    assert java - {pids["zookeeper"]}, "ZooKeeper's java process"

    # A rerun over the same directory is refused in one line while the first one runs.
    again = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--data-dir",
         str(data_dir), *SMALL, *FREE_PORTS],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 1
    assert "Traceback" not in again.stderr
    assert again.stderr.strip().count("\n") == 0, again.stderr
    assert "is in use by another local-cluster" in again.stderr
    assert f"pid {first.proc.pid}" in again.stderr
    assert all(alive(pid) for pid in pids.values()), "the refused rerun touched nothing"

    first.kill()  # SIGKILL: no chance to stop its children
    every = set(pids.values()) | java
    wait_until(
        lambda: not any(alive(pid) for pid in every), timeout_s=GONE_TIMEOUT_S,
        what="every process of the killed local-cluster to end",
    )  # fmt: skip

    # Once they are all gone, the directory is free again and the cluster comes back.
    third = LocalClusterCommand(data_dir, *SMALL, *FREE_PORTS)
    commands.append(third)
    third.wait_ready()
    assert third.interrupt() == 0


def test_sigterm_stops_a_broker_still_connecting_to_zookeeper(tmp_path: Path) -> None:
    """A 'ZooKeeper' that accepts connections and never answers: the broker's start-up is
    waiting on it (session timeout 60 s) when it gets SIGTERM."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(60)
        port = silent.getsockname()[1]
        with open(tmp_path / "broker.log", "wb") as log:
            broker = subprocess.Popen(
                [sys.executable, "-m", "magnetar.cli.main", "broker", "--metadata-url",
                 f"zk://127.0.0.1:{port}/c", "--port", "0", "--http-port", "0",
                 "--session-timeout-s", "60"],
                stdout=log, stderr=log,
            )  # fmt: skip
        try:
            conn, _ = silent.accept()  # the broker is connecting
            with conn:
                started = time.monotonic()
                broker.send_signal(signal.SIGTERM)
                assert broker.wait(SIGTERM_STOP_S) == 0
                assert time.monotonic() - started < SIGTERM_STOP_S
        finally:
            if broker.poll() is None:
                broker.kill()
                broker.wait()


def test_sigterm_stops_a_broker_and_a_bookie_whose_zookeeper_is_gone(tmp_path: Path) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=1, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=30.0, log_level="INFO",
        )
    )  # fmt: skip
    try:
        cluster.start()
        assert cluster.zookeeper is not None
        cluster.zookeeper.stop()  # the broker and the bookie retry it from now on
        for process in (*cluster.brokers, *cluster.bookies):
            assert process.proc is not None
            started = time.monotonic()
            process.signal(signal.SIGTERM)
            assert process.proc.wait(SIGTERM_STOP_S) == 0, process.name
            assert time.monotonic() - started < SIGTERM_STOP_S, process.name
    finally:
        cluster.stop()
