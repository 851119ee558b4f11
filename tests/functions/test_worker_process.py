"""Workers as separate processes (``python -m magnetar.functions``), killed with SIGKILL, as
the election walkthrough has it: the broker's topic stats are the only view of the cluster."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import (
    ELECTION_TIMEOUT_S,
    WorkerProcess,
    cluster_topics,
    topic_stats,
)


def test_sigkilled_leader_is_replaced(
    standalone: StandaloneProcess, spawn: Any, unique: str
) -> None:
    topics = cluster_topics(unique)
    coordinate, assignments = topics[1], topics[3]
    procs = {p.worker_id: p for p in (spawn(f"w{i}", *topics) for i in range(3))}
    for p in procs.values():
        wait_until(p.joined, ELECTION_TIMEOUT_S)

    def settled(members: int) -> WorkerProcess | None:
        """The leader once stats show ``members`` consumers, an active one, and that worker
        holding the assignments producer (same connection as its coordination consumer)."""
        sub = topic_stats(standalone, coordinate).get("subscriptions", {}).get("participants")
        if sub is None:
            return None
        if sub["type"] != "Failover" or len(sub["consumers"]) != members:
            return None
        active = sub["activeConsumerName"]
        leader = next((p for p in procs.values() if p.consumer_name == active), None)
        if leader is None or [p for p in procs.values() if p.leading()] != [leader]:
            return None
        publishers = topic_stats(standalone, assignments).get("publishers", [])
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
            [sys.executable, "-m", "magnetar.functions", "--port", "0",
             "--service-url", standalone.url,
             "--admin-url", standalone.http_url, *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == code
        errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in done.stderr
        assert done.stdout == ""
