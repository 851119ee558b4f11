"""One function instance: consume the inputs, call the function, publish its result, ack.

Per input message, in this order (one message at a time, so effects follow input order):

1. catch up with the state topic (other instances may have written since);
2. at-most-once: acknowledge now (a failure later loses the message, by definition);
3. effectively-once: if the state topic says this input's effects are already stored (an
   earlier attempt got that far, then crashed before the ack), acknowledge and skip;
4. call the function in this instance's own thread (user code may block);
5. publish the result to the output, and wait for every ``context.publish`` and the
   result to be stored; effectively-once sends the result with a producer named after the
   function and the input topic (the same name for whichever instance holds that input)
   and a sequence id made of the input's position (ledger, entry, batch index: see
   :func:`~magnetar.functions.context.sequence_id_of`), on an output topic
   with deduplication on, so the broker drops a re-sent result;
6. publish the state writes of the call, with effectively-once the input's position among
   them, as one batch;
7. at-least-once and effectively-once (with ``autoAck``): acknowledge.

A raising function counts a user exception, drops the call's state writes and negatively
acknowledges the input (redelivered, or sent to the dead-letter topic after
``maxMessageRetries``). A failed send of the result counts a system exception and
negatively acknowledges. A failed state write ends :meth:`FunctionInstance.run` with the
error, so the runtime restarts the instance from the stored state.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from magnetar.client import (
    Client,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    Message,
    PartitionedProducer,
    Producer,
)
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ProducerBusy
from magnetar.functions.context import Context, position_of, sequence_id_of
from magnetar.functions.function_config import ProcessingGuarantee
from magnetar.functions.function_loader import ProcessFn
from magnetar.functions.function_thread import FunctionThread
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_stats import InstanceStats
from magnetar.functions.log_topic import LogTopicHandler
from magnetar.functions.serde import deserialize_input, serialize_output
from magnetar.functions.state_store import StateStore, state_topic_name
from magnetar.functions.state_topic import StateTopic
from magnetar.functions.topic_admin import enable_deduplication, trigger_compaction

NACK_REDELIVERY_DELAY_MS = 1_000
"""How soon a negatively acknowledged input comes back."""
STATE_COMPACTION_RECORDS_MIN = 1_000
"""An instance that read more state records than this at start asks for compaction."""
PRODUCER_BUSY_RETRY_MS = 200
PRODUCER_BUSY_TIMEOUT_MS = 30_000
"""Effectively-once: how long an instance waits for the previous holder of an input's
producer name to let go (after a failover of the input)."""

INPUT_TOPIC_PROPERTY = "__pfn_input_topic__"
INPUT_MESSAGE_ID_PROPERTY = "__pfn_input_msg_id__"

_log = logging.getLogger(__name__)


class FunctionInstance:
    """Runs ``process`` for ``spec`` until cancelled. ``on_running`` is called once the
    input subscription exists (messages published from then on are processed)."""

    def __init__(
        self,
        spec: InstanceSpec,
        process: ProcessFn,
        *,
        clock: Clock,
        stats: InstanceStats,
        on_running: Callable[[], None] | None = None,
    ) -> None:
        self._spec = spec
        self._config = spec.config
        self._process = process
        self._clock = clock
        self._stats = stats
        self._on_running = on_running
        self._guarantee = spec.config.processing_guarantee
        self._state = StateStore(spec.instance_id)
        self._pending: list[asyncio.Future[Any]] = []
        self._producers: dict[str, Producer | PartitionedProducer] = {}
        self._once_producers: dict[str, Producer | PartitionedProducer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None
        self._consumer: Any = None
        self.logger = logging.getLogger(f"magnetar.functions.instance.{spec.instance_key}")
        self.logger.setLevel(logging.INFO)  # what a function logs at INFO is kept, as in Pulsar

    @property
    def effectively_once(self) -> bool:
        return self._guarantee is ProcessingGuarantee.EFFECTIVELY_ONCE

    async def run(self) -> None:
        """Raises what stops the instance (connect, subscribe or state errors)."""
        self._loop = asyncio.get_running_loop()
        executor = FunctionThread(f"fn {self._spec.instance_key}")
        credentials = self._spec.client_credentials
        self._client = client = Client(
            self._spec.service_url, authentication=credentials.client_authentication()
        )
        log_handler: LogTopicHandler | None = None
        try:
            state_topic = StateTopic(
                client,
                state_topic_name(self._config.tenant, self._config.namespace, self._config.name),
                self._state,
            )
            await state_topic.open()
            if self._state.records_applied > STATE_COMPACTION_RECORDS_MIN:
                with contextlib.suppress(MagnetarError):
                    await trigger_compaction(
                        self._spec.admin_url, state_topic.topic, credentials.http_headers()
                    )
            context = Context(
                self._config,
                instance_id=self._spec.instance_id,
                function_id=self._config.fqfn,
                state=self._state,
                publish=self._publish_from_thread,
                ack=self._ack_from_thread,
                logger=self.logger,
            )
            if self._config.log_topic is not None:
                log_topic = self._config.log_topic
                producer = await self._output_producer(log_topic)

                async def send_log(line: bytes, properties: dict[str, str]) -> object:
                    return await producer.send(line, properties=properties)

                log_handler = LogTopicHandler(
                    self._loop,
                    send_log,
                    fqfn=self._config.fqfn,
                    instance_id=self._spec.instance_id,
                )
                self.logger.addHandler(log_handler)
            if self._config.output is not None:
                await self._output_producer(self._config.output)
                if self.effectively_once:
                    partitions = await client.get_topic_partitions(self._config.output)
                    await enable_deduplication(
                        self._spec.admin_url,
                        self._config.output,
                        partitions,
                        self._clock,
                        credentials.http_headers(),
                    )
            self._consumer = await self._subscribe(client)
            if self._on_running is not None:
                self._on_running()
            while True:
                msg = await self._consumer.receive()
                await self._handle(msg, context, state_topic, executor)
        finally:
            if log_handler is not None:
                self.logger.removeHandler(log_handler)
            executor.shutdown(wait=False)
            with contextlib.suppress(MagnetarError):
                await client.close()

    async def _subscribe(self, client: Client) -> Any:
        config = self._config
        topics: Any = list(config.inputs)
        if config.topics_pattern:
            topics = re.compile(config.topics_pattern)
        dead_letter = None
        if config.max_message_retries is not None and config.max_message_retries > 0:
            dead_letter = DeadLetterPolicy(
                max_redeliver_count=config.max_message_retries,
                dead_letter_topic=config.dead_letter_topic,
            )
        position = (
            InitialPosition.Earliest
            if config.subscription_position == "Earliest"
            else InitialPosition.Latest
        )
        return await client.subscribe(
            topics,
            config.subscription,
            consumer_type=(
                ConsumerType.Failover if self.effectively_once else ConsumerType.Shared
            ),
            consumer_name=self._spec.instance_key,
            initial_position=position,
            negative_ack_redelivery_delay_ms=NACK_REDELIVERY_DELAY_MS,
            dead_letter_policy=dead_letter,
            properties={"application": "pulsar-function", "id": config.fqfn,
                        "instance_id": str(self._spec.instance_id)},
        )  # fmt: skip

    # ------------------------------------------------------------ one message

    async def _handle(
        self,
        msg: Message,
        context: Context,
        state_topic: StateTopic,
        executor: concurrent.futures.Executor,
    ) -> None:
        consumer = self._consumer
        stats = self._stats
        stats.record_received()
        auto_ack = self._config.auto_ack
        if self._guarantee is ProcessingGuarantee.AT_MOST_ONCE and auto_ack:
            await consumer.acknowledge(msg)
        await state_topic.catch_up()
        input_topic = msg.topic_name()
        mid = msg.message_id()
        if self.effectively_once:
            done = self._state.position(input_topic)
            if done is not None and position_of(mid) <= done:
                await consumer.acknowledge(msg)
                return
        context.set_current_message(msg)
        self._pending = []
        started_s = self._clock.monotonic_s()
        stats.record_invocation()
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                executor, _call_user, self._process, deserialize_input(msg.data()), context
            )
            payload = None if result is None else serialize_output(result)
        except Exception as exc:
            self.logger.warning("process raised: %s: %s", type(exc).__name__, exc)
            self._state.discard_writes()
            stats.record_user_exception(exc)
            await self._settle_pending()
            self._nack(msg)
            return
        finally:
            context.set_current_message(None)
        try:
            if payload is not None and self._config.output is not None:
                await self._send_result(msg, payload)
            await self._settle_pending(raise_first=True)
        except (MagnetarError, OSError, ValueError) as exc:
            # ValueError: an input position no effectively-once sequence id can hold.
            self._state.discard_writes()
            stats.record_system_exception(exc)
            self._nack(msg)
            return
        if self.effectively_once:
            self._state.record_position(input_topic, position_of(mid))
        await state_topic.publish(self._state.take_writes())
        if auto_ack and self._guarantee in (
            ProcessingGuarantee.AT_LEAST_ONCE,
            ProcessingGuarantee.EFFECTIVELY_ONCE,
        ):
            await consumer.acknowledge(msg)
        stats.record_processed((self._clock.monotonic_s() - started_s) * 1000)

    def _nack(self, msg: Message) -> None:
        if self._guarantee is not ProcessingGuarantee.AT_MOST_ONCE:
            self._consumer.negative_acknowledge(msg)

    async def _send_result(self, msg: Message, payload: bytes) -> None:
        output = self._config.output
        assert output is not None
        properties = {
            INPUT_TOPIC_PROPERTY: msg.topic_name(),
            INPUT_MESSAGE_ID_PROPERTY: base64.b64encode(msg.message_id().serialize()).decode(),
        }
        key = msg.partition_key() if msg.has_partition_key() else None
        if self.effectively_once:
            producer = await self._once_producer(msg.topic_name(), output)
            await producer.send(
                payload,
                properties=properties,
                partition_key=key,
                sequence_id=sequence_id_of(msg.message_id()),
            )
        else:
            producer = await self._output_producer(output)
            await producer.send(payload, properties=properties, partition_key=key)

    async def _settle_pending(self, *, raise_first: bool = False) -> None:
        pending, self._pending = self._pending, []
        results = await asyncio.gather(*pending, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors and raise_first:
            raise errors[0]

    # ------------------------------------------------------------ producers

    async def _output_producer(self, topic: str) -> Producer | PartitionedProducer:
        producer = self._producers.get(topic)
        if producer is None:
            assert self._client is not None
            producer = await self._client.create_producer(
                topic,
                batching_enabled=True,
                batching_max_publish_delay_ms=1,
                properties={"application": "pulsar-function", "id": self._config.fqfn,
                            "instance_id": str(self._spec.instance_id)},
            )  # fmt: skip
            self._producers[topic] = producer
        return producer

    async def _once_producer(self, input_topic: str, output: str) -> Producer | PartitionedProducer:
        """The producer whose name belongs to ``input_topic`` (one name per input partition:
        its sequence ids grow along that partition only)."""
        producer = self._once_producers.get(input_topic)
        if producer is not None:
            return producer
        assert self._client is not None
        name = f"{self._config.fqfn}/{input_topic}"
        deadline_s = self._clock.monotonic_s() + PRODUCER_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                producer = await self._client.create_producer(
                    output, producer_name=name, batching_enabled=False
                )
                break
            except ProducerBusy:
                # The previous holder of this input (an instance that lost it in a
                # failover, or one whose connection the broker has not dropped yet).
                if self._clock.monotonic_s() > deadline_s:
                    raise
                await self._clock.sleep(PRODUCER_BUSY_RETRY_MS / 1000)
        self._once_producers[input_topic] = producer
        return producer

    # ------------------------------------------------------------ calls from the thread

    def _publish_from_thread(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None, key: str | None
    ) -> None:
        loop = self._loop
        assert loop is not None

        def start() -> None:
            self._pending.append(
                asyncio.ensure_future(self._publish(topic, payload, properties, key))
            )

        loop.call_soon_threadsafe(start)

    async def _publish(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None, key: str | None
    ) -> None:
        producer = await self._output_producer(topic)
        await producer.send(payload, properties=dict(properties or {}) or None, partition_key=key)

    def _ack_from_thread(self, msg: Message) -> None:
        loop = self._loop
        assert loop is not None

        def start() -> None:
            self._pending.append(asyncio.ensure_future(self._consumer.acknowledge(msg)))

        loop.call_soon_threadsafe(start)


class FunctionExited(Exception):
    """The function called ``sys.exit()``: a user exception like any other (letting
    SystemExit through would stop the event loop, and with it the worker)."""


def _call_user(process: ProcessFn, value: Any, context: Context) -> Any:
    try:
        return process(value, context)
    except SystemExit as exc:
        raise FunctionExited(f"the function called sys.exit({exc.code!r})") from None
