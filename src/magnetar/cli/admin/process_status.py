"""Pulsar's ``LongRunningProcessStatus`` as the admin commands read it (compaction and
offload status: ``NOT_RUN``, ``RUNNING``, ``SUCCESS``, ``ERROR``)."""

from __future__ import annotations

import time
from typing import Any

from magnetar.cli.admin.context import rest
from magnetar.cli.output import fail


def poll_status(
    path: str, what: str, *, wait_complete: bool, timeout_s: float, interval_s: float
) -> tuple[Any, str | None]:
    """``GET path`` (the status JSON and its ``status``), again every ``interval_s`` while
    it is ``RUNNING`` when ``wait_complete``; fails naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = rest().get(path)
        state = status.get("status") if isinstance(status, dict) else None
        if not wait_complete or state != "RUNNING":
            return status, state
        if time.monotonic() > deadline:
            fail(f"{what} still running after {timeout_s:g} s")
        time.sleep(interval_s)
