"""The web console on a ``magnetar local-cluster`` (2 brokers, 1 bookie and its Functions
Worker: the smallest cluster with two consoles, started in about 15 s) in headless chromium:
the cluster view shows both brokers, the controller and its epoch, the bookie with its free
disk and the bundles' owners; a function deployed through a broker is shown running on the
namespace page; a topic is shown on its owner's console (another broker's console
links there); a stalled subscription's backlog is shown growing; an unload from the
console closes the topic and it is served again (on either broker). No console error, no
request leaving 127.0.0.1."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from local_cluster.command import FREE_PORTS, LocalClusterCommand
from selenium import webdriver

from magnetar.testing.wait import wait_until

from .conftest import Console, create_function

WORKER_TIMEOUT_S = 60.0
"""The Functions Worker joins after the ready line; then an instance process starts."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    cmd = LocalClusterCommand(
        tmp_path / "cluster",
        *("--brokers", "2", "--bookies", "1"),
        *("--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1"),
        *FREE_PORTS,
    )
    try:
        ready = cmd.wait_ready()
        # "http://host:port,host:port" (as webServiceUrl takes several brokers)
        admin = [u if "://" in u else f"http://{u}" for u in ready.group(2).split(",")]
        yield ready.group(1), admin
    finally:
        cmd.stop_everything()


def _serves_functions(admin_url: str) -> bool:
    """Whether the broker's forwarded function paths reach a worker that has joined."""
    try:
        with urllib.request.urlopen(f"{admin_url}/admin/v3/functions/public/default", timeout=10):
            return True
    except OSError:  # the worker not listening yet (503), or not joined yet
        return False


def _owner(admin_url: str, topic: str) -> dict[str, object]:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{admin_url}/admin/v2/console/owner/{path}", timeout=30) as a:
        owner: dict[str, object] = json.loads(a.read())
        return owner


def _publisher_since(admin_url: str, topic: str) -> str | None:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{admin_url}/admin/v2/{path}/stats", timeout=30) as a:
        publishers = json.loads(a.read())["publishers"]
    return str(publishers[0]["connectedSince"]) if publishers else None


def test_the_console_on_a_local_cluster(
    cluster: tuple[str, list[str]], chromium: webdriver.Chrome, screenshots: Path, tmp_path: Path
) -> None:
    service_url, admin_urls = cluster
    name = f"t{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    # deployed through a broker first: its instance starts while the rest is checked
    wait_until(lambda: _serves_functions(admin_urls[0]), WORKER_TIMEOUT_S, 0.2,
               "the Functions Worker served through a broker")  # fmt: skip
    create_function(admin_urls[0], f"echo-{name}", tmp_path / "echo.py")
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        client.subscribe(topic, "stalled", receiver_queue_size=1)  # never receives
        for i in range(3):
            producer.send(f"m-{i}".encode())

        first = Console(chromium, admin_urls[0], screenshots)
        chromium.get_log("browser")
        first.open("#/cluster")
        wait_until(
            lambda: len(chromium.find_elements("css selector", "#brokers tbody tr")) == 2,
            20, 0.2, "both brokers listed",
        )  # fmt: skip
        brokers = chromium.execute_script(
            "return [...document.querySelectorAll('#brokers tbody tr td:first-child')]"
            ".map(td => td.textContent)"
        )
        assert first.text("#controller") in brokers
        assert "epoch" in first.text("#controller + .k")
        assert len(chromium.find_elements("css selector", "#bookies tr[data-bookie]")) == 1
        assert "% free" in first.text("#bookies tr[data-bookie] td.disk")
        first.find("#bundles tbody tr td")
        first.screenshot("cluster-local-cluster")
        assert first.errors() == [] and first.foreign_requests() == []

        first.go("#/ns/public/default")
        running = f'tr[data-function="echo-{name}"] .tag.ok'  # its instance runs
        assert first.find(running, timeout_s=WORKER_TIMEOUT_S)
        first.screenshot("namespace-local-cluster")
        assert first.errors() == [] and first.foreign_requests() == []

        owner = _owner(admin_urls[0], topic)
        owner_url = str(owner["httpUrl"])
        other = next(u for u in admin_urls if u != owner_url)
        on_other = Console(chromium, other, screenshots)
        on_other.open(f"#/topic/persistent/public/default/{name}")
        assert on_other.text("#topic-owner .owner") == owner["brokerId"]
        assert on_other.errors() == [] and on_other.foreign_requests() == []

        console = Console(chromium, owner_url, screenshots)
        console.open(f"#/topic/persistent/public/default/{name}")
        backlog = 'section[data-subscription="stalled"] .backlog'
        wait_until(lambda: console.number(backlog) == 3, 20, 0.2, "backlog 3 shown")
        for i in range(3, 8):
            producer.send(f"m-{i}".encode())
        wait_until(lambda: console.number(backlog) == 8, 20, 0.2, "backlog 8 shown")

        before = _publisher_since(owner_url, topic)
        console.click("#unload")
        chromium.switch_to.alert.accept()
        assert console.text("#status div") == "unloaded"

        def served_again() -> bool:
            now = _owner(admin_urls[0], topic)
            since = _publisher_since(str(now["httpUrl"]), topic)
            return since is not None and since != before

        wait_until(served_again, 60, 0.5, "the topic served again with its producer")
        producer.send(b"after")
        assert console.errors() == [] and console.foreign_requests() == []
    finally:
        # Leave no page refreshing against the cluster about to stop (its failed requests
        # would be a later test's console errors).
        chromium.get("about:blank")
        client.close()
