"""Spark + magnetar throughput: rows/s read into a no-op sink and written from a generated
DataFrame, for 100 B and 1 KiB values, next to Spark reading the same rows from Parquet.

Runs ``magnetar standalone`` (deduplication on) as a subprocess and Spark ``local[2]``.
Prints a table and writes ``benchmarks/results/spark.json``.

``--offloaded`` measures historical reads instead: the rows are written to a topic with
small ledgers on a standalone with tiered storage (``--store filesystem``, or ``s3`` on
moto's server), every closed ledger is offloaded (deletion lag 0), then the same batch read
runs straight from the object store in the executors, through the broker
(``offload.directRead=false``), and from Parquet, in the same run
(``benchmarks/results/spark-offloaded.json``, with the ratios).

    .venv/bin/python benchmarks/spark.py [--rows 1000000] [--partitions 4]
    .venv/bin/python benchmarks/spark.py --offloaded [--store filesystem|s3] [--rows 1000000]
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
from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.s3_server import S3Server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.spark.conftest import admin, create_partitioned

LEDGER_ENTRIES = 20
"""Entries per ledger in ``--offloaded`` (a Spark write's entries are batches of rows)."""


def timed(action) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _session() -> SparkSession:
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    return spark


def _offload_all(node: StandaloneProcess, topic: str) -> int:
    """Offload every closed ledger of ``topic``'s partitions and wait until the bookie
    copies are gone; returns how many ledgers were offloaded."""
    parts = admin(node, "GET", f"/admin/v2/persistent/public/default/{topic}/partitions")
    names = [f"{topic}-partition-{i}" for i in range(parts["partitions"])] or [topic]
    count = 0
    for name in names:
        path = f"/admin/v2/persistent/public/default/{name}"
        ledgers = admin(node, "GET", f"{path}/internal-info")["ledgerInfo"]
        last = ledgers[-1]["ledgerId"]
        admin(node, "PUT", f"{path}/offload", {"ledgerId": last, "entryId": 0})
        wait_until(
            lambda path=path: admin(node, "GET", f"{path}/offload")["status"] == "SUCCESS",
            timeout_s=600,
            what=f"offload of {name}",
        )
        status = admin(node, "GET", f"{path}/offload")
        last = int(status["firstUnoffloadedMessage"]["ledgerId"])

        def deleted(path: str = path, last: int = last) -> int:
            info = admin(node, "GET", f"{path}/internal-info")["ledgerInfo"]
            before = [led for led in info if led["ledgerId"] < last and led["entries"]]
            gone = [
                led for led in before if (led.get("offloadContext") or {}).get("bookkeeperDeleted")
            ]
            return len(gone) if len(gone) == len(before) else 0

        count += wait_until(deleted, timeout_s=600, what=f"bookie copies of {name} deleted")
    return count


def offloaded(rows: int, parts: int, store: str) -> None:
    """The ``--offloaded`` phase (see the module docstring)."""
    work = Path(tempfile.mkdtemp(prefix="spark-offload-bench-"))
    s3: S3Server | None = None
    if store == "s3":
        s3 = S3Server(work / "moto.log")
        s3.start()
        s3.create_bucket("bench")
        os.environ.update(S3Server.env())
        flags = ["--offload-driver", "aws-s3", "--offload-bucket", "bench"]
        flags += ["--offload-region", "us-east-1", "--offload-endpoint", s3.endpoint]
    else:
        flags = ["--offload-driver", "filesystem", "--offload-directory", str(work / "tier")]
    node = StandaloneProcess(
        work / "data",
        "--deduplication",
        "--managed-ledger-max-entries-per-ledger", str(LEDGER_ENTRIES),
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
        "--offload-deletion-lag-ms", "0",
        *flags,
    )  # fmt: skip
    node.start()
    spark = _session()
    results: list[dict[str, object]] = []
    try:
        admin(
            node,
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        topic = "bench-offloaded"
        create_partitioned(node, topic, parts)
        df = spark.range(rows, numPartitions=parts).selectExpr(
            "cast(rpad(cast(id AS string), 100, 'x') AS binary) AS value"
        )
        df.write.format("magnetar").option("service_url", node.url).option("topic", topic).mode(
            "append"
        ).save()
        ledgers = _offload_all(node, topic)
        options = {"service_url": node.url, "topic": topic, "admin_url": node.http_url}
        direct = {**options, "offload.driver": "aws-s3" if s3 else "filesystem"}
        if s3 is not None:
            direct.update(
                {
                    "offload.bucket": "bench",
                    "offload.region": "us-east-1",
                    "offload.endpoint": s3.endpoint,
                }
            )
        else:
            direct["offload.directory"] = str(work / "tier")
        broker = {**direct, "offload.directRead": "false"}

        def read(opts: dict[str, str]) -> float:
            source = spark.read.format("magnetar").options(**opts).load()
            return timed(lambda: source.write.format("noop").mode("overwrite").save())

        parquet = work / "parquet"
        spark.read.format("magnetar").options(**direct).load().write.parquet(str(parquet))
        read(direct)  # warm-up: Python workers, imports, the object store's connections
        timings = {
            "object store (direct)": read(direct),
            "broker": read(broker),
            "parquet": timed(
                lambda: (
                    spark.read.parquet(str(parquet)).write.format("noop").mode("overwrite").save()
                )
            ),
        }
        parquet_s = timings["parquet"]
        for what, seconds in timings.items():
            results.append(
                {
                    "operation": f"batch read, {what}",
                    "rows": rows,
                    "seconds": round(seconds, 3),
                    "rows_per_s": round(rows / seconds),
                    "vs_parquet": round(parquet_s / seconds, 3),
                }
            )
        results[0]["vs_broker"] = round(timings["broker"] / timings["object store (direct)"], 3)
    finally:
        spark.stop()
        node.kill()
        if s3 is not None:
            s3.stop()
    print(f"store {store}, {ledgers} ledgers offloaded, {parts} partitions, value 100 B")
    print(f"{'operation':<36} {'rows':>8} {'seconds':>8} {'rows/s':>10} {'x parquet':>9}")
    for r in results:
        print(
            f"{r['operation']:<36} {r['rows']:>8} {r['seconds']:>8} {r['rows_per_s']:>10} "
            f"{r['vs_parquet']:>9}"
        )
    out = Path(__file__).parent / "results" / "spark-offloaded.json"
    out.parent.mkdir(exist_ok=True)
    summary = {
        "spark_master": "local[2]",
        "partitions": parts,
        "store": store,
        "ledgers_offloaded": ledgers,
        "results": results,
    }
    out.write_text(json.dumps(summary, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--rows", type=int, default=1_000_000
    )  # fewer: Spark's fixed costs dominate
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--offloaded", action="store_true", help="historical reads of offloaded ledgers"
    )
    parser.add_argument("--store", choices=("filesystem", "s3"), default="filesystem")
    args = parser.parse_args()
    rows, parts = args.rows, args.partitions
    if args.offloaded:
        offloaded(rows, parts, args.store)
        return
    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    node = StandaloneProcess(work / "data", "--deduplication")
    node.start()
    spark = _session()
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
