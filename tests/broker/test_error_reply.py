"""Every failed request gets the answer its client waits for (DESIGN §6: "Every request is
answered, whatever exception its handling raised")."""

from __future__ import annotations

import pytest

from magnetar.broker.error_reply import MESSAGE_LENGTH_MAX_CHARS, failure_reply
from magnetar.common.errors import MetadataError, ServerError, TopicNotFound
from magnetar.metadata.store import SessionExpired
from magnetar.protocol import (
    Command,
    Error,
    Flow,
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    Producer,
    SchemaInfo,
    SchemaType,
    encode,
)

TOPIC = "persistent://public/default/t"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            LookupTopic(topic=TOPIC, request_id=7),
            LookupTopicResponse(
                request_id=7,
                response=LookupResult.Failed,
                error=ServerError.TopicNotFound,
                message="gone",
            ),
        ),
        (
            PartitionedTopicMetadata(topic=TOPIC, request_id=7),
            PartitionedTopicMetadataResponse(
                request_id=7,
                response=MetadataResult.Failed,
                error=ServerError.TopicNotFound,
                message="gone",
            ),
        ),
        (
            GetSchema(topic=TOPIC, request_id=7),
            GetSchemaResponse(
                request_id=7, error_code=ServerError.TopicNotFound, error_message="gone"
            ),
        ),
        (
            GetOrCreateSchema(
                topic=TOPIC,
                request_id=7,
                schema=SchemaInfo(name="s", schema_data=b"", type=SchemaType.None_),
            ),
            GetOrCreateSchemaResponse(
                request_id=7, error_code=ServerError.TopicNotFound, error_message="gone"
            ),
        ),
        (
            Producer(topic=TOPIC, producer_id=1, request_id=7),
            Error(request_id=7, error=ServerError.TopicNotFound, message="gone"),
        ),
    ],
)
def test_each_request_gets_its_own_kind_of_failure(request_: Command, expected: Command) -> None:
    assert failure_reply(request_, TopicNotFound("gone")) == expected


def test_an_unexpected_exception_is_answered_without_its_text() -> None:
    reply = failure_reply(
        Producer(topic=TOPIC, producer_id=1, request_id=3),
        TypeError("'in <string>' requires string as left operand, not bytes"),
    )
    assert reply == Error(
        request_id=3, error=ServerError.UnknownError, message="Internal error: TypeError"
    )


def test_a_message_that_cannot_be_encoded_is_escaped_and_bounded() -> None:
    exc = MetadataError("bad name 'x\udcffy' " + "z" * 5000)
    reply = failure_reply(LookupTopic(topic=TOPIC, request_id=4), exc)
    assert isinstance(reply, LookupTopicResponse) and reply.message is not None
    assert reply.message.startswith("bad name 'x\\udcffy' ")
    assert len(reply.message) <= MESSAGE_LENGTH_MAX_CHARS + len("\\udcff")
    encode(reply)  # goes out on the wire


def test_a_command_without_request_id_has_no_answer() -> None:
    assert failure_reply(Flow(consumer_id=1, message_permits=1), TopicNotFound("x")) is None


@pytest.mark.parametrize(
    "request_",
    [
        LookupTopic(topic=TOPIC, request_id=7),
        PartitionedTopicMetadata(topic=TOPIC, request_id=7),
        Producer(topic=TOPIC, producer_id=1, request_id=7),
    ],
)
def test_the_end_of_the_metadata_session_is_answered_service_not_ready(
    request_: Command,
) -> None:
    # The store raises SessionExpired (its wire code: MetadataError) from the moment the
    # session ends, a moment before the broker sees the LOST state: the answer is still
    # the retriable ServiceNotReady that sends the client to look the topic up again.
    reply = failure_reply(request_, SessionExpired("session 0x1 is lost"))
    code = reply.error if isinstance(reply, Error | LookupTopicResponse) else None
    if isinstance(reply, PartitionedTopicMetadataResponse):
        code = reply.error
    assert code is ServerError.ServiceNotReady
    assert reply is not None and "session 0x1 is lost" in str(reply)
