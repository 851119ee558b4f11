"""The web console in headless chromium against a real ``magnetar standalone``: every page
loads without a browser console error and fetches nothing from outside the broker; a
stalled subscription's backlog is shown growing and its actions work; an unload from the
console closes the topic and its producer comes back."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pulsar

from magnetar.testing import StandaloneProcess
from magnetar.testing.wait import wait_until

from .conftest import Console, create_function

NAMESPACE = "public/default"


def _stats(node: StandaloneProcess, topic: str) -> dict[str, object]:
    local = topic.rsplit("/", 1)[1]
    url = f"{node.http_url}/admin/v2/persistent/{NAMESPACE}/{local}/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats: dict[str, object] = json.loads(answer.read())
        return stats


def _clean(console: Console) -> None:
    assert console.errors() == []
    assert console.foreign_requests() == []


def test_pages_load_without_errors_and_fetch_only_from_the_broker(
    console: Console,
    standalone: StandaloneProcess,
    client: pulsar.Client,
    name: str,
    tmp_path: Path,
) -> None:
    create_function(standalone.http_url, f"echo-{name}", tmp_path / "echo.py")
    topic = f"persistent://{NAMESPACE}/{name}"
    producer = client.create_producer(topic)
    client.subscribe(topic, "audit", consumer_type=pulsar.ConsumerType.Failover)
    producer.send(b"hello")

    console.open("#/")
    assert console.find(f'tr[data-namespace="{NAMESPACE}"]')
    console.screenshot("namespaces")
    _clean(console)

    console.go("#/cluster")
    assert console.text("#controller") == "standalone"
    console.find("#bookies tbody tr[data-bookie]")
    # The bookie's registration carries its disk: free / total, and the share free.
    disk = console.text("#bookies tbody tr[data-bookie] td.disk")
    assert re.fullmatch(r"[\d.,]+ [KMGT]?i?B / [\d.,]+ [KMGT]?i?B \(\d+ % free\)", disk), disk
    console.screenshot("cluster")

    console.go(f"#/ns/{NAMESPACE}")
    console.find(f'tr[data-topic="{topic}"]')
    console.find(f'tr[data-function="echo-{name}"] .tag.ok')  # its instance runs
    console.screenshot("namespace")

    console.go(f"#/topic/persistent/{NAMESPACE}/{name}")
    assert console.text("#topic-title") == topic
    assert console.text('section[data-subscription="audit"] .active-consumer')
    _clean(console)


def test_a_stalled_subscription_shows_its_backlog_growing_and_its_actions_work(
    console: Console, standalone: StandaloneProcess, client: pulsar.Client, name: str
) -> None:
    topic = f"persistent://{NAMESPACE}/{name}"
    producer = client.create_producer(topic, batching_enabled=False)
    client.subscribe(topic, "stalled", receiver_queue_size=1)  # never receives
    for i in range(5):
        producer.send(f"message {i}".encode())

    console.open(f"#/topic/persistent/{NAMESPACE}/{name}")
    backlog = 'section[data-subscription="stalled"] .backlog'
    wait_until(lambda: console.number(backlog) == 5, 10, 0.1, "backlog 5 shown")

    def chart() -> list[int]:
        raw = console.attribute("#chart-backlog", "data-backlog")
        return [int(v) for v in raw.split(",") if v]

    first = wait_until(chart, 10, 0.1, "a first sample")
    assert first[-1] == 5
    for i in range(5, 12):
        producer.send(f"message {i}".encode())
    wait_until(lambda: console.number(backlog) == 12, 10, 0.1, "backlog 12 shown")
    # the broker samples every SAMPLE_INTERVAL_S: the chart's next point shows the growth
    wait_until(lambda: chart()[-1] == 12, 15, 0.2, "the growth charted")
    points = chart()
    assert 5 in points and points == sorted(points), points
    console.screenshot("topic")

    console.click('section[data-subscription="stalled"] [data-action="peek"]')
    assert "message 0" in console.text('section[data-subscription="stalled"] pre.peek')

    console.click('section[data-subscription="stalled"] [data-action="skip-all"]')
    console.driver.switch_to.alert.accept()
    wait_until(lambda: console.number(backlog) == 0, 10, 0.1, "backlog cleared")

    console.click('section[data-subscription="stalled"] [data-action="reset"]')
    console.driver.switch_to.alert.accept()
    wait_until(lambda: console.number(backlog) == 12, 10, 0.1, "cursor reset to 10 min ago")
    _clean(console)


def test_an_unload_from_the_console_closes_the_topic_and_its_producer_comes_back(
    console: Console, standalone: StandaloneProcess, client: pulsar.Client, name: str
) -> None:
    topic = f"persistent://{NAMESPACE}/{name}"
    producer = client.create_producer(topic)
    producer.send(b"before")
    before = _stats(standalone, topic)["topicEpoch"], _publisher_since(standalone, topic)

    console.open(f"#/topic/persistent/{NAMESPACE}/{name}")
    console.click("#unload")
    console.driver.switch_to.alert.accept()
    assert console.text("#status div") == "unloaded"

    def reconnected() -> bool:
        since = _publisher_since(standalone, topic)
        return since is not None and since != before[1]

    wait_until(reconnected, 20, 0.1, "the producer reconnected to the reloaded topic")
    producer.send(b"after")
    _clean(console)


def _publisher_since(node: StandaloneProcess, topic: str) -> str | None:
    publishers = _stats(node, topic)["publishers"]
    assert isinstance(publishers, list)
    return str(publishers[0]["connectedSince"]) if publishers else None
