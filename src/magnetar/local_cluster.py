"""``magnetar local-cluster``: a real ZooKeeper, M bookies and N brokers on 127.0.0.1, each
its own process with its own data directory, for demos and tests.

    cluster = LocalCluster(LocalClusterConfig(data_dir=Path("cluster"), brokers=3, bookies=3))
    cluster.start()                 # ZooKeeper, then bookies, then brokers, each waited for
    cluster.service_url             # pulsar://127.0.0.1:6650,127.0.0.1:6651,127.0.0.1:6652
    cluster.brokers[1].kill()       # SIGKILL one; .start() brings it back on its ports
    cluster.add_broker()            # one more broker; the controller moves bundles onto it
    cluster.stop()                  # brokers, then bookies, then ZooKeeper; bounded

Layout under ``data_dir``: ``zookeeper/``, ``bookie-<i>/`` (the bookie's data), one
``<name>.log`` per process (its stdout and stderr), and ``ports.json``: the ports picked at
the first start. A bookie's id is ``host:port`` and is written into every ledger's ensemble,
so ports are picked once and reused on every later start over the same directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from magnetar.common.errors import MagnetarError
from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port

READY_TIMEOUT_S = 60.0
"""How long one process may take to print its ready line (a loaded 2-core machine)."""
STOP_TIMEOUT_S = 15.0
"""How long a process may take to exit after SIGTERM before it gets SIGKILL."""
POLL_INTERVAL_S = 0.05
CHROOT = "/magnetar"
_BROKER_READY = re.compile(r"magnetar broker ready: broker (\S+) .*http (\S+)")
_BOOKIE_READY = re.compile(r"bookie (\S+) ready")


class LocalClusterError(MagnetarError):
    """A process of the local cluster failed to start; the message names it and quotes the
    tail of its log."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalClusterConfig:
    data_dir: Path
    brokers: int = 1
    bookies: int = 3
    zookeeper_port: int = 2181
    """0 picks a free port at the first start (then kept in ``ports.json``), as do the
    other ``*_port`` settings; otherwise processes take consecutive ports from these."""
    broker_port: int = 6650
    http_port: int = 8080
    bookie_port: int = 3181
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    bookie_disk_free_min_bytes: int = 64 * 1024 * 1024
    session_timeout_s: float = 10.0
    """ZooKeeper session timeout of every bookie and broker: a SIGKILLed process's
    registration (and a broker's bundles) go after about this long."""
    log_level: str = "INFO"
    broker_args: tuple[str, ...] = ()
    """More options for every ``magnetar broker`` (e.g. its authentication settings,
    ``("--authentication-enabled", "--authentication-providers", "token", ...)``)."""

    def __post_init__(self) -> None:
        if self.brokers < 1 or self.bookies < 1:
            raise ValueError("a local cluster needs at least one broker and one bookie")
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise ValueError("need 1 <= ack quorum <= write quorum <= ensemble size")
        if self.ensemble_size > self.bookies:
            raise ValueError(
                f"ensemble size {self.ensemble_size} needs at least that many bookies "
                f"(got {self.bookies})"
            )


class ClusterProcess:
    """One child process (a bookie or a broker): started in its own session (so a Ctrl+C
    in the terminal reaches only ``local-cluster``, which stops the children in order),
    output appended to ``log_path``, ready once its ready line appears there."""

    def __init__(self, name: str, args: list[str], log_path: Path, ready: re.Pattern[str]):
        self.name = name
        self.args = args
        self.log_path = log_path
        self._ready = ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_match: re.Match[str] | None = None
        self._offset = 0

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start and wait for the ready line; raises :class:`LocalClusterError`."""
        self.launch()
        self.wait_ready(ready_timeout_s)

    def launch(self) -> None:
        """Start the process (no wait); :meth:`wait_ready` waits for its ready line."""
        if self.is_running():
            return
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.ready_match = None
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def wait_ready(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the ready line printed since :meth:`launch`; raises
        :class:`LocalClusterError` (and kills the process) when it exits or times out."""
        assert self.proc is not None, f"{self.name} was not launched"
        deadline = time.monotonic() + ready_timeout_s
        while self.ready_match is None:
            match = self._ready.search(self._log_since(self._offset))
            if match is not None:
                self.ready_match = match
                return
            if self.proc.poll() is not None:
                raise LocalClusterError(
                    f"{self.name} exited with status {self.proc.returncode} before it was "
                    f"ready: {self._tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise LocalClusterError(
                    f"{self.name} was not ready within {ready_timeout_s:.0f} s: {self._tail()}"
                )
            time.sleep(POLL_INTERVAL_S)

    def _log_since(self, offset: int) -> str:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
        return ""

    def _tail(self, lines: int = 5) -> str:
        text = self._log_since(0).strip().splitlines()
        return " | ".join(text[-lines:]) or f"(nothing in {self.log_path})"

    def signal(self, sig: signal.Signals) -> None:
        if self.is_running():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM; SIGKILL if it has not exited within ``timeout_s``."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


class LocalCluster:
    """See the module docstring. Not thread-safe; :meth:`stop` is idempotent."""

    def __init__(self, config: LocalClusterConfig) -> None:
        self.config = config
        self.data_dir = config.data_dir.resolve()
        self.zookeeper: ZooKeeperServer | None = None
        self.bookies: list[ClusterProcess] = []
        self.brokers: list[ClusterProcess] = []

    @property
    def metadata_url(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.url(CHROOT)

    @property
    def service_url(self) -> str:
        """All brokers in one URL, as Pulsar clients take it."""
        hosts = [_host_port(self._broker_urls(b)[0]) for b in self.brokers]
        return "pulsar://" + ",".join(hosts)

    @property
    def admin_url(self) -> str:
        return self._broker_urls(self.brokers[0])[1]

    @property
    def admin_service_url(self) -> str:
        """All brokers' admin URLs in one (``http://h1:p1,h2:p2``), as the admin CLI and
        :class:`magnetar.admin_client.AdminClient` take it."""
        hosts = [_host_port(self._broker_urls(b)[1]) for b in self.brokers]
        return "http://" + ",".join(hosts)

    def broker_service_url(self, index: int) -> str:
        return self._broker_urls(self.brokers[index])[0]

    def broker_admin_url(self, index: int) -> str:
        return self._broker_urls(self.brokers[index])[1]

    @staticmethod
    def _broker_urls(broker: ClusterProcess) -> tuple[str, str]:
        assert broker.ready_match is not None, f"{broker.name} has not started"
        return broker.ready_match.group(1), broker.ready_match.group(2)

    def processes(self) -> list[ClusterProcess]:
        return [*self.bookies, *self.brokers]

    def start(self) -> None:
        """Start everything, in order; on a failure, stop what started and raise
        :class:`LocalClusterError`."""
        cfg = self.config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = self._ports()
        try:
            self.zookeeper = ZooKeeperServer(
                self.data_dir / "zookeeper",
                port=ports["zookeeper"][0],
                max_session_timeout_ms=60_000,
            )
            self.zookeeper.start()
            self.bookies = [self._bookie(i, ports["bookies"][i]) for i in range(cfg.bookies)]
            _start_all(self.bookies)
            self.brokers = [
                self._broker(i, ports["brokers"][i], ports["http"][i]) for i in range(cfg.brokers)
            ]
            _start_all(self.brokers)
        except BaseException:
            self.stop()
            raise

    def add_broker(self) -> ClusterProcess:
        """Start one more broker on the next ports (kept in ``ports.json`` like the
        others) and wait for it; the controller rebalances bundles onto it. Raises
        :class:`LocalClusterError` (the broker is stopped then)."""
        assert self.zookeeper is not None, "the cluster is not started"
        index = len(self.brokers)
        ports = self._ports(brokers=index + 1)
        broker = self._broker(index, ports["brokers"][index], ports["http"][index])
        self.brokers.append(broker)
        broker.start()
        return broker

    def _ports(self, brokers: int | None = None) -> dict[str, list[int]]:
        """The ports of every process: those saved in ``ports.json`` first, then new ones
        (consecutive from the configured base, or free ones for a base of 0); all of them
        are saved again, so a later, larger cluster keeps the ports of the first.
        ``brokers`` overrides the configured number of brokers (a broker added later)."""
        cfg = self.config
        path = self.data_dir / "ports.json"
        saved: dict[str, list[int]] = {}
        with contextlib.suppress(OSError, ValueError, AttributeError):
            loaded = json.loads(path.read_text())
            saved = {k: [int(p) for p in v] for k, v in loaded.items() if isinstance(v, list)}
        wanted = {
            "zookeeper": (cfg.zookeeper_port, 1),
            "bookies": (cfg.bookie_port, cfg.bookies),
            "brokers": (cfg.broker_port, brokers or cfg.brokers),
            "http": (cfg.http_port, brokers or cfg.brokers),
        }
        taken = {port for ports in saved.values() for port in ports}
        for key, (base, count) in wanted.items():
            have = saved.setdefault(key, [])
            while len(have) < count:
                port = base + len(have) if base else free_port()
                if not base and port in taken:
                    # free_port() closes its probe socket, so it can name a port it named
                    # before for another process (seen: ZooKeeper's and a broker's HTTP)
                    continue
                have.append(port)
                taken.add(port)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved))
        tmp.replace(path)
        return saved

    def _magnetar(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "magnetar.cli.main", *args]

    def _bookie(self, index: int, port: int) -> ClusterProcess:
        cfg = self.config
        args = self._magnetar(
            "bookie",
            "--metadata-url", self.metadata_url,
            "--data-dir", str(self.data_dir / f"bookie-{index}"),
            "--port", str(port),
            "--disk-free-min-bytes", str(cfg.bookie_disk_free_min_bytes),
            "--session-timeout-s", str(cfg.session_timeout_s),
        )  # fmt: skip
        return ClusterProcess(
            f"bookie-{index}", args, self.data_dir / f"bookie-{index}.log", _BOOKIE_READY
        )

    def _broker(self, index: int, port: int, http_port: int) -> ClusterProcess:
        cfg = self.config
        args = self._magnetar(
            "broker",
            "--metadata-url", self.metadata_url,
            "--port", str(port),
            "--http-port", str(http_port),
            "--ensemble-size", str(cfg.ensemble_size),
            "--write-quorum", str(cfg.write_quorum),
            "--ack-quorum", str(cfg.ack_quorum),
            "--session-timeout-s", str(cfg.session_timeout_s),
            "--log-level", cfg.log_level,
            *cfg.broker_args,
        )  # fmt: skip
        return ClusterProcess(
            f"broker-{index}", args, self.data_dir / f"broker-{index}.log", _BROKER_READY
        )

    def exited(self) -> list[ClusterProcess]:
        """The children that have exited (killed, crashed or stopped one by one)."""
        return [p for p in self.processes() if p.proc is not None and p.proc.poll() is not None]

    def stop(self) -> None:
        """Brokers first (they flush cursors to the bookies), then bookies, then ZooKeeper."""
        for group in (self.brokers, self.bookies):
            for p in group:
                p.signal(signal.SIGCONT)
                p.signal(signal.SIGTERM)
            for p in group:
                p.stop()
        zookeeper, self.zookeeper = self.zookeeper, None
        if zookeeper is not None:
            zookeeper.stop()


def _start_all(group: list[ClusterProcess]) -> None:
    """Launch every process of ``group`` at once, then wait for each to be ready."""
    for p in group:
        p.launch()
    for p in group:
        p.wait_ready()


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")
