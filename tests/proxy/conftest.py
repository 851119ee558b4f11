"""``magnetar proxy`` processes for the proxy tests, in front of a ``local-cluster``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing.ready_process import kill, log_tail, start_until_ready, stop

READY = re.compile(r"magnetar proxy ready: proxy (\S+) http (\S+)")


@dataclass
class ProxyProcess:
    """A running ``magnetar proxy`` on free ports."""

    proc: subprocess.Popen[str]
    service_url: str
    http_url: str
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.service_url.rsplit(":", 1)[1])

    def log(self) -> str:
        return log_tail(self.log_path)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                stop(self.proc, 15)
            except subprocess.TimeoutExpired:
                kill(self.proc)


def start_proxy(log_path: Path, *args: str, free_ports: bool = True) -> ProxyProcess:
    """``magnetar proxy --port 0 --http-port 0 --bind-address 127.0.0.1 ARGS``, ready
    (``free_ports`` False: only ARGS)."""
    defaults = ("--bind-address", "127.0.0.1", "--port", "0", "--http-port", "0")
    command = [
        sys.executable, "-m", "magnetar.cli.main", "proxy",
        *(defaults if free_ports else ()), "--log-level", "INFO", *args,
    ]  # fmt: skip
    proc, line = start_until_ready(command, log_path, "magnetar proxy ready", "proxy", 60)
    match = READY.search(line)
    assert match is not None, line
    return ProxyProcess(proc, match.group(1), match.group(2), log_path)


@pytest.fixture
def proxies() -> Iterator[list[ProxyProcess]]:
    """Proxies a test starts, stopped at teardown."""
    started: list[ProxyProcess] = []
    yield started
    for p in started:
        p.stop()


def http(method: str, url: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    """(status, decoded JSON or raw bytes) of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            status = response.status
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        with exc:
            raw = exc.read()
        status, kind = exc.code, exc.headers.get("Content-Type", "")
    if "json" in kind and raw:
        return status, json.loads(raw)
    return status, raw
