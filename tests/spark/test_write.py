"""Writes (batch and streaming) with deduplicating producer names; batch reads of history;
data loss after retention removed requested data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import countDistinct, udf
from pyspark.sql.types import StringType
from pyspark.sql.utils import StreamingQueryException

from magnetar.client import MessageId
from magnetar.client.sync import Client
from magnetar.testing import StandaloneProcess, wait_until

from .conftest import create_partitioned, produce, read_all


def test_batch_write_and_rerun_with_same_write_id_writes_nothing_twice(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    create_partitioned(standalone, topic, 2)
    df = spark.range(3000, numPartitions=3).selectExpr(
        "cast(id AS string) AS value",
        "concat('k', id % 10) AS key",
        "map('n', cast(id AS string)) AS properties",
        "timestamp_millis(1700000000000 + id) AS event_time",
    )
    for _ in range(2):  # the second run is a retry of the whole job
        (
            df.write.format("magnetar")
            .option("service_url", standalone.url)
            .option("topic", topic)
            .option("write_id", f"job-{topic}")
            .mode("append")
            .save()
        )
    back = read_all(spark, standalone.url, topic)
    stats = back.selectExpr(
        "count(*) c",
        "count(DISTINCT value) d",
        "sum(CASE WHEN properties['n'] = cast(value AS string) THEN 1 ELSE 0 END) p",
        "sum(CASE WHEN unix_millis(event_time) = 1700000000000 + cast(cast(value AS string) AS "
        "bigint) THEN 1 ELSE 0 END) e",
        "count(DISTINCT partition) parts",
    ).collect()[0]
    assert (stats.c, stats.d, stats.p, stats.e, stats.parts) == (3000, 3000, 3000, 3000, 2)
    # A key always lands on one partition.
    spread = back.groupBy("key").agg(countDistinct("partition").alias("n")).filter("n > 1")
    assert spread.count() == 0


def test_per_row_topic_routing(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    df = spark.range(100).selectExpr(
        "cast(id AS string) AS value",
        f"CASE WHEN id % 2 = 0 THEN '{topic}-even' ELSE NULL END AS topic",
    )
    df.write.format("magnetar").option("service_url", standalone.url).option(
        "topic", f"{topic}-odd"
    ).mode("append").save()
    assert read_all(spark, standalone.url, f"{topic}-even").count() == 50
    assert read_all(spark, standalone.url, f"{topic}-odd").count() == 50


def test_streaming_write_killed_mid_batch_and_restarted(
    spark: SparkSession, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    n = 20_000
    source, sink = f"{topic}-src", f"{topic}-dst"
    produce(standalone.url, source, [str(i).encode() for i in range(n)])
    marker = tmp_path / "failed-once"
    crash_at = str(n * 3 // 4)

    @udf(StringType())
    def crash_once(v: str) -> str:
        # The task dies after it has produced three quarters of the batch, once.
        if v == crash_at and not marker.exists():
            marker.touch()
            raise RuntimeError("simulated executor crash")
        return v

    def start():  # type: ignore[no-untyped-def]
        df = (
            spark.readStream.format("magnetar")
            .option("service_url", standalone.url)
            .option("topic", source)
            .option("starting_offsets", "earliest")
            .load()
            .select(crash_once(spark_col_value()).alias("value"))
        )
        return (
            df.writeStream.format("magnetar")
            .option("service_url", standalone.url)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    q = start()
    with pytest.raises(StreamingQueryException, match="simulated executor crash"):
        q.awaitTermination(180)
    partial = read_all(spark, standalone.url, sink).count()
    assert 0 < partial < n, partial  # the crashed attempt did write part of the batch
    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    stats = (
        read_all(spark, standalone.url, sink)
        .selectExpr("count(*) c", "count(DISTINCT value) d", "count(DISTINCT producer_name) names")
        .collect()[0]
    )
    assert (stats.c, stats.d) == (n, n)
    assert stats.names == 1  # the replayed batch reused the crashed attempt's producer name


def spark_col_value():  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import col

    return col("value").cast("string")


def test_batch_read_between_offsets_and_times(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    produce(standalone.url, topic, [str(i).encode() for i in range(10)])
    rows = read_all(spark, standalone.url, topic).orderBy("message_id").collect()
    ids = [MessageId.deserialize(r.message_id) for r in rows]
    full = f"persistent://public/default/{topic}"
    start = ids[2]
    end = ids[6]
    between = read_all(
        spark,
        standalone.url,
        topic,
        starting_offsets=json.dumps(
            {full: [start.ledger_id(), start.entry_id(), start.batch_index()]}
        ),
        ending_offsets=json.dumps({full: [end.ledger_id(), end.entry_id(), end.batch_index()]}),
    )
    assert sorted(int(r.value) for r in between.collect()) == [3, 4, 5, 6]
    t = int(rows[0].publish_time.timestamp() * 1000)
    late = read_all(spark, standalone.url, topic, starting_time=str(t + 10**9))
    assert late.count() == 0
    assert read_all(spark, standalone.url, topic, ending_time=str(t + 10**9)).count() == 10


def test_fail_on_data_loss_when_retention_removed_requested_data(
    spark: SparkSession,
    standalone_factory,
    topic: str,  # type: ignore[no-untyped-def]
) -> None:
    node = standalone_factory()
    produce(node.url, topic, [f"old{i}".encode() for i in range(10)])
    first_old = MessageId.deserialize(
        read_all(spark, node.url, topic).orderBy("message_id").first().message_id
    )
    # A restart rolls the topic to a new ledger; with no subscription and no retention the
    # old ledger is trimmed.
    node.stop()
    node.start()
    produce(node.url, topic, [f"new{i}".encode() for i in range(5)])

    def old_ledger_gone() -> bool:
        with Client(node.url) as client:
            reader = client.create_reader(topic, MessageId.earliest)
            msg = reader.read_next(10_000)
            return bool(msg.message_id().ledger_id() != first_old.ledger_id())

    wait_until(old_ledger_gone, 60, 0.5)
    offsets = json.dumps({topic: [first_old.ledger_id(), first_old.entry_id()]})
    with pytest.raises(Exception, match="DataLoss"):
        read_all(spark, node.url, topic, starting_offsets=offsets).count()
    rest = read_all(spark, node.url, topic, starting_offsets=offsets, fail_on_data_loss="false")
    assert sorted(r.value for r in rest.collect()) == sorted(f"new{i}".encode() for i in range(5))
