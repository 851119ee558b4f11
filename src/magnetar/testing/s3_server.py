"""A real S3-compatible server for tests: moto's server (PyPI's ``moto[server]``) as its own
process on a free 127.0.0.1 port. Tiered-storage tests offload to it over HTTP exactly as to
AWS; stopping and starting it (:meth:`S3Server.stop`, :meth:`S3Server.start`) on the same
port is how they make the store unreachable. Its objects live in memory: a restart empties it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from magnetar.testing.ready_process import kill
from magnetar.testing.wait import wait_until

ACCESS_KEY_ID = "magnetar-test"
SECRET_ACCESS_KEY = "magnetar-test-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """``moto_server`` on ``port`` (a free one by default); :attr:`endpoint` is its URL and
    :meth:`env` the credentials a client of it needs (moto accepts any)."""

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def env() -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
        }

    def start(self, ready_timeout_s: float = 30.0) -> None:
        """Starts the server and waits until it answers; fails (never skips) when moto's
        server is not installed."""
        executable = shutil.which(
            "moto_server", path=str(Path(sys.executable).parent)
        ) or shutil.which("moto_server")
        assert executable, "moto_server is missing: make test installs moto[server]"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [executable, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env()},
            )
        wait_until(
            self._answers, timeout_s=ready_timeout_s, interval_s=0.1, what="moto_server to answer"
        )

    def _answers(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"moto_server exited: {self.log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.endpoint}/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def create_bucket(self, bucket: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        if self._proc is not None:
            kill(self._proc)  # type: ignore[arg-type]
            self._proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
