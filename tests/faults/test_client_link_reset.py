"""A client's link to its broker reset on the client's side only (a middlebox that lost its
state): the consumer learns at once and reconnects, while the broker still holds its
registration on the old, now silent, connection until its keep-alive gives up on it.
Meanwhile the broker answers the new SUBSCRIBE with ConsumerBusy; ``magnetar client consume``
must retry it (as Pulsar's clients keep reconnecting an established consumer) instead of
exiting with "fatal error on reconnect" (issue 38).

Real processes: ``magnetar standalone`` advertising the address of a
:class:`~magnetar.testing.fault_proxy.FaultProxy` in front of it, so every client connection
goes through the proxy; its keep-alive every 2 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from magnetar.metadata.zookeeper_server import free_port
from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.fault_proxy import FaultProxy
from tests.faults.consume_output import consumed

pytestmark = pytest.mark.timeout(120)

TOPIC = "persistent://public/default/link-reset"


def send(url: str, payload: str) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        client.create_producer(TOPIC).send(payload.encode())
    finally:
        client.close()


def test_consumer_retries_consumer_busy_after_a_one_sided_reset(tmp_path: Path) -> None:
    port = free_port()
    with FaultProxy("127.0.0.1", port) as link:
        node = StandaloneProcess(
            tmp_path / "data", "--advertised-listeners", f"internal:pulsar://{link.address}",
            "--keep-alive-interval-seconds", "2",
        )  # fmt: skip
        node.port = port
        consumer: subprocess.Popen[bytes] | None = None
        try:
            node.start()
            url = f"pulsar://{link.address}"
            out = tmp_path / "consumer.out"
            with out.open("wb") as stdout, (tmp_path / "consumer.err").open("wb") as stderr:
                consumer = subprocess.Popen(
                    [
                        sys.executable, "-m", "magnetar.cli.main", "client", "--url", url,
                        "--output", "json", "consume", TOPIC, "-s", "sub", "-n", "0",
                    ],
                    stdout=stdout, stderr=stderr,
                )  # fmt: skip
            wait_until(
                lambda: "subscribed" in (tmp_path / "consumer.err").read_text(), timeout_s=30,
                what="the consumer subscribed",
            )  # fmt: skip
            send(url, "before")
            wait_until(lambda: "before" in consumed(out), timeout_s=30, what="'before' consumed")

            link.reset_connections(client_side_only=True)
            send(url, "after")
            wait_until(
                lambda: "after" in consumed(out) or consumer.poll() is not None,  # type: ignore[union-attr]
                timeout_s=60, what="'after' consumed",
            )  # fmt: skip
            assert consumer.poll() is None, (tmp_path / "consumer.err").read_text()
        finally:
            if consumer is not None and consumer.poll() is None:
                consumer.kill()
                consumer.wait(10)
            node.kill()
