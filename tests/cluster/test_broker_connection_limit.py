"""A cluster broker (``magnetar broker`` on ZooKeeper, with a ``magnetar bookie``) enforces
``--broker-max-connections`` and ``--broker-max-connections-per-ip`` as the standalone does:
they are the same broker (:mod:`magnetar.broker_server`)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from magnetar.client import Client
from magnetar.common.errors import NotAllowed
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        ("--broker-max-connections", r"Reached the maximum number of connections \(1\)"),
        (
            "--broker-max-connections-per-ip",
            r"maximum number of connections on address 127\.0\.0\.1 \(1\)",
        ),
    ],
)
def test_a_cluster_broker_refuses_connections_over_its_limit(
    zookeeper_url: str, tmp_path: Path, option: str, refusal: str
) -> None:
    bookie = BookieProcess(zookeeper_url, tmp_path / "bookie")
    broker = BrokerProcess(
        zookeeper_url,
        tmp_path / "broker.log",
        "--session-timeout-s", "2",
        "--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1",
        option, "1",
    )  # fmt: skip
    try:
        bookie.start()
        wait_until(lambda: " ready" in bookie.log(), timeout_s=30, what="the bookie")
        broker.start()
        topic = f"persistent://public/default/limit-{uuid.uuid4().hex[:8]}"

        async def scenario() -> None:
            async with Client(broker.url) as first:
                producer = await first.create_producer(topic)
                second = Client(broker.url)
                with pytest.raises(NotAllowed, match=refusal):
                    await second.create_producer(topic)
                await second.close()
                await producer.send(b"the admitted connection is still served")

        asyncio.run(scenario())
        assert broker.proc is not None and broker.proc.poll() is None
    finally:
        broker.kill()
        bookie.kill()
