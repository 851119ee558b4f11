"""``magnetar bookie`` processes for multi-process tests; callers kill them in teardown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from magnetar.metadata import MetadataStore
from magnetar.metadata.zookeeper_server import free_port


class BookieProcess:
    """One ``magnetar bookie`` on ``metadata_url`` over ``data_dir`` (port: free when not
    given), with a 2 s session; its output goes to ``<data_dir>.log``."""

    def __init__(
        self, metadata_url: str, data_dir: Path, port: int | None = None, *extra_args: str
    ) -> None:
        self.metadata_url = metadata_url
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        """More ``magnetar bookie`` options, for every start (changeable between starts)."""
        self.bookie_id = f"127.0.0.1:{self.port}"
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready_before = 0

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ready_before = self.log().count(" ready")
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magnetar.cli.main",
                "bookie",
                "--metadata-url",
                self.metadata_url,
                "--data-dir",
                str(self.data_dir),
                "--port",
                str(self.port),
                "--disk-free-min-bytes",
                "0",
                "--session-timeout-s",
                "2",
                "--gc-interval-ms",
                "3600000",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()

    async def wait_registered(self, store: MetadataStore, timeout_s: float = 30) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"bookie exited: {self.log()}")
            if (
                self.bookie_id in await _children(store, "/ledgers/available")
                and self.log().count(" ready") > self._ready_before
            ):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"bookie {self.bookie_id} did not register: {self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


async def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return await store.children(path)
    except Exception:
        return []
