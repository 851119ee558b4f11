"""A function's, source's or sink's definition, as ``pulsar-admin`` and Pulsar's REST API
spell it (``FunctionConfig`` JSON: ``tenant``, ``namespace``, ``name``, ``className``,
``inputs``, ``topicsPattern``, ``output``, ``parallelism``, ``processingGuarantees``, ...).

This is the contract between the worker's managers (metadata, scheduler, runtime) and the
instance runtime: the metadata manager stores :meth:`FunctionConfig.to_json` records, the
scheduler reads ``parallelism``, the runtime runs what the rest says.

    config = FunctionConfig.from_json({"tenant": "public", "namespace": "default",
                                       "name": "wc", "className": "wordcount.WordCount",
                                       "inputs": ["in"], "output": "out", "parallelism": 2})
    config.fqfn              # "public/default/wc"
    config.to_json()         # Pulsar's spelling, full topic names

Raises :class:`InvalidFunctionConfig` naming the field for anything that cannot run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.common.errors import InvalidTopicName, MagnetarError
from magnetar.common.names import NamespaceName, TopicName, check_named_entity

PARALLELISM_MAX = 1_024
"""Instances one function may ask for (bounded: the scheduler writes one record each)."""
USER_CONFIG_BYTES_MAX = 64 * 1024
"""The largest ``userConfig`` (as JSON) a definition may carry."""


class InvalidFunctionConfig(MagnetarError, ValueError):
    """A definition that cannot run; the message names the field."""


class ComponentKind(enum.StrEnum):
    """What the definition describes; REST paths are ``/admin/v3/{kind}s/...``."""

    FUNCTION = "function"
    SOURCE = "source"
    SINK = "sink"


class ProcessingGuarantee(enum.StrEnum):
    """Pulsar's ``processingGuarantees`` values."""

    AT_MOST_ONCE = "ATMOST_ONCE"
    AT_LEAST_ONCE = "ATLEAST_ONCE"
    EFFECTIVELY_ONCE = "EFFECTIVELY_ONCE"
    MANUAL = "MANUAL"


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionConfig:
    """One definition. Topic names are kept in full form (``persistent://t/ns/x``)."""

    tenant: str
    namespace: str
    name: str
    kind: ComponentKind = ComponentKind.FUNCTION
    class_name: str | None = None
    """``module.Class`` or ``module.function`` inside the package; for built-in sources and
    sinks, the built-in's name (``archive`` in Pulsar's terms)."""
    inputs: tuple[str, ...] = ()
    topics_pattern: str | None = None
    output: str | None = None
    log_topic: str | None = None
    parallelism: int = 1
    processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE
    user_config: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    """``cpu``, ``ram``, ``disk`` as Pulsar spells them; recorded, not enforced."""
    auto_ack: bool = True
    max_message_retries: int | None = None
    dead_letter_topic: str | None = None
    subscription_name: str | None = None
    """Default: ``tenant/namespace/name``, as Pulsar names a function's subscription."""
    subscription_position: str = "Latest"
    """Where a new input subscription starts: ``Latest`` (Pulsar's default) or ``Earliest``."""
    package: str | None = None
    """The package's name as uploaded (``py`` in Pulsar: a ``.py`` file, a zip or wheel)."""

    def __post_init__(self) -> None:
        try:
            NamespaceName.of(self.tenant, self.namespace)
            check_named_entity("function", self.name)
        except InvalidTopicName as exc:
            raise InvalidFunctionConfig(str(exc)) from None
        if not 1 <= self.parallelism <= PARALLELISM_MAX:
            raise InvalidFunctionConfig(f"parallelism must be 1..{PARALLELISM_MAX}")
        if self.subscription_position not in ("Latest", "Earliest"):
            raise InvalidFunctionConfig("subscriptionPosition must be Latest or Earliest")
        if self.max_message_retries is not None and self.max_message_retries < 0:
            raise InvalidFunctionConfig("maxMessageRetries must not be negative")
        object.__setattr__(self, "inputs", tuple(_full("inputs", t) for t in self.inputs))
        for attr in ("output", "log_topic", "dead_letter_topic"):
            value = getattr(self, attr)
            if value is not None:
                object.__setattr__(self, attr, _full(attr, value))
        if self.kind is not ComponentKind.SOURCE and not self.inputs and not self.topics_pattern:
            raise InvalidFunctionConfig("inputs: a function or sink needs inputs or topicsPattern")
        if self.kind is ComponentKind.SOURCE and self.output is None:
            raise InvalidFunctionConfig("output: a source needs a topic to write to")

    @property
    def fqfn(self) -> str:
        """``tenant/namespace/name``: the definition's key everywhere."""
        return f"{self.tenant}/{self.namespace}/{self.name}"

    @property
    def subscription(self) -> str:
        return self.subscription_name or self.fqfn

    def with_updates(self, **changes: Any) -> FunctionConfig:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``FunctionConfig`` spelling; ``None`` fields are left out."""
        out: dict[str, Any] = {
            "tenant": self.tenant,
            "namespace": self.namespace,
            "name": self.name,
            "componentType": self.kind.value.upper(),
            "className": self.class_name,
            "inputs": list(self.inputs),
            "topicsPattern": self.topics_pattern,
            "output": self.output,
            "logTopic": self.log_topic,
            "parallelism": self.parallelism,
            "processingGuarantees": self.processing_guarantee.value,
            "userConfig": dict(self.user_config),
            "secrets": dict(self.secrets),
            "resources": dict(self.resources),
            "autoAck": self.auto_ack,
            "maxMessageRetries": self.max_message_retries,
            "deadLetterTopic": self.dead_letter_topic,
            "subName": self.subscription_name,
            "subscriptionPosition": self.subscription_position,
            "py": self.package,
            "runtime": "PYTHON",
        }
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], *, kind: ComponentKind | None = None
    ) -> FunctionConfig:
        """Read Pulsar's spelling (unknown keys are ignored, as Pulsar's admin does).
        ``kind`` (from the REST path) wins over ``componentType``."""
        if not isinstance(data, Mapping):
            raise InvalidFunctionConfig("the definition must be a JSON object")
        try:
            kind = kind or ComponentKind(str(data.get("componentType", "function")).lower())
            guarantee = ProcessingGuarantee(data.get("processingGuarantees", "ATLEAST_ONCE"))
        except ValueError as exc:
            raise InvalidFunctionConfig(str(exc)) from None
        class_name = data.get("className")
        archive = data.get("archive")
        if class_name is None and isinstance(archive, str) and archive.startswith("builtin://"):
            class_name = archive  # SourceConfig/SinkConfig name a built-in this way
        inputs = data.get("inputs") or ()
        if isinstance(inputs, str):
            inputs = [t for t in inputs.split(",") if t]
        for key in ("tenant", "namespace", "name"):
            if not isinstance(data.get(key), str):
                raise InvalidFunctionConfig(f"{key}: missing")
        try:
            return cls(
                tenant=data["tenant"],
                namespace=data["namespace"],
                name=data["name"],
                kind=kind,
                class_name=class_name,
                inputs=tuple(str(t) for t in inputs),
                topics_pattern=data.get("topicsPattern"),
                output=data.get("output") or data.get("topicName"),
                log_topic=data.get("logTopic"),
                # 0 is a value to refuse, not a missing one: only an absent (or null)
                # parallelism means the default.
                parallelism=int(1 if data.get("parallelism") is None else data["parallelism"]),
                processing_guarantee=guarantee,
                user_config=dict(data.get("userConfig") or data.get("configs") or {}),
                secrets=dict(data.get("secrets") or {}),
                resources=dict(data.get("resources") or {}),
                auto_ack=bool(data.get("autoAck", True)),
                max_message_retries=data.get("maxMessageRetries"),
                dead_letter_topic=data.get("deadLetterTopic"),
                subscription_name=data.get("subName"),
                subscription_position=str(data.get("subscriptionPosition") or "Latest"),
                package=data.get("py"),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidFunctionConfig):
                raise
            raise InvalidFunctionConfig(str(exc)) from None


def _full(what: str, topic: str) -> str:
    try:
        return str(TopicName.parse(topic))
    except InvalidTopicName as exc:
        raise InvalidFunctionConfig(f"{what}: {exc}") from None
