"""Batch job: a topic's history (between offsets or publish times) into Parquet files,
partitioned by day, for analytics.

    python examples/history/to_parquet.py --service-url pulsar://127.0.0.1:6650 \
        --topic clicks --out /tmp/clicks-parquet [--starting-time MS] [--ending-time MS]
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import magnetar.spark


def history(
    spark: SparkSession,
    service_url: str,
    topic: str,
    *,
    starting_time_ms: int | None = None,
    ending_time_ms: int | None = None,
) -> DataFrame:
    reader = (
        spark.read.format("magnetar")
        .option("service_url", service_url)
        .option("topic", topic)
        .option("starting_offsets", "earliest")
        .option("ending_offsets", "latest")
    )
    if starting_time_ms is not None:
        reader = reader.option("starting_time", str(starting_time_ms))
    if ending_time_ms is not None:
        reader = reader.option("ending_time", str(ending_time_ms))
    return reader.load().withColumn("day", F.to_date("publish_time"))


def export(df: DataFrame, out: str) -> int:
    """Write ``df`` as Parquet partitioned by day; returns the number of rows written."""
    df.cache()
    rows = df.count()
    df.write.mode("overwrite").partitionBy("day").parquet(out)
    df.unpersist()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--out", default="/tmp/clicks-parquet")
    parser.add_argument("--starting-time", type=int)
    parser.add_argument("--ending-time", type=int)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    magnetar.spark.register(spark)
    df = history(
        spark,
        args.service_url,
        args.topic,
        starting_time_ms=args.starting_time,
        ending_time_ms=args.ending_time,
    )
    print(f"wrote {export(df, args.out)} rows to {args.out}")


if __name__ == "__main__":
    main()
