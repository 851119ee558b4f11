"""Pulsar's Failover walkthrough, automated with the command-line tools only.

Three ``magnetar client consume -t Failover`` processes (two on topic1/sub, one on
topic2/sub3); ``magnetar admin topics stats`` shows who is active; interrupting the active
consumer hands topic1 to the other one, which then receives what ``magnetar client produce``
sends next.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from typing import Any

from magnetar.broker.failover import ring_index
from magnetar.testing import wait_until

from .conftest import Cli

FIRST, SECOND, THIRD = "consumer-1", "consumer-2", "consumer-3"


def _topic_where_first_stays_active() -> str:
    """A topic name for which the failover hash ring (non-partitioned topics) keeps FIRST
    active when SECOND joins, so "the first consumer is active" holds as in the walkthrough."""
    while True:
        name = f"topic1-{uuid.uuid4().hex[:8]}"
        if ring_index([FIRST, SECOND], f"persistent://public/default/{name}") == 0:
            return name


def _stats(cli: Cli, topic: str) -> dict[str, Any]:
    result = cli.admin("topics", "stats", topic)  # text output: indented JSON
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _produce(cli: Cli, topic: str, words: list[str]) -> None:
    result: subprocess.CompletedProcess[str] = cli.client("produce", topic, "-m", ",".join(words))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{len(words)} messages successfully produced"


def test_failover_walkthrough(cli: Cli) -> None:
    topic1 = _topic_where_first_stays_active()
    topic2 = f"topic2-{uuid.uuid4().hex[:8]}"
    args = ("-t", "Failover", "--num-messages", "0")
    c1 = cli.consume(topic1, "--subscription-name", "sub", "--consumer-name", FIRST, *args)
    c1.wait_for_line(f"consumer {FIRST} became active")
    c2 = cli.consume(topic1, "--subscription-name", "sub", "--consumer-name", SECOND, *args)
    c2.wait_for_line(f"consumer {SECOND} became inactive")
    c3 = cli.consume(topic2, "--subscription-name", "sub3", "--consumer-name", THIRD, *args)
    c3.wait_for_line(f"consumer {THIRD} became active")

    sub = _stats(cli, topic1)["subscriptions"]["sub"]
    assert sub["type"] == "Failover"
    assert sorted(c["consumerName"] for c in sub["consumers"]) == [FIRST, SECOND]
    assert sub["activeConsumerName"] == FIRST
    sub3 = _stats(cli, topic2)["subscriptions"]["sub3"]
    assert sub3["type"] == "Failover"
    assert [c["consumerName"] for c in sub3["consumers"]] == [THIRD]
    assert sub3["activeConsumerName"] == THIRD

    before = [f"before-{i}" for i in range(5)]
    _produce(cli, topic1, before)
    for word in before:
        c1.wait_for_line(f"content:{word}", stderr=False)
    assert not any("content:" in ln for ln in c2.out)

    assert c1.interrupt(signal.SIGINT) == 0
    assert not any("Traceback" in ln for ln in c1.err)
    assert c1.err[-1] == "5 messages successfully consumed"

    def second_active() -> dict[str, Any] | None:
        s = _stats(cli, topic1)["subscriptions"]["sub"]
        return s if s.get("activeConsumerName") == SECOND else None

    sub = wait_until(second_active, 30.0, interval_s=0.2)
    assert [c["consumerName"] for c in sub["consumers"]] == [SECOND]
    c2.wait_for_line(f"consumer {SECOND} became active")

    after = [f"after-{i}" for i in range(5)]
    _produce(cli, topic1, after)
    for word in after:
        c2.wait_for_line(f"content:{word}", stderr=False)
    received = [ln.rsplit("content:", 1)[1] for ln in c2.out if "content:" in ln]
    assert received == after  # FIRST acknowledged "before-*", so nothing is redelivered
    assert not any("content:" in ln for ln in c3.out)

    assert c2.interrupt(signal.SIGINT) == 0
    assert c3.interrupt(signal.SIGTERM) == 0
    assert c2.err[-1] == "5 messages successfully consumed"


def test_event_lines_name_generated_consumers(cli: Cli) -> None:
    # Issue 13: without --consumer-name, a consumer told it is inactive while its subscribe
    # was still being answered printed "consumer  became inactive" (the printer only learnt
    # the generated name from the finished subscribe). The broker tells a newcomer at once
    # when the active consumer stays, as here: the first consumer has the better priority.
    topic = f"topic-{uuid.uuid4().hex[:8]}"
    args = ("-s", "sub", "-t", "Failover", "-n", "0")
    first = cli.consume(topic, *args, "--priority-level", "0")
    first.wait_for_line("became active")
    second = cli.consume(topic, *args, "--priority-level", "1")
    second.wait_for_line("became inactive")
    for proc, state in ((first, "active"), (second, "inactive")):
        subscribed = proc.wait_for_line("subscribed to")
        name = subscribed.rsplit("consumer ", 1)[1]
        assert name.startswith("consumer-")
        assert f"consumer {name} became {state}" in proc.err, proc.err
        assert not any("consumer  became" in ln for ln in proc.err), proc.err
    assert first.interrupt(signal.SIGINT) == 0
    assert second.interrupt(signal.SIGINT) == 0
