"""Names and namespaces at the broker's entry points, with real processes (issue 13 item 2,
issue 14 items 4 and 5).

* A producer, consumer or reader on a tenant or namespace that does not exist is refused
  with ``TopicNotFound`` at lookup time, and nothing is stored: no managed ledger, no
  ledger, no metadata node.
* Every request is answered, whatever its handling raised; a name that is not UTF-8, ``.``
  or ``..``, or an empty subscription name gets a clear error naming the problem, never a
  ``MetadataError`` with an internal path.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable

import pulsar
import pytest

from magnetar.common.errors import ServerError
from magnetar.protocol import (
    Command,
    Error,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    Producer,
    ProducerSuccess,
    Subscribe,
    SubType,
    encode,
)
from magnetar.testing import StandaloneProcess

from .helpers import new_client
from .raw import RawClient


def _metadata_paths(node: StandaloneProcess) -> set[str]:
    """Every node path in the standalone's embedded metadata store (read-only; the store
    is SQLite in WAL mode, so reading beside the running process is safe)."""
    db = sqlite3.connect(f"file:{node.data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT path FROM nodes")}
    finally:
        db.close()


def test_clients_on_a_missing_tenant_or_namespace_are_refused_and_store_nothing(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    # No Functions Worker: its own topics (created while it starts) would add ledgers.
    node = standalone_factory("--no-functions-worker")
    before = _metadata_paths(node)
    tag = uuid.uuid4().hex[:8]
    topics = [
        f"persistent://no-tenant-{tag}/ns/t",  # tenant missing
        f"persistent://public/no-ns-{tag}/t",  # tenant exists, namespace missing
        f"non-persistent://public/no-ns-{tag}/t",
    ]
    client = new_client(node.url)
    try:
        for topic in topics:
            with pytest.raises(pulsar.TopicNotFound):
                client.create_producer(topic)
            with pytest.raises(pulsar.TopicNotFound):
                client.subscribe(topic, "sub")
            with pytest.raises(pulsar.TopicNotFound):
                client.create_reader(topic, pulsar.MessageId.earliest)
        # the broker still serves topics of namespaces that exist
        ok = f"persistent://public/default/ok-{tag}"
        producer = client.create_producer(ok)
        producer.send(b"hello")
    finally:
        client.close()
    created = _metadata_paths(node) - before
    assert not [p for p in created if tag in p and "ok-" not in p], sorted(created)
    # the one ledger and managed ledger that exist belong to the topic that was allowed
    assert [p for p in created if p.startswith("/managed-ledgers/") and tag in p] == [
        f"/managed-ledgers/public/default/persistent/ok-{tag}"
    ]
    assert len([p for p in created if p.startswith("/ledgers/L")]) == 1


def test_raw_lookups_on_a_missing_namespace_answer_topic_not_found(
    standalone: StandaloneProcess,
) -> None:
    raw = RawClient(standalone.port)
    try:
        topic = f"persistent://public/no-ns-{uuid.uuid4().hex[:8]}/t"
        lookup = raw.request(LookupTopic(topic=topic, request_id=raw.next_id()))
        assert isinstance(lookup, LookupTopicResponse)
        assert lookup.response is LookupResult.Failed
        assert lookup.error is ServerError.TopicNotFound
        assert lookup.message is not None and "does not exist" in lookup.message
        meta = raw.request(PartitionedTopicMetadata(topic=topic, request_id=raw.next_id()))
        assert isinstance(meta, PartitionedTopicMetadataResponse)
        assert meta.response is MetadataResult.Failed
        assert meta.error is ServerError.TopicNotFound
        answer = raw.create_producer(topic, 1)
        assert isinstance(answer, Error) and answer.error is ServerError.TopicNotFound
    finally:
        raw.close()


def _request_with_bytes(raw: RawClient, command: Command, marker: bytes, bad: bytes) -> Command:
    """Send ``command`` with ``marker`` replaced by ``bad`` (same length, so the frame's
    sizes still hold) and return the answer to its request id."""
    assert len(marker) == len(bad)
    data = encode(command)
    assert data.count(marker) == 1
    raw.send_bytes(data.replace(marker, bad))
    rid = command.request_id  # type: ignore[attr-defined]
    return raw.wait_for(lambda f: getattr(f.command, "request_id", None) == rid).command


def _assert_clear_error(answer: Command, code: ServerError, fragment: str) -> None:
    if isinstance(answer, LookupTopicResponse | PartitionedTopicMetadataResponse):
        assert answer.response in (LookupResult.Failed, MetadataResult.Failed), answer
        error, message = answer.error, answer.message or ""
    else:
        assert isinstance(answer, Error), answer
        error, message = answer.error, answer.message
    assert error is code, answer
    assert fragment in message, answer
    assert "/managed-ledgers" not in message and "/admin/" not in message, answer


def test_names_that_are_not_utf8_are_answered_with_an_error(standalone: StandaloneProcess) -> None:
    raw = RawClient(standalone.port)
    try:
        topic = "persistent://public/default/bad-XX-name"
        marker, bad = b"XX", b"\xff\xfe"
        for command in (
            LookupTopic(topic=topic, request_id=raw.next_id()),
            PartitionedTopicMetadata(topic=topic, request_id=raw.next_id()),
            Producer(topic=topic, producer_id=1, request_id=raw.next_id()),
            Subscribe(
                topic=topic,
                subscription="s",
                consumer_id=1,
                request_id=raw.next_id(),
                sub_type=SubType.Exclusive,
            ),
        ):
            answer = _request_with_bytes(raw, command, marker, bad)
            _assert_clear_error(answer, ServerError.NotAllowedError, "not valid UTF-8")
        good_topic = f"persistent://public/default/utf8-{uuid.uuid4().hex[:8]}"
        answer = _request_with_bytes(
            raw,
            Subscribe(
                topic=good_topic,
                subscription="sub-XX",
                consumer_id=2,
                request_id=raw.next_id(),
                sub_type=SubType.Exclusive,
            ),
            marker,
            bad,
        )
        _assert_clear_error(answer, ServerError.NotAllowedError, "not valid UTF-8")
        # the connection still serves valid requests
        assert isinstance(raw.create_producer(good_topic, 3), ProducerSuccess)
    finally:
        raw.close()


@pytest.mark.parametrize("local", [".", ".."])
def test_dot_names_are_refused_at_lookup_not_later_with_an_internal_path(
    standalone: StandaloneProcess, local: str
) -> None:
    raw = RawClient(standalone.port)
    try:
        topic = f"persistent://public/default/{local}"
        lookup = raw.request(LookupTopic(topic=topic, request_id=raw.next_id()))
        _assert_clear_error(lookup, ServerError.NotAllowedError, "reserved")
        _assert_clear_error(raw.create_producer(topic, 1), ServerError.NotAllowedError, "reserved")
        subscribe = Subscribe(
            topic=topic,
            subscription="s",
            consumer_id=1,
            request_id=raw.next_id(),
            sub_type=SubType.Shared,
        )
        _assert_clear_error(raw.request(subscribe), ServerError.NotAllowedError, "reserved")
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("subscription", "fragment"),
    [("", "Empty subscription name"), ("..", "reserved"), ("a\rb", "control characters")],
)
def test_bad_subscription_names_are_refused(
    standalone: StandaloneProcess, subscription: str, fragment: str
) -> None:
    raw = RawClient(standalone.port)
    try:
        topic = f"persistent://public/default/subname-{uuid.uuid4().hex[:8]}"
        answer = raw.request(
            Subscribe(
                topic=topic,
                subscription=subscription,
                consumer_id=1,
                request_id=raw.next_id(),
                sub_type=SubType.Exclusive,
            )
        )
        _assert_clear_error(answer, ServerError.NotAllowedError, fragment)
    finally:
        raw.close()


def test_the_official_client_gets_not_allowed_at_once_for_a_reserved_name(
    standalone: StandaloneProcess,
) -> None:
    """The wheel retries InvalidTopicName lookups until its operation timeout; names only
    Magnetar refuses come back NotAllowedError, which it reports at once."""
    client = pulsar.Client(standalone.url, operation_timeout_seconds=120)
    try:
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer("persistent://public/default/..")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(f"persistent://public/default/sub-{uuid.uuid4().hex[:8]}", "..")
    finally:
        client.close()
