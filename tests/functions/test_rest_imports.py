"""The functions' REST routes are built when the standalone starts, before its worker joins:
building them must not import the worker and its client library (a tenth of the start-up)."""

from __future__ import annotations

import subprocess
import sys

LOADED = """
print(" ".join(m for m in sys.modules if m.startswith(("magnetar.client", "fastavro"))))
"""
ROUTES = """
import sys
from magnetar.functions.rest import ServiceSlot, router

router(ServiceSlot())
"""
WORKER = """
import sys
import magnetar.functions

assert magnetar.functions.FunctionsWorker.__name__ == "FunctionsWorker"
"""


def loaded_after(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + LOADED],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_routes_are_built_without_the_client_library() -> None:
    assert loaded_after(ROUTES) == []


def test_the_worker_is_still_reachable_from_the_package() -> None:
    assert "magnetar.client" in loaded_after(WORKER)
