"""What ``magnetar standalone`` leaves out of its start-up: importing it loads neither the
HTTP side nor optional features, and serving (what the ready line announces) loads neither
the admin app (FastAPI, pydantic, prometheus-client), the Functions Worker, the client
library, Spark nor tiered storage's object store client (they follow the ready line, or the
first use of the feature). Without the Functions Worker neither is the HTTP server itself:
the port listens, and uvicorn starts with the first connection. An HTTP request that comes before the admin app is built waits
for it and is served. Without the Functions Worker the admin app is built only when the
first HTTP request comes, and so it is with the Functions Worker, whose routes are built
with the app: an idle standalone never imports the web framework, though its worker joins."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

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
    "cramjam",
    "lz4",
    "importlib.metadata",
    "fastapi",
    "starlette",
    "pydantic",
    "prometheus_client",
    "magnetar.admin.app",
    "magnetar.admin.metrics",
    "magnetar.broker.controller",
    "magnetar.broker.ownership",
    "magnetar.functions.rest",
    "magnetar.functions.worker_service",
    "magnetar.client",
    "magnetar.spark",
    "fastavro",
    "pyspark",
    "obstore",
    "ctypes",
    # the protobuf classes and the converters built from them: at the first frame
    "google.protobuf.descriptor",
    "google._upb",
    "magnetar.protocol._convert",
    "magnetar.protocol.generated.PulsarApi_pb2",
    "magnetar.bookie_protocol.bookie_pb2",
)

WORKER_NOT_WHEN_IDLE = ("http.client", "urllib.request", "email")
"""HTTP client modules a joined Functions Worker does not hold until it sends an HTTP
request (its client speaks the binary protocol)."""

IMPORT = """
import json, sys
import magnetar.standalone
print(json.dumps(sorted(sys.modules)))
"""
_SERVER_SCRIPT_HEAD = """
import asyncio, json, sys, tempfile
from pathlib import Path
from magnetar.broker.config import BrokerConfig
from magnetar.broker_server import APP_AFTER_WAIT_S, BrokerServerConfig
from magnetar.standalone import Standalone, StandaloneConfig

def get(url: str) -> list[object]:
    import urllib.request  # here: what the process imports itself is looked at before

    with urllib.request.urlopen(url, timeout=60) as response:
        return [response.status, json.loads(response.read())]

async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = BrokerServerConfig(http_port=0, broker=BrokerConfig(port=0))
"""
"""What both server scripts start with: imports, ``get``, the data and server settings."""

SERVING = (
    _SERVER_SCRIPT_HEAD
    + """
        node = Standalone(StandaloneConfig(data_dir=Path(tmp), server=server))
        await node.start()
        loaded = sorted(sys.modules)  # serving now, as at the ready line
        assert node.http is not None
        url = f"http://127.0.0.1:{node.http.port}/admin/v2/clusters"
        # sent before the admin app is built: it waits for it, then is answered
        answer = await asyncio.to_thread(get, url)
        await node.stop()
    print(json.dumps([loaded, answer]))

asyncio.run(main())
"""
)

IDLE_WITHOUT_WORKER = (
    _SERVER_SCRIPT_HEAD
    + """
        config = StandaloneConfig(data_dir=Path(tmp), server=server, functions_worker=False)
        node = Standalone(config)
        await node.start()
        node.ready_line(0.0)  # what a built-after-ready app waits for
        # idle for a while: an app built after the ready line has begun its imports by now
        await asyncio.sleep(2 * APP_AFTER_WAIT_S)
        idle = "fastapi" in sys.modules or "uvicorn" in sys.modules
        assert node.http is not None
        answer = await asyncio.to_thread(get, f"http://127.0.0.1:{node.http.port}/admin/v2/clusters")
        await node.stop()
    print(json.dumps([idle, answer]))

asyncio.run(main())
"""
)


IDLE_WITH_WORKER = (
    f"HTTP_CLIENT = {WORKER_NOT_WHEN_IDLE!r}\n"
    + _SERVER_SCRIPT_HEAD
    + """
        from magnetar.testing.wait import wait_until_async

        node = Standalone(StandaloneConfig(data_dir=Path(tmp), server=server))
        await node.start()
        node.ready_line(0.0)
        await wait_until_async(lambda: node.functions_worker is not None, timeout_s=60)
        idle = "fastapi" in sys.modules or "uvicorn" in sys.modules
        http_client = sorted(m for m in HTTP_CLIENT if m in sys.modules)
        assert node.http is not None
        base = f"http://127.0.0.1:{node.http.port}"
        members = await asyncio.to_thread(get, f"{base}/admin/v2/worker/cluster")
        await node.stop()
    print(json.dumps([idle, members, http_client]))

asyncio.run(main())
"""
)


def output_of(code: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def heavy(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


def test_importing_the_standalone_loads_no_http_side_nor_optional_feature() -> None:
    assert heavy(set(output_of(IMPORT)), NOT_ON_IMPORT) == []


def test_serving_loads_no_admin_app_worker_nor_optional_feature_yet_answers_http() -> None:
    loaded, answer = output_of(SERVING)
    assert heavy(set(loaded), NOT_WHEN_SERVING) == []
    assert answer == [200, ["standalone"]]


def test_without_the_worker_the_admin_app_is_built_by_the_first_request() -> None:
    idle_loaded_fastapi, answer = output_of(IDLE_WITHOUT_WORKER)
    assert not idle_loaded_fastapi
    assert answer == [200, ["standalone"]]


def test_with_the_worker_the_admin_app_is_built_by_the_first_request_too() -> None:
    """The worker joins (leader election over its Failover subscription) without the app;
    the first request builds the app with the worker's routes, which answer it."""
    idle_loaded_fastapi, (status, members), http_client = output_of(IDLE_WITH_WORKER)
    assert not idle_loaded_fastapi
    assert http_client == []
    assert status == 200
    assert [m["workerId"] for m in members] == ["standalone"]
