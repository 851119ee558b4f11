"""Functions Workers as separate processes (``python -m magnetar.functions``), for tests that
kill, pause and resume them. Each worker serves its REST API on a free port (``--port 0``);
its ``joined workerId:host:port`` line names it."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from magnetar.functions.admin_stats import topic_stats_url
from magnetar.testing import StandaloneProcess

ELECTION_TIMEOUT_S = 30.0


def cluster_topics(unique: str) -> tuple[str, ...]:
    """Command-line settings giving one worker cluster its own four topics."""
    base = f"persistent://public/functions/{unique}"
    return (
        "--coordination-topic", f"{base}-coordinate",
        "--assignments-topic", f"{base}-assignments",
        "--metadata-topic", f"{base}-metadata",
        "--packages-topic", f"{base}-packages",
    )  # fmt: skip


class WorkerProcess:
    """One worker subprocess; its stdout lines are collected by a thread."""

    def __init__(self, node: StandaloneProcess, log_dir: Path, worker_id: str, *args: str):
        self.worker_id = worker_id
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        cmd = [
            sys.executable, "-m", "magnetar.functions",
            "--worker-id", worker_id, "--port", "0", "--runtime", "thread",
            "--work-dir", str(log_dir / f"{worker_id}-work"),
            "--service-url", node.url, "--admin-url", node.http_url, *args,
        ]  # fmt: skip
        with open(log_dir / f"{worker_id}.log", "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(
            target=lambda: [self._queue.put(x.strip()) for x in stdout], daemon=True
        ).start()

    def _drain(self) -> None:
        while not self._queue.empty():
            self.lines.append(self._queue.get())

    def joined(self) -> bool:
        self._drain()
        return any(x.startswith("joined ") for x in self.lines)

    @property
    def consumer_name(self) -> str:
        """``workerId:host:port`` from the joined line (call after :meth:`joined`)."""
        self._drain()
        return next(x.split()[1] for x in self.lines if x.startswith("joined "))

    @property
    def http_url(self) -> str:
        _, host, port = self.consumer_name.rsplit(":", 2)
        return f"http://{host}:{port}"

    def saw(self, line: str) -> bool:
        self._drain()
        return line in self.lines

    def terms_ended(self) -> int:
        """How many ``follower`` lines (ends of a leadership term) the worker printed."""
        self._drain()
        return sum(1 for x in self.lines if x.startswith("follower "))

    def leading(self) -> bool:
        """Whether the worker's last leadership line says it leads."""
        self._drain()
        changes = [x for x in self.lines if x.startswith(("leader ", "follower "))]
        return bool(changes) and changes[-1].startswith("leader ")


def topic_stats(node: StandaloneProcess, topic: str) -> Any:
    """The topic's stats; ``{}`` while the topic does not exist yet."""
    try:
        with urllib.request.urlopen(topic_stats_url(node.http_url, topic), timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise


def http(
    method: str, url: str, body: bytes | None = None, content_type: str | None = None
) -> tuple[int, Any]:
    """(status, JSON body or None) of one request; 4xx/5xx are returned, not raised."""
    req = urllib.request.Request(url, data=body, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw.strip() else None
