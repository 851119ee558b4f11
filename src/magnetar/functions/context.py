"""The ``context`` argument of ``process(input, context)``: what Pulsar's Python ``Context``
offers a function, so functions written for Pulsar run unchanged.

``process`` runs in a worker thread (user code may block), so every method here is plain
and synchronous. State calls touch only the in-memory :class:`StateStore` (its writes are
published after ``process`` returns); ``publish`` hands the message to the instance's event
loop and returns at once; the instance waits for those sends before it acknowledges the
input (so a published message is stored before its input is acknowledged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client import Message, MessageId
from magnetar.functions.function_config import FunctionConfig
from magnetar.functions.serde import serialize_output
from magnetar.functions.state_store import StateStore

USER_METRICS_MAX = 100
"""Distinct metric names ``record_metric`` keeps per instance."""

PublishFn = Callable[[str, bytes, Mapping[str, str] | None, str | None], None]
"""``(topic, payload, properties, key)``: queue a message on the instance's loop."""
AckFn = Callable[[Message], None]


@dataclass(slots=True)
class MetricSummary:
    count: int = 0
    total: float = 0.0
    minimum: float = field(default=float("inf"))
    maximum: float = field(default=float("-inf"))

    def record(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)


class Context:
    """One per instance; the current message changes before each ``process`` call."""

    def __init__(
        self,
        config: FunctionConfig,
        *,
        instance_id: int,
        function_id: str,
        state: StateStore,
        publish: PublishFn,
        ack: AckFn,
        logger: logging.Logger,
    ) -> None:
        self._config = config
        self._instance_id = instance_id
        self._function_id = function_id
        self._state = state
        self._publish = publish
        self._ack = ack
        self._logger = logger
        self._message: Message | None = None
        self.user_metrics: dict[str, MetricSummary] = {}

    def set_current_message(self, message: Message | None) -> None:
        self._message = message

    # ------------------------------------------------------------ the current message

    def get_message_id(self) -> MessageId | None:
        return self._message.message_id() if self._message is not None else None

    def get_message_key(self) -> str | None:
        msg = self._message
        return msg.partition_key() if msg is not None and msg.has_partition_key() else None

    get_partition_key = get_message_key

    def get_message_eventtime(self) -> int | None:
        return self._message.event_timestamp() if self._message is not None else None

    def get_message_properties(self) -> dict[str, str]:
        return dict(self._message.properties()) if self._message is not None else {}

    def get_current_message_topic_name(self) -> str | None:
        return self._message.topic_name() if self._message is not None else None

    def get_message_partition_index(self) -> int | None:
        msg = self._message
        return msg.message_id().partition() if msg is not None else None

    def get_message_sequence_id(self) -> int | None:
        """The input's position as one number (see :func:`sequence_id_of`)."""
        msg = self._message
        return sequence_id_of(msg.message_id()) if msg is not None else None

    # ------------------------------------------------------------ the function

    def get_function_name(self) -> str:
        return self._config.name

    def get_function_tenant(self) -> str:
        return self._config.tenant

    def get_function_namespace(self) -> str:
        return self._config.namespace

    def get_function_id(self) -> str:
        return self._function_id

    def get_function_version(self) -> str:
        return "0"

    def get_instance_id(self) -> int:
        return self._instance_id

    def get_input_topics(self) -> list[str]:
        return list(self._config.inputs)

    def get_output_topic(self) -> str | None:
        return self._config.output

    def get_output_serde_class_name(self) -> str | None:
        return None

    def get_user_config_value(self, key: str) -> Any:
        return self._config.user_config.get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self._config.user_config)

    def get_secret(self, secret_name: str) -> str | None:
        """The secret's value as configured (Pulsar's clear-text secrets provider)."""
        value = self._config.secrets.get(secret_name)
        return None if value is None else str(value)

    def get_logger(self) -> logging.Logger:
        return self._logger

    def record_metric(self, metric_name: str, metric_value: float) -> None:
        summary = self.user_metrics.get(metric_name)
        if summary is None:
            if len(self.user_metrics) >= USER_METRICS_MAX:
                raise ValueError(f"more than {USER_METRICS_MAX} distinct metric names")
            summary = self.user_metrics[metric_name] = MetricSummary()
        summary.record(float(metric_value))

    # ------------------------------------------------------------ output

    def publish(
        self,
        topic_name: str,
        message: Any,
        serde_class_name: str | None = None,
        properties: Mapping[str, str] | None = None,
        compression_type: Any = None,
        callback: Any = None,
        message_conf: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish ``message`` (serialized as a function's output is) to ``topic_name``.
        ``message_conf`` may carry ``partition_key`` (Pulsar's ``send_async`` keywords);
        ``serde_class_name``, ``compression_type`` and ``callback`` are accepted and ignored."""
        key = None
        if message_conf:
            key = message_conf.get("partition_key")
        self._publish(topic_name, serialize_output(message), properties, key)

    def ack(self, msgid: Any = None, topic: Any = None) -> None:
        """Acknowledge the current message (for ``autoAck`` off / ``MANUAL``)."""
        if self._message is not None:
            self._ack(self._message)

    # ------------------------------------------------------------ state

    def incr_counter(self, key: str, amount: int) -> None:
        self._state.incr_counter(key, amount)

    def get_counter(self, key: str) -> int:
        return self._state.get_counter(key)

    def del_counter(self, key: str) -> None:
        self._state.del_counter(key)

    def put_state(self, key: str, value: Any) -> None:
        """``value`` as bytes or str (stored UTF-8 encoded); ``get_state`` answers bytes."""
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"state value must be bytes or str, got {type(value).__name__}")
        self._state.put_state(key, bytes(value))

    def get_state(self, key: str) -> bytes | None:
        return self._state.get_state(key)

    def del_state(self, key: str) -> None:
        self._state.del_state(key)


LEDGER_ID_BITS = 28
ENTRY_ID_BITS = 22
BATCH_INDEX_BITS = 13


def sequence_id_of(message_id: Any) -> int:
    """A message's position as a sequence id that grows along one topic partition:
    ``ledger_id << 35 | entry_id << 13 | (batch_index + 1)`` (batch index -1, unbatched,
    counts as 0). Pulsar's instances use ``ledger_id << 28 | entry_id``, which gives every
    message of a batched input the same id, so deduplication keeps only the first; the
    batch index is part of the position here. Raises ValueError for a position outside
    the ranges (ledger ids below 2**28, entry ids below 2**22 — ledgers roll over at 50,000
    entries by default — batch indexes below 2**13 - 1)."""
    ledger: int = message_id.ledger_id()
    entry: int = message_id.entry_id()
    batch: int = max(message_id.batch_index(), -1) + 1
    if not (
        0 <= ledger < 1 << LEDGER_ID_BITS
        and 0 <= entry < 1 << ENTRY_ID_BITS
        and batch < 1 << BATCH_INDEX_BITS
    ):
        raise ValueError(
            f"input position {ledger}:{entry}:{batch - 1} is outside what an effectively-once "
            "sequence id can hold"
        )
    return (ledger << (ENTRY_ID_BITS + BATCH_INDEX_BITS)) | (entry << BATCH_INDEX_BITS) | batch


def position_of(message_id: Any) -> tuple[int, int, int]:
    """``(ledger_id, entry_id, batch_index)``: ordered as the messages of a partition."""
    return (message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())
