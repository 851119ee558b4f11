"""A real PostgreSQL for the sink tests: Debian's ``postgresql`` binaries, a fresh cluster made
with ``initdb`` in a temporary directory, started with ``pg_ctl`` on a free port of
127.0.0.1 (trust authentication, user ``magnetar``). PostgreSQL refuses to run as root, so
under root (as in CI) it runs as the ``postgres`` user the Debian package creates."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

START_TIMEOUT_S = 60


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"{name} not found: install Debian's postgresql (make system-deps)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="magnetar-pg-"))
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=magnetar dbname=postgres"

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self._as_user, *argv], capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        data = self.dir / "data"
        self._run(_bin("initdb"), "-D", str(data), "-U", "magnetar", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run(
            _bin("pg_ctl"), "-D", str(data), "-l", str(self.dir / "server.log"),
            "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start",
        )  # fmt: skip

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
