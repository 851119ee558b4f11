"""The plumbing shared by the test-support process wrappers (``StandaloneProcess``,
``BrokerProcess``): start a ``magnetar`` command with its stderr appended to a log file,
wait for its ready line on stdout, stop or kill it, show the log's tail."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from pathlib import Path


def start_until_ready(
    args: list[str], log_path: Path, marker: str, what: str, ready_timeout_s: float
) -> tuple[subprocess.Popen[str], str]:
    """Start ``args`` and return the process and its first stdout line containing ``marker``.

    Later stdout lines are read and dropped by a daemon thread (so the child never blocks on
    a full pipe). Raises :class:`RuntimeError` with the log's tail, after killing the
    process, if it exits or prints no such line within ``ready_timeout_s``."""
    with open(log_path, "a") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + ready_timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            kill(proc)
            raise RuntimeError(f"{what} did not become ready; log:\n{log_tail(log_path)}")
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if marker in line:
            return proc, line


def log_tail(log_path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log_path.read_text().splitlines()[-lines:])
    except OSError:
        return ""


def stop(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """SIGTERM and wait for the exit; returns the exit code (kills it and raises
    :class:`subprocess.TimeoutExpired` if it does not exit in time)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        kill(proc)
        raise


def kill(proc: subprocess.Popen[str] | None) -> None:
    """SIGKILL the process if it runs (resuming it first if stopped), and reap it."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)
