"""Smoke tests of the pipelines in examples/, on the shared standalone and Spark session."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from pyspark.sql import SparkSession

from magnetar.testing import StandaloneProcess, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(relative: str) -> ModuleType:
    path = EXAMPLES / relative
    name = "example_" + relative.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_clickstream_pipeline(
    spark: SparkSession, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    generator = load("clickstream/generator.py")
    aggregate = load("clickstream/aggregate.py")
    serve = load("clickstream/serve.py")
    source, results = f"{topic}-clicks", f"{topic}-results"
    start_ms = 1_699_999_980_000  # 22:13:00 UTC: five whole one-minute windows per page
    sent = asyncio.run(
        generator.generate(standalone.url, source, 3000, start_ms=start_ms, close_windows=True)
    )
    q = aggregate.start(
        spark,
        standalone.url,
        source,
        results,
        str(tmp_path / "checkpoint"),
        admin_url=standalone.http_url,
    )
    latest = serve.LatestResults()

    def all_windows_served() -> bool:
        latest.catch_up(standalone.url, results, idle_ms=300)
        return len(latest.snapshot()) >= 5 * len(generator.PAGES)

    try:
        q.processAllAvailable()
        # The windows close in the no-data batch that follows the watermark's move.
        wait_until(all_windows_served, 120, 0.5)
    finally:
        q.stop()
    snapshot = latest.snapshot()
    per_page: dict[str, tuple[int, int]] = {}
    for value in snapshot.values():
        views, conversions = per_page.get(value["page"], (0, 0))
        per_page[value["page"]] = (views + value["views"], conversions + value["conversions"])
    expected = {
        page: (sent.get((page, "view"), 0), sent.get((page, "purchase"), 0))
        for page in generator.PAGES
    }
    assert per_page == expected
    assert {key.split("|")[1] for key in snapshot} == {
        "2023-11-14T22:13",
        "2023-11-14T22:14",
        "2023-11-14T22:15",
        "2023-11-14T22:16",
        "2023-11-14T22:17",
    }


def test_history_to_parquet(
    spark: SparkSession, standalone: StandaloneProcess, topic: str, tmp_path: Path
) -> None:
    generator = load("clickstream/generator.py")
    job = load("history/to_parquet.py")
    sent = asyncio.run(generator.generate(standalone.url, topic, 2000))
    out = tmp_path / "parquet"
    assert job.export(job.history(spark, standalone.url, topic), str(out)) == 2000
    back = spark.read.parquet(str(out))
    assert back.count() == sum(sent.values())
    assert "day" in back.columns and back.select("value").distinct().count() == 2000
