"""``magnetar local-cluster`` as a user runs it: a real ZooKeeper, bookies and brokers as
processes, the official client through the printed service URL, Ctrl+C stops everything."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import wait_until

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
_READY = re.compile(r"magnetar local-cluster ready: service (\S+) admin (\S+)")
_PID = re.compile(r"^\s+(\S+)\s+pid (\d+)", re.MULTILINE)


class LocalClusterCommand:
    """One ``magnetar local-cluster`` subprocess; its stdout is collected by a thread."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "local-cluster",
             "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            assert stream is not None
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: object, sink: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line)

    def text(self) -> str:
        return "".join(self.out)

    def wait_ready(self) -> re.Match[str]:
        wait_until(
            lambda: _READY.search(self.text()) is not None or self.proc.poll() is not None,
            timeout_s=READY_TIMEOUT_S,
            what="the local cluster's ready line",
        )
        match = _READY.search(self.text())
        assert match is not None, f"exited {self.proc.returncode}: {''.join(self.err)}"
        return match

    def child_pids(self) -> dict[str, int]:
        return {name: int(pid) for name, pid in _PID.findall(self.text())}

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop_everything(self) -> None:
        """Teardown, whatever state a failed test left: Ctrl+C (the command stops its
        children, ZooKeeper last), SIGKILL if it does not exit in time, then SIGKILL every
        process still running over the data directory (the children are in their own
        sessions; ZooKeeper's java is not in the printed pid list)."""
        pids = set(self.child_pids().values())
        if self.proc.poll() is None:
            try:
                self.interrupt()
            except subprocess.TimeoutExpired:
                self.kill()
        left = subprocess.run(
            ["pgrep", "-f", str(self.data_dir)], capture_output=True, text=True
        ).stdout.split()
        for pid in pids | set(map(int, left)):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie left to us is gone for our purposes: it runs nothing
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture
def commands() -> Iterator[list[LocalClusterCommand]]:
    started: list[LocalClusterCommand] = []
    yield started
    for cmd in started:
        cmd.stop_everything()


FREE_PORTS = ("--zookeeper-port", "0", "--broker-port", "0", "--http-port", "0",
              "--bookie-port", "0")  # fmt: skip


def test_two_brokers_three_bookies_serve_the_official_client_and_stop_on_ctrl_c(
    tmp_path: Path, commands: list[LocalClusterCommand]
) -> None:
    data_dir = tmp_path / "cluster"
    cmd = LocalClusterCommand(data_dir, "--brokers", "2", "--bookies", "3", *FREE_PORTS)
    commands.append(cmd)
    ready = cmd.wait_ready()
    service_url, admin_url = ready.group(1), ready.group(2)
    assert service_url.startswith("pulsar://") and service_url.count(",") == 1
    assert admin_url.startswith("http://") and admin_url.count(",") == 1
    assert set(cmd.child_pids()) == {"bookie-0", "bookie-1", "bookie-2", "broker-0", "broker-1"}

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
    assert cmd.proc.poll() is None and all(_alive(p) for n, p in pids.items() if n != "broker-0")
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic)
        producer.send(b"after-kill")
    finally:
        client.close()
    # The printed admin URL list still works for the CLI with its first broker dead.
    stats = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--url", admin_url,
         "topics", "stats", topic],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr

    assert cmd.interrupt() == 0
    wait_until(lambda: not any(_alive(p) for p in pids.values()), timeout_s=STOP_TIMEOUT_S,
               what="every child process to exit")  # fmt: skip
    assert not any(_alive(p) for p in pids.values())

    # Started again over the same directory: the same ports, the same data.
    again = LocalClusterCommand(data_dir, "--brokers", "2", "--bookies", "3", *FREE_PORTS)
    commands.append(again)
    assert again.wait_ready().group(1) == service_url
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
