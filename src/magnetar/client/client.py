"""The client: connections, lookups, and the factories for producers, consumers and readers.

::

    async with Client("pulsar://127.0.0.1:6650") as client:
        producer = await client.create_producer("my-topic")
        msg_id = await producer.send(b"hello", properties={"a": "1"}, partition_key="k")
        consumer = await client.subscribe("my-topic", "sub", consumer_type=ConsumerType.Shared)
        msg = await consumer.receive(timeout_ms=5000)
        await consumer.acknowledge(msg)

Every factory first asks the service URL for the topic's partition count, then looks up
each partition's owner and registers there (one connection per broker, shared).
Closing the client closes every producer, consumer and reader it created.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from magnetar.client.auth import Authentication
from magnetar.client.connection_pool import ConnectionPool
from magnetar.client.consumer import Consumer
from magnetar.client.consumer_config import (
    ConsumerConfig,
    ConsumerEventListener,
    ConsumerType,
    DeadLetterPolicy,
)
from magnetar.client.context import ClientContext
from magnetar.client.errors import AlreadyClosed, InvalidConfiguration
from magnetar.client.lookup import Lookup, LookupService
from magnetar.client.message_id import MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer
from magnetar.client.partitioned_producer import PartitionedProducer
from magnetar.client.producer import Producer, ProducerConfig
from magnetar.client.reader import Reader
from magnetar.client.routing import HashingScheme, PartitionRouter, PartitionsRoutingMode
from magnetar.client.schema import BytesSchema, Schema
from magnetar.client.service_url import ServiceUrl
from magnetar.client.topic_schema import AutoProduceBytesSchema, fetch_schema
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import InvalidTopicName, MagnetarError
from magnetar.common.names import (
    PARTITIONED_TOPIC_SUFFIX,
    NamespaceName,
    TopicName,
    partition_index_of,
    partitioned_topic_name,
)
from magnetar.protocol import (
    CompressionType,
    InitialPosition,
    KeySharedMode,
    ProducerAccessMode,
    SchemaInfo,
    TopicsMode,
)


def full_topic_name(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; ``t/ns/x`` ->
    ``persistent://t/ns/x``; fully qualified names are returned unchanged. Names are checked
    with :mod:`magnetar.common.names` (the broker's rules): an invalid one raises
    :class:`InvalidConfiguration` saying what is wrong."""
    try:
        return TopicName.parse(topic).full_name
    except InvalidTopicName as exc:
        raise InvalidConfiguration(exc.message) from None


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITIONED_TOPIC_SUFFIX}{index}"


class Client:
    """An asyncio Pulsar client. Use as ``async with Client(url) as client`` or call
    :meth:`close`. Must be used from one event loop."""

    def __init__(
        self,
        service_url: str,
        *,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30.0,
        connection_timeout_ms: int = 10_000,
        keep_alive_interval_seconds: float = 30.0,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        listener_name: str | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        parsed = ServiceUrl.parse(service_url)
        http, tls = parsed.http, parsed.tls
        ssl_context: ssl.SSLContext | None = None
        if tls or tls_trust_certs_file_path is not None:
            ssl_context = ssl.create_default_context(cafile=tls_trust_certs_file_path)
            ssl_context.check_hostname = tls_validate_hostname and not tls_allow_insecure_connection
            if tls_allow_insecure_connection:
                ssl_context.verify_mode = ssl.CERT_NONE
            if tls_certificate_file_path is not None:
                ssl_context.load_cert_chain(tls_certificate_file_path, tls_private_key_file_path)
        self._clock = clock or SystemClock()
        rng = rng or random.Random()
        pool = ConnectionPool(
            authentication=authentication,
            clock=self._clock,
            ssl_context=ssl_context,
            tls_validate_hostname=tls_validate_hostname,
            connect_timeout_s=connection_timeout_ms / 1000,
            keep_alive_interval_s=keep_alive_interval_seconds,
        )
        request_ids = itertools.count()
        lookup: Lookup
        if http:
            # urllib.request and the email package: ~1 MB a binary-protocol client never uses
            from magnetar.client.http_lookup import HttpLookupService

            lookup = HttpLookupService(
                service_url,
                clock=self._clock,
                operation_timeout_s=operation_timeout_seconds,
                use_tls=tls,
                authentication=authentication,
                ssl_context=ssl_context,
                listener_name=listener_name,
                rng=rng,
            )
        else:
            lookup = LookupService(
                pool,
                service_url,
                request_ids=request_ids,
                clock=self._clock,
                operation_timeout_s=operation_timeout_seconds,
                use_tls=tls,
                listener_name=listener_name,
                rng=rng,
            )
        self._ctx = ClientContext(
            pool=pool,
            lookup=lookup,
            clock=self._clock,
            request_ids=request_ids,
            operation_timeout_s=operation_timeout_seconds,
            rng=rng,
        )
        self._service_url = service_url

    def _check_open(self) -> None:
        if self._ctx.closed:
            raise AlreadyClosed("client is closed")

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition names of ``topic`` (the topic itself if it is not partitioned)."""
        topic = full_topic_name(topic)
        n = await self._ctx.lookup.partitions(topic)
        return [partition_name(topic, i) for i in range(n)] if n else [topic]

    async def get_topics_of_namespace(
        self, namespace: str, mode: TopicsMode = TopicsMode.PERSISTENT
    ) -> list[str]:
        """Full names of the existing topics of ``tenant/namespace``; a partitioned topic
        is listed by its partitions' names (``…-partition-N``). ``mode`` picks persistent
        (default), non-persistent or all topics.

        Never creates a topic (unlike a lookup under auto topic creation): it is
        GET_TOPICS_OF_NAMESPACE, or ``GET /admin/v2/namespaces/{t}/{ns}/topics`` with an
        ``http://`` service URL. Raises the lookup's errors (``ServerError`` for an unknown
        namespace, ``Timeout`` after the operation timeout)."""
        self._check_open()
        if namespace.count("/") != 1:
            raise InvalidConfiguration(f"namespace must be tenant/namespace, got {namespace!r}")
        return await self._ctx.lookup.topics_of_namespace(namespace, TopicsMode(mode))

    async def get_schema_info(
        self, topic: str, version: int | None = None
    ) -> tuple[SchemaInfo, int] | None:
        """The schema of ``topic`` and its version number: the latest live one, or version
        ``version``. None when the topic has no (such) schema. Raises Timeout and the
        broker's other errors."""
        self._check_open()
        wire_version = None if version is None else version.to_bytes(8, "big", signed=True)
        found = await fetch_schema(self._ctx, full_topic_name(topic), wire_version)
        if found is None:
            return None
        return found[0], int.from_bytes(found[1], "big", signed=True)

    # ------------------------------------------------------------ producers

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Schema[Any] | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30_000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = True,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        chunk_max_message_size: int | None = None,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
        message_router: Callable[[Any, int], int] | None = None,
        properties: Mapping[str, str] | None = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        initial_subscription_name: str | None = None,
    ) -> Producer | PartitionedProducer:
        """Create a producer (a :class:`PartitionedProducer` for a partitioned topic).
        Raises the broker's error (ProducerBusy, ProducerFenced, TopicNotFound, ...)."""
        self._check_open()
        topic = full_topic_name(topic)
        if isinstance(schema, AutoProduceBytesSchema):
            found = await fetch_schema(self._ctx, topic)
            schema = schema.bind(found[0] if found else None)
        conf = ProducerConfig(
            producer_name=producer_name,
            schema=schema or BytesSchema(),
            initial_sequence_id=initial_sequence_id,
            send_timeout_ms=send_timeout_millis,
            compression_type=compression_type,
            max_pending_messages=max_pending_messages,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            chunking_enabled=chunking_enabled,
            chunk_max_message_size=chunk_max_message_size,
            properties=properties,
            access_mode=access_mode,
            initial_subscription_name=initial_subscription_name,
        )
        n = await self._ctx.lookup.partitions(topic)
        if n == 0:
            producer = Producer(self._ctx, topic, -1, conf)
            await producer._start()
            return producer
        if message_router is not None:
            message_routing_mode = PartitionsRoutingMode.CustomPartition
        router = PartitionRouter(
            message_routing_mode,
            hashing_scheme=hashing_scheme,
            switch_every=batching_max_messages if batching_enabled else 1,
            custom=message_router,
            rng=self._ctx.rng,
        )
        producers = [Producer(self._ctx, partition_name(topic, i), i, conf) for i in range(n)]
        await self._start_all(producers)
        return PartitionedProducer(topic, producers, router)

    async def _start_all(self, handles: list[Any]) -> None:
        results = await asyncio.gather(*(h._start() for h in handles), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for h in handles:
                with contextlib.suppress(MagnetarError):
                    await h.close()
            raise errors[0]

    # ------------------------------------------------------------ consumers

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Schema[Any] | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50_000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        negative_ack_redelivery_delay_ms: int = 60_000,
        broker_consumer_stats_cache_time_ms: int = 30_000,
        is_read_compacted: bool = False,
        properties: Mapping[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: Any = None,
        key_shared_policy: Any = None,
        batch_index_ack_enabled: bool = False,
        dead_letter_policy: DeadLetterPolicy | None = None,
        crypto_key_reader: Any = None,
        consumer_event_listener: ConsumerEventListener | None = None,
        priority_level: int | None = None,
        subscription_properties: Mapping[str, str] | None = None,
        acknowledgment_group_time_ms: int = 100,
        key_shared_mode: KeySharedMode = KeySharedMode.AUTO_SPLIT,
        retry_enable: bool = False,
    ) -> Consumer | MultiTopicsConsumer:
        """Subscribe to a topic, a list of topics, or every topic of a namespace matching a
        regex (``re.compile("persistent://public/default/orders-.*")``; new matching topics
        are picked up every ``pattern_auto_discovery_period`` seconds). Returns a
        :class:`Consumer` for one non-partitioned topic, else a :class:`MultiTopicsConsumer`.

        ``retry_enable`` (Java ``enableRetry``) also subscribes to the retry-letter topic
        (``dead_letter_policy.retry_letter_topic``, default ``<topic>-<subscription>-RETRY``)
        and enables ``reconsume_later``; without a dead-letter policy messages go to the
        DLQ after 16 retries, as in the Java client."""
        self._check_open()
        if crypto_key_reader is not None:
            raise InvalidConfiguration("end-to-end encryption is not supported")
        if consumer_name is None:
            # One name for every partition and topic of this consumer, as the C++ client
            # does: Failover spreads partitions by sorted consumer name.
            consumer_name = f"consumer-{self._ctx.rng.getrandbits(40):010x}"
        conf = ConsumerConfig(
            consumer_type=consumer_type,
            consumer_name=consumer_name,
            schema=schema or BytesSchema(),
            receiver_queue_size=receiver_queue_size,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms or 0,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            acknowledgment_group_time_ms=acknowledgment_group_time_ms,
            batch_index_ack_enabled=batch_index_ack_enabled,
            initial_position=initial_position,
            priority_level=priority_level,
            properties=properties,
            subscription_properties=subscription_properties,
            read_compacted=is_read_compacted,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            key_shared_mode=key_shared_mode,
            consumer_event_listener=consumer_event_listener,
            dead_letter_policy=dead_letter_policy,
            max_pending_chunked_message=max_pending_chunked_message,
        )
        if isinstance(topic, re.Pattern):
            topics = await self._topics_matching(topic)
        elif isinstance(topic, list):
            topics = [full_topic_name(t) for t in topic]
        else:
            topics = [full_topic_name(topic)]
        if retry_enable:
            if not topics:
                raise InvalidConfiguration("retry_enable needs at least one topic")
            base = topics[0]
            policy = dataclasses.replace(
                dead_letter_policy or DeadLetterPolicy(max_redeliver_count=16)
            )
            policy.retry_letter_topic = full_topic_name(
                policy.retry_letter_topic or f"{base}-{subscription_name}-RETRY"
            )
            policy.dead_letter_topic = full_topic_name(
                policy.dead_letter_topic or f"{base}-{subscription_name}-DLQ"
            )
            conf.dead_letter_policy = policy
            conf.retry_enable = True
            if policy.retry_letter_topic not in topics:
                topics.append(policy.retry_letter_topic)
        partitions = await self._partitions_of(topics)
        if (
            len(partitions) == 1
            and not isinstance(topic, re.Pattern | list)
            and partitions[0][1] < 0
        ):
            consumer = Consumer(self._ctx, partitions[0][0], subscription_name, -1, conf)
            await consumer._start()
            return consumer
        parent = MultiTopicsConsumer(
            topic.pattern if isinstance(topic, re.Pattern) else ",".join(topics),
            subscription_name,
            consumer_name,
        )
        if partitions:
            conf.receiver_queue_size = min(
                receiver_queue_size,
                max(1, max_total_receiver_queue_size_across_partitions // len(partitions)),
            )
        children = [
            Consumer(self._ctx, name, subscription_name, index, conf, facade=parent, sink=parent)
            for name, index in partitions
        ]
        await self._start_all(children)
        parent._attach(children)
        if isinstance(topic, re.Pattern) and pattern_auto_discovery_period > 0:
            pattern = topic

            async def add(new_topics: list[str]) -> list[Consumer]:
                found = await self._partitions_of(new_topics)
                kids = [
                    Consumer(self._ctx, name, subscription_name, index, conf,
                             facade=parent, sink=parent)
                    for name, index in found
                ]  # fmt: skip
                await self._start_all(kids)
                return kids

            parent._watch(
                pattern_auto_discovery_period,
                self._clock,
                lambda: self._topics_matching(pattern),
                add,
            )
        return parent

    async def _partitions_of(self, topics: list[str]) -> list[tuple[str, int]]:
        """``(name, partition index)`` of every partition of ``topics`` (index -1 for a
        non-partitioned topic)."""
        out: list[tuple[str, int]] = []
        for t in topics:
            n = await self._ctx.lookup.partitions(t)
            out.extend([(partition_name(t, i), i) for i in range(n)] if n else [(t, -1)])
        return out

    async def _topics_matching(self, pattern: re.Pattern[str]) -> list[str]:
        full = pattern.pattern
        if "://" not in full:
            full = f"persistent://public/default/{full}"
            pattern = re.compile(full)
        domain, _, rest = full.partition("://")
        try:
            namespace = NamespaceName.of(*rest.split("/")[:2])
        except (InvalidTopicName, TypeError):
            raise InvalidConfiguration(
                f"invalid topics pattern {pattern.pattern!r}: it must start with "
                "<domain>://<tenant>/<namespace>/"
            ) from None
        names = await self._ctx.lookup.topics_of_namespace(
            str(namespace),
            TopicsMode.NON_PERSISTENT if domain == "non-persistent" else TopicsMode.PERSISTENT,
        )
        bases = sorted({partitioned_topic_name(t) for t in names})
        return [t for t in bases if pattern.fullmatch(t)]

    # ------------------------------------------------------------ readers

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        reader_listener: Any = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        schema: Schema[Any] | None = None,
        is_read_compacted: bool = False,
        start_message_id_inclusive: bool = False,
    ) -> Reader:
        """A reader of a topic, of one partition (by its full name), or of every partition
        of a partitioned topic (``start_message_id`` then must be earliest or latest).
        Raises InvalidConfiguration otherwise."""
        self._check_open()
        topic = full_topic_name(topic)
        partition = partition_index_of(topic)
        n = 0 if partition >= 0 else await self._ctx.lookup.partitions(topic)
        if n and start_message_id not in (MessageId.earliest, MessageId.latest):
            raise InvalidConfiguration(
                "a reader of a whole partitioned topic starts at earliest or latest"
            )
        prefix = subscription_role_prefix or "reader"
        conf = ConsumerConfig(
            consumer_type=ConsumerType.Exclusive,
            consumer_name=reader_name,
            schema=schema or BytesSchema(),
            receiver_queue_size=receiver_queue_size,
            read_compacted=is_read_compacted,
            durable=False,
            start_message_id=start_message_id,
            start_message_id_inclusive=start_message_id_inclusive,
            acknowledgment_group_time_ms=0,
        )
        sub = f"{prefix}-{self._ctx.rng.getrandbits(40):010x}"
        if n:
            parent = MultiTopicsConsumer(topic, sub)
            children = [
                Consumer(self._ctx, partition_name(topic, i), sub, i, conf,
                         facade=parent, sink=parent)
                for i in range(n)
            ]  # fmt: skip
            await self._start_all(children)
            parent._attach(children)
            return Reader(parent, start_message_id, start_message_id_inclusive)
        consumer = Consumer(self._ctx, topic, sub, partition, conf)
        await consumer._start()
        return Reader(consumer, start_message_id, start_message_id_inclusive)

    # ------------------------------------------------------------ closing

    async def close(self, *, flush: bool = True) -> None:
        """Close every producer, consumer and reader, then every connection.
        ``flush=False`` closes the connections first: pending sends fail at once instead of
        being waited for (for a caller that sends them again itself, as the geo-replicator
        does from its cursor), and nothing waits for an unresponsive broker."""
        if self._ctx.closed:
            return
        if not flush:
            self._ctx.pool.close()
        handles = list(self._ctx.handles)
        await asyncio.gather(*(h.close() for h in handles), return_exceptions=True)
        self._ctx.closed = True
        self._ctx.pool.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
