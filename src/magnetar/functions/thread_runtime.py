"""Running an instance inside the worker's own process, on an asyncio task (``process`` in
a thread of its own): for tests and small deployments. :mod:`process_runtime` isolates
instances from each other and from the worker; this one shares the interpreter, so a
package's modules and requirements are visible to every thread-run instance, and a
``process`` that never returns keeps its thread until the worker exits.

    runtime = ThreadRuntime()
    await runtime.start(spec)      # returns at once; preparing and importing happen after
    runtime.status()               # InstanceStatus: running, error, counters
    await runtime.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from magnetar.common.clock import Clock, SystemClock
from magnetar.functions.function_loader import PackageError
from magnetar.functions.instance_factory import load_instance, prepare_instance
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_stats import InstanceStats
from magnetar.functions.instance_status import InstanceStatus
from magnetar.functions.restart_backoff import RestartBackoff

STOP_TIMEOUT_MS = 10_000
"""How long :meth:`ThreadRuntime.stop` waits for the instance to close its client."""

_log = logging.getLogger(__name__)


class ThreadRuntime:
    """An :class:`~magnetar.functions.instance_spec.InstanceRuntime` on this event loop.

    A package that cannot be prepared or imported is not retried (it would fail the same
    way): ``status()`` shows the error and ``running`` false. An instance that fails while
    running (broker unreachable, a state write refused) is restarted with backoff."""

    def __init__(
        self, *, clock: Clock | None = None, backoff: RestartBackoff | None = None
    ) -> None:
        self._clock = clock or SystemClock()
        self._backoff = backoff or RestartBackoff()
        self._stats = InstanceStats(self._clock)
        self._spec: InstanceSpec | None = None
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._error = ""
        self._restarts = 0
        self._failed_permanently = False

    async def start(self, spec: InstanceSpec) -> None:
        if self._task is not None:
            raise RuntimeError("ThreadRuntime.start called twice")
        self._spec = spec
        self._task = asyncio.create_task(self._supervise(spec), name=f"fn {spec.instance_key}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, STOP_TIMEOUT_MS / 1000)
        self._running = False

    @property
    def failed_permanently(self) -> bool:
        """The package could not be prepared or imported: nothing will run until the
        instance is started again with another package."""
        return self._failed_permanently

    def status(self) -> InstanceStatus:
        spec = self._spec
        return self._stats.snapshot(
            instance_id=spec.instance_id if spec is not None else -1,
            running=self._running,
            worker_id=spec.worker_id if spec is not None else "",
            error=self._error,
            num_restarts=self._restarts,
        )

    async def _supervise(self, spec: InstanceSpec) -> None:
        try:
            prepared = await prepare_instance(spec)
            make_instance = await asyncio.to_thread(
                lambda: load_instance(
                    spec,
                    prepared,
                    clock=self._clock,
                    stats=self._stats,
                    on_running=self._mark_running,
                )
            )
        except (PackageError, OSError) as exc:
            self._error = str(exc)
            self._failed_permanently = True
            _log.warning("%s: %s", spec.instance_key, exc)
            return
        attempt = 0
        while True:
            instance = make_instance()
            try:
                await instance.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Anything that stopped the loop (the broker, the state topic, a bug):
                # reported and retried, never taking the worker down.
                self._running = False
                self._error = f"{type(exc).__name__}: {exc}"
                self._stats.record_system_exception(exc)
                _log.warning("%s stopped: %s", spec.instance_key, self._error)
            self._restarts += 1
            delay_ms = self._backoff.delay_ms(attempt)
            attempt += 1
            await self._clock.sleep(delay_ms / 1000)

    def _mark_running(self) -> None:
        self._running = True
        self._error = ""
