"""Streaming reads: exactly once into a sink, across a stop and a restart from checkpoint;
JSON values; new partitions and topics; bad input."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.utils import StreamingQueryException

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import create_partitioned, produce, read_all


def stream(spark: SparkSession, url: str, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("magnetar").option("service_url", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_100k_messages_on_4_partitions_exactly_once(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    n = 100_000
    create_partitioned(standalone, topic, 4)
    produce(
        standalone.url,
        topic,
        [str(i).encode() for i in range(n)],
        keys=[f"k{i % 97}" for i in range(n)],
        properties=lambda i: {"i": str(i)} if i % 1000 == 0 else {},
    )
    df = stream(spark, standalone.url, topic, starting_offsets="earliest")
    q = df.writeStream.format("memory").queryName("exactly_once_100k").start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    stats = spark.sql(
        "SELECT count(*) c, count(DISTINCT value) d, min(cast(cast(value AS string) AS int)) lo, "
        "max(cast(cast(value AS string) AS int)) hi, count(DISTINCT partition) parts, "
        "count(DISTINCT message_id) ids FROM exactly_once_100k"
    ).collect()[0]
    assert (stats.c, stats.d, stats.lo, stats.hi, stats.parts, stats.ids) == (n, n, 0, n - 1, 4, n)
    # Content: keys and properties travel with their values.
    bad = spark.sql(
        "SELECT count(*) c FROM exactly_once_100k WHERE key != concat('k', "
        "cast(cast(value AS string) AS int) % 97) OR (cast(cast(value AS string) AS int) % 1000 = 0 "
        "AND properties['i'] != cast(value AS string))"
    ).collect()[0]
    assert bad.c == 0
    assert (
        spark.sql(
            f"SELECT count(*) c FROM exactly_once_100k WHERE topic = 'persistent://public/default/{topic}'"
        )
        .collect()[0]
        .c
        == n
    )


def test_stop_and_restart_from_checkpoint_with_more_data(
    spark: SparkSession, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    create_partitioned(standalone, topic, 4)
    produce(standalone.url, topic, [f"a{i}".encode() for i in range(20_000)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start():  # type: ignore[no-untyped-def]
        df = stream(
            spark,
            standalone.url,
            topic,
            starting_offsets="earliest",
            max_entries_per_trigger="5",
            admin_url=standalone.http_url,
        ).selectExpr("cast(value AS string) AS v", "partition", "message_id")
        return (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    # More data arrives while the query runs, is stopped, and restarts.
    more = threading.Thread(
        target=produce,
        args=(standalone.url, topic, [f"b{i}".encode() for i in range(10_000)]),
    )
    q = start()
    try:
        wait_until(lambda: q.lastProgress is not None and q.lastProgress["numInputRows"] > 0, 120)
        more.start()
    finally:
        q.stop()
    more.join(120)
    produce(standalone.url, topic, [f"c{i}".encode() for i in range(5_000)])
    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.read.parquet(str(out))
    stats = rows.selectExpr("count(*) c", "count(DISTINCT v) d").collect()[0]
    assert (stats.c, stats.d) == (35_000, 35_000)


def test_json_values_decode_into_typed_columns(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    values = [
        b'{"page": "home", "views": 3, "price": 1.5, "at": "2024-01-02T03:04:05Z", "tags": ["a"]}',
        b'{"page": "cart", "views": 7, "price": null, "at": 1700000000000}',
        b"not json",
        b'{"page": "bad", "views": "many"}',
    ]
    produce(standalone.url, topic, values)
    df = stream(
        spark,
        standalone.url,
        topic,
        starting_offsets="earliest",
        value_format="json",
        value_schema="page STRING, views INT, price DOUBLE, at TIMESTAMP, tags ARRAY<STRING>",
    )
    assert df.columns[:5] == ["page", "views", "price", "at", "tags"]
    assert "value" not in df.columns and "message_id" in df.columns
    q = df.writeStream.format("memory").queryName("json_values").start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.sql("SELECT * FROM json_values").orderBy("message_id").collect()
    assert len(rows) == 4
    first, second, garbage, misfit = rows
    assert (first.page, first.views, first.price, first.tags) == ("home", 3, 1.5, ["a"])
    assert first.at.isoformat().startswith("2024-01-02T03:04:05")
    assert (second.page, second.views, second.price) == ("cart", 7, None)
    assert second.at.year == 2023
    assert garbage.page is None and garbage.views is None
    assert misfit.page is None  # a field of the wrong type nulls the row (PERMISSIVE)
    types = dict(df.dtypes)
    assert (types["views"], types["price"], types["at"]) == ("int", "double", "timestamp")


def test_new_topics_of_a_pattern_are_picked_up(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    produce(standalone.url, f"{topic}-one", [b"1", b"2"])
    df = (
        spark.readStream.format("magnetar")
        .option("service_url", standalone.url)
        .option("topics_pattern", f"persistent://public/default/{topic}-.*")
        .option("starting_offsets", "earliest")
        .load()
    )
    q = df.writeStream.format("memory").queryName("pattern_topics").start()
    try:
        q.processAllAvailable()
        produce(standalone.url, f"{topic}-two", [b"3"])
        produce(standalone.url, f"{topic}-one", [b"4"])
        q.processAllAvailable()
    finally:
        q.stop()
    got = sorted(
        r.v for r in spark.sql("SELECT cast(value AS string) v FROM pattern_topics").collect()
    )
    assert got == ["1", "2", "3", "4"]


def test_unknown_topic_fails_with_a_clear_error(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    with pytest.raises(Exception, match="does not exist"):
        read_all(spark, standalone.url, f"{topic}-missing").count()
    q = (
        stream(spark, standalone.url, f"{topic}-missing")
        .writeStream.format("memory")
        .queryName("missing_topic")
        .start()
    )
    with pytest.raises(StreamingQueryException, match="does not exist"):
        q.awaitTermination(120)


def test_malformed_offsets_json_fails_with_a_clear_error(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    produce(standalone.url, topic, [b"x"])
    with pytest.raises((PySparkException, Exception), match="offsets"):
        read_all(spark, standalone.url, topic, starting_offsets="{oops").count()
    with pytest.raises((PySparkException, Exception), match="bad message id"):
        read_all(spark, standalone.url, topic, ending_offsets=json.dumps({topic: [1]})).count()


def test_broker_gone_mid_stream_fails_the_query(
    spark: SparkSession,
    standalone_factory,
    topic: str,  # type: ignore[no-untyped-def]
) -> None:
    node = standalone_factory()
    produce(node.url, topic, [str(i).encode() for i in range(20_000)])
    q = (
        stream(
            spark,
            node.url,
            topic,
            starting_offsets="earliest",
            max_entries_per_trigger="2",
            admin_url=node.http_url,
            read_timeout_ms="3000",
        )
        .writeStream.format("memory")
        .queryName("broker_gone")
        .start()
    )
    try:
        wait_until(lambda: q.lastProgress is not None and q.lastProgress["numInputRows"] > 0, 120)
        node.kill()
        with pytest.raises(StreamingQueryException) as info:
            q.awaitTermination(120)
        assert any(
            word in str(info.value)
            for word in ("RangeReadTimeout", "ConnectError", "Timeout", "LookupError", "refused")
        ), str(info.value)[:2000]
    finally:
        q.stop()
