"""Spark ``local[2]`` against ``magnetar standalone`` run as a real process.

One Spark session and one standalone are shared by the whole test session -- a Spark
session takes ~5 s to start. Deduplication is on for namespace ``public/default`` through
the admin API (as docs/spark.md tells users), not by the broker-wide flag. Tests use unique topic names. Tests that
stop or kill the broker start their own standalone with ``standalone_factory``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

import magnetar.spark
from magnetar.client import Client
from magnetar.testing import StandaloneProcess
from magnetar.testing.s3_server import S3Server

_names = itertools.count()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("spark-standalone") / "data") as node:
        admin(node, "POST", "/admin/v2/namespaces/public/default/deduplication", True)
        yield node


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Python workers must run the project's interpreter (magnetar, pyarrow).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Executors take S3 credentials from their environment, fixed when the session starts:
    # the test S3 server's (moto accepts any).
    os.environ.update(S3Server.env())
    session = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic() -> str:
    return f"spark-t{next(_names)}-{os.getpid()}"


def admin(node: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    """One admin REST call; the JSON answer (None when empty). Raises HTTPError."""
    req = urllib.request.Request(
        node.http_url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status in (200, 204)
        raw = resp.read()
    return json.loads(raw) if raw else None


def create_partitioned(node: StandaloneProcess, topic: str, partitions: int) -> None:
    admin(node, "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", partitions)


def produce(
    url: str,
    topic: str,
    values: list[bytes],
    *,
    keys: list[str] | None = None,
    properties: Callable[[int], dict[str, str]] | None = None,
    event_times: list[int] | None = None,
    batching: bool = True,
) -> None:
    """Send ``values`` (batched unless ``batching`` is false: one entry per message) and
    wait until all are stored."""

    async def main() -> None:
        async with Client(url) as client:
            producer: Any = await client.create_producer(
                topic, max_pending_messages=10_000, batching_enabled=batching
            )
            futures = []
            for i, value in enumerate(values):
                futures.append(
                    producer.send_async(
                        value,
                        partition_key=keys[i] if keys else None,
                        properties=properties(i) if properties else None,
                        event_timestamp=event_times[i] if event_times else None,
                    )
                )
                if len(futures) >= 5000:
                    await asyncio.gather(*futures)
                    futures.clear()
            await producer.flush()
            await asyncio.gather(*futures)

    asyncio.run(main())


def read_all(spark: SparkSession, url: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("magnetar").option("service_url", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


# The S3-compatible server of the tiered-storage tests (moto's, its own process).
from tests.offload.conftest import s3_config, s3_server  # noqa: E402, F401
