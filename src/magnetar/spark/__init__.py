"""Magnetar as a PySpark data source (Spark 4.x ``pyspark.sql.datasource``). See docs/spark.md.

::

    import magnetar.spark
    magnetar.spark.register(spark)
    stream = (spark.readStream.format("magnetar")
              .option("service_url", "pulsar://127.0.0.1:6650")
              .option("topic", "clicks")
              .option("starting_offsets", "earliest")
              .load())
"""

from __future__ import annotations

from typing import Any

from magnetar.spark.offsets import OffsetsError, Position
from magnetar.spark.options import OptionsError
from magnetar.spark.source import MagnetarDataSource
from magnetar.spark.topic_catalog import DataLoss, SparkSourceError, UnknownTopic

__all__ = [
    "DataLoss",
    "MagnetarDataSource",
    "OffsetsError",
    "OptionsError",
    "Position",
    "SparkSourceError",
    "UnknownTopic",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``magnetar`` format on a SparkSession."""
    spark.dataSource.register(MagnetarDataSource)
