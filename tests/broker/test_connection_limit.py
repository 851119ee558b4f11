"""Connection limits (Pulsar's ``brokerMaxConnections``, ``brokerMaxConnectionsPerIp``):
the pure counter, then a real standalone with ``magnetar.client`` and the official wheel. A
connection over a limit is answered Error NotAllowedError with the reason and closed; the
broker keeps serving, and a closed connection frees its place."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Callable

import pulsar
import pytest

from magnetar.broker.connection_limit import ConnectionLimiter
from magnetar.client import Client
from magnetar.common.errors import NotAllowed
from magnetar.testing import StandaloneProcess, wait_until


def test_limiter_counts_in_all_and_per_ip() -> None:
    limiter = ConnectionLimiter(max_connections=3, max_connections_per_ip=2)
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") is None
    refused = limiter.admit("10.0.0.1")
    assert refused == "Reached the maximum number of connections on address 10.0.0.1 (2)"
    assert limiter.admit("10.0.0.2") is None
    assert limiter.admit("10.0.0.3") == "Reached the maximum number of connections (3)"
    assert limiter.refused_total == 2 and limiter.open_connections == 3
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.3") is None
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        limiter.release(ip)
    assert limiter.open_connections == 0
    assert limiter._per_ip == {}  # nothing held for IPs without connections


def test_no_limit_by_default() -> None:
    limiter = ConnectionLimiter()
    assert all(limiter.admit("10.0.0.1") is None for _ in range(1000))


def _metric(node: StandaloneProcess, name: str) -> float:
    with urllib.request.urlopen(f"{node.http_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    line = next(x for x in text.splitlines() if x.startswith(f"{name} "))
    return float(line.split()[-1])


def _refused_total(node: StandaloneProcess) -> float:
    return _metric(node, "magnetar_connections_refused_total")


def test_connections_over_the_per_ip_limit_are_refused(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory("--broker-max-connections-per-ip", "2", "--no-functions-worker")
    topic = f"persistent://public/default/limit-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        first, second = Client(node.url), Client(node.url)
        producers = [await c.create_producer(topic) for c in (first, second)]
        third = Client(node.url)
        with pytest.raises(
            NotAllowed, match=r"maximum number of connections on address 127\.0\.0\.1"
        ):
            await third.create_producer(topic)
        await third.close()
        for producer in producers:  # the admitted connections keep working
            await producer.send(b"still served")
        await first.close()  # frees a place, once the broker has seen it close
        await asyncio.to_thread(wait_until, lambda: _metric(node, "pulsar_active_connections") == 1)
        fourth = Client(node.url)
        try:
            await (await fourth.create_producer(topic)).send(b"admitted again")
        finally:
            await fourth.close()
            await second.close()

    asyncio.run(scenario())
    assert _refused_total(node) == 1

    # The official client is refused the same way (it reports a failed connection).
    held = [pulsar.Client(node.url, operation_timeout_seconds=10) for _ in range(2)]
    over = pulsar.Client(node.url, operation_timeout_seconds=3)
    try:
        for client in held:
            client.create_producer(topic).send(b"x")
        with pytest.raises(pulsar.PulsarException):
            over.create_producer(topic)
        wait_until(lambda: _refused_total(node) > 1, timeout_s=10)
    finally:
        over.close()
        for client in held:
            client.close()
    assert node.proc is not None and node.proc.poll() is None


def test_connections_over_the_broker_limit_are_refused(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory("--broker-max-connections", "1", "--no-functions-worker")
    topic = f"persistent://public/default/limit-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with Client(node.url) as first:
            await first.create_producer(topic)
            second = Client(node.url)
            with pytest.raises(
                NotAllowed, match=r"Reached the maximum number of connections \(1\)"
            ):
                await second.create_producer(topic)
            await second.close()

    asyncio.run(scenario())
    assert node.proc is not None and node.proc.poll() is None
