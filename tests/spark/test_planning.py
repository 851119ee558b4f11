"""What the driver plans and commits: admission control across ledgers, the durable
subscription that follows committed offsets, partitions added while a query runs, and the
sink's deduplication check with namespace-level deduplication."""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import admin, create_partitioned, produce, read_all


def stream(spark: SparkSession, url: str, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("magnetar").option("service_url", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_max_entries_per_trigger_caps_every_micro_batch_across_ledgers(
    spark: SparkSession, standalone_factory: Any, topic: str
) -> None:
    node: StandaloneProcess = standalone_factory(
        "--managed-ledger-max-entries-per-ledger", "10",
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
    )  # fmt: skip
    # Keep read ledgers (no subscription here): the point is ledgers, not retention.
    admin(
        node,
        "POST",
        "/admin/v2/namespaces/public/default/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    n, cap = 95, 7
    produce(node.url, topic, [str(i).encode() for i in range(n)], batching=False)
    stats = admin(node, "GET", f"/admin/v2/persistent/public/default/{topic}/internalStats")
    assert len([led for led in stats["ledgers"] if led["entries"] > 0]) >= 9
    q = (
        stream(
            spark,
            node.url,
            topic,
            starting_offsets="earliest",
            max_entries_per_trigger=str(cap),
            admin_url=node.http_url,
        )
        .writeStream.format("memory")
        .queryName("capped_across_ledgers")
        .start()
    )
    try:
        q.processAllAvailable()
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0]
    finally:
        q.stop()
    # One entry per message: every micro-batch admitted at most ``cap`` entries, and the
    # batches together read everything once (so several batches straddled ledgers).
    assert sizes and max(sizes) <= cap, sizes
    assert sum(sizes) == n and len(sizes) == -(-n // cap), sizes
    got = spark.sql("SELECT cast(value AS string) v FROM capped_across_ledgers").collect()
    assert sorted(int(r.v) for r in got) == list(range(n))


def _backlog(node: StandaloneProcess, topic: str, partitions: int, sub: str) -> int | None:
    total = 0
    for i in range(partitions):
        stats = admin(
            node, "GET", f"/admin/v2/persistent/public/default/{topic}-partition-{i}/stats"
        )
        found = stats["subscriptions"].get(sub)
        if found is None:
            return None
        total += int(found["msgBacklog"])
    return total


def test_durable_subscription_follows_committed_offsets(
    spark: SparkSession, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    create_partitioned(standalone, topic, 2)
    produce(standalone.url, topic, [f"a{i}".encode() for i in range(300)], batching=False)

    def run() -> None:
        q = (
            stream(
                spark,
                standalone.url,
                topic,
                starting_offsets="earliest",
                subscription_name="spark-sub",
            )
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            q.processAllAvailable()
            # Each partition's last read message stays unacknowledged (its ledger is kept
            # for the next batch's data-loss check): the backlog is one per partition.
            wait_until(lambda: _backlog(standalone, topic, 2, "spark-sub") == 2, 60, 0.2)
        finally:
            q.stop()

    run()
    produce(standalone.url, topic, [f"b{i}".encode() for i in range(200)], batching=False)
    # The stopped query's subscription shows what it has not read yet.
    assert _backlog(standalone, topic, 2, "spark-sub") == 2 + 200
    run()  # restart from the checkpoint: reads the 200, commits, the backlog shrinks
    out = spark.read.parquet(str(tmp_path / "out"))
    stats = out.selectExpr("count(*) c", "count(DISTINCT message_id) d").collect()[0]
    assert (stats.c, stats.d) == (500, 500)


def test_partitions_added_while_a_query_runs_are_read(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    create_partitioned(standalone, topic, 2)
    produce(
        standalone.url,
        topic,
        [f"a{i}".encode() for i in range(100)],
        keys=[f"k{i}" for i in range(100)],
    )
    q = (
        stream(spark, standalone.url, topic, starting_offsets="earliest")
        .writeStream.format("memory")
        .queryName("growing_topic")
        .start()
    )
    try:
        q.processAllAvailable()
        admin(standalone, "POST", f"/admin/v2/persistent/public/default/{topic}/partitions", 4)
        produce(
            standalone.url,
            topic,
            [f"b{i}".encode() for i in range(200)],
            keys=[f"k{i}" for i in range(200)],
        )
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.sql("SELECT cast(value AS string) v, partition FROM growing_topic").collect()
    assert sorted(r.v for r in rows) == sorted(
        [f"a{i}" for i in range(100)] + [f"b{i}" for i in range(200)]
    )
    assert {r.partition for r in rows} == {0, 1, 2, 3}
    # Rows of the new partitions were all written after the growth.
    assert all(r.v.startswith("b") for r in rows if r.partition >= 2)


def test_sink_checks_namespace_deduplication(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    ns = f"dedup-{topic}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/public/{ns}", {})
    full = f"persistent://public/{ns}/{topic}"
    admin(standalone, "PUT", f"/admin/v2/persistent/public/{ns}/{topic}")
    df = spark.range(2000, numPartitions=2).selectExpr("cast(id AS string) AS value")

    def write() -> None:
        (
            df.write.format("magnetar")
            .option("service_url", standalone.url)
            .option("admin_url", standalone.http_url)
            .option("topic", full)
            .option("write_id", f"job-{topic}")
            .mode("append")
            .save()
        )

    with pytest.raises(Exception, match="deduplication is off"):
        write()
    assert read_all(spark, standalone.url, full).count() == 0
    admin(standalone, "POST", f"/admin/v2/namespaces/public/{ns}/deduplication", True)
    # The loaded topic applies the namespace policy when the broker sees it change.
    stats_path = f"/admin/v2/persistent/public/{ns}/{topic}/stats"
    wait_until(
        lambda: admin(standalone, "GET", stats_path)["deduplicationStatus"] == "Enabled", 30, 0.1
    )
    write()
    write()  # a re-run of the same job: every row is a duplicate the broker drops
    stats = read_all(spark, standalone.url, full).selectExpr(
        "count(*) c", "count(DISTINCT value) d"
    )
    assert tuple(stats.collect()[0]) == (2000, 2000)
    with pytest.raises(urllib.error.HTTPError):
        admin(standalone, "POST", f"/admin/v2/namespaces/public/{ns}/deduplication", "maybe")
