"""The functions' REST routes are built when the standalone starts, before its worker joins:
building them must not import the worker and its client library (a tenth of the start-up)."""

from __future__ import annotations

import json
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


STANDALONE = """
import asyncio, json, sys, tempfile, urllib.request
from pathlib import Path
from magnetar.broker.config import BrokerConfig
from magnetar.broker_server import BrokerServerConfig
from magnetar.standalone import Standalone, StandaloneConfig

async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = BrokerServerConfig(http_port=0, broker=BrokerConfig(port=0))
        config = StandaloneConfig(data_dir=Path(tmp), server=server)
        node = Standalone(config)
        await node.start()
        # serving now, as at the ready line: the worker's routes are not built yet
        built_at_start = "magnetar.functions.rest" in sys.modules
        url = f"http://127.0.0.1:{node.http.port}/admin/v3/functions/public/default"
        status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).status)
        await node.stop()
    print(json.dumps({"built_at_start": built_at_start, "status": status}))

asyncio.run(main())
"""


def test_the_standalone_builds_the_worker_routes_after_it_serves() -> None:
    """Not on the way to the ready line; the first request builds the admin app with them
    and is answered by them."""
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"built_at_start": False, "status": 200}
