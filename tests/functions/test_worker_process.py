"""Workers as separate processes (``python -m magnetar.functions``), killed with SIGKILL, as
the election walkthrough has it: the broker's topic stats are the only view of the cluster."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.functions.admin_stats import topic_stats_url
from magnetar.testing import StandaloneProcess, wait_until

ELECTION_TIMEOUT_S = 30.0


class WorkerProcess:
    """One worker subprocess; its stdout lines are collected by a thread."""

    def __init__(self, node: StandaloneProcess, log_dir: Path, worker_id: str, *args: str):
        self.worker_id = worker_id
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        cmd = [
            sys.executable, "-m", "magnetar.functions",
            "--worker-id", worker_id, "--port", "6750",
            "--service-url", node.url, "--admin-url", node.http_url, *args,
        ]  # fmt: skip
        with open(log_dir / f"{worker_id}.log", "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(
            target=lambda: [self._queue.put(x.strip()) for x in stdout], daemon=True
        ).start()

    @property
    def consumer_name(self) -> str:
        return f"{self.worker_id}:127.0.0.1:6750"

    def saw(self, line: str) -> bool:
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return line in self.lines

    def leading(self) -> bool:
        """Whether the worker's last leadership line says it leads."""
        self.saw("")
        changes = [x for x in self.lines if x.startswith(("leader ", "follower "))]
        return bool(changes) and changes[-1].startswith("leader ")


@pytest.fixture
def spawn(standalone: StandaloneProcess, tmp_path: Path) -> Iterator[Any]:
    procs: list[WorkerProcess] = []

    def make(worker_id: str, *args: str) -> WorkerProcess:
        p = WorkerProcess(standalone, tmp_path, worker_id, *args)
        procs.append(p)
        return p

    try:
        yield make
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
            p.proc.wait(10)


def _stats(node: StandaloneProcess, topic: str) -> Any:
    """The topic's stats; ``{}`` while the topic does not exist yet."""
    try:
        with urllib.request.urlopen(topic_stats_url(node.http_url, topic), timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise


def test_sigkilled_leader_is_replaced(
    standalone: StandaloneProcess, spawn: Any, unique: str
) -> None:
    coordinate = f"persistent://public/functions/coordinate-{unique}"
    assignments = f"persistent://public/functions/assignments-{unique}"
    topics = ("--coordination-topic", coordinate, "--assignments-topic", assignments)
    procs = {p.worker_id: p for p in (spawn(f"w{i}", *topics) for i in range(3))}
    for p in procs.values():
        wait_until(lambda p=p: p.saw(f"joined {p.consumer_name}"), ELECTION_TIMEOUT_S)

    def settled(members: int) -> WorkerProcess | None:
        """The leader once stats show ``members`` consumers, an active one, and that worker
        holding the assignments producer (same connection as its coordination consumer)."""
        sub = _stats(standalone, coordinate).get("subscriptions", {}).get("participants")
        if sub is None:
            return None
        if sub["type"] != "Failover" or len(sub["consumers"]) != members:
            return None
        active = sub["activeConsumerName"]
        leader = next((p for p in procs.values() if p.consumer_name == active), None)
        if leader is None or [p for p in procs.values() if p.leading()] != [leader]:
            return None
        publishers = _stats(standalone, assignments).get("publishers", [])
        address = next(c["address"] for c in sub["consumers"] if c["consumerName"] == active)
        if [(x["accessMode"], x["address"]) for x in publishers] != [
            ("ExclusiveWithFencing", address)
        ]:
            return None
        return leader

    first = wait_until(lambda: settled(3), ELECTION_TIMEOUT_S, what="a first leader")
    assert first is not None

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    del procs[first.worker_id]
    second = wait_until(lambda: settled(2), ELECTION_TIMEOUT_S, what="a second leader")
    assert second is not None and second is not first

    # A clean stop hands leadership over too, and the process exits 0.
    second.proc.send_signal(signal.SIGTERM)
    assert second.proc.wait(20) == 0
    assert not second.leading()
    del procs[second.worker_id]
    (third,) = procs.values()
    assert wait_until(lambda: settled(1), ELECTION_TIMEOUT_S, what="a third leader") is third


def test_unusable_settings_exit_with_one_line(standalone: StandaloneProcess) -> None:
    for args, code in (
        (["--worker-id", "a:b"], 2),
        (["--worker-id", "w", "--coordination-topic", "persistent://public/nope-ns/c"], 1),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "magnetar.functions", "--service-url", standalone.url,
             "--admin-url", standalone.http_url, *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == code
        errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in done.stderr
        assert done.stdout == ""
