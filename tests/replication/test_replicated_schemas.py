"""Schemas cross with their messages: the replicator registers the schema of an entry on the
remote topic before sending it, and the entry carries the remote's version of it. Two real
standalones (``east``, ``west``) and the official client's ``AvroSchema`` records, which
decode each message with the writer schema of the version it carries (fetched from the
cluster it is consumed in)."""

from __future__ import annotations

import logging
from datetime import datetime

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from magnetar.testing.wait import wait_until

from .conftest import Pair, ok

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
RECEIVE_TIMEOUT_MS = 20_000


class Order(Record):
    _sorted_fields = True
    id = Integer()
    item = String()


class OrderWithNote(Record):
    """``Order`` plus a field with a default: compatible both ways."""

    _sorted_fields = True
    id = Integer()
    item = String()
    note = String(default="none", required_default=True)


class OrderWithTextId(Record):
    """``Order`` with another type for ``id``: compatible neither way."""

    _sorted_fields = True
    id = String()
    item = String()


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=_log)


def test_a_consumer_with_a_schema_decodes_replicated_messages(pair: Pair) -> None:
    """West holds another schema as its version 0 before east's messages arrive, so east's
    version 0 means another schema there: the messages must carry west's version of the
    schema they were written with (before, west decoded them with the wrong schema)."""
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/orders"
    east, west = _client(pair.east.url), _client(pair.west.url)
    try:
        west.create_producer(topic, schema=AvroSchema(OrderWithNote)).close()  # west's v0
        in_west = west.subscribe(
            topic,
            "sub",
            schema=AvroSchema(OrderWithNote),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = east.create_producer(topic, schema=AvroSchema(Order))  # east's v0
        for i in range(10):
            producer.send(Order(id=i, item=f"item-{i}"))
        got = []
        for _ in range(10):
            msg = in_west.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            in_west.acknowledge(msg)
            got.append(msg)
        assert [(m.value().id, m.value().item, m.value().note) for m in got] == [
            (i, f"item-{i}", "none") for i in range(10)
        ]
        west_schema = ok(pair.west.http_url, "GET", f"/admin/v2/schemas/{ns}/orders/schema/1")
        assert '"item"' in west_schema["data"] and '"note"' not in west_schema["data"]
        assert {m._message.int_schema_version() for m in got} == {1}
    finally:
        east.close()
        west.close()


def test_a_schema_the_remote_refuses_is_retried_with_a_growing_backoff(pair: Pair) -> None:
    """The remote takes the replicator's producer, then refuses the schema: each attempt
    connects, so the backoff must not start again from 100 ms at each (before, the
    replicator tried about ten times a second for as long as the schema was refused)."""
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/refused"
    east, west = _client(pair.east.url), _client(pair.west.url)
    try:
        west.create_producer(topic, schema=AvroSchema(OrderWithTextId)).close()
        in_west = west.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        east.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, item="a"))

        def refusals() -> list[datetime]:
            lines = pair.east.log_path.read_text(errors="replace").splitlines()
            return [
                datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                for line in lines
                if topic in line and "Incompatible schema" in line
            ]

        wait_until(lambda: len(refusals()) >= 6, timeout_s=30, what="six refusals")
        first, sixth = refusals()[0], refusals()[5]
        # 100 + 200 + 400 + 800 + 1600 ms of backoff between them, less up to 10% jitter
        assert (sixth - first).total_seconds() >= 2.79, refusals()[:6]
        with pytest.raises(pulsar.Timeout):
            in_west.receive(timeout_millis=500)
    finally:
        east.close()
        west.close()
