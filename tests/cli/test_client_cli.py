"""``magnetar client produce|consume`` as subprocesses against a real standalone."""

from __future__ import annotations

import json
import signal

from magnetar.testing import wait_until

from .conftest import Cli


def test_produce_then_consume_from_earliest_round_trip(cli: Cli, topic: str) -> None:
    produced = cli.client(
        "produce",
        topic,
        "-m",
        "alpha,beta,gamma",
        "-n",
        "2",
        "-k",
        "k1",
        "-p",
        "a=1",
        "-p",
        "b=two",
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.strip() == "6 messages successfully produced"

    consumed = cli.client("consume", topic, "-s", "s1", "-p", "Earliest", "-n", "6")
    assert consumed.returncode == 0, consumed.stderr
    lines = consumed.stdout.splitlines()
    assert lines.count("----- got message -----") == 6
    contents = [ln for ln in lines if ln.startswith("key:")]
    assert contents == [
        f"key:[k1], properties:[a=1, b=two], content:{word}"
        for word in ["alpha", "beta", "gamma"] * 2
    ]
    assert "6 messages successfully consumed" in consumed.stderr


def test_json_output_of_produce_and_consume(cli: Cli, topic: str) -> None:
    produced = cli.run(
        "client", "--url", cli.node.url, "--output", "json",
        "produce", topic, "-m", "x|y,z", "--separator", "|", "--disable-batching",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    doc = json.loads(produced.stdout)
    assert doc["produced"] == 2 and len(doc["messageIds"]) == 2
    assert all(mid.count(":") >= 2 for mid in doc["messageIds"])

    consumed = cli.client(
        "consume", topic, "-s", "s", "-p", "Earliest", "-n", "2", "--output", "json"
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [r["payload"] for r in records] == ["x", "y,z"]
    assert [r["messageId"] for r in records] == doc["messageIds"]
    assert records[0]["topic"] == f"persistent://public/default/{topic}"
    assert records[0]["key"] is None and records[0]["properties"] == {}
    assert json.loads(consumed.stderr.splitlines()[-1]) == {"consumed": 2}


def test_consume_forever_until_sigint_exits_zero(cli: Cli, topic: str) -> None:
    consumer = cli.consume(
        topic, "-s", "live", "-t", "Shared", "-n", "0", "--consumer-name", "c-live"
    )
    consumer.wait_for_line("consumer c-live")
    assert cli.client("produce", topic, "-m", "one,two,three").returncode == 0
    wait = consumer.wait_for_line("content:three", stderr=False)
    assert wait
    assert consumer.interrupt(signal.SIGINT) == 0
    assert "3 messages successfully consumed" in consumer.err[-1]
    assert not any("Traceback" in ln for ln in consumer.err)


def test_consume_stops_cleanly_on_sigterm(cli: Cli, topic: str) -> None:
    consumer = cli.consume(topic, "-s", "term", "-n", "0")
    consumer.wait_for_line("subscribed to")
    assert consumer.interrupt(signal.SIGTERM) == 0
    assert consumer.err[-1] == "0 messages successfully consumed"


def test_bad_arguments_exit_2_with_usage(cli: Cli, topic: str) -> None:
    no_sub = cli.client("consume", topic)
    assert no_sub.returncode == 2
    assert "Missing option '--subscription-name'" in no_sub.stderr
    bad_type = cli.client("consume", topic, "-s", "s", "-t", "Queue")
    assert bad_type.returncode == 2 and "Invalid value for '--subscription-type'" in bad_type.stderr
    no_messages = cli.client("produce", topic)
    assert no_messages.returncode == 2 and "give messages with -m" in no_messages.stderr
    bad_prop = cli.client("produce", topic, "-m", "x", "-p", "novalue")
    assert bad_prop.returncode == 2 and "expected key=value" in bad_prop.stderr


def test_unreachable_broker_is_one_line_and_exit_1(cli: Cli, topic: str) -> None:
    result = cli.run(
        "client",
        "--url",
        "pulsar://127.0.0.1:1",
        "--operation-timeout",
        "2",
        "produce",
        topic,
        "-m",
        "x",
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    waiting, error = result.stderr.strip().splitlines()  # what it waits for, then why it gave up
    assert "waiting for pulsar://127.0.0.1:1, retrying for up to 2 s" in waiting
    assert error.startswith("Error: ") and "127.0.0.1:1" in error
    assert "did not succeed within 2 s" in error


def test_partitioned_topic_round_trip_with_failover_events(cli: Cli, topic: str) -> None:
    assert cli.admin("topics", "create-partitioned-topic", topic, "-p", "2").returncode == 0
    consumer = cli.consume(topic, "-s", "ps", "-t", "Failover", "-n", "6", "--consumer-name", "pc")
    consumer.wait_for_line("consumer pc became active on partition 0")
    consumer.wait_for_line("consumer pc became active on partition 1")
    produced = cli.client("produce", topic, "-m", "1,2,3", "-n", "2", "--disable-batching")
    assert produced.returncode == 0, produced.stderr
    assert consumer.wait(60) == 0
    contents = sorted(ln.rsplit("content:", 1)[1] for ln in consumer.out if "content:" in ln)
    assert contents == ["1", "1", "2", "2", "3", "3"]


def test_key_shared_consumers_split_the_keys(cli: Cli, topic: str) -> None:
    """``-t Key_Shared`` (any case) subscribes; each key goes to one consumer of the two."""
    first = cli.consume(topic, "-s", "ks", "-t", "Key_Shared", "-n", "0", "--consumer-name", "k1")
    second = cli.consume(topic, "-s", "ks", "-t", "key_shared", "-n", "0", "--consumer-name", "k2")
    first.wait_for_line("(Key_Shared), consumer k1")
    second.wait_for_line("(Key_Shared), consumer k2")
    for key in ("a", "b", "c", "d"):
        produced = cli.client("produce", topic, "-m", f"{key}1,{key}2", "-k", key)
        assert produced.returncode == 0, produced.stderr

    def received() -> list[tuple[str, str]]:
        return [
            (name, ln.split("key:[", 1)[1].split("]", 1)[0])
            for name, bg in (("k1", first), ("k2", second))
            for ln in list(bg.out)
            if ln.startswith("key:")
        ]

    wait_until(lambda: len(received()) == 8, 30, what="8 messages over both consumers")
    owner: dict[str, set[str]] = {}
    for name, key in received():
        owner.setdefault(key, set()).add(name)
    assert sorted(owner) == ["a", "b", "c", "d"]
    assert all(len(names) == 1 for names in owner.values()), owner
    assert first.interrupt() == 0 and second.interrupt() == 0
