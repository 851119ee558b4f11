"""Every worker's runtime manager: runs the instances the ``assignments`` topic gives this
worker, through an injected runtime factory (``Callable[[InstanceSpec], InstanceRuntime]``:
thread or process runtime).

:func:`plan_runtime` is the sans-IO core: from what should run here (instance key -> the
definition's record) and what runs (instance key -> generation) it answers which instances to
stop and which to start. An instance is restarted when its definition's ``generation``
changes (update, restart); one listed in ``stoppedInstances`` is stopped and stays stopped.

:class:`RuntimeManager` carries the plan out, one reconciliation at a time (a request that
arrives during one runs once it is over, coalesced). A package that cannot be fetched, or a
factory that raises, leaves an error in the instance's status; the worker and its other
instances keep running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.common.errors import MagnetarError
from magnetar.functions.assignment_table import AssignmentTable, split_instance_key
from magnetar.functions.function_registry import FunctionRecord, FunctionRegistry, PackageRef
from magnetar.functions.instance_spec import InstanceRuntime, InstanceSpec
from magnetar.functions.instance_status import InstanceStatus

log = logging.getLogger(__name__)

RuntimeFactory = Callable[[InstanceSpec], InstanceRuntime]
FetchPackage = Callable[[PackageRef], Awaitable[Path]]
STOP_TIMEOUT_MS = 10_000
"""How long stopping one instance may take before the manager moves on."""


@dataclass(frozen=True, slots=True)
class RuntimePlan:
    stop: tuple[str, ...]
    start: tuple[str, ...]


def wanted_here(
    worker_id: str, registry: FunctionRegistry, table: AssignmentTable
) -> dict[str, FunctionRecord]:
    """Instance key -> record, for the instances assigned to ``worker_id`` whose definition
    exists and whose instance is not stopped."""
    out: dict[str, FunctionRecord] = {}
    for key in table.of_worker(worker_id):
        fqfn, index = split_instance_key(key)
        record = registry.get(fqfn)
        if record is None or index >= record.config.parallelism:
            continue
        if index in record.stopped_instances:
            continue
        out[key] = record
    return out


def plan_runtime(wanted: Mapping[str, FunctionRecord], running: Mapping[str, int]) -> RuntimePlan:
    """Stop what runs but is not wanted (or runs an older generation); start what is wanted
    and not running (or being restarted). Both in key order."""
    stop = sorted(k for k, gen in running.items() if k not in wanted or wanted[k].generation != gen)
    start = sorted(k for k, rec in wanted.items() if k not in running or k in stop)
    return RuntimePlan(tuple(stop), tuple(start))


RUNTIME_KINDS = ("thread", "process")


def runtime_factory(kind: str) -> RuntimeFactory:
    """The factory of the instance runtime named ``kind``: ``thread``
    (:class:`~magnetar.functions.thread_runtime.ThreadRuntime`, instances on the worker's own
    event loop) or ``process`` (:class:`~magnetar.functions.process_runtime.ProcessRuntime`,
    one subprocess each). Raises ValueError for another name."""
    if kind == "thread":
        from magnetar.functions.thread_runtime import ThreadRuntime

        return lambda spec: ThreadRuntime()
    if kind == "process":
        from magnetar.functions.process_runtime import ProcessRuntime

        return lambda spec: ProcessRuntime()
    raise ValueError(f"unknown instance runtime {kind!r} (expected one of {RUNTIME_KINDS})")


class RuntimeManager:
    """Runs this worker's instances. Not thread-safe; one event loop drives it."""

    def __init__(
        self,
        *,
        worker_id: str,
        factory: RuntimeFactory,
        fetch_package: FetchPackage,
        service_url: str,
        admin_url: str,
        work_dir: Path,
        client_credentials: ClientCredentials = NO_CREDENTIALS,
    ) -> None:
        self.worker_id = worker_id
        self._factory = factory
        self._fetch_package = fetch_package
        self._service_url = service_url
        self._admin_url = admin_url
        self._client_credentials = client_credentials
        self._work_dir = work_dir
        self._running: dict[str, tuple[int, InstanceRuntime]] = {}
        self._failed: dict[str, InstanceStatus] = {}
        self._lock = asyncio.Lock()
        self.started_total = 0
        """Instances started since the manager was created (for tests and metrics)."""

    def running_keys(self) -> list[str]:
        """The instance keys this worker runs (started, whatever their health), sorted."""
        return sorted(self._running)

    def status(self, instance_key: str) -> InstanceStatus | None:
        """The status of a local instance: its runtime's, or why it could not start; None
        when this worker does not run it."""
        entry = self._running.get(instance_key)
        if entry is not None:
            return entry[1].status()
        return self._failed.get(instance_key)

    async def reconcile(self, registry: FunctionRegistry, table: AssignmentTable) -> None:
        """Bring the running instances to what ``registry`` and ``table`` say now."""
        async with self._lock:
            wanted = wanted_here(self.worker_id, registry, table)
            running = {k: gen for k, (gen, _) in self._running.items()}
            plan = plan_runtime(wanted, running)
            for key in plan.stop:
                await self._stop(key)
            for key in list(self._failed):
                if key not in wanted or key in plan.start:
                    del self._failed[key]
            for key in plan.start:
                await self._start(key, wanted[key])

    async def close(self) -> None:
        """Stop every instance (each bounded by :data:`STOP_TIMEOUT_MS`)."""
        async with self._lock:
            for key in sorted(self._running):
                await self._stop(key)

    async def _stop(self, key: str) -> None:
        _, runtime = self._running.pop(key)
        try:
            await asyncio.wait_for(runtime.stop(), STOP_TIMEOUT_MS / 1000)
        except TimeoutError:
            log.error("instance %s did not stop within %d ms", key, STOP_TIMEOUT_MS)
        except Exception:
            log.exception("stopping instance %s failed", key)
        log.info("worker %s stopped %s", self.worker_id, key)

    async def _start(self, key: str, record: FunctionRecord) -> None:
        _, index = split_instance_key(key)
        package_path: Path | None = None
        try:
            if record.package is not None:
                package_path = await self._fetch_package(record.package)
            spec = InstanceSpec(
                config=record.config,
                instance_id=index,
                package_path=package_path,
                service_url=self._service_url,
                admin_url=self._admin_url,
                client_credentials=self._client_credentials,
                worker_id=self.worker_id,
                work_dir=self._work_dir / "instances" / key.replace("/", "_").replace(":", "-"),
            )
            runtime = self._factory(spec)
            await runtime.start(spec)
        except (MagnetarError, OSError, ValueError) as exc:
            log.warning("worker %s cannot start %s: %s", self.worker_id, key, exc)
            self._failed[key] = InstanceStatus(
                instance_id=index, running=False, worker_id=self.worker_id, error=str(exc)
            )
            return
        self._running[key] = (record.generation, runtime)
        self.started_total += 1
        log.info("worker %s started %s (generation %d)", self.worker_id, key, record.generation)
