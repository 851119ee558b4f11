"""``magnetar perf produce|consume`` as subprocesses against a real standalone."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from .conftest import Cli

LATENCY = re.compile(
    r"Latency ms: mean [\d.]+ - p50 [\d.]+ - p95 [\d.]+ - p99 [\d.]+ - p99\.9 [\d.]+ - max [\d.]+"
)


def test_perf_produce_and_consume_report_throughput_and_percentiles(
    cli: Cli, topic: str, tmp_path: Path
) -> None:
    summary_file = tmp_path / "consume.json"
    consumer = cli.background(
        "perf", "consume", topic, "-u", cli.node.url, "-m", "6000", "-i", "1",
        "--output", "json", "--json-file", str(summary_file),
    )  # fmt: skip
    consumer.wait_for_line("1 consumers subscribed")
    produced = cli.run(
        "perf", "produce", topic, "-u", cli.node.url, "-r", "3000", "-m", "6000", "-s", "512",
        "-n", "2", "-i", "0.5",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    lines = produced.stdout.splitlines()
    windows = [ln for ln in lines if ln.startswith("Throughput produced:")]
    assert len(windows) >= 2, produced.stdout
    assert all(LATENCY.search(ln) and " msg/s --- " in ln and " MB/s " in ln for ln in windows)
    assert lines[-2].startswith("Aggregated throughput stats --- 6000 records produced --- ")
    assert "errors 0" in lines[-2]
    assert LATENCY.search(lines[-1]) and lines[-1].startswith("Aggregated latency stats")

    assert consumer.wait(60) == 0, consumer.err
    summary = json.loads(consumer.out[-1])
    assert summary == json.loads(summary_file.read_text())
    assert summary["mode"] == "consume" and summary["messages"] == 6000
    assert summary["bytes"] == 6000 * 512 and summary["errors"] == 0
    latency = summary["latencyMs"]
    assert (
        0 <= latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    )
    assert summary["msgPerSecond"] > 0 and summary["mbPerSecond"] > 0


def test_perf_produce_json_summary_for_a_time_limit(cli: Cli, topic: str) -> None:
    result = cli.run(
        "perf", "produce", topic, "-u", cli.node.url, "-r", "0", "-time", "2", "-s", "100",
        "--output", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)  # nothing else on stdout
    assert summary["mode"] == "produce" and summary["batching"] is True
    assert summary["messages"] > 0 and summary["bytes"] == summary["messages"] * 100
    assert 1.9 <= summary["elapsedSeconds"] <= 30
    assert summary["latencyMs"]["p99"] <= summary["latencyMs"]["max"]


def test_perf_consume_interrupted_prints_summary_and_exits_zero(cli: Cli, topic: str) -> None:
    consumer = cli.background(
        "perf", "consume", topic, "-u", cli.node.url, "-st", "Shared", "-n", "2", "-i", "0.2"
    )
    consumer.wait_for_line("2 consumers subscribed")
    consumer.wait_for_line("Throughput received:", stderr=False)
    assert consumer.interrupt(signal.SIGINT) == 0
    assert consumer.out[-2].startswith("Aggregated throughput stats --- 0 records received")
    assert not any("Traceback" in ln for ln in consumer.err)


def test_perf_bad_arguments(cli: Cli, topic: str) -> None:
    exclusive = cli.run("perf", "consume", topic, "-n", "2")
    assert exclusive.returncode == 2 and "need -st Shared" in exclusive.stderr
    no_topic = cli.run("perf", "produce")
    assert no_topic.returncode == 2 and "Missing argument 'TOPICS...'" in no_topic.stderr


def test_perf_consume_key_shared(cli: Cli, topic: str) -> None:
    """``-st key_shared`` (any case) runs two Key_Shared consumers to the message quota."""
    consumer = cli.background(
        "perf", "consume", topic, "-u", cli.node.url, "-st", "key_shared", "-n", "2",
        "-m", "200", "--output", "json",
    )  # fmt: skip
    consumer.wait_for_line("2 consumers subscribed")
    produced = cli.run("perf", "produce", topic, "-u", cli.node.url, "-r", "0", "-m", "200")
    assert produced.returncode == 0, produced.stderr
    assert consumer.wait(60) == 0, consumer.err
    summary = json.loads(consumer.out[-1])
    assert summary["subscriptionType"] == "Key_Shared" and summary["messages"] == 200
