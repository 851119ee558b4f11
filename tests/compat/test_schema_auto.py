"""AUTO_CONSUME and AUTO_PUBLISH against a real ``magnetar standalone``: the official wheel
writes typed records (it has no AUTO schemas), Magnetar's own client reads and writes with
``AutoConsumeSchema`` / ``AutoProduceBytesSchema``, as Pulsar's Java client does with
``Schema.AUTO_CONSUME()`` / ``Schema.AUTO_PRODUCE_BYTES()``."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from typing import Any

import fastavro
import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from magnetar.client import (
    AutoConsumeSchema,
    AutoProduceBytesSchema,
    BytesSchema,
    Client,
    InitialPosition,
    SchemaSerializationError,
)
from magnetar.common.errors import IncompatibleSchema
from magnetar.protocol import SchemaInfo, SchemaType
from magnetar.testing import StandaloneProcess

WAIT_MS = 10_000


class UserV1(Record):
    name = String()
    age = Integer()


class UserV2(Record):  # adds a field with a default: compatible under FULL
    name = String()
    age = Integer()
    city = String(default="nowhere", required_default=True)


def _topic() -> str:
    return f"persistent://public/default/auto-{uuid.uuid4().hex[:10]}"


async def _magnetar_client(standalone: StandaloneProcess) -> Client:
    return Client(standalone.url, operation_timeout_seconds=15)


def test_auto_consume_decodes_each_message_by_its_version(
    client: pulsar.Client, standalone: StandaloneProcess
) -> None:
    """Messages written under two Avro versions: each decodes with its own version's
    schema (v1 records have no ``city``), and the subscription registered nothing."""
    topic = _topic()
    p1 = client.create_producer(topic, schema=AvroSchema(UserV1))
    p2 = client.create_producer(topic, schema=AvroSchema(UserV2))
    p1.send(UserV1(name="ann", age=31))
    p2.send(UserV2(name="bob", age=42, city="oslo"))
    p1.send(UserV1(name="cid", age=7))

    async def read() -> list[tuple[int, Any]]:
        async with await _magnetar_client(standalone) as mc:
            consumer = await mc.subscribe(
                topic,
                "auto",
                schema=AutoConsumeSchema(),
                initial_position=InitialPosition.Earliest,
            )
            out = []
            for _ in range(3):
                msg = await consumer.receive(WAIT_MS)
                out.append((int.from_bytes(msg.schema_version() or b"", "big"), msg.value()))
            assert (await mc.get_schema_info(topic)) is not None
            return out

    assert asyncio.run(read()) == [
        (0, {"name": "ann", "age": 31}),
        (1, {"name": "bob", "age": 42, "city": "oslo"}),
        (0, {"name": "cid", "age": 7}),
    ]


def test_auto_consume_on_an_idle_topic_registers_nothing(
    client: pulsar.Client, standalone: StandaloneProcess
) -> None:
    """An AUTO_CONSUME subscriber neither registers a schema nor keeps the topic from being
    idle: a typed subscriber after it still registers its own schema (Pulsar's rule)."""
    topic = _topic()

    async def run() -> None:
        async with await _magnetar_client(standalone) as mc:
            await mc.subscribe(topic, "auto", schema=AutoConsumeSchema())
            assert await mc.get_schema_info(topic) is None
            client.subscribe(topic, "typed", schema=JsonSchema(UserV1))
            found = await mc.get_schema_info(topic)
            assert found is not None
            info, version = found
            assert (info.type, version) == (SchemaType.Json, 0)
            # Then a JSON producer writes, and the AUTO_CONSUME consumer decodes JSON.
            producer = client.create_producer(topic, schema=JsonSchema(UserV1))
            producer.send(UserV1(name="dee", age=5))
            consumer = await mc.subscribe(
                topic,
                "auto2",
                schema=AutoConsumeSchema(),
                initial_position=InitialPosition.Earliest,
            )
            msg = await consumer.receive(WAIT_MS)
            assert msg.value() == {"name": "dee", "age": 5}

    asyncio.run(run())


def test_auto_consume_is_no_producer_schema(standalone: StandaloneProcess) -> None:
    """A producer naming AUTO_CONSUME is refused with IncompatibleSchema; nothing stored."""
    topic = _topic()

    class AutoConsumeAsProducer(BytesSchema):
        def schema_info(self) -> SchemaInfo:
            return SchemaInfo(name="x", schema_data=b"", type=SchemaType.AutoConsume)

    async def run() -> None:
        async with await _magnetar_client(standalone) as mc:
            with pytest.raises(IncompatibleSchema, match="AUTO_CONSUME"):
                await mc.create_producer(topic, schema=AutoConsumeAsProducer())
            assert await mc.get_schema_info(topic) is None

    asyncio.run(run())


def test_auto_publish_sends_with_the_topic_schema(
    client: pulsar.Client, standalone: StandaloneProcess
) -> None:
    """AUTO_PUBLISH fetches the latest schema, registers with it (its messages carry that
    version, so a typed consumer decodes them) and refuses bytes that do not decode."""
    topic = _topic()
    client.create_producer(topic, schema=AvroSchema(UserV1))
    client.create_producer(topic, schema=AvroSchema(UserV2))  # latest: version 1
    consumer = client.subscribe(topic, "typed", schema=AvroSchema(UserV2))
    parsed = fastavro.parse_schema(json.loads(json.dumps(UserV2.schema())))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"name": "eve", "age": 3, "city": "rome"})

    async def run() -> None:
        async with await _magnetar_client(standalone) as mc:
            producer = await mc.create_producer(
                topic, schema=AutoProduceBytesSchema(), batching_enabled=False
            )
            await producer.send(buf.getvalue())
            with pytest.raises(SchemaSerializationError):
                await producer.send(b"\xff\xff\xff\xff\xff\xff")
            found = await mc.get_schema_info(topic)
            assert found is not None and found[1] == 1  # no new version

    asyncio.run(run())
    msg = consumer.receive(WAIT_MS)
    assert msg.schema_version().encode() == (1).to_bytes(8, "big")
    assert msg.value() == UserV2(name="eve", age=3, city="rome")


def test_auto_publish_on_a_topic_without_schema_sends_bytes(
    client: pulsar.Client, standalone: StandaloneProcess
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "raw")

    async def run() -> None:
        async with await _magnetar_client(standalone) as mc:
            producer = await mc.create_producer(topic, schema=AutoProduceBytesSchema())
            await producer.send(b"plain")
            assert await mc.get_schema_info(topic) is None

    asyncio.run(run())
    assert consumer.receive(WAIT_MS).data() == b"plain"
