"""Spark + magnetar throughput: rows/s read into a no-op sink and written from a generated
DataFrame, for 100 B and 1 KiB values, next to Spark reading the same rows from Parquet.

Runs ``magnetar standalone`` (deduplication on) as a subprocess and Spark ``local[2]``.
Prints a table and writes ``benchmarks/results/spark.json``.

    .venv/bin/python benchmarks/spark.py [--rows 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

import magnetar.spark
from magnetar.testing import StandaloneProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.spark.conftest import create_partitioned


def timed(action) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--rows", type=int, default=1_000_000
    )  # fewer: Spark's fixed costs dominate
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    rows, parts = args.rows, args.partitions
    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    node = StandaloneProcess(work / "data", "--deduplication")
    node.start()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    results: list[dict[str, object]] = []
    try:
        for size in (100, 1024):
            topic = f"bench-{size}"
            create_partitioned(node, topic, parts)
            df = spark.range(rows, numPartitions=parts).selectExpr(
                f"cast(rpad(cast(id AS string), {size}, 'x') AS binary) AS value"
            )
            write_s = timed(
                lambda df=df, topic=topic: (
                    df.write.format("magnetar")
                    .option("service_url", node.url)
                    .option("topic", topic)
                    .mode("append")
                    .save()
                )
            )
            source = (
                spark.read.format("magnetar")
                .option("service_url", node.url)
                .option("topic", topic)
                .load()
            )
            batch_read_s = timed(
                lambda source=source: source.write.format("noop").mode("overwrite").save()
            )

            def stream_read(topic: str = topic) -> None:
                q = (
                    spark.readStream.format("magnetar")
                    .option("service_url", node.url)
                    .option("topic", topic)
                    .option("starting_offsets", "earliest")
                    .load()
                    .writeStream.format("noop")
                    .start()
                )
                q.processAllAvailable()
                q.stop()

            stream_read_s = timed(stream_read)
            parquet = work / f"parquet-{size}"
            source.write.parquet(str(parquet))
            parquet_s = timed(
                lambda parquet=parquet: (
                    spark.read.parquet(str(parquet)).write.format("noop").mode("overwrite").save()
                )
            )
            for what, seconds in (
                ("write", write_s),
                ("batch read", batch_read_s),
                ("stream read", stream_read_s),
                ("parquet read", parquet_s),
            ):
                results.append(
                    {
                        "value_bytes": size,
                        "operation": what,
                        "rows": rows,
                        "seconds": round(seconds, 3),
                        "rows_per_s": round(rows / seconds),
                    }
                )
    finally:
        spark.stop()
        node.kill()
    print(f"{'value':>6} {'operation':<13} {'rows':>8} {'seconds':>8} {'rows/s':>10}")
    for r in results:
        print(
            f"{r['value_bytes']:>6} {r['operation']:<13} {r['rows']:>8} {r['seconds']:>8} "
            f"{r['rows_per_s']:>10}"
        )
    out = Path(__file__).parent / "results" / "spark.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"spark_master": "local[2]", "partitions": parts, "results": results}, indent=2)
    )


if __name__ == "__main__":
    main()
