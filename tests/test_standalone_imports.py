"""What ``magnetar standalone`` leaves out of its start-up: importing it loads neither the
HTTP side nor optional features, and serving (what the ready line announces) loads neither
the Functions Worker, the client library, Spark nor tiered storage's object store client
(they follow the ready line, or the first use of the feature)."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_ON_IMPORT = (
    "fastapi",
    "uvicorn",
    "prometheus_client",
    "magnetar.admin.app",
    "magnetar.replication",
    "magnetar.functions",
    "magnetar.client",
    "magnetar.spark",
    "magnetar.proxy",
    "fastavro",
    "pyspark",
    "obstore",
)
NOT_WHEN_SERVING = (
    "magnetar.functions.rest",
    "magnetar.functions.worker_service",
    "magnetar.client",
    "magnetar.spark",
    "fastavro",
    "pyspark",
    "obstore",
    "ctypes",
)

IMPORT = """
import json, sys
import magnetar.standalone
print(json.dumps(sorted(sys.modules)))
"""
SERVING = """
import asyncio, json, sys, tempfile
from pathlib import Path
from magnetar.broker.config import BrokerConfig
from magnetar.broker_server import BrokerServerConfig
from magnetar.standalone import Standalone, StandaloneConfig

async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = BrokerServerConfig(http_port=0, broker=BrokerConfig(port=0))
        node = Standalone(StandaloneConfig(data_dir=Path(tmp), server=server))
        await node.start()
        loaded = sorted(sys.modules)  # serving now, as at the ready line
        await node.stop()
    print(json.dumps(loaded))

asyncio.run(main())
"""


def loaded_by(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def heavy(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


def test_importing_the_standalone_loads_no_http_side_nor_optional_feature() -> None:
    assert heavy(loaded_by(IMPORT), NOT_ON_IMPORT) == []


def test_serving_loads_no_worker_client_library_nor_optional_feature() -> None:
    assert heavy(loaded_by(SERVING), NOT_WHEN_SERVING) == []
