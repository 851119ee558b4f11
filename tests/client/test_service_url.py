"""Service URLs listing several hosts (``pulsar://h1:p1,h2:p2``, ``pulsar+ssl://…``,
``http://…``): every host is used, and a host that is down is passed over for the next.

The resolver is sans-IO and checked alone; the rest runs real processes: a standalone
behind a URL whose first host is a port nothing listens on, and two standalones of which
the first is killed, driven through ``magnetar client`` as a user would. Also the one-line
error of ``magnetar client produce`` for a message over the broker's limit, which names
``-c/--chunking``.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.client import Client, InitialPosition
from magnetar.client.errors import InvalidConfiguration
from magnetar.client.service_url import ServiceNameResolver, ServiceUrl
from magnetar.testing import StandaloneProcess

RUN_TIMEOUT_S = 60.0


def _down_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _host(url: str) -> str:
    return url.split("://", 1)[1]


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        env=dict(os.environ),
    )  # fmt: skip


# ------------------------------------------------------------------ parsing, order


def test_a_service_url_gives_one_url_per_host() -> None:
    assert ServiceUrl.parse("pulsar://a:6650,b:6651").urls == ("pulsar://a:6650", "pulsar://b:6651")
    ssl = ServiceUrl.parse("pulsar+ssl://a:6651, b:6651")
    assert ssl.urls == ("pulsar+ssl://a:6651", "pulsar+ssl://b:6651") and ssl.tls
    http = ServiceUrl.parse("http://a:8080,b:8080/")
    assert http.urls == ("http://a:8080", "http://b:8080") and http.http and not http.tls
    assert ServiceUrl.parse("https://a/prefix/").urls == ("https://a/prefix",)
    assert ServiceUrl.parse("pulsar://a").urls == ("pulsar://a",)
    for bad in ("kafka://a:9092", "pulsar://a:6650,,b:6650", "a:6650"):
        with pytest.raises(InvalidConfiguration):
            ServiceUrl.parse(bad)


def test_hosts_are_handed_out_round_robin_from_a_random_start() -> None:
    url = ServiceUrl.parse("pulsar://a,b,c")
    starts = {ServiceNameResolver(url, random.Random(seed)).rotation()[0] for seed in range(30)}
    assert starts == set(url.urls)  # clients of one cluster start at different hosts
    resolver = ServiceNameResolver(url, random.Random(1))
    first = resolver.rotation()
    assert sorted(first) == sorted(url.urls)  # every host once per attempt
    second = resolver.rotation()
    assert second == first[1:] + first[:1]  # the next attempt starts one host further
    assert ServiceNameResolver(ServiceUrl.parse("pulsar://a")).rotation() == ["pulsar://a"]


# ------------------------------------------------------------------ a host that is down


@pytest.mark.parametrize("scheme", ["pulsar", "http"])
async def test_a_dead_first_host_is_passed_over(
    standalone: StandaloneProcess, topic: str, scheme: str
) -> None:
    live = standalone.url if scheme == "pulsar" else standalone.http_url
    url = f"{scheme}://127.0.0.1:{_down_port()},{_host(live)}"
    # every seed: whichever host a lookup starts at, the dead one is tried and passed over
    for seed in (0, 1):
        async with Client(url, operation_timeout_seconds=10, rng=random.Random(seed)) as client:
            consumer = await client.subscribe(
                topic, f"s{seed}", initial_position=InitialPosition.Earliest
            )
            producer = await client.create_producer(topic)
            await producer.send(f"m{seed}".encode())
            msg = await consumer.receive(timeout_ms=10_000)
            assert msg.data() == b"m0"
            await consumer.acknowledge(msg)


@pytest.fixture
def two_standalones(tmp_path: Path) -> Iterator[tuple[StandaloneProcess, StandaloneProcess]]:
    first = StandaloneProcess(tmp_path / "first")
    second = StandaloneProcess(tmp_path / "second")
    try:
        first.start()
        second.start()
        yield first, second
    finally:
        first.kill()
        second.kill()


def test_the_cli_works_once_the_first_broker_of_the_url_is_killed(
    two_standalones: tuple[StandaloneProcess, StandaloneProcess], topic: str
) -> None:
    first, second = two_standalones
    url = f"pulsar://{_host(first.url)},{_host(second.url)}"
    first.kill()
    produced = _magnetar(
        "client", "--url", url, "--operation-timeout", "20", "produce", topic, "-m", "a,b"
    )
    assert produced.returncode == 0, produced.stderr
    consumed = _magnetar(
        "client", "--url", url, "--operation-timeout", "20",
        "consume", topic, "-s", "sub", "-p", "Earliest", "-n", "2",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.count("content:") == 2, consumed.stdout
    perf = _magnetar("perf", "produce", topic, "-u", url, "-r", "0", "-m", "20")
    assert perf.returncode == 0, perf.stderr


# ------------------------------------------------------------------ too big: chunking


def test_a_message_over_the_limit_suggests_chunking(
    standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    big = tmp_path / "big"
    big.write_bytes(os.urandom(200_000))  # the fixture's broker allows 131072 bytes
    refused = _magnetar("client", "--url", standalone.url, "produce", topic, "-f", str(big))
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "-c/--chunking" in lines[0] and "200000" in lines[0], lines
    chunked = _magnetar("client", "--url", standalone.url, "produce", topic, "-f", str(big), "-c")
    assert chunked.returncode == 0, chunked.stderr
