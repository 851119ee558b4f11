"""``magnetar local-cluster`` run as a user runs it: the command as a subprocess, its printed
lines collected, teardown that leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from magnetar.testing import wait_until

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
_READY = re.compile(r"magnetar local-cluster ready: service (\S+) admin (\S+)")
_PID = re.compile(r"^\s+(\S+)\s+pid (\d+)", re.MULTILINE)
_WORKER = re.compile(r"^\s+functions worker (http://\S+)", re.MULTILINE)


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

    def functions_worker_url(self) -> str | None:
        """The Functions Worker's URL as printed (None: the command runs none)."""
        match = _WORKER.search(self.text())
        return None if match is None else match.group(1)

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
        sessions; ZooKeeper's java is not in the printed pid list, its supervisor is)."""
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
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie left to us is gone for our purposes: it runs nothing
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


FREE_PORTS = ("--zookeeper-port", "0", "--broker-port", "0", "--http-port", "0",
              "--bookie-port", "0", "--functions-worker-port", "0")  # fmt: skip
