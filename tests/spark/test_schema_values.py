"""``value_format=schema``: values decoded through the topic's schema into Spark columns,
each message by its own schema version. Records are written by the official ``pulsar``
wheel (typed Avro and JSON producers) into a real ``magnetar standalone``; Spark runs in
``local[2]``."""

from __future__ import annotations

import pulsar
import pytest
from pulsar.schema import AvroSchema, Double, Integer, JsonSchema, Record, String
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, IntegerType, StringType

from magnetar.testing import StandaloneProcess

from .conftest import produce, read_all


def _user_v1() -> type[Record]:
    class User(Record):
        name = String()
        age = Integer()

    return User


def _user_v2() -> type[Record]:
    class User(Record):  # the same record, evolved: a field with a default (FULL-compatible)
        name = String()
        age = Integer()
        city = String(default="nowhere", required_default=True)

    return User


def _full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def test_avro_values_of_two_versions_become_columns(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    v1, v2 = _user_v1(), _user_v2()
    client = pulsar.Client(standalone.url)
    try:
        p1 = client.create_producer(_full(topic), schema=AvroSchema(v1))
        p1.send(v1(name="ann", age=31))
        p2 = client.create_producer(_full(topic), schema=AvroSchema(v2))
        p2.send(v2(name="bob", age=42, city="oslo"))
        p1.send(v1(name="cid", age=7))
    finally:
        client.close()
    df = read_all(spark, standalone.url, topic, value_format="schema")
    types = {f.name: f.dataType for f in df.schema.fields}
    assert (types["name"], types["age"], types["city"]) == (
        StringType(),
        IntegerType(),
        StringType(),
    )
    assert "value" not in types and "publish_time" in types
    rows = [tuple(r) for r in df.select("name", "age", "city").orderBy("publish_time").collect()]
    # Version 0 records lack ``city``: resolved to version 1's default.
    assert rows == [("ann", 31, "nowhere"), ("bob", 42, "oslo"), ("cid", 7, "nowhere")]


def test_json_values_become_columns_and_misfits_are_null(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    class Reading(Record):
        sensor = String()
        celsius = Double()

    client = pulsar.Client(standalone.url)
    try:
        producer = client.create_producer(_full(topic), schema=JsonSchema(Reading))
        producer.send(Reading(sensor="s1", celsius=21.5))
        producer.send(Reading(sensor="s2", celsius=-3.0))
    finally:
        client.close()
    produce(standalone.url, topic, [b"not json"])  # a schemaless producer (not enforced)
    df = read_all(spark, standalone.url, topic, value_format="schema")
    assert {f.name: f.dataType for f in df.schema.fields}["celsius"] == DoubleType()
    rows = [tuple(r) for r in df.select("sensor", "celsius").orderBy("publish_time").collect()]
    assert rows == [("s1", 21.5), ("s2", -3.0), (None, None)]


def test_string_topic_gives_a_string_value(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    client = pulsar.Client(standalone.url)
    try:
        producer = client.create_producer(_full(topic), schema=pulsar.schema.StringSchema())
        producer.send("héllo")
    finally:
        client.close()
    df = read_all(spark, standalone.url, topic, value_format="schema")
    assert [r.value for r in df.select("value").collect()] == ["héllo"]


def test_topic_without_schema_is_a_clear_error(
    spark: SparkSession, standalone: StandaloneProcess, topic: str
) -> None:
    produce(standalone.url, topic, [b"raw"])
    with pytest.raises(Exception, match="has no schema"):
        read_all(spark, standalone.url, topic, value_format="schema").collect()
