"""What the fuzz and memory tests observe of a ``magnetar standalone`` process from outside:
its resident memory, and whether the official client can still produce and consume."""

from __future__ import annotations

import logging
import urllib.request
import uuid

import pulsar

from magnetar.testing import StandaloneProcess, wait_until

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)

MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` in ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def pid_of(node: StandaloneProcess) -> int:
    assert node.proc is not None and node.proc.poll() is None, "the standalone is not running"
    return node.proc.pid


def wait_for_rss_below(node: StandaloneProcess, limit_bytes: int, timeout_s: float = 30) -> int:
    """Wait until the process's RSS is at most ``limit_bytes`` (freed memory goes back to the
    system within seconds: the standalone trims its heap every 2 s); returns the RSS seen.
    Fails with the last reading otherwise."""
    seen: list[int] = []

    def below() -> bool:
        seen.append(rss_bytes(pid_of(node)))
        return seen[-1] <= limit_bytes

    try:
        wait_until(below, timeout_s=timeout_s, interval_s=0.25, what="RSS back down")
    except AssertionError:
        raise AssertionError(
            f"RSS stayed at {seen[-1] / MIB:.0f} MiB, above {limit_bytes / MIB:.0f} MiB"
        ) from None
    return seen[-1]


def produce_and_consume(url: str, count: int = 10) -> None:
    """The official client publishes ``count`` messages and a consumer receives them all."""
    client = pulsar.Client(url, operation_timeout_seconds=15, logger=_client_log)
    try:
        topic = f"persistent://public/default/after-fuzz-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode())
        got = []
        for _ in range(count):
            msg = consumer.receive(10_000)
            consumer.acknowledge(msg)
            got.append(msg.data())
        assert got == [f"m{i}".encode() for i in range(count)]
    finally:
        client.close()


def warm_up(node: StandaloneProcess) -> int:
    """Serve one producer and consumer and one admin request (lazy imports, the admin app
    built after the ready line and the first topic's caches are in place); returns the RSS
    then, the baseline the memory checks compare against."""
    produce_and_consume(node.url)
    with urllib.request.urlopen(f"{node.http_url}/admin/v2/clusters", timeout=30) as reply:
        assert reply.status == 200
    return rss_bytes(pid_of(node))
