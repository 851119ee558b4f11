"""One sample of every command, with its expected wire layout written from the reference's
field tables (``/work/shared/reference/pulsar-protocol.md`` section 3), not from our .proto.

``SAMPLES[i] = (command, expected)``: ``expected`` is the layout of the command's
sub-message inside BaseCommand (see :mod:`tests.protocol.wire`).
"""

from __future__ import annotations

from typing import Any

import magnetar.protocol as p
from magnetar.protocol import INT64_MAX, MessageId, ServerError

U64_MAX = (1 << 64) - 1

SCHEMA = p.SchemaInfo(
    name="s", schema_data=b'{"type":"string"}', type=p.SchemaType.Json, properties=(("k", "v"),)
)
SCHEMA_WIRE = {1: "s", 3: b'{"type":"string"}', 4: 2, 5: {1: "k", 2: "v"}}

TXN = {2: 11, 3: 22}  # txnid_least_bits, txnid_most_bits


def _txn_resp(cls: type[Any]) -> tuple[Any, dict[int, Any]]:
    cmd = cls(
        request_id=9,
        txnid_least_bits=11,
        txnid_most_bits=22,
        error=ServerError.TransactionConflict,
        message="m",
    )
    return cmd, {1: 9, **TXN, 4: 23, 5: "m"}


SAMPLES: list[tuple[Any, dict[int, Any]]] = [
    (
        p.Connect(
            client_version="Pulsar-CPP-v4.2.0",
            auth_method_name="token",
            auth_data=b"tok",
            protocol_version=20,
            proxy_to_broker_url="b:6650",
            original_principal="op",
            original_auth_data="oad",
            original_auth_method="oam",
            auth_method=p.AuthMethod.AuthMethodYcaV1,
            feature_flags=p.FeatureFlags(
                supports_auth_refresh=True, supports_broker_entry_metadata=True
            ),
        ),
        {
            1: "Pulsar-CPP-v4.2.0",
            2: 1,
            3: b"tok",
            4: 20,
            5: "token",
            6: "b:6650",
            7: "op",
            8: "oad",
            9: "oam",
            10: {1: 1, 2: 1},
        },
    ),
    (
        p.Connected(
            server_version="Magnetar",
            protocol_version=20,
            max_message_size=1024000,
            feature_flags=p.FeatureFlags(supports_topic_watchers=True),
        ),
        {1: "Magnetar", 2: 20, 3: 1024000, 4: {4: 1}},
    ),
    (
        p.Subscribe(
            topic="persistent://public/default/t",
            subscription="sub",
            sub_type=p.SubType.Key_Shared,
            consumer_id=4,
            request_id=5,
            consumer_name="c",
            priority_level=2,
            durable=False,
            start_message_id=p.EARLIEST,
            metadata=(("a", "b"),),
            read_compacted=True,
            schema=SCHEMA,
            initial_position=p.InitialPosition.Earliest,
            replicate_subscription_state=True,
            force_topic_creation=False,
            start_message_rollback_duration_sec=30,
            key_shared_meta=p.KeySharedMeta(
                key_shared_mode=p.KeySharedMode.STICKY,
                hash_ranges=(p.IntRange(start=0, end=100), p.IntRange(start=200, end=65535)),
                allow_out_of_order_delivery=True,
            ),
            subscription_properties=(("x", "y"),),
            consumer_epoch=3,
        ),
        {
            1: "persistent://public/default/t",
            2: "sub",
            3: 3,
            4: 4,
            5: 5,
            6: "c",
            7: 2,
            8: 0,
            9: {1: U64_MAX, 2: U64_MAX},
            10: {1: "a", 2: "b"},
            11: 1,
            12: SCHEMA_WIRE,
            13: 1,
            14: 1,
            15: 0,
            16: 30,
            17: {1: 1, 3: [{1: 0, 2: 100}, {1: 200, 2: 65535}], 4: 1},
            18: {1: "x", 2: "y"},
            19: 3,
        },
    ),
    (
        p.Producer(
            topic="t",
            producer_id=1,
            request_id=2,
            producer_name="p",
            encrypted=True,
            metadata=(("k", "v"), ("k2", "v2")),
            schema=SCHEMA,
            epoch=3,
            user_provided_producer_name=False,
            producer_access_mode=p.ProducerAccessMode.ExclusiveWithFencing,
            topic_epoch=4,
            txn_enabled=True,
            initial_subscription_name="init",
        ),
        {
            1: "t",
            2: 1,
            3: 2,
            4: "p",
            5: 1,
            6: [{1: "k", 2: "v"}, {1: "k2", 2: "v2"}],
            7: SCHEMA_WIRE,
            8: 3,
            9: 0,
            10: 3,
            11: 4,
            12: 1,
            13: "init",
        },
    ),
    (
        p.Send(
            producer_id=1,
            sequence_id=2,
            num_messages=10,
            txnid_least_bits=3,
            txnid_most_bits=4,
            highest_sequence_id=11,
            is_chunk=True,
            marker=True,
            message_id=MessageId(5, 6),
        ),
        {1: 1, 2: 2, 3: 10, 4: 3, 5: 4, 6: 11, 7: 1, 8: 1, 9: {1: 5, 2: 6}},
    ),
    (
        p.SendReceipt(
            producer_id=1, sequence_id=2, message_id=MessageId(7, 8), highest_sequence_id=3
        ),
        {1: 1, 2: 2, 3: {1: 7, 2: 8}, 4: 3},
    ),
    (
        p.SendError(producer_id=1, sequence_id=2, error=ServerError.ChecksumError, message="bad"),
        {1: 1, 2: 2, 3: 9, 4: "bad"},
    ),
    (
        p.Message(
            consumer_id=3,
            message_id=MessageId(7, 8, partition=2, batch_index=1),
            redelivery_count=4,
            ack_set=(-1, 5),
            consumer_epoch=6,
        ),
        {1: 3, 2: {1: 7, 2: 8, 3: 2, 4: 1}, 3: 4, 4: [-1, 5], 5: 6},
    ),
    (
        p.Ack(
            consumer_id=3,
            ack_type=p.AckType.Cumulative,
            message_id=(
                MessageId(1, 2, ack_set=(6,), batch_size=3),
                MessageId(1, 3, first_chunk_message_id=MessageId(1, 1)),
            ),
            validation_error=p.ValidationError.ChecksumMismatch,
            properties=(("k", 7),),
            txnid_least_bits=11,
            txnid_most_bits=22,
            request_id=8,
        ),
        {
            1: 3,
            2: 1,
            3: [{1: 1, 2: 2, 5: 6, 6: 3}, {1: 1, 2: 3, 7: {1: 1, 2: 1}}],
            4: 2,
            5: {1: "k", 2: 7},
            6: 11,
            7: 22,
            8: 8,
        },
    ),
    (p.Flow(consumer_id=3, message_permits=1000), {1: 3, 2: 1000}),
    (p.Unsubscribe(consumer_id=3, request_id=4), {1: 3, 2: 4}),
    (p.Success(request_id=4, schema=SCHEMA), {1: 4, 2: SCHEMA_WIRE}),
    (
        p.Error(request_id=4, error=ServerError.ServiceNotReady, message="later"),
        {1: 4, 2: 6, 3: "later"},
    ),
    (
        p.CloseProducer(
            producer_id=1,
            request_id=2,
            assigned_broker_service_url="pulsar://b:6650",
            assigned_broker_service_url_tls="pulsar+ssl://b:6651",
        ),
        {1: 1, 2: 2, 3: "pulsar://b:6650", 4: "pulsar+ssl://b:6651"},
    ),
    (
        p.CloseConsumer(
            consumer_id=1,
            request_id=2,
            assigned_broker_service_url="pulsar://b:6650",
            assigned_broker_service_url_tls="pulsar+ssl://b:6651",
        ),
        {1: 1, 2: 2, 3: "pulsar://b:6650", 4: "pulsar+ssl://b:6651"},
    ),
    (
        p.ProducerSuccess(
            request_id=2,
            producer_name="standalone-0-3",
            last_sequence_id=9,
            schema_version=b"\x00" * 7 + b"\x01",
            topic_epoch=5,
            producer_ready=False,
        ),
        {1: 2, 2: "standalone-0-3", 3: 9, 4: b"\x00" * 7 + b"\x01", 5: 5, 6: 0},
    ),
    (p.Ping(), {}),
    (p.Pong(), {}),
    (
        p.RedeliverUnacknowledgedMessages(
            consumer_id=3, message_ids=(MessageId(1, 2), MessageId(1, 3)), consumer_epoch=2
        ),
        {1: 3, 2: [{1: 1, 2: 2}, {1: 1, 2: 3}], 3: 2},
    ),
    (
        p.PartitionedTopicMetadata(
            topic="t",
            request_id=1,
            original_principal="a",
            original_auth_data="b",
            original_auth_method="c",
        ),
        {1: "t", 2: 1, 3: "a", 4: "b", 5: "c"},
    ),
    (
        p.PartitionedTopicMetadataResponse(
            partitions=4,
            request_id=1,
            response=p.MetadataResult.Failed,
            error=ServerError.TopicNotFound,
            message="m",
        ),
        {1: 4, 2: 1, 3: 1, 4: 11, 5: "m"},
    ),
    (
        p.LookupTopic(
            topic="t",
            request_id=1,
            authoritative=True,
            original_principal="a",
            original_auth_data="b",
            original_auth_method="c",
            advertised_listener_name="l",
        ),
        {1: "t", 2: 1, 3: 1, 4: "a", 5: "b", 6: "c", 7: "l"},
    ),
    (
        p.LookupTopicResponse(
            broker_service_url="pulsar://b:6650",
            broker_service_url_tls="pulsar+ssl://b:6651",
            response=p.LookupResult.Connect,
            request_id=1,
            authoritative=True,
            error=ServerError.MetadataError,
            message="m",
            proxy_through_service_url=True,
        ),
        {
            1: "pulsar://b:6650",
            2: "pulsar+ssl://b:6651",
            3: 1,
            4: 1,
            5: 1,
            6: 1,
            7: "m",
            8: 1,
        },
    ),
    (p.ConsumerStats(request_id=1, consumer_id=2), {1: 1, 4: 2}),
    (
        p.ConsumerStatsResponse(
            request_id=1,
            error_code=ServerError.ConsumerNotFound,
            error_message="e",
            msg_rate_out=1.5,
            msg_throughput_out=2.5,
            msg_rate_redeliver=3.5,
            consumer_name="c",
            available_permits=4,
            unacked_messages=5,
            blocked_consumer_on_unacked_msgs=True,
            address="/1.2.3.4:5",
            connected_since="2024",
            type="Shared",
            msg_rate_expired=6.5,
            msg_backlog=7,
            message_ack_rate=8.5,
        ),
        {
            1: 1,
            2: 13,
            3: "e",
            4: 1.5,
            5: 2.5,
            6: 3.5,
            7: "c",
            8: 4,
            9: 5,
            10: 1,
            11: "/1.2.3.4:5",
            12: "2024",
            13: "Shared",
            14: 6.5,
            15: 7,
            16: 8.5,
        },
    ),
    (p.ReachedEndOfTopic(consumer_id=3), {1: 3}),
    (
        p.Seek(consumer_id=1, request_id=2, message_id=p.LATEST, message_publish_time=123),
        {1: 1, 2: 2, 3: {1: INT64_MAX, 2: INT64_MAX}, 4: 123},
    ),
    (p.GetLastMessageId(consumer_id=1, request_id=2), {1: 1, 2: 2}),
    (
        p.GetLastMessageIdResponse(
            last_message_id=MessageId(3, -1, partition=0),
            request_id=2,
            consumer_mark_delete_position=MessageId(3, 4),
        ),
        {1: {1: 3, 2: U64_MAX, 3: 0}, 2: 2, 3: {1: 3, 2: 4}},
    ),
    (p.ActiveConsumerChange(consumer_id=1, is_active=True), {1: 1, 2: 1}),
    (
        p.GetTopicsOfNamespace(
            request_id=1,
            namespace="public/default",
            mode=p.TopicsMode.ALL,
            topics_pattern="t.*",
            topics_hash="h",
        ),
        {1: 1, 2: "public/default", 3: 2, 4: "t.*", 5: "h"},
    ),
    (
        p.GetTopicsOfNamespaceResponse(
            request_id=1, topics=("a", "b"), filtered=True, topics_hash="h", changed=False
        ),
        {1: 1, 2: ["a", "b"], 3: 1, 4: "h", 5: 0},
    ),
    (
        p.GetSchema(request_id=1, topic="t", schema_version=b"\x00\x01"),
        {1: 1, 2: "t", 3: b"\x00\x01"},
    ),
    (
        p.GetSchemaResponse(
            request_id=1,
            error_code=ServerError.TopicNotFound,
            error_message="e",
            schema=SCHEMA,
            schema_version=b"\x02",
        ),
        {1: 1, 2: 11, 3: "e", 4: SCHEMA_WIRE, 5: b"\x02"},
    ),
    (
        p.AuthChallenge(
            server_version="s",
            challenge=p.AuthData(auth_method_name="token", auth_data=b"x"),
            protocol_version=20,
        ),
        {1: "s", 2: {1: "token", 2: b"x"}, 3: 20},
    ),
    (
        p.AuthResponse(
            client_version="c",
            response=p.AuthData(auth_method_name="token", auth_data=b"y"),
            protocol_version=20,
        ),
        {1: "c", 2: {1: "token", 2: b"y"}, 3: 20},
    ),
    (
        p.AckResponse(
            consumer_id=1,
            txnid_least_bits=11,
            txnid_most_bits=22,
            error=ServerError.TransactionConflict,
            message="m",
            request_id=5,
        ),
        {1: 1, **TXN, 4: 23, 5: "m", 6: 5},
    ),
    (
        p.GetOrCreateSchema(request_id=1, topic="t", schema=SCHEMA),
        {1: 1, 2: "t", 3: SCHEMA_WIRE},
    ),
    (
        p.GetOrCreateSchemaResponse(
            request_id=1,
            error_code=ServerError.IncompatibleSchema,
            error_message="e",
            schema_version=b"\x03",
        ),
        {1: 1, 2: 18, 3: "e", 4: b"\x03"},
    ),
    (p.NewTxn(request_id=1, txn_ttl_seconds=60, tc_id=2), {1: 1, 2: 60, 3: 2}),
    _txn_resp(p.NewTxnResponse),
    (
        p.AddPartitionToTxn(
            request_id=9, txnid_least_bits=11, txnid_most_bits=22, partitions=("a", "b")
        ),
        {1: 9, **TXN, 4: ["a", "b"]},
    ),
    _txn_resp(p.AddPartitionToTxnResponse),
    (
        p.AddSubscriptionToTxn(
            request_id=9,
            txnid_least_bits=11,
            txnid_most_bits=22,
            subscription=(p.TxnSubscription(topic="t", subscription="s"),),
        ),
        {1: 9, **TXN, 4: {1: "t", 2: "s"}},
    ),
    _txn_resp(p.AddSubscriptionToTxnResponse),
    (
        p.EndTxn(
            request_id=9, txnid_least_bits=11, txnid_most_bits=22, txn_action=p.TxnAction.ABORT
        ),
        {1: 9, **TXN, 4: 1},
    ),
    _txn_resp(p.EndTxnResponse),
    (
        p.EndTxnOnPartition(
            request_id=9,
            txnid_least_bits=11,
            txnid_most_bits=22,
            topic="t",
            txn_action=p.TxnAction.COMMIT,
            txnid_least_bits_of_low_watermark=7,
        ),
        {1: 9, **TXN, 4: "t", 5: 0, 6: 7},
    ),
    _txn_resp(p.EndTxnOnPartitionResponse),
    (
        p.EndTxnOnSubscription(
            request_id=9,
            txnid_least_bits=11,
            txnid_most_bits=22,
            subscription=p.TxnSubscription(topic="t", subscription="s"),
            txn_action=p.TxnAction.COMMIT,
            txnid_least_bits_of_low_watermark=7,
        ),
        {1: 9, **TXN, 4: {1: "t", 2: "s"}, 5: 0, 6: 7},
    ),
    _txn_resp(p.EndTxnOnSubscriptionResponse),
    (p.TcClientConnectRequest(request_id=1, tc_id=0), {1: 1, 2: 0}),
    (
        p.TcClientConnectResponse(request_id=1, error=ServerError.NotAllowedError, message="m"),
        {1: 1, 2: 22, 3: "m"},
    ),
    (
        p.WatchTopicList(
            request_id=1,
            watcher_id=2,
            namespace="public/default",
            topics_pattern="t.*",
            topics_hash="h",
        ),
        {1: 1, 2: 2, 3: "public/default", 4: "t.*", 5: "h"},
    ),
    (
        p.WatchTopicListSuccess(request_id=1, watcher_id=2, topic=("a", "b"), topics_hash="h"),
        {1: 1, 2: 2, 3: ["a", "b"], 4: "h"},
    ),
    (
        p.WatchTopicUpdate(watcher_id=2, new_topics=("a",), deleted_topics=("b",), topics_hash="h"),
        {1: 2, 2: "a", 3: "b", 4: "h"},
    ),
    (p.WatchTopicListClose(request_id=1, watcher_id=2), {1: 1, 2: 2}),
    (
        p.TopicMigrated(
            resource_id=1,
            resource_type=p.ResourceType.Consumer,
            broker_service_url="pulsar://b:6650",
            broker_service_url_tls="pulsar+ssl://b:6651",
        ),
        {1: 1, 2: 1, 3: "pulsar://b:6650", 4: "pulsar+ssl://b:6651"},
    ),
]

# BaseCommand table of the reference: (Type name, value). The sub-message field number
# must equal the value.
REFERENCE_TYPES: dict[str, int] = {
    "CONNECT": 2, "CONNECTED": 3, "SUBSCRIBE": 4, "PRODUCER": 5, "SEND": 6,
    "SEND_RECEIPT": 7, "SEND_ERROR": 8, "MESSAGE": 9, "ACK": 10, "FLOW": 11,
    "UNSUBSCRIBE": 12, "SUCCESS": 13, "ERROR": 14, "CLOSE_PRODUCER": 15,
    "CLOSE_CONSUMER": 16, "PRODUCER_SUCCESS": 17, "PING": 18, "PONG": 19,
    "REDELIVER_UNACKNOWLEDGED_MESSAGES": 20, "PARTITIONED_METADATA": 21,
    "PARTITIONED_METADATA_RESPONSE": 22, "LOOKUP": 23, "LOOKUP_RESPONSE": 24,
    "CONSUMER_STATS": 25, "CONSUMER_STATS_RESPONSE": 26, "REACHED_END_OF_TOPIC": 27,
    "SEEK": 28, "GET_LAST_MESSAGE_ID": 29, "GET_LAST_MESSAGE_ID_RESPONSE": 30,
    "ACTIVE_CONSUMER_CHANGE": 31, "GET_TOPICS_OF_NAMESPACE": 32,
    "GET_TOPICS_OF_NAMESPACE_RESPONSE": 33, "GET_SCHEMA": 34, "GET_SCHEMA_RESPONSE": 35,
    "AUTH_CHALLENGE": 36, "AUTH_RESPONSE": 37, "ACK_RESPONSE": 38,
    "GET_OR_CREATE_SCHEMA": 39, "GET_OR_CREATE_SCHEMA_RESPONSE": 40, "NEW_TXN": 50,
    "NEW_TXN_RESPONSE": 51, "ADD_PARTITION_TO_TXN": 52, "ADD_PARTITION_TO_TXN_RESPONSE": 53,
    "ADD_SUBSCRIPTION_TO_TXN": 54, "ADD_SUBSCRIPTION_TO_TXN_RESPONSE": 55, "END_TXN": 56,
    "END_TXN_RESPONSE": 57, "END_TXN_ON_PARTITION": 58, "END_TXN_ON_PARTITION_RESPONSE": 59,
    "END_TXN_ON_SUBSCRIPTION": 60, "END_TXN_ON_SUBSCRIPTION_RESPONSE": 61,
    "TC_CLIENT_CONNECT_REQUEST": 62, "TC_CLIENT_CONNECT_RESPONSE": 63,
    "WATCH_TOPIC_LIST": 64, "WATCH_TOPIC_LIST_SUCCESS": 65, "WATCH_TOPIC_UPDATE": 66,
    "WATCH_TOPIC_LIST_CLOSE": 67, "TOPIC_MIGRATED": 68,
}  # fmt: skip
