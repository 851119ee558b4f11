"""Instance processes end with their worker: a ``magnetar functions-worker`` using the process
runtime that is SIGKILLed leaves no ``instance_main`` behind (the leader would reassign its
instances, and two copies would run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import ELECTION_TIMEOUT_S, cluster_topics

INSTANCE_EXIT_TIMEOUT_S = 15.0
FUNCTION = b"def process(input, context):\n    return input\n"


def _is_live_instance(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) ``instance_main`` process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and b"magnetar.functions.instance_main" in cmdline


def _instances_of(parent_pid: int) -> set[int]:
    """The live ``instance_main`` children of ``parent_pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent_pid and _is_live_instance(int(entry)):
            found.add(int(entry))
    return found


def test_sigkilled_worker_leaves_no_instance_processes(
    standalone: StandaloneProcess, spawn: Any, unique: str, tmp_path: Path
) -> None:
    worker = spawn("w1", *cluster_topics(unique), "--runtime", "process")
    wait_until(worker.joined, ELECTION_TIMEOUT_S, what="the worker joined")
    wait_until(worker.leading, ELECTION_TIMEOUT_S, what="the worker leads")
    package = tmp_path / "echo.py"
    package.write_bytes(FUNCTION)
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", worker.http_url,
         "functions", "create", "--name", f"echo-{unique}", "--py", str(package),
         "--classname", "echo.process", "--inputs", f"in-{unique}",
         "--output", f"out-{unique}", "--parallelism", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: len(_instances_of(worker.proc.pid)) == 2,
        ELECTION_TIMEOUT_S,
        what="two instance processes",
    )
    pids = _instances_of(worker.proc.pid)

    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(10)
    try:
        wait_until(
            lambda: not any(_is_live_instance(pid) for pid in pids),
            INSTANCE_EXIT_TIMEOUT_S,
            what="the instance processes ended with their worker",
        )
    finally:
        for pid in pids:  # without the fix they would outlive the test
            if _is_live_instance(pid):
                os.kill(pid, signal.SIGKILL)
