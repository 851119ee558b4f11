"""Spark streaming job: views and conversions per page per one-minute event-time window,
with a watermark, written as JSON to a results topic (keyed ``page|window start``).

Output mode is append (Python data source sinks take append only): a window's row is
written once, when the watermark (latest event time minus two minutes) passes its end --
so every result is final and the deduplicating sink writes it exactly once.

    python examples/clickstream/aggregate.py --service-url pulsar://127.0.0.1:6650 \
        --checkpoint /tmp/clickstream-checkpoint
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import magnetar.spark

EVENT_SCHEMA = "page STRING, user STRING, action STRING, ts TIMESTAMP"


def aggregate(events: DataFrame) -> DataFrame:
    """Per page and minute: views, purchases and their ratio; JSON rows for the sink."""
    counts = (
        events.withWatermark("ts", "2 minutes")
        .groupBy(F.window("ts", "1 minute"), "page")
        .agg(
            F.sum(F.when(F.col("action") == "view", 1).otherwise(0)).alias("views"),
            F.sum(F.when(F.col("action") == "purchase", 1).otherwise(0)).alias("conversions"),
        )
    )
    return counts.select(
        F.concat_ws("|", "page", F.date_format("window.start", "yyyy-MM-dd'T'HH:mm")).alias("key"),
        F.to_json(
            F.struct(
                "page",
                F.col("window.start").alias("window_start"),
                "views",
                "conversions",
                (F.col("conversions") / F.col("views")).alias("conversion_rate"),
            )
        ).alias("value"),
    )


def start(
    spark: SparkSession,
    service_url: str,
    source: str,
    results: str,
    checkpoint: str,
    admin_url: str | None = None,
) -> StreamingQuery:
    events = (
        spark.readStream.format("magnetar")
        .option("service_url", service_url)
        .option("topic", source)
        .option("starting_offsets", "earliest")
        .option("value_format", "json")
        .option("value_schema", EVENT_SCHEMA)
        .load()
    )
    sink = (
        aggregate(events)
        .writeStream.format("magnetar")
        .outputMode("append")
        .option("service_url", service_url)
        .option("topic", results)
        .option("checkpointLocation", checkpoint)
    )
    if admin_url:
        # The sink then refuses to start if the broker would not deduplicate its writes.
        sink = sink.option("admin_url", admin_url)
    return sink.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--source", default="clicks")
    parser.add_argument("--results", default="clicks-per-minute")
    parser.add_argument("--checkpoint", default="/tmp/clickstream-checkpoint")
    parser.add_argument(
        "--admin-url",
        default="http://127.0.0.1:8080",
        help="admin REST URL: the sink checks deduplication is on ('' to skip the check)",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    magnetar.spark.register(spark)
    start(
        spark, args.service_url, args.source, args.results, args.checkpoint, args.admin_url
    ).awaitTermination()


if __name__ == "__main__":
    main()
