"""Test support: an event loop on a thread of its own for the runtimes, so tests can drive
them from plain (blocking) code next to the official ``pulsar`` client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_status import InstanceStatus
from magnetar.functions.process_runtime import ProcessRuntime
from magnetar.functions.thread_runtime import ThreadRuntime

T = TypeVar("T")
CALL_TIMEOUT_S = 60.0

Runtime = ThreadRuntime | ProcessRuntime


class RuntimeHost:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.runtimes: list[Runtime] = []

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_TIMEOUT_S)

    def start(self, runtime: Runtime, spec: InstanceSpec) -> Runtime:
        self.runtimes.append(runtime)
        self.call(runtime.start(spec))
        return runtime

    def status(self, runtime: Runtime) -> InstanceStatus:
        async def read() -> InstanceStatus:
            return runtime.status()

        return self.call(read())

    def stop(self, runtime: Runtime) -> None:
        self.call(runtime.stop())

    def close(self) -> None:
        for runtime in self.runtimes:
            self.call(runtime.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CALL_TIMEOUT_S)


@contextmanager
def runtime_host() -> Iterator[RuntimeHost]:
    host = RuntimeHost()
    try:
        yield host
    finally:
        host.close()
