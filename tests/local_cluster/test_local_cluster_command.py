"""``magnetar local-cluster`` as a user runs it: a real ZooKeeper, bookies, brokers and a
Functions Worker as processes, the official client through the printed service URL, Ctrl+C
stops everything."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pulsar

from magnetar.testing import wait_until

from .command import (
    FREE_PORTS,
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    LocalClusterCommand,
    alive,
)


def test_two_brokers_three_bookies_serve_the_official_client_and_stop_on_ctrl_c(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    data_dir = tmp_path / "cluster"
    cmd = LocalClusterCommand(data_dir, "--brokers", "2", "--bookies", "3", *FREE_PORTS)
    commands.append(cmd)
    ready = cmd.wait_ready()
    service_url = ready.group(1)
    assert service_url.startswith("pulsar://") and service_url.count(",") == 1
    admin_urls = ready.group(2)  # every broker's HTTP address, as webServiceUrl takes them
    assert admin_urls.startswith("http://") and admin_urls.count(",") == 1
    assert set(cmd.child_pids()) == {
        "zookeeper", "bookie-0", "bookie-1", "bookie-2", "broker-0", "broker-1",
        "functions-worker",
    }  # fmt: skip
    worker_url = cmd.functions_worker_url()
    assert worker_url is not None and worker_url.startswith("http://127.0.0.1:")

    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        topic = "persistent://public/default/local-cluster-walkthrough"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(50):
            producer.send(f"m-{i}".encode())
        got = [consumer.receive(timeout_millis=30_000).data().decode() for _ in range(50)]
        assert got == [f"m-{i}" for i in range(50)]
    finally:
        client.close()

    # A broker killed to watch a failover is reported; the rest of the cluster serves on.
    pids = cmd.child_pids()
    os.kill(pids["broker-0"], signal.SIGKILL)
    wait_until(lambda: "broker-0 exited with status -9" in "".join(cmd.err), timeout_s=30,
               what="the report of broker-0's exit")  # fmt: skip
    assert cmd.proc.poll() is None and all(alive(p) for n, p in pids.items() if n != "broker-0")
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic)
        producer.send(b"after-kill")
    finally:
        client.close()
    # The printed admin URL list still works for the CLI with its first broker dead.
    stats = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--url", admin_urls,
         "topics", "stats", topic],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr

    assert cmd.interrupt() == 0
    wait_until(lambda: not any(alive(p) for p in pids.values()), timeout_s=STOP_TIMEOUT_S,
               what="every child process to exit")  # fmt: skip
    assert not any(alive(p) for p in pids.values())

    # Started again over the same directory: the same ports, the same data.
    again = LocalClusterCommand(data_dir, "--brokers", "2", "--bookies", "3", *FREE_PORTS)
    commands.append(again)
    assert again.wait_ready().group(1) == service_url
    assert again.functions_worker_url() == worker_url
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic, "sub-2", initial_position=pulsar.InitialPosition.Earliest
        )
        got = [consumer.receive(timeout_millis=30_000).data().decode() for _ in range(51)]
        assert got == [f"m-{i}" for i in range(50)] + ["after-kill"]
    finally:
        client.close()
    assert again.interrupt() == 0


def test_a_busy_port_is_one_line_and_leaves_no_process_behind(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = LocalClusterCommand(
            tmp_path / "cluster", "--bookies", "1", "--ensemble-size", "1", "--write-quorum", "1",
            "--ack-quorum", "1", *FREE_PORTS[:6], "--bookie-port", str(port),
        )  # fmt: skip
        commands.append(cmd)
        assert cmd.proc.wait(READY_TIMEOUT_S) == 1
    err = "".join(cmd.err)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "bookie-0" in lines[0], err
    zk_dir = tmp_path / "cluster" / "zookeeper"
    # ZooKeeper was started first and must be gone with the rest.
    out = subprocess.run(["pgrep", "-f", str(zk_dir)], capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_settings_that_cannot_work_are_a_usage_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--data-dir",
         str(tmp_path / "c"), "--bookies", "1", "--ensemble-size", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "ensemble size 2 needs at least that many bookies" in out.stderr
    assert "Traceback" not in out.stderr
