"""An instance's counters (Pulsar's function stats): sans-IO, fed by the instance loop,
read as an :class:`InstanceStatus` by the runtime."""

from __future__ import annotations

import collections

from magnetar.common.clock import Clock
from magnetar.functions.instance_status import (
    LATEST_EXCEPTIONS_MAX,
    ExceptionReport,
    InstanceStatus,
)

EXCEPTION_TEXT_CHARS_MAX = 1_000
"""Reported exception strings are cut to this length."""


class InstanceStats:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.received = 0
        self.processed = 0
        self.user_exceptions = 0
        self.system_exceptions = 0
        self.latest_user: collections.deque[ExceptionReport] = collections.deque(
            maxlen=LATEST_EXCEPTIONS_MAX
        )
        self.latest_system: collections.deque[ExceptionReport] = collections.deque(
            maxlen=LATEST_EXCEPTIONS_MAX
        )
        self._latency_total_ms = 0.0
        self.last_invocation_ms = 0

    def record_received(self) -> None:
        self.received += 1

    def record_invocation(self) -> None:
        self.last_invocation_ms = self._clock.now_ms()

    def record_processed(self, latency_ms: float) -> None:
        self.processed += 1
        self._latency_total_ms += latency_ms

    def record_user_exception(self, exc: BaseException) -> None:
        self.user_exceptions += 1
        self.latest_user.append(self._report(exc))

    def record_system_exception(self, exc: BaseException) -> None:
        self.system_exceptions += 1
        self.latest_system.append(self._report(exc))

    @property
    def average_latency_ms(self) -> float:
        return self._latency_total_ms / self.processed if self.processed else 0.0

    def _report(self, exc: BaseException) -> ExceptionReport:
        text = f"{type(exc).__name__}: {exc}"[:EXCEPTION_TEXT_CHARS_MAX]
        return ExceptionReport(text, self._clock.now_ms())

    def snapshot(
        self,
        *,
        instance_id: int,
        running: bool,
        worker_id: str = "",
        error: str = "",
        num_restarts: int = 0,
    ) -> InstanceStatus:
        return InstanceStatus(
            instance_id=instance_id,
            running=running,
            worker_id=worker_id,
            error=error,
            num_restarts=num_restarts,
            num_received=self.received,
            num_successfully_processed=self.processed,
            num_user_exceptions=self.user_exceptions,
            num_system_exceptions=self.system_exceptions,
            latest_user_exceptions=tuple(self.latest_user),
            latest_system_exceptions=tuple(self.latest_system),
            average_latency_ms=self.average_latency_ms,
            last_invocation_time_ms=self.last_invocation_ms,
        )
