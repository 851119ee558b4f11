"""The contract between the worker's runtime manager and an instance runtime.

The runtime manager (every worker) reads the assignments meant for its worker and, for each,
builds an :class:`InstanceSpec` and asks an :class:`InstanceRuntime` to run it; the runtime
(thread or subprocess) supervises the instance — restarting a crashed one with backoff — and
answers :meth:`InstanceRuntime.status` at any time. Stopping is always bounded.

    runtime: InstanceRuntime = ProcessRuntime(...)      # or ThreadRuntime(...)
    await runtime.start(spec)
    runtime.status()                                    # InstanceStatus
    await runtime.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.functions.function_config import FunctionConfig
from magnetar.functions.instance_status import InstanceStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSpec:
    """One instance to run: instance ``instance_id`` (0 ≤ id < parallelism) of ``config``."""

    config: FunctionConfig
    instance_id: int
    package_path: Path | None
    """The downloaded package on this worker's disk (a ``.py`` file, a module directory, a
    zip or a wheel); None for built-in sources and sinks."""
    service_url: str
    """Where the instance's consumers and producers connect (``pulsar://host:6650``)."""
    admin_url: str
    worker_id: str
    work_dir: Path
    """The instance's own directory (virtualenv for ``requirements.txt``, unpacked package)."""
    client_credentials: ClientCredentials = NO_CREDENTIALS
    """What the instance presents to the broker (the worker's own credentials)."""

    @property
    def instance_key(self) -> str:
        """``tenant/namespace/name:id``, as Pulsar names an instance in assignments."""
        return f"{self.config.fqfn}:{self.instance_id}"

    def to_json(self) -> dict[str, Any]:
        """For handing the spec to another process (the process runtime's instance)."""
        return {
            "config": self.config.to_json(),
            "instanceId": self.instance_id,
            "packagePath": None if self.package_path is None else str(self.package_path),
            "serviceUrl": self.service_url,
            "adminUrl": self.admin_url,
            "workerId": self.worker_id,
            "workDir": str(self.work_dir),
            "clientCredentials": self.client_credentials.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InstanceSpec:
        """Raises InvalidFunctionConfig, KeyError or TypeError for a malformed document."""
        package = data.get("packagePath")
        return cls(
            config=FunctionConfig.from_json(data["config"]),
            instance_id=int(data["instanceId"]),
            package_path=None if package is None else Path(package),
            service_url=str(data["serviceUrl"]),
            admin_url=str(data["adminUrl"]),
            worker_id=str(data.get("workerId", "")),
            work_dir=Path(data["workDir"]),
            client_credentials=ClientCredentials.from_json(data.get("clientCredentials")),
        )


class InstanceRuntime(Protocol):
    """Runs one instance. ``start`` returns once the instance was launched (not once it
    processed anything); failures to import, install or connect show in ``status().error``
    and never raise out of ``start``. ``stop`` is idempotent and bounded."""

    async def start(self, spec: InstanceSpec) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> InstanceStatus: ...
