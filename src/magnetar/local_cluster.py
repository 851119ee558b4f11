"""``magnetar local-cluster``: a real ZooKeeper, M bookies, N brokers and (optionally) one
Functions Worker on 127.0.0.1, each its own process with its own data directory, for demos
and tests.

    cluster = LocalCluster(LocalClusterConfig(data_dir=Path("cluster"), brokers=3, bookies=3))
    cluster.start()                 # ZooKeeper, then bookies, then brokers, each waited for
    cluster.service_url             # pulsar://127.0.0.1:6650,127.0.0.1:6651,127.0.0.1:6652
    cluster.web_service_url         # http://127.0.0.1:8080,127.0.0.1:8081,127.0.0.1:8082
    cluster.brokers[1].kill()       # SIGKILL one; .start() brings it back on its ports
    cluster.add_broker()            # one more broker; the controller moves bundles onto it
    cluster.stop()                  # worker, brokers, bookies, then ZooKeeper; bounded

With ``functions_worker`` one ``magnetar functions-worker`` starts once the brokers are ready,
without being waited for (:meth:`LocalCluster.wait_functions_worker` waits for it): its REST
API is on its own port (:attr:`LocalCluster.functions_worker_url`), and every broker is given
that URL (``--function-worker-web-service-url``), so the brokers' HTTP ports serve
``/admin/v3/functions|sources|sinks`` and ``/admin/v2/worker`` too
(:mod:`magnetar.admin.function_worker_forward`).

Layout under ``data_dir``: ``zookeeper/``, ``bookie-<i>/`` (the bookie's data),
``functions-worker/`` (the worker's packages and instances' files), one ``<name>.log`` per
process (its stdout and stderr), ``ports.json``: the ports picked at
the first start, ``client.conf``: the cluster's URLs (and the super user's token, when the
cluster signs its own: :mod:`magnetar.local_cluster_security`) for the CLI's ``--config``,
and ``local-cluster.lock``. A bookie's id is ``host:port`` and is written into every
ledger's ensemble, so ports are picked once and reused on every later start over the same
directory.

No orphans: every process is tied to the one that started the cluster by a lifeline
(:mod:`magnetar.common.lifeline`): if that process ends in any way (SIGKILL, the OOM
killer), ZooKeeper, the bookies and the brokers stop too. The data directory is locked
(``flock`` on ``local-cluster.lock``) by the starting process and, inherited, by every
process it starts: a second cluster over a directory in use is refused, even while the
processes of a killed one are still stopping.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from magnetar.common.errors import MagnetarError
from magnetar.common.lifeline import Lifeline, lifeline_command
from magnetar.local_cluster_security import ClusterTokens
from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port

READY_TIMEOUT_S = 60.0
"""How long one process may take to print its ready line (a loaded 2-core machine)."""
STOP_TIMEOUT_S = 15.0
"""How long a process may take to exit after SIGTERM before it gets SIGKILL."""
POLL_INTERVAL_S = 0.05
LIFELINE_GRACE_MS = 10_000
"""How long a process whose local-cluster died may take to stop before it exits hard."""
CHROOT = "/magnetar"
LOCK_FILE = "local-cluster.lock"
CLIENT_CONF_FILE = "client.conf"
_BROKER_READY = re.compile(r"magnetar broker ready: broker (\S+) .*http (\S+)")
_BOOKIE_READY = re.compile(r"bookie (\S+) ready")
_WORKER_READY = re.compile(r"^joined (\S+)", re.MULTILINE)
FUNCTIONS_WORKER = "functions-worker"
"""The worker's process name (its log: ``functions-worker.log``, its id:
``<cluster name>-functions-worker``)."""
FUNCTIONS_RUNTIMES = ("process", "thread")
"""How the worker runs instances (``magnetar functions-worker --runtime``)."""


class LocalClusterError(MagnetarError):
    """A process of the local cluster failed to start (the message names it and quotes the
    tail of its log), or the data directory is in use by another local cluster."""


class DataDirLock:
    """An exclusive ``flock`` on ``<data dir>/local-cluster.lock``, which holds the pid of the
    process that took it. The lock belongs to the open file, so children given :attr:`fd`
    (``pass_fds``) hold it too, until the last of them ends. :meth:`release` is idempotent."""

    def __init__(self, data_dir: Path) -> None:
        path = data_dir / LOCK_FILE
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self.fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            raise LocalClusterError(
                f"data directory {data_dir} is in use by another local-cluster (pid {holder}, "
                "or the processes it started); stop it or choose another --data-dir"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)  # children that inherited it may hold the lock a little longer


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalClusterConfig:
    data_dir: Path
    cluster_name: str = "standalone"
    """Every broker's ``--cluster-name`` (Pulsar's ``clusterName``): the name other
    clusters register this one under to replicate with it."""
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
    bookie_disk_free_min_bytes: int = 0
    """An absolute floor of free space for the bookie, on top of its usage thresholds (0.95,
    writable again under 0.90)."""
    session_timeout_s: float = 10.0
    """ZooKeeper session timeout of every bookie and broker: a SIGKILLed process's
    registration (and a broker's bundles) go after about this long."""
    log_level: str = "INFO"
    bookie_racks: tuple[str, ...] = ()
    """The ``/region/rack`` of each bookie, in order (``magnetar bookie --rack``); empty:
    none."""
    broker_args: tuple[str, ...] = ()
    """More options for every ``magnetar broker`` (e.g. its authentication settings,
    ``("--authentication-enabled", "--authentication-providers", "token", ...)``)."""
    tokens: ClusterTokens | None = None
    """Whether the cluster signs its own tokens: the key and the super user's token are
    made at start (:class:`~magnetar.local_cluster_security.ClusterTokens`) and every broker
    (and the Functions Worker) gets them; ``broker_args`` turn token authentication on."""
    functions_worker: bool = False
    """Run one Functions Worker beside the brokers (``magnetar local-cluster`` does unless
    ``--no-functions-worker``)."""
    functions_worker_port: int = 6750
    """The worker's HTTP port (Pulsar's ``workerPort``); 0 picks a free one, kept in
    ``ports.json`` like the others."""
    functions_runtime: str = "process"
    """How the worker runs instances: one subprocess each, or threads of the worker."""
    functions_worker_args: tuple[str, ...] = ()
    """More options for ``magnetar functions-worker`` (the brokers' security settings: it
    checks its callers and presents credentials to the brokers as they do)."""

    def __post_init__(self) -> None:
        if not self.cluster_name:
            raise ValueError("the cluster name must not be empty")
        if self.brokers < 1 or self.bookies < 1:
            raise ValueError("a local cluster needs at least one broker and one bookie")
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise ValueError("need 1 <= ack quorum <= write quorum <= ensemble size")
        if self.bookie_racks and len(self.bookie_racks) != self.bookies:
            raise ValueError(
                f"{len(self.bookie_racks)} bookie racks given for {self.bookies} bookies"
            )
        if self.functions_runtime not in FUNCTIONS_RUNTIMES:
            raise ValueError(f"unknown functions runtime {self.functions_runtime!r}")
        if self.ensemble_size > self.bookies:
            raise ValueError(
                f"ensemble size {self.ensemble_size} needs at least that many bookies "
                f"(got {self.bookies})"
            )


class ClusterProcess:
    """One child process (a bookie, a broker, the Functions Worker): started in its own session (so a Ctrl+C
    in the terminal reaches only ``local-cluster``, which stops the children in order),
    tied to this process by a lifeline, given the fds ``inherited`` (the data directory's
    lock), output appended to ``log_path``, ready once its ready line appears there."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log_path: Path,
        ready: re.Pattern[str],
        inherited: Sequence[int] = (),
    ):
        self.name = name
        self.args = args
        self.log_path = log_path
        self._ready = ready
        self._inherited = tuple(inherited)
        self.proc: subprocess.Popen[bytes] | None = None
        self._lifeline: Lifeline | None = None
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
        self._close_lifeline()
        self._lifeline = lifeline = Lifeline()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                lifeline_command(lifeline.child_fd, self.args, grace_ms=LIFELINE_GRACE_MS),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                pass_fds=(lifeline.child_fd, *self._inherited),
            )
        lifeline.child_started()

    def _close_lifeline(self) -> None:
        """Once the process has ended (a live one would take it as its parent's end)."""
        lifeline, self._lifeline = self._lifeline, None
        if lifeline is not None:
            lifeline.close()

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
        self._close_lifeline()

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
        self._close_lifeline()


class LocalCluster:
    """See the module docstring. Not thread-safe; :meth:`stop` is idempotent."""

    def __init__(self, config: LocalClusterConfig) -> None:
        self.config = config
        self.data_dir = config.data_dir.resolve()
        self.zookeeper: ZooKeeperServer | None = None
        self.bookies: list[ClusterProcess] = []
        self.brokers: list[ClusterProcess] = []
        self.functions_worker: ClusterProcess | None = None
        self._worker_port: int | None = None
        self._lock: DataDirLock | None = None

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
    def web_service_url(self) -> str:
        """All brokers' HTTP addresses in one URL, as Pulsar's ``webServiceUrl`` takes it."""
        hosts = [_host_port(self._broker_urls(b)[1]) for b in self.brokers]
        return "http://" + ",".join(hosts)

    @property
    def admin_url(self) -> str:
        """The first broker's HTTP URL."""
        return self._broker_urls(self.brokers[0])[1]

    @property
    def client_conf(self) -> Path:
        """``client.conf`` for the CLI's ``--config``: the URLs and, when the cluster signs
        its own tokens, the super user's token."""
        return self.data_dir / CLIENT_CONF_FILE

    @property
    def functions_worker_url(self) -> str | None:
        """The Functions Worker's REST API (None without one); every broker forwards to it."""
        port = self._worker_port
        return None if port is None else f"http://127.0.0.1:{port}"

    def wait_functions_worker(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until the Functions Worker has joined its cluster (at once without one); raises
        :class:`LocalClusterError` when it exits or is not ready in time."""
        if self.functions_worker is not None:
            self.functions_worker.wait_ready(timeout_s)

    def broker_service_url(self, index: int) -> str:
        return self._broker_urls(self.brokers[index])[0]

    def broker_admin_url(self, index: int) -> str:
        return self._broker_urls(self.brokers[index])[1]

    @staticmethod
    def _broker_urls(broker: ClusterProcess) -> tuple[str, str]:
        assert broker.ready_match is not None, f"{broker.name} has not started"
        return broker.ready_match.group(1), broker.ready_match.group(2)

    def processes(self) -> list[ClusterProcess]:
        """The bookies, the brokers and the Functions Worker (ZooKeeper is
        :attr:`zookeeper`)."""
        worker = [] if self.functions_worker is None else [self.functions_worker]
        return [*self.bookies, *self.brokers, *worker]

    def process_table(self) -> list[tuple[str, int | None, Path]]:
        """(name, pid, log) of every process, ZooKeeper first; ZooKeeper's pid is its
        supervisor's (:attr:`ZooKeeperServer.pid`)."""
        rows = [(p.name, p.pid, p.log_path) for p in self.processes()]
        if self.zookeeper is not None:
            rows.insert(0, ("zookeeper", self.zookeeper.pid, self.zookeeper.log_file))
        return rows

    def start(self) -> None:
        """Start everything, in order; on a failure, stop what started and raise
        :class:`LocalClusterError` (also when another local cluster uses the data
        directory). The Functions Worker is launched last and not waited for
        (:meth:`wait_functions_worker`): its start (the client library, joining its
        cluster) does not delay the brokers' readiness."""
        cfg = self.config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = DataDirLock(self.data_dir)
        try:
            ports = self._ports()
            if cfg.functions_worker:
                self._worker_port = ports[FUNCTIONS_WORKER][0]
            if cfg.tokens is not None:
                cfg.tokens.ensure(self.data_dir)
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
            self._write_client_conf()
            if cfg.functions_worker:
                self.functions_worker = self._worker()
                self.functions_worker.launch()
        except BaseException:
            self.stop()
            raise

    def _write_client_conf(self) -> None:
        lines = [
            "# written by magnetar local-cluster: magnetar --config <this file> admin ...",
            f"webServiceUrl={self.web_service_url}",
            f"brokerServiceUrl={self.service_url}",
        ]
        if self.config.tokens is not None:
            lines += [
                "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
                f"authParams={ClusterTokens.token_file(self.data_dir).as_uri()}",
            ]
        self.client_conf.write_text("\n".join(lines) + "\n")

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
            FUNCTIONS_WORKER: (cfg.functions_worker_port, int(cfg.functions_worker)),
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
            *(("--rack", cfg.bookie_racks[index]) if cfg.bookie_racks else ()),
        )  # fmt: skip
        return ClusterProcess(
            f"bookie-{index}", args, self.data_dir / f"bookie-{index}.log", _BOOKIE_READY,
            self._inherited(),
        )  # fmt: skip

    def _broker(self, index: int, port: int, http_port: int) -> ClusterProcess:
        cfg = self.config
        args = self._magnetar(
            "broker",
            "--metadata-url", self.metadata_url,
            "--cluster-name", cfg.cluster_name,
            "--port", str(port),
            "--http-port", str(http_port),
            "--ensemble-size", str(cfg.ensemble_size),
            "--write-quorum", str(cfg.write_quorum),
            "--ack-quorum", str(cfg.ack_quorum),
            "--session-timeout-s", str(cfg.session_timeout_s),
            "--log-level", cfg.log_level,
            *cfg.broker_args,
            *self._token_args(),
            *(
                ()
                if self.functions_worker_url is None
                else ("--function-worker-web-service-url", self.functions_worker_url)
            ),
        )  # fmt: skip
        return ClusterProcess(
            f"broker-{index}", args, self.data_dir / f"broker-{index}.log", _BROKER_READY,
            self._inherited(),
        )  # fmt: skip

    def _worker(self) -> ClusterProcess:
        cfg = self.config
        assert self._worker_port is not None
        args = self._magnetar(
            "functions-worker",
            "--worker-id", f"{cfg.cluster_name}-{FUNCTIONS_WORKER}",
            "--host", "127.0.0.1",
            "--port", str(self._worker_port),
            "--service-url", self.service_url,
            "--admin-url", self.web_service_url,
            "--work-dir", str(self.data_dir / FUNCTIONS_WORKER),
            "--runtime", cfg.functions_runtime,
            *cfg.functions_worker_args,
            *self._token_args(),
        )  # fmt: skip
        return ClusterProcess(
            FUNCTIONS_WORKER, args, self.data_dir / f"{FUNCTIONS_WORKER}.log", _WORKER_READY,
            self._inherited(),
        )  # fmt: skip

    def _token_args(self) -> tuple[str, ...]:
        tokens = self.config.tokens
        return () if tokens is None else tokens.broker_args(self.data_dir)

    def _inherited(self) -> tuple[int, ...]:
        """The data directory's lock, held by every child too (see the module docstring)."""
        return () if self._lock is None else (self._lock.fd,)

    def exited(self) -> list[ClusterProcess]:
        """The children that have exited (killed, crashed or stopped one by one)."""
        return [p for p in self.processes() if p.proc is not None and p.proc.poll() is not None]

    def stop(self) -> None:
        """The Functions Worker first (a client of the brokers), then the brokers (they flush
        cursors to the bookies), then bookies, then ZooKeeper."""
        worker = [] if self.functions_worker is None else [self.functions_worker]
        for group in (worker, self.brokers, self.bookies):
            for p in group:
                p.signal(signal.SIGCONT)
                p.signal(signal.SIGTERM)
            for p in group:
                p.stop()
        zookeeper, self.zookeeper = self.zookeeper, None
        if zookeeper is not None:
            zookeeper.stop()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


def _start_all(group: list[ClusterProcess]) -> None:
    """Launch every process of ``group`` at once, then wait for each to be ready."""
    for p in group:
        p.launch()
    for p in group:
        p.wait_ready()


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")
