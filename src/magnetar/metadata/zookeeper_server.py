"""Start and stop a real standalone ZooKeeper server (Debian's ``zookeeper`` package).

Used by the test suite, the benchmarks and ``magnetar local-cluster``. The server runs as a
child process (``java ... QuorumPeerMain zoo.cfg``) listening on ``127.0.0.1`` only, with its
configuration, data and log in one directory (a fresh temporary one unless given). It is tied
to the process that started it by a lifeline (:mod:`magnetar.common.lifeline`; ``java`` runs
under its small supervisor): it ends when that process ends, SIGKILL included.

Settings chosen for local use: ``tickTime`` 200 ms with ``minSessionTimeout`` 1 s, so tests
can use short sessions and expiry is detected within a tick or two; ``jute.maxbuffer`` 4 MiB
so values of the store's 1 MiB limit fit in a request with room for the path and headers;
four-letter words ``ruok``/``srvr``/``mntr``/``cons`` enabled for readiness and inspection.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from magnetar.common.errors import MetadataError
from magnetar.common.lifeline import Lifeline, lifeline_command

JAVA_LIB_DIR = Path("/usr/share/java")
_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")

_LOG4J = """\
log4j.rootLogger={level}, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log_file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n
"""


class ZooKeeperServerError(MetadataError):
    """The server could not be started (Java or the jars missing, port taken, timeout)."""


_RECENT_PORTS_MAX = 4096
_recent_ports: collections.deque[int] = collections.deque(maxlen=_RECENT_PORTS_MAX)
"""The ports :func:`free_port` handed out last (at most ``_RECENT_PORTS_MAX``)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close),
    and not one this process was handed among its last ``_RECENT_PORTS_MAX``: the kernel
    may give a closed port out again at once, and two processes started together must not
    be told the same port."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _recent_ports:
            _recent_ports.append(port)
            return port
    raise ZooKeeperServerError("no free TCP port on 127.0.0.1 that was not just handed out")


def four_letter_word(port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the reply ('' if none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """A standalone ZooKeeper on ``127.0.0.1:<port>``.

    ``start`` blocks until the server answers ``srvr`` as a serving standalone server (about
    2 s) or raises :class:`ZooKeeperServerError` after ``start_timeout_s``. ``stop`` ends the
    process (SIGTERM, then SIGKILL) and deletes the directory if this object created it.
    Both are idempotent; the object is also a (sync and async) context manager.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        port: int = 0,
        tick_time_ms: int = 200,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60_000,
        fsync: bool = True,
        log_level: str = "WARN",
        java: str = "java",
        heap_max_mb: int = 256,
    ) -> None:
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="magnetar-zk-"))
        self._requested_port = port
        self.port = port
        self._tick_time_ms = tick_time_ms
        self._min_session_timeout_ms = min_session_timeout_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._fsync = fsync
        self._log_level = log_level
        self._java = java
        self._heap_max_mb = heap_max_mb
        self._process: subprocess.Popen[bytes] | None = None
        self._lifeline: Lifeline | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        """The metadata-store URL of this server, e.g. ``zk://127.0.0.1:41234/magnetar``."""
        return f"zk://{self.address}{chroot}"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        """The pid of ZooKeeper's supervisor (:mod:`magnetar.common.lifeline_child`):
        SIGTERM, SIGINT and SIGHUP reach ZooKeeper through it, and ZooKeeper dies with it."""
        return None if self._process is None else self._process.pid

    def _write_config(self) -> Path:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        conf_dir = self.directory / "conf"
        conf_dir.mkdir(exist_ok=True)
        (conf_dir / "log4j.properties").write_text(
            _LOG4J.format(level=self._log_level, log_file=self.log_file)
        )
        cfg = conf_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self._tick_time_ms}",
                    f"dataDir={data_dir}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr,cons,stat",
                    f"minSessionTimeout={self._min_session_timeout_ms}",
                    f"maxSessionTimeout={self._max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    f"forceSync={'yes' if self._fsync else 'no'}",
                    # the default 64 MiB preallocation of each log file is wasteful here
                    "preAllocSize=4096",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        return cfg

    def _command(self, cfg: Path) -> list[str]:
        missing = [jar for jar in _JARS[:2] if not (JAVA_LIB_DIR / jar).exists()]
        if missing or shutil.which(self._java) is None:
            raise ZooKeeperServerError(
                f"ZooKeeper needs java and {', '.join(_JARS[:2])} in {JAVA_LIB_DIR}"
                " (Debian packages zookeeper and openjdk-17-jre-headless)"
            )
        jars = [str(JAVA_LIB_DIR / jar) for jar in _JARS if (JAVA_LIB_DIR / jar).exists()]
        classpath = ":".join([str(cfg.parent), *jars])
        return [
            self._java,
            f"-Xmx{self._heap_max_mb}m",
            "-XX:+UseSerialGC",
            "-Djute.maxbuffer=4194304",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j.configuration=file:{cfg.parent / 'log4j.properties'}",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]

    def start(self, start_timeout_s: float = 30.0) -> None:
        if self._process is not None:
            return
        attempts = 1 if self._requested_port else 3  # a free port may be taken meanwhile
        for attempt in range(attempts):
            if not self._requested_port:
                self.port = free_port()
            cfg = self._write_config()
            command = self._command(cfg)
            self._lifeline = lifeline = Lifeline()
            with open(self.directory / "stderr.log", "ab") as stderr:
                self._process = subprocess.Popen(
                    lifeline_command(lifeline.child_fd, command),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    start_new_session=True,  # a Ctrl-C in a terminal is ours to forward
                    pass_fds=(lifeline.child_fd,),
                )
            lifeline.child_started()
            try:
                self._wait_ready(start_timeout_s)
                return
            except ZooKeeperServerError:
                self._kill()
                if attempt == attempts - 1:
                    raise

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ZooKeeperServerError(
                    f"ZooKeeper exited with {self._process.returncode}: {self._log_tail()}"
                )
            with contextlib.suppress(OSError):
                if "Mode: standalone" in four_letter_word(self.port, "srvr", timeout_s=1.0):
                    return
            # Polling a child process's readiness: the one place a plain pause is right.
            time.sleep(0.05)
        raise ZooKeeperServerError(
            f"ZooKeeper not ready on {self.address} after {timeout_s} s: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        texts = []
        for name in ("stderr.log", "zookeeper.log"):
            with contextlib.suppress(OSError):
                texts.append((self.directory / name).read_text(errors="replace")[-2000:])
        return "\n".join(texts)

    def _kill(self) -> None:
        process, self._process = self._process, None
        lifeline, self._lifeline = self._lifeline, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()  # ZooKeeper gets the parent-death signal
                process.wait(timeout=10)
        if lifeline is not None:
            lifeline.close()

    def stop(self) -> None:
        self._kill()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    async def start_async(self, start_timeout_s: float = 30.0) -> None:
        await asyncio.to_thread(self.start, start_timeout_s)

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ZooKeeperServer:
        await self.start_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()

    def __del__(self) -> None:
        # Last resort: never leave a Java process behind if the owner forgot stop().
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)
